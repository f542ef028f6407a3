"""Any split of the same records into micro-batches gives the same tables (issue 12 item 6).

The Kafka sources cut batches differently from the segments source, and a resumed run
cuts them anywhere: ``group_generations`` used to keep a topic id (and a null client id)
where the record naming it came in a later batch. The property: for random cuts of every
``__consumer_offsets`` partition, batched the way a source hands out fair shares of
partitions, every column of every table equals the one-batch result, ingest bookkeeping
(``ingested_at``, ``updated_at``, ``ingest_batch_id``) aside. Runs the no-Spark path
(``process_batch``), on golden recordings when ../shared is there and on a generated
history always.
"""

from __future__ import annotations

import shutil
import tempfile
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pipelines.demo import generate_cluster
from pipelines.ingest import IngestReport, ensure_tables, process_batch
from pipelines.lake.engines import DeltaRsEngine
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import cluster_of, read_range
from tests.conftest import corpus_path, table_rows

TABLES = ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets",
          "group_records_latest", "consumer_groups", "group_members", "group_generations",
          "topic_names", "commit_attribution", "offset_anomalies", "offset_audit_cursor",
          "ownership_last_ended")


def partitions_of(data: Path) -> list[pa.Table]:
    """Each ``__consumer_offsets`` partition's records in log order (as the sources emit them)."""
    parts = [list(read_range(plog, 0, 1 << 62, cluster_of(plog, "default")))
             for plog in find_segments(data)]
    return [pa.Table.from_batches(p) for p in parts if p]


def batches(parts: list[pa.Table], cuts: list[list[int]], shifts: list[int]) -> list[pa.Table]:
    """Partition p cut at ``cuts[p]``; its j-th piece goes into batch j + ``shifts[p]``."""
    out: dict[int, list[pa.Table]] = {}
    for table, pcuts, shift in zip(parts, cuts, shifts, strict=True):
        bounds = [0, *sorted({c % (table.num_rows + 1) for c in pcuts}), table.num_rows]
        for j, (lo, hi) in enumerate(pairwise(bounds)):
            if hi > lo:
                out.setdefault(j + shift, []).append(table.slice(lo, hi - lo))
    return [pa.concat_tables(out[i]) for i in sorted(out)]


def ingest(batch_list: list[pa.Table], lake: Path) -> Path:
    engine = DeltaRsEngine(lake)
    ensure_tables(engine)
    report = IngestReport()
    for i, raw in enumerate(batch_list):
        process_batch(engine, raw, i, "split-test", report)
    return lake


def snapshot_of(lake: Path) -> dict[str, list[dict]]:
    return {t: table_rows(lake, t) for t in TABLES if (lake / t).exists()}


class _Source:
    """One recording: its partitions and the tables of the one-batch ingest."""

    def __init__(self, data: Path, workdir: Path) -> None:
        self.data = data
        self.parts = partitions_of(data)
        self.reference = snapshot_of(ingest([pa.concat_tables(self.parts)], workdir / "one"))
        assert self.reference["group_generations"], "the recording should have ownership history"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> _Source:
    root = tmp_path_factory.mktemp("split-generated")
    generate_cluster(root / "data", num_partitions=4, seed=12, live=False)
    return _Source(root / "data", root)


@pytest.fixture(scope="module", params=["scenario-a", "scenario-d"])
def recording(request, tmp_path_factory) -> _Source:
    data = corpus_path("golden", request.param, "segments")
    return _Source(data, tmp_path_factory.mktemp(f"split-{request.param}"))


def _splits(max_cuts: int = 2):
    """Up to 3 pieces per partition, shifted by up to one batch: at most 4 batches per
    example (each batch costs a few Delta merges; the examples vary where cuts fall)."""
    cuts = st.lists(st.lists(st.integers(0, 1 << 20), max_size=max_cuts), min_size=16, max_size=16)
    shifts = st.lists(st.integers(0, 1), min_size=16, max_size=16)
    return cuts, shifts


def _check(source: _Source, cuts: list[list[int]], shifts: list[int]) -> None:
    n = len(source.parts)
    _check_batches(source, batches(source.parts, cuts[:n], shifts[:n]))


def _check_batches(source: _Source, split: list[pa.Table]) -> None:
    work = Path(tempfile.mkdtemp(prefix="offsetlake-split-"))
    try:
        got = snapshot_of(ingest(split, work / "lake"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for table, rows in source.reference.items():
        if got[table] == rows:  # both sorted (table_rows)
            continue
        mine, theirs = {repr(r) for r in rows}, {repr(r) for r in got[table]}
        raise AssertionError(
            f"{table} differs with {len(split)} batches: only in one batch "
            f"{sorted(mine - theirs)[:3]}; only in the split {sorted(theirs - mine)[:3]}")


# no shrinking: one failing split already names the differing rows, and each example
# re-ingests a whole recording
_SETTINGS = settings(max_examples=6, deadline=None, derandomize=True, phases=[Phase.generate],
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(data=st.data())
def test_generated_history_tables_do_not_depend_on_batch_boundaries(generated: _Source, data) -> None:
    cuts, shifts = _splits()
    _check(generated, data.draw(cuts), data.draw(shifts))


@_SETTINGS
@given(data=st.data())
def test_recorded_tables_do_not_depend_on_batch_boundaries(recording: _Source, data) -> None:
    cuts, shifts = _splits()
    _check(recording, data.draw(cuts), data.draw(shifts))


def test_fair_shares_of_every_partition(generated: _Source) -> None:
    """A deterministic case next to the random ones: 6 fair batches, every partition cut at
    the same relative points (what a per-batch record budget does)."""
    cuts = [[t.num_rows * k // 6 for k in range(1, 6)] for t in generated.parts]
    _check(generated, cuts, [0] * len(generated.parts))


def fair_batches(parts: list[pa.Table], budget: int) -> list[pa.Table]:
    """Batches cut the way the sources cut them: ``budget`` records per batch shared fairly
    between partitions (:func:`pipelines.sources.batching.spread_budget`)."""
    from pipelines.sources.batching import spread_budget

    pos, out = [0] * len(parts), []
    while True:
        backlog = {str(i): t.num_rows - pos[i] for i, t in enumerate(parts)}
        if not any(backlog.values()):
            return out
        grants = spread_budget(backlog, budget)
        out.append(pa.concat_tables([t.slice(pos[i], grants[str(i)]) for i, t in enumerate(parts)
                                     if grants[str(i)]]))
        pos = [p + grants[str(i)] for i, p in enumerate(pos)]


def test_source_budgets_of_400_records(generated: _Source) -> None:
    _check_batches(generated, fair_batches(generated.parts, 400))


def test_recorded_source_budgets_of_1500_records(recording: _Source) -> None:
    _check_batches(recording, fair_batches(recording.parts, 1500))


def test_streaming_job_with_250_record_batches_equals_one_batch(spark, generated: _Source,
                                                               tmp_path: Path) -> None:
    """The Spark job's own batching (``--max-records-per-batch 250``, availableNow) gives the
    tables of the one-batch ingest."""
    from pipelines.ingest import IngestConfig, run_ingest

    lake = tmp_path / "lake"
    report = run_ingest(spark, IngestConfig(source="segments", lake=lake, path=str(generated.data),
                                            max_records_per_batch=250))
    assert report.batches >= sum(p.num_rows for p in generated.parts) // 250
    got = snapshot_of(lake)
    for table, rows in generated.reference.items():
        assert got[table] == rows, table
