"""Reconcile and the quality gate read how far each partition is ingested from the small
``ingest_progress`` table, not from the whole history (issue 9 item 4).

The guarantee: the table holds exactly what a scan of ``offsets_raw`` gives (checked here
against that scan, done in the test with pyarrow), whatever the batches, replays and
clusters; and a reconciliation plus gate using it gives the same rows and outcomes as one
scanning the history (a copy of the lake without the table takes that path). On data the
project generates (pipelines.demo).
"""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.quality import run_quality_gate
from pipelines.reconcile.reconcile import run_reconcile
from pipelines.reconcile.snapshot import store_snapshot
from pipelines.state import progress
from tests.conftest import table_rows


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("incremental")
    generate_cluster(root / "data", num_partitions=4, seed=5)
    return root / "data"


def history_facts(lake: Path) -> dict[tuple[str, int], tuple[int, datetime | None, datetime | None]]:
    """(cluster, partition) -> (max offset + 1, first, last timestamp), scanned from offsets_raw."""
    raw = DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table(
        columns=["cluster_id", "offsets_partition", "offset", "timestamp"])
    out: dict[tuple[str, int], tuple[int, datetime | None, datetime | None]] = {}
    for r in raw.to_pylist():
        key = (r["cluster_id"], r["offsets_partition"])
        end, first, last = out.get(key, (0, None, None))
        ts = r["timestamp"]
        out[key] = (max(end, r["offset"] + 1),
                    ts if first is None or (ts is not None and ts < first) else first,
                    ts if last is None or (ts is not None and ts > last) else last)
    return out


def progress_facts(lake: Path) -> dict[tuple[str, int], tuple[int, datetime | None, datetime | None]]:
    rows = DeltaTable(str(lake / "ingest_progress")).to_pyarrow_table().to_pylist()
    return {(r["cluster_id"], r["offsets_partition"]): (r["log_end"], r["first_timestamp"],
                                                        r["last_timestamp"]) for r in rows}


def test_progress_equals_a_scan_of_the_history(generated: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    report = ingest_segments_local(generated, lake, cluster_id="demo", max_records_per_batch=1)
    facts = history_facts(lake)
    assert report.batches == len(facts) >= 3  # one batch per partition directory holding records
    assert progress_facts(lake) == facts
    engine = DeltaRsEngine(lake)
    assert progress.log_ends(engine, "demo") == {p: e for (_, p), (e, _, _) in facts.items()}
    assert progress.time_range(engine, "demo") == (min(v[1] for v in facts.values()),
                                                   max(v[2] for v in facts.values()))
    assert progress.log_ends(engine, "other") == {}
    assert progress.time_range(engine, "other") is None


def test_replays_other_queries_and_clusters_keep_it_exact(generated: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ingest_segments_local(generated, lake, cluster_id="demo", app_id="first", max_records_per_batch=1)
    before = progress_facts(lake)
    # the same records again under another query (its batch numbers start at 0 again)
    ingest_segments_local(generated, lake, cluster_id="demo", app_id="second", max_records_per_batch=1)
    assert progress_facts(lake) == before
    # a lake that predates the table: it is built from the history at the next batch
    shutil.rmtree(lake / "ingest_progress")
    ingest_segments_local(generated, lake, cluster_id="copy", app_id="third")
    facts = history_facts(lake)
    assert {c for c, _ in facts} == {"demo", "copy"}
    assert progress_facts(lake) == facts


def test_combine_keeps_the_widest_range() -> None:
    spec = progress.contract(progress.TABLE)
    t = [datetime(2026, 1, d, tzinfo=timezone.utc) for d in (1, 2, 3, 4)]
    now = datetime(2026, 2, 1, tzinfo=timezone.utc)

    def rows(*values: tuple) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(("cluster_id", "offsets_partition", "log_end",
                                               "first_timestamp", "last_timestamp"), v, strict=True),
                                          updated_at=now) for v in values], schema=spec.arrow_schema)

    old = rows(("c", 0, 100, t[1], t[2]), ("c", 1, 7, None, None))
    new = rows(("c", 0, 50, t[0], t[1]), ("c", 1, 9, t[3], t[3]), ("c", 2, 1, None, None))
    got = {(r["cluster_id"], r["offsets_partition"]): (r["log_end"], r["first_timestamp"], r["last_timestamp"])
           for r in progress.combine(old, new).to_pylist()}
    assert got == {("c", 0): (100, t[0], t[2]), ("c", 1): (9, t[3], t[3]), ("c", 2): (1, None, None)}


def _without_ids(rows: list[dict]) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k not in ("reconcile_id", "reconciled_at")}
                   for r in rows), key=repr)


def _outcomes(result) -> list[tuple]:
    return sorted((o.table, o.expectation, o.success, o.observed_value, o.element_count,
                   o.unexpected_count) for o in result.quality.outcomes)


def test_reconcile_and_gate_equal_a_full_scan(generated: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ingest_segments_local(generated, lake, cluster_id="demo", max_records_per_batch=1)
    store_snapshot(DeltaRsEngine(lake), snapshot_from_recorded(generated / "live"), "demo")
    full = tmp_path / "full"
    shutil.copytree(lake, full)
    shutil.rmtree(full / "ingest_progress")  # reads the history, as before the table existed

    incremental = run_reconcile(lake, cluster_id="demo", data_docs=False)
    scanned = run_reconcile(full, cluster_id="demo", data_docs=False)
    assert incremental.passed and scanned.passed, incremental.summary["unexplained"]
    assert incremental.reconciliation.lake_log_end == scanned.reconciliation.lake_log_end
    assert incremental.reconciliation.lake_log_end == {
        p: e for (_, p), (e, _, _) in history_facts(lake).items()}
    assert _without_ids(incremental.reconciliation.table.to_pylist()) == \
        _without_ids(scanned.reconciliation.table.to_pylist())
    assert _outcomes(incremental) == _outcomes(scanned)
    assert any("record time range" in o[1] for o in _outcomes(incremental))
    assert table_rows(lake, "committed_offsets") == table_rows(full, "committed_offsets")


def _verdicts(result) -> list[tuple]:
    return sorted((o.table, o.expectation, o.success, o.unexpected_count)
                  for o in result.quality.outcomes)


def test_gate_validates_only_new_history_with_the_same_verdicts(generated: Path, tmp_path: Path) -> None:
    parts = sorted(p.name for p in generated.glob("__consumer_offsets-*"))
    first, second = tmp_path / "first", tmp_path / "second"
    for where, names in ((first, parts[:2]), (second, parts[2:])):
        for name in names:
            shutil.copytree(generated / name, where / name)
    lake = tmp_path / "lake"
    ingest_segments_local(first, lake, cluster_id="demo", app_id="q", max_records_per_batch=1)
    store_snapshot(DeltaRsEngine(lake), snapshot_from_recorded(generated / "live"), "demo")
    run_reconcile(lake, cluster_id="demo", data_docs=False)  # validates all history so far
    commits_before = DeltaTable(str(lake / "offset_commits")).to_pyarrow_table(columns=["offset"]).num_rows
    ingest_segments_local(second, lake, cluster_id="demo", app_id="q", first_batch_id=2,
                          max_records_per_batch=1)
    commits_after = DeltaTable(str(lake / "offset_commits")).to_pyarrow_table(columns=["offset"]).num_rows
    assert commits_after > commits_before

    full = tmp_path / "full"
    shutil.copytree(lake, full)
    shutil.rmtree(full / "quality_results")  # no earlier run: everything is validated
    incremental = run_reconcile(lake, cluster_id="demo", data_docs=False)
    scanned = run_reconcile(full, cluster_id="demo", data_docs=False)
    assert incremental.passed and scanned.passed, incremental.summary["gate"]
    assert _verdicts(incremental) == _verdicts(scanned)
    assert _without_ids(incremental.reconciliation.table.to_pylist()) == \
        _without_ids(scanned.reconciliation.table.to_pylist())
    new_rows = {o.element_count for o in incremental.quality.outcomes if o.table == "offset_commits"}
    all_rows = {o.element_count for o in scanned.quality.outcomes if o.table == "offset_commits"}
    assert new_rows == {commits_after - commits_before}
    assert all_rows == {commits_after}
    history = [o.details["history"] for o in incremental.quality.outcomes if o.table == "offset_commits"]
    assert all(h["since_version"] is not None for h in history)


def test_a_failing_history_check_is_validated_again(generated: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ingest_segments_local(generated, lake, cluster_id="demo")
    engine = DeltaRsEngine(lake)
    wrong = 7  # not the generator's 4 partitions: partition_for(group_id, 7) fails rows
    failed = [run_quality_gate(engine, cluster_id="demo", num_partitions=wrong, data_docs=False)
              for _ in range(2)]
    for report in failed:
        assert not report.passed
    counts = [sorted((o.table, o.expectation, o.unexpected_count) for o in r.failed()) for r in failed]
    assert counts[0] == counts[1]  # the second run did not skip the rows the first one failed
    assert any(t == "offset_commits" for t, _, _ in counts[1])
    right = [run_quality_gate(engine, cluster_id="demo", num_partitions=4, data_docs=False)
             for _ in range(2)]
    assert right[0].passed and right[1].passed
    second = {o.table: o.element_count for o in right[1].outcomes if o.table in ("offset_commits", "group_metadata")}
    assert second == {"offset_commits": 0, "group_metadata": 0}  # nothing new since the first pass


def _state_input(records: list[tuple[str, int, int]], commits: list[tuple[str, int, int]]):
    """A batch's state input: group records and offset commits at (cluster, partition, offset)."""
    from pipelines.lake.contracts import contract
    from pipelines.model import GroupColumns, GroupRecord, LatestRecord, StateInput

    schema = contract("offset_commits").arrow_schema
    rows = [{"cluster_id": c, "group_id": "g", "topic": "t", "partition": 0, "offsets_partition": p,
             "offset": o, "is_tombstone": False} for c, p, o in commits]
    return StateInput(pa.Table.from_pylist(rows, schema=schema), GroupColumns.of(
        [GroupRecord(c, "g", LatestRecord(5, "m", False, {}, p, o)) for c, p, o in records]))


def test_not_yet_applied_cuts_exactly_the_records_below_each_log_end(tmp_path: Path) -> None:
    """Records below their partition's log end are cut, every other one kept: another
    cluster, another partition, a partition without a row, the log end itself; the group
    records in log order or not (each record is looked up by its own position)."""
    engine = DeltaRsEngine(tmp_path)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    spec = progress.contract(progress.TABLE)
    engine.overwrite(spec, pa.Table.from_pylist(
        [{"cluster_id": c, "offsets_partition": p, "log_end": e, "updated_at": now}
         for c, p, e in (("a", 0, 10), ("a", 1, 3), ("b", 0, 5))], schema=spec.arrow_schema))
    positions = sorted((c, p, o) for c in ("a", "b", "c") for p in (0, 1, 2) for o in (0, 2, 3, 4, 5, 9, 10, 11))
    applied = {(c, p, o) for c, p, o in positions if o < {("a", 0): 10, ("a", 1): 3, ("b", 0): 5}.get((c, p), 0)}
    for records in (positions, positions[::-1]):
        batch = _state_input(records, positions[::3])
        left, cut = progress.not_yet_applied(engine, batch, "app", 0)
        kept = [(g.cluster_id, g.record.offsets_partition, g.record.offset) for g in left.group_records]
        assert kept == [x for x in records if x not in applied]
        assert cut == {("a", 0): 10, ("a", 1): 3, ("b", 0): 5}
        commits = list(zip(*(left.offset_commits.column(n).to_pylist()
                             for n in ("cluster_id", "offsets_partition", "offset")), strict=True))
        assert commits == [x for x in positions[::3] if x not in applied]
    # out of order, a record of a partition without a log end between cut ones stays
    odd = [("a", 0, 0), ("b", 0, 3), ("a", 2, 0)]
    left, cut = progress.not_yet_applied(engine, _state_input(odd, []), "app", 0)
    assert [(g.cluster_id, g.record.offsets_partition, g.record.offset) for g in left.group_records] == [("a", 2, 0)]
    # the batch whose own progress row landed (a replay after a crash) is left whole
    engine.merge(spec, pa.Table.from_pylist([{"cluster_id": "a", "offsets_partition": 0, "log_end": 10,
                                              "updated_at": now, "_op": "upsert"}]), "app", 7)
    batch = _state_input(positions, positions)
    assert progress.not_yet_applied(engine, batch, "app", 7) == (batch, {})
