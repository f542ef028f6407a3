"""``group_generations`` keeps its open rows apart from its closed ones.

Why: every micro-batch reads the open rows of the groups it touches and closes and opens
rows. With every group in every file, each MERGE rewrote the files holding a changed row
together with all of their closed rows, and both the read and the MERGE scanned the whole
table: a batch's cost grew with the history (docs/performance.md). Partitioned by
``is_open``, a batch reads and rewrites only the open partition and adds its closed rows as
new files. A lake written before the column existed is laid out again once.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from pipelines.demo import generate_cluster
from pipelines.ingest import IngestReport, ensure_tables, process_batch
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaRsEngine, transaction_version
from pipelines.model import OP
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import read_range
from pipelines.state.generations import STORED_COLUMN

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
TABLE = "group_generations"


def _log_actions(table_dir: Path) -> list[tuple[int, dict]]:
    """(version, action) of every commit in the table's log, in order."""
    out = []
    for commit in sorted((table_dir / "_delta_log").glob("*.json")):
        out += [(int(commit.stem), json.loads(line)) for line in commit.read_text().splitlines()]
    return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """A group-heavy generated history ingested in many small batches per partition (the
    same groups in batch after batch), delta-rs committing."""
    root = tmp_path_factory.mktemp("generations-layout")
    generate_cluster(root / "data", num_partitions=2, seed=7, live=False, group_heavy=4)
    engine = DeltaRsEngine(root / "lake")
    ensure_tables(engine)
    report, batch_id = IngestReport(), 0
    for plog in find_segments(root / "data"):
        raw = pa.Table.from_batches(list(read_range(plog, 0, 1 << 62, "c1")))
        for start in range(0, raw.num_rows, 250):
            process_batch(engine, raw.slice(start, 250), batch_id, "layout-test", report)
            batch_id += 1
    assert batch_id >= 8
    return root / "lake"


def test_the_table_is_partitioned_by_is_open(lake: Path) -> None:
    table = DeltaTable(str(lake / TABLE))
    assert table.metadata().partition_columns == ["is_open"]
    rows = table.to_pyarrow_table()
    assert pc.all(pc.equal(rows.column("is_open"), pc.is_null(rows.column("valid_to")))).as_py()
    assert 0 < pc.sum(rows.column("is_open")).as_py() < rows.num_rows  # both partitions hold rows
    # every file lies in the partition its rows belong to
    for add in (a["add"] for _, a in _log_actions(lake / TABLE) if "add" in a):
        in_file = pq.read_table(lake / TABLE / add["path"], columns=["valid_to"]).column("valid_to")
        if add["partitionValues"]["is_open"] == "true":
            assert in_file.null_count == len(in_file), add["path"]
        else:
            assert in_file.null_count == 0, add["path"]


def test_batches_never_rewrite_a_file_of_closed_rows(lake: Path) -> None:
    """Each batch closed rows that earlier batches opened; none removed a closed file."""
    actions = _log_actions(lake / TABLE)
    removed = [a["remove"]["path"] for _, a in actions if "remove" in a]
    closing = {v for v, a in actions if "add" in a and a["add"]["partitionValues"]["is_open"] == "false"}
    assert len(closing) >= 5  # batch after batch closed rows
    assert removed  # the open partition was rewritten...
    assert not [p for p in removed if p.startswith("is_open=false")]  # ...the closed one never


def old_layout(lake: Path) -> tuple[pa.Table, pa.Table]:
    """``group_generations`` as offsetlake wrote it before ``is_open`` (unpartitioned, no
    such column; batch 7 of ``old-app`` in its log): its rows, and a change set closing its
    open row. The closed rows lie around the open one in every key column, so no file
    statistic tells them apart: only the partition can."""
    spec = contract(TABLE)
    rows = [{"cluster_id": "c", "group_id": "g", "group_type": "classic", "generation": 3, "member_id": "m",
             "topic": "t", "partition": p, "valid_from": NOW, "valid_to": None if p == 1 else NOW,
             "valid_from_offset": 5 * (p + 1), "valid_to_offset": None if p == 1 else 20,
             "offsets_partition": 1, "updated_at": NOW} for p in (0, 1, 2)]
    old = spec.from_rows(rows).drop_columns(["is_open"])
    write_deltalake(str(lake / TABLE), old, commit_properties=CommitProperties(
        app_transactions=[Transaction(app_id="old-app", version=7)]))
    closing = spec.from_rows([{**rows[1], "valid_to": NOW, "valid_to_offset": 30, "is_open": False}])
    return old, closing.append_column(OP, pa.array(["upsert"])).append_column(STORED_COLUMN, pa.array([True]))


def check_laid_out(lake: Path, old: pa.Table) -> None:
    """The old table rewritten once: partitioned, the same rows with ``is_open`` filled in,
    its batches' transaction ids kept (a replay of them is still skipped)."""
    table = DeltaTable(str(lake / TABLE))
    assert table.metadata().partition_columns == ["is_open"]
    assert table.version() == 1  # one rewrite
    assert transaction_version(str(lake / TABLE), "old-app") == 7
    laid_out = {r["partition"]: r for r in table.to_pyarrow_table().to_pylist()}
    assert {p: r["is_open"] for p, r in laid_out.items()} == {0: False, 1: True, 2: False}
    assert {p: {k: v for k, v in r.items() if k != "is_open"} for p, r in laid_out.items()} == \
        {r["partition"]: r for r in old.to_pylist()}


def check_closed(lake: Path) -> None:
    after = DeltaTable(str(lake / TABLE)).to_pyarrow_table()
    assert after.num_rows == 3 and not pc.any(after.column("is_open")).as_py()
    assert sorted(after.column("valid_to_offset").to_pylist()) == [20, 20, 30]


def test_a_lake_from_before_the_partitioning_is_laid_out_once(tmp_path: Path, monkeypatch) -> None:
    """An unpartitioned table without ``is_open`` (offsetlake before it) is rewritten on
    first use, in one commit; then batches merge as usual, reading the open partition."""
    spec = contract(TABLE)
    old, closing = old_layout(tmp_path)
    engine = DeltaRsEngine(tmp_path)
    engine.ensure(spec)
    check_laid_out(tmp_path, old)
    DeltaRsEngine(tmp_path).ensure(spec)  # laid out already: nothing written
    assert DeltaTable(str(tmp_path / TABLE)).version() == 1

    # the open row closes: matched in the open partition alone, moved to the closed one
    from deltalake.table import TableMerger

    metrics: list[dict] = []
    execute = TableMerger.execute
    monkeypatch.setattr(TableMerger, "execute", lambda self: metrics.append(execute(self)) or metrics[-1])
    assert engine.merge(spec, closing, "new-app", 0)
    assert (metrics[0]["num_target_files_scanned"], metrics[0]["num_target_files_skipped_during_scan"]) == (1, 1)
    check_closed(tmp_path)


def test_names_from_a_snapshot_lay_out_an_old_lake_before_renaming_its_rows(tmp_path: Path) -> None:
    """The snapshot's topic names are the other writer of ``group_generations``: on a lake
    from before ``is_open`` its renamed rows (read, deleted, upserted under the name) go
    through the laid-out table, each in the partition it belongs to."""
    from pipelines.state.topics import store_cluster_names

    old_layout(tmp_path)
    engine = DeltaRsEngine(tmp_path)
    assert store_cluster_names(engine, {("c", "t"): "orders"}, "snapshot-app", NOW)["group_generations"] == 3
    table = DeltaTable(str(tmp_path / TABLE))
    assert table.metadata().partition_columns == ["is_open"]
    renamed = table.to_pyarrow_table().to_pylist()
    assert {(r["topic"], r["partition"], r["is_open"]) for r in renamed} == \
        {("orders", 0, False), ("orders", 1, True), ("orders", 2, False)}
    assert transaction_version(str(tmp_path / TABLE), "old-app") == 7
