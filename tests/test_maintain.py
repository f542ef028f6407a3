"""``offsetlake maintain``: fewer files, the same records, time travel and replays intact.

The lake is the demo (scale 1) ingested without Spark one ``__consumer_offsets`` partition
per call, i.e. ten micro-batches: ten small files per history table and ten merges per
state table. Tests that need "time passing" age the Delta log's remove actions (and file
mtimes) instead of waiting weeks: that is exactly what vacuum and checkpoints look at.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.lake.maintain import (
    MIN_RETENTION_HOURS,
    find_tables,
    interval_hours,
    maintain,
)

DAY_S = 86_400
APP_ID = "offsetlake-local"
HISTORY = ("offsets_raw", "offset_commits", "group_metadata")


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Demo history in ten batches + a recorded snapshot + one reconcile/gate run (~6 s)."""
    from pipelines.demo import generate_cluster
    from pipelines.ingest import ingest_segments_local
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
    from pipelines.reconcile.reconcile import run_reconcile
    from pipelines.reconcile.snapshot import store_snapshot

    base = tmp_path_factory.mktemp("maintain")
    data, lake = base / "demo-data", base / "lake"
    generate_cluster(data, scale=1)
    parts = sorted(data.glob("__consumer_offsets-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))
    for batch_id, part in enumerate(parts):
        ingest_segments_local(part, lake, cluster_id="demo", first_batch_id=batch_id)
    store_snapshot(DeltaRsEngine(lake), snapshot_from_recorded(data / "live"), "demo")
    assert run_reconcile(lake, cluster_id="demo", data_docs=False).passed
    return lake


@pytest.fixture
def lake(demo_lake: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "lake"
    shutil.copytree(demo_lake, copy)
    return copy


def _rows(path: Path, version: int | None = None) -> list[str]:
    """A table's rows (at ``version``) as sorted JSON strings: order-free, exact content."""
    dt = DeltaTable(str(path), version=version)
    return sorted(json.dumps(r, sort_keys=True, default=repr)
                  for r in dt.to_pyarrow_table().to_pylist())


def _state(lake: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in find_tables(lake):
        dt = DeltaTable(str(path))
        out[path.name] = {"version": dt.version(), "rows": _rows(path),
                          "txn": dt.transaction_version(APP_ID),
                          "files": len(dt.file_uris())}
    return out


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def _delta_packed(lake: Path) -> dict[str, bool]:
    """Per table with ``delta_encoded`` columns: whether its live files store all of them
    DELTA_BINARY_PACKED (the ingest's files, and compaction's after ``maintain``)."""
    import pyarrow.parquet as pq

    from pipelines.lake.contracts import contracts

    out = {}
    for name, spec in contracts().items():
        if not spec.delta_encoded or not (lake / name).exists():
            continue
        files = [pq.ParquetFile(uri.removeprefix("file://")).metadata for uri in DeltaTable(str(lake / name)).file_uris()]
        out[name] = bool(files) and all(
            "DELTA_BINARY_PACKED" in meta.row_group(g).column(i).encodings
            for meta in files for g in range(meta.num_row_groups) for i in range(meta.num_columns)
            if meta.row_group(g).column(i).path_in_schema in spec.delta_encoded)
    return out


def test_maintain_keeps_every_record_and_time_travel(lake: Path) -> None:
    packed = {"offsets_raw": True, "offset_commits": True, "group_metadata": True, "commit_attribution": True}
    assert _delta_packed(lake) == packed
    before = _state(lake)
    assert {*HISTORY, "committed_offsets", "consumer_groups", "group_members",
            "group_generations", "snapshot_offsets", "reconciliation",
            "quality_results"} <= set(before)
    assert all(before[t]["files"] >= 5 for t in HISTORY), before  # small files to compact
    # versions to travel back to: the first history batch, a mid-way state merge
    early = {t: 1 for t in HISTORY} | {"committed_offsets": 3, "group_members": 3}
    early_rows = {t: _rows(lake / t, v) for t, v in early.items()}

    report = maintain(lake)  # 720 h default

    assert report["errors"] == [] and set(report["tables"]) == set(before)
    after = _state(lake)
    for name, b in before.items():
        a, r = after[name], report["tables"][name]
        assert a["rows"] == b["rows"], f"{name}: contents changed"
        assert a["txn"] == b["txn"], f"{name}: exactly-once markers lost"
        assert r["rows_before"] == r["rows_after"] == len(b["rows"])
        assert r["vacuum"]["removed"] == 0  # nothing is older than 720 h
        assert r["checkpoint"]["version"] == a["version"]
        assert (lake / name / "_delta_log" / "_last_checkpoint").exists()
        config = DeltaTable(str(lake / name)).metadata().configuration
        assert interval_hours(config["delta.deletedFileRetentionDuration"]) == 720
    for t in HISTORY:
        assert after[t]["files"] == 1 < before[t]["files"]
    assert report["tables"]["offset_commits"]["optimize"]["mode"] == "z-order(group_id)"
    assert report["tables"]["offsets_raw"]["optimize"]["mode"] == "compact"  # no group_id
    for t, v in early.items():  # time travel reads the files compaction replaced
        assert _rows(lake / t, v) == early_rows[t], t

    assert _delta_packed(lake) == packed  # compaction writes files as the ingest does
    again = maintain(lake)  # idempotent: nothing left to compact, no new versions
    assert all(r["optimize"]["mode"] == "skipped" for r in again["tables"].values())
    assert _state(lake) == after


def test_dry_run_changes_nothing(lake: Path) -> None:
    tree = _tree(lake)
    report = maintain(lake, retention_hours=MIN_RETENTION_HOURS, dry_run=True)
    assert _tree(lake) == tree
    assert report["dry_run"] and report["errors"] == []
    raw = report["tables"]["offsets_raw"]
    assert raw["optimize"]["mode"] == "compact" and raw["optimize"]["would_consider_files"] >= 5
    assert raw["properties_would_set"] == {}  # 168 h is Delta's default already
    assert raw["vacuum"]["would_remove"] == 0 and raw["checkpoint"] is None


def test_retention_below_a_week_is_refused(lake: Path) -> None:
    with pytest.raises(ValueError, match="at least 168 h"):
        maintain(lake, retention_hours=MIN_RETENTION_HOURS - 1)


def test_longer_table_retention_is_kept(lake: Path) -> None:
    dt = DeltaTable(str(lake / "offset_commits"))
    dt.alter.set_table_properties({"delta.deletedFileRetentionDuration": "interval 60 days"})
    report = maintain(lake, retention_hours=200, tables=["offset_commits", "offsets_raw"])
    assert set(report["tables"]) == {"offset_commits", "offsets_raw"}
    assert report["tables"]["offset_commits"]["vacuum"]["retention_hours"] == 60 * 24
    assert "delta.deletedFileRetentionDuration" not in report["tables"]["offset_commits"][
        "properties_set"]
    config = DeltaTable(str(lake / "offset_commits")).metadata().configuration
    assert config["delta.deletedFileRetentionDuration"] == "interval 60 days"


def _aged_table(path: Path, removed_days_ago: float, files_days_ago: float) -> int:
    """Three appends, then a compaction whose remove actions (and the removed files) are
    back-dated: time passing, as vacuum and checkpoints see it. Returns the pre-compaction
    version."""
    for i in range(3):
        write_deltalake(str(path), pa.table({"group_id": [f"g{i}"], "n": [i]}), mode="append")
    version = DeltaTable(str(path)).version()
    DeltaTable(str(path)).optimize.compact()
    commit = path / "_delta_log" / f"{DeltaTable(str(path)).version():020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
    stamp = int((time.time() - removed_days_ago * DAY_S) * 1000)
    mtime = time.time() - files_days_ago * DAY_S
    for action in actions:
        if "remove" in action:
            action["remove"]["deletionTimestamp"] = stamp
            os.utime(path / action["remove"]["path"], (mtime, mtime))
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return version


def test_vacuum_keeps_time_travel_inside_retention(tmp_path: Path) -> None:
    """Files removed 10 days ago survive a 30-day vacuum even in full mode, across the
    checkpoint: without raising deletedFileRetentionDuration, delta-rs drops their
    tombstones from the checkpoint (older than its 7-day default) and a full vacuum then
    deletes them as orphans (their mtime is 40 days old)."""
    lake = tmp_path / "lake"
    recent = _aged_table(lake / "recent", removed_days_ago=10, files_days_ago=40)
    expired = _aged_table(lake / "expired", removed_days_ago=40, files_days_ago=40)
    orphan_old, orphan_new = lake / "recent" / "part-orphan-old.parquet", lake / "recent" / "part-orphan-new.parquet"
    for orphan in (orphan_old, orphan_new):
        orphan.write_bytes(b"not referenced by the log (a failed write)")
    os.utime(orphan_old, (time.time() - 40 * DAY_S,) * 2)
    rows_recent = _rows(lake / "recent", recent)

    report = maintain(lake, full_vacuum=True)
    # the second run starts from the checkpoint the first one wrote: the tombstones must be in it
    second = maintain(lake, full_vacuum=True)

    assert second["totals"]["vacuum_removed"] == 0
    r, e = report["tables"]["recent"], report["tables"]["expired"]
    assert r["vacuum"]["files"] == [orphan_old.name] and r["vacuum"]["removed"] == 1
    assert orphan_new.exists() and not orphan_old.exists()
    assert r["checkpoint"]["created"]
    assert _rows(lake / "recent", recent) == rows_recent  # 10 days < 30: still readable
    assert e["vacuum"]["removed"] == 3 and e["vacuum"]["bytes"] > 0  # 40 days > 30: gone
    assert len(_rows(lake / "expired")) == 3  # the current version is untouched
    with pytest.raises(Exception, match=r"(?i)not found|no such file|does not exist"):
        _rows(lake / "expired", expired)
