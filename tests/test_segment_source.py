"""Micro-batch planning of the segments source: bounded, fair, and never past what exists."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines.demo import generate_cluster
from pipelines.sources.batching import even_budget
from pipelines.sources.raw import (
    DEFERRED_COLUMN,
    INDEX_ARROW_SCHEMA,
    PACKED_COLUMN,
    RAW_ARROW_SCHEMA,
    SPARK_RAW_SCHEMA,
    unpacked,
)
from pipelines.sources.record_batches.arrow_reader import index_segments_arrow, read_segments_arrow
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import (
    PartitionIndex,
    SegmentIndexCache,
    emitted_table,
    index_partition,
    plan_end_offsets,
    read_regions,
    split_ranges,
)
from pipelines.sources.segments.spark_source import MIN_TASK_RECORDS, SegmentPlanner, task_count


def _idx(offsets: list[int]) -> PartitionIndex:
    return PartitionIndex(np.array(offsets, dtype=np.int64), (offsets[-1] + 1) if offsets else 0, ())


def test_plan_takes_everything_without_a_limit() -> None:
    indexes = {"a": _idx([0, 1, 5, 9]), "b": _idx([3, 4])}
    assert plan_end_offsets(indexes, {}, None) == {"a": 10, "b": 5}


def test_an_index_cut_at_an_offset_keeps_exactly_the_offsets_below_it() -> None:
    offsets = [0, 1, 2, 5, 9, 10]
    index = _idx(offsets)
    for end in range(-1, 13):
        cut = index.before(end)
        assert cut.offsets.tolist() == [o for o in offsets if o < end], end
        assert (cut.last_stable_offset, cut.signature) == (index.last_stable_offset, index.signature)
        assert not len(cut.offsets) or np.shares_memory(cut.offsets, index.offsets)  # a view
    assert plan_end_offsets({"a": index.before(6)}, {}, None) == {"a": 6}


def test_plan_bounds_the_batch_and_shares_it_fairly() -> None:
    indexes = {"a": _idx(list(range(0, 100, 2))), "b": _idx([7, 8])}  # a: 50 records with gaps
    # 52 records at most 10 a batch: six batches, of 9, 9, 9, 9, 8 and 8 records
    end = plan_end_offsets(indexes, {}, 10)
    assert end["b"] == 9  # the small partition gets all of its backlog
    assert end["a"] == 14  # offsets 0..12: the 7 records left of the batch's 9
    resumed = plan_end_offsets(indexes, end, 10)
    assert resumed["a"] == 32 and resumed["b"] == 9  # the next 9 records of a, nothing new in b
    sizes, start = [], end
    while (nxt := plan_end_offsets(indexes, start, 10)) != start:
        sizes.append(sum(int(((i.offsets >= start[k]) & (i.offsets < nxt[k])).sum()) for k, i in indexes.items()))
        start = nxt
    assert sizes == [9, 9, 9, 8, 8] and start == {"a": 99, "b": 9}


@pytest.mark.parametrize(("backlog", "most", "want"), [
    (2_039_514, 1_000_000, 679_838),  # the group-heavy history: three batches, not 1M, 1M, 40k
    (3_000_000, 1_000_000, 1_000_000),  # a multiple: full batches
    (1_000_001, 1_000_000, 500_001),
    (999_999, 1_000_000, 1_000_000),  # one batch holds it: the bound stands
    (0, 500, 500),
    (19_914, 500, 498),  # 40 batches, as at 500 each
])
def test_even_budget_keeps_the_batch_count_and_evens_the_sizes(backlog: int, most: int, want: int) -> None:
    assert even_budget(backlog, most) == want


# ----------------------------------------------------------------------------- reading planned byte regions


@pytest.fixture(scope="module")
def rolled_demo(tmp_path_factory) -> Path:
    """Generated history in small, mixed-codec segments: transactions span segment files,
    some abort, and markers often lie in a later file than the data they decide."""
    out = tmp_path_factory.mktemp("rolled")
    generate_cluster(out, scale=3, compression=["none", "gzip", "zstd", "lz4", "snappy"],
                     segment_bytes=64 * 1024, live=False)
    return out


def _planned_reads(root: Path, cuts_per_partition: int = 4, seed: int = 3) -> list[tuple[pa.Table, pa.Table]]:
    """(regions read piece by piece, full read) per partition directory, at random cuts."""
    rng = random.Random(seed)
    pairs = []
    for plog in find_segments(root):
        idx = index_partition(plog)
        n = len(idx.offsets)
        cuts = sorted({0, n, *(rng.randrange(n + 1) for _ in range(cuts_per_partition))})
        pieces = []
        for lo, hi in itertools.pairwise(cuts):
            if hi > lo:
                first, stop = int(idx.offsets[lo]), int(idx.offsets[hi - 1]) + 1
                aborted = idx.aborted[(idx.aborted >= first) & (idx.aborted < stop)].tolist()
                pieces += read_regions(plog.offsets_partition, idx.regions(lo, hi), first, stop, aborted, "c")
        pairs.append((pa.Table.from_batches(pieces, schema=SPARK_RAW_SCHEMA),
                      emitted_table(plog.segments, "c").cast(SPARK_RAW_SCHEMA)))
    return pairs


def test_region_reads_equal_full_reads_with_transactions_across_segments(rolled_demo: Path) -> None:
    pairs = _planned_reads(rolled_demo)
    assert sum(len(index_partition(p).aborted) for p in find_segments(rolled_demo)) > 0
    assert any(len(p.segments) > 3 for p in find_segments(rolled_demo))
    for got, full in pairs:
        assert got.equals(full)


def test_region_reads_equal_full_reads_on_real_broker_files(public_corpus: Path, scenario_a: Path) -> None:
    # the public corpus keeps several copies of a segment side by side (overlapping files)
    assert any(len(p.segments) > 1 for p in find_segments(public_corpus))
    for root in (public_corpus, scenario_a / "segments"):
        for got, full in _planned_reads(root):
            assert got.equals(full)


def test_a_region_ends_where_its_files_next_emitted_batch_begins(rolled_demo: Path, public_corpus: Path) -> None:
    """Each region is exactly what the piece needs: from its first batch to the start of the
    file's next emitted batch (or the file's end), found from a full read's positions."""
    rng = random.Random(11)
    checked = 0
    for root in (rolled_demo, public_corpus):
        for plog in find_segments(root):
            idx = index_partition(plog)
            full = emitted_table(plog.segments, "c")
            source = np.array(full.column("source").to_pylist(), dtype=object)
            position = full.column("source_position").to_numpy()
            n = len(idx.offsets)
            assert n == full.num_rows
            cuts = sorted({0, n, *(rng.randrange(n + 1) for _ in range(6))})
            for lo, hi in itertools.pairwise(cuts):
                if hi <= lo:
                    continue
                expected = []
                for path in set(source[lo:hi]):
                    mine = position[lo:hi][source[lo:hi] == path]
                    later = np.unique(position[source == path])
                    later = later[later > mine.max()]
                    expected.append((path, int(mine.min()), int(later[0]) if len(later) else -1))
                assert sorted(idx.regions(lo, hi)) == sorted(expected), (plog.directory, lo, hi)
                checked += any(end != -1 for _, _, end in expected)
    assert checked > 10  # regions that end before their file does


def test_index_only_read_has_the_full_reads_rows(rolled_demo: Path, public_corpus: Path) -> None:
    for root in (rolled_demo, public_corpus):
        for plog in find_segments(root):
            full = pa.Table.from_batches(read_segments_arrow(plog.segments), schema=RAW_ARROW_SCHEMA)
            light = pa.Table.from_batches(index_segments_arrow(plog.segments), schema=INDEX_ARROW_SCHEMA)
            for name in ("offset", "producer_id", "is_transactional", "is_control", "control_type",
                         "source_position"):
                assert light.column(name).equals(full.column(name)), (plog.directory, name)
            files = [str(s.path) for s in plog.segments]
            assert [files[i] for i in light.column("source_file").to_pylist()] == full.column("source").to_pylist()


def test_split_ranges_keeps_every_core_busy_on_one_busy_partition() -> None:
    indexes = {"busy": _idx(list(range(1000))), "quiet": _idx([0, 1, 2])}
    pieces = split_ranges(indexes, {"busy": 100}, {"busy": 900, "quiet": 3}, tasks=4, min_rows=10)
    assert [(rows, key) for rows, key, _, _ in pieces] == [(201, "busy"), (201, "busy"), (201, "busy"),
                                                           (197, "busy"), (3, "quiet")]
    busy = [(lo, hi) for _, key, lo, hi in pieces if key == "busy"]
    assert busy[0][0] == 100 and busy[-1][1] == 900  # the rows of [100, 900): no gap, no overlap
    assert all(a[1] == b[0] for a, b in itertools.pairwise(busy))
    assert split_ranges(indexes, {"busy": 1000, "quiet": 3}, {"busy": 1000, "quiet": 3}, tasks=4) == []


def test_task_count_follows_the_batch_size() -> None:
    assert task_count(0, 8) == 1 and task_count(1, 8) == 1
    assert task_count(MIN_TASK_RECORDS, 8) == 1
    assert task_count(MIN_TASK_RECORDS + 1, 8) == 2
    assert task_count(10 * MIN_TASK_RECORDS, 8) == 8  # never more than the cores
    assert task_count(10 * MIN_TASK_RECORDS, 2) == 2
    assert task_count(500, 8, min_task_records=100) == 5


@pytest.mark.parametrize(("min_task_records", "max_tasks", "expected"),
                         [(10**9, 8, 1), (1000, 8, None), (1000, 2, 2), (1, 64, None)])
def test_planned_tasks_follow_the_batch_size_and_read_every_record_once(
        rolled_demo: Path, min_task_records: int, max_tasks: int, expected: int | None) -> None:
    """A micro-batch is cut into one task per ``min_task_records`` (at most ``max_tasks``),
    and the tasks' ranges still read every record of the batch exactly once."""
    planner = SegmentPlanner({"path": str(rolled_demo), "cluster_id": "c",
                              "max_tasks": str(max_tasks), "min_task_records": str(min_task_records)})
    end = planner._latest({}, None, None)
    ranges = planner._task_ranges({}, end)
    total = sum(r[5] for task in ranges for r in task)
    pieces = split_ranges(planner._indexes, {}, end, max_tasks)  # what tasks are packed from
    assert len(ranges) == (expected or min(len(pieces), task_count(total, max_tasks, min_task_records)))
    assert expected or 2 < len(ranges) <= max_tasks
    got = pa.concat_tables(pa.Table.from_batches(list(planner.read_raw(task))) for task in ranges)
    full = pa.concat_tables([emitted_table(p.segments, "c") for p in find_segments(rolled_demo)])
    order = [("offsets_partition", "ascending"), ("offset", "ascending")]
    assert got.num_rows == total == full.num_rows
    assert got.cast(full.schema).sort_by(order).equals(full.sort_by(order))


@pytest.mark.spark
def test_packed_spark_read_carries_the_same_records(spark, rolled_demo: Path) -> None:
    from pipelines.sources.segments import spark_source

    spark_source.register(spark)

    def read(packed: str, defer_read: str = "false") -> pa.Table:
        return (spark.read.format(spark_source.NAME).option("path", str(rolled_demo))
                .option("cluster_id", "c").option("packed", packed).option("defer_read", defer_read)
                .load().toArrow())

    plain, packed, deferred = read("false"), read("true"), read("false", "true")
    assert packed.column_names == [PACKED_COLUMN] and packed.num_rows < plain.num_rows
    full = pa.concat_tables([emitted_table(p.segments, "c") for p in find_segments(rolled_demo)])
    order = [("offsets_partition", "ascending"), ("offset", "ascending")]
    assert unpacked(packed).sort_by(order).equals(plain.sort_by(order))
    assert plain.sort_by(order).equals(full.cast(SPARK_RAW_SCHEMA).sort_by(order))
    # deferred: one small row per task, naming what to read; the records are read by unpacked()
    assert deferred.column_names == [DEFERRED_COLUMN] and deferred.num_rows >= 1
    assert max(len(cell) for cell in deferred.column(DEFERRED_COLUMN).to_pylist()) < 4096 < plain.nbytes
    assert unpacked(deferred).sort_by(order).equals(plain.sort_by(order))


def test_index_cache_gives_the_same_index_and_reads_no_log_twice(rolled_demo: Path, tmp_path: Path,
                                                                 monkeypatch) -> None:
    from pipelines.sources.segments import index as segment_index

    cache = SegmentIndexCache(tmp_path / "cache")
    plogs = find_segments(rolled_demo)
    fresh = [index_partition(p) for p in plogs]
    first = [index_partition(p, cache=cache) for p in plogs]
    assert len(list((tmp_path / "cache").glob("*.parquet"))) == sum(len(p.segments) for p in plogs)
    assert len(list((tmp_path / "cache").glob("partition-*.arrow"))) == len(plogs)

    def no_log_reads(segment):
        raise AssertionError(f"{segment.path} read again")

    monkeypatch.setattr(segment_index, "_index_rows", no_log_reads)
    again = [index_partition(p, cache=cache) for p in plogs]  # the partitions' entries
    monkeypatch.setattr(cache, "partition", lambda plog, signature: None)
    folded = [index_partition(p, cache=cache) for p in plogs]  # the segments' entries, folded again
    assert any(len(a.aborted) for a in fresh) and any(len(a.offsets) for a in fresh)
    for a, b, c, d in zip(fresh, first, again, folded, strict=True):
        for name in ("offsets", "aborted", "run_row", "run_file", "run_pos"):
            for other in (b, c, d):
                assert np.array_equal(getattr(a, name), getattr(other, name)), name
                assert getattr(other, name).dtype == np.int64, name
        for other in (b, c, d):
            assert (a.last_stable_offset, a.files, a.signature) == \
                (other.last_stable_offset, other.files, other.signature)

    # a damaged partition entry is built again from the segments' rows, not a failed plan
    damaged = next((tmp_path / "cache").glob("partition-*.arrow"))
    damaged.write_bytes(b"not an Arrow file")
    monkeypatch.undo()
    rebuilt = [index_partition(p, cache=cache) for p in plogs]
    for a, b in zip(fresh, rebuilt, strict=True):
        assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.run_pos, b.run_pos)
    assert all(segment_index.SegmentIndexCache(tmp_path / "cache").partition(p, a.signature) is not None
               for p, a in zip(plogs, fresh, strict=True))  # and stored whole again

    cache.keep(plogs[0])  # the other partitions' files are gone
    cache.prune()
    assert len(list((tmp_path / "cache").glob("*.parquet"))) == len(plogs[0].segments)
    assert len(list((tmp_path / "cache").glob("partition-*.arrow"))) == 1


def test_spark_planner_processes_unpickle_the_source_without_the_reader(tmp_path: Path) -> None:
    """Spark starts a Python process to create the data source and one to plan each read,
    one after the other before any record is read: the classes they unpickle (and the
    reader they build) must not pull in the segment reader, numpy or pyarrow (~0.2 s each)."""
    import subprocess
    import sys

    from pyspark import cloudpickle

    from pipelines.sources.segments import spark_source

    blob = tmp_path / "source.pickle"
    blob.write_bytes(cloudpickle.dumps(spark_source._spark_classes()))
    code = (
        "import pickle, sys\n"
        f"cls = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
        f"source = cls({{'path': {str(tmp_path)!r}, 'index_cache_dir': {str(tmp_path / 'c')!r}}})\n"
        "reader = source.streamReader(None)\n"
        "heavy = [m for m in ('pyarrow', 'numpy', 'pipelines.sources.segments.index',\n"
        "                     'pipelines.sources.record_batches.arrow_reader') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


_RUNNER_PROBE = """
import importlib.machinery, json, pickle, sys
if sys.argv[1] == "runner":  # this process as Spark starts it: python -m <runner module>
    sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec(sys.argv[2], None)
cls = pickle.loads(open(sys.argv[3], "rb").read())
reader = cls({"path": sys.argv[4], "max_records_per_batch": "700"}).streamReader(None)
reader.prepareForTriggerAvailableNow()
start, plan = reader.initialOffset(), []
while True:
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    if end == start:
        break
    plan.append([end, [p.ranges for p in reader.partitions(start, end)]])
    start = end
print(json.dumps({"plan": plan, "pandas": "pandas" in sys.modules}))
"""


def test_the_streaming_runner_plans_without_pandas(tmp_path: Path) -> None:
    """Spark's process for a streaming source runs only its planning: there the reader
    blocks pandas (pyarrow's first ``pa.array`` would import it, ~0.17 s on the path of every
    run's start) and plans the very same micro-batches; anywhere else pandas is untouched."""
    import json
    import subprocess
    import sys

    from pyspark import cloudpickle

    from pipelines.sources.segments import spark_source
    from pipelines.without_pandas import SPARK_STREAMING_SOURCE_RUNNER

    generate_cluster(tmp_path / "data", num_partitions=3, live=False)
    blob = tmp_path / "source.pickle"
    blob.write_bytes(cloudpickle.dumps(spark_source._spark_classes()))

    def probe(*how: str) -> dict:
        done = subprocess.run([sys.executable, "-c", _RUNNER_PROBE, *how, str(blob), str(tmp_path / "data")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    in_runner = probe("runner", SPARK_STREAMING_SOURCE_RUNNER)
    elsewhere = probe("other", "pyspark.sql.worker.plan_data_source_read")
    assert in_runner["pandas"] is False and elsewhere["pandas"] is True
    assert len(in_runner["plan"]) > 2 and in_runner["plan"] == elsewhere["plan"]


@pytest.mark.parametrize(("master", "parallelism", "expected"),
                         [("local[2]", 2, 2), ("local[*]", 16, 16), ("local", 1, 1),
                          ("spark://10.0.0.1:7077", 2, 8), ("spark://10.0.0.1:7077", 64, 64),
                          ("yarn", 0, 8)])
def test_tasks_per_batch_follow_the_sessions_cores(master: str, parallelism: int, expected: int) -> None:
    """The ingest job caps the segments source's tasks at a local session's cores; on a
    cluster never below 8, since executors may register after the query started."""
    from types import SimpleNamespace

    from pipelines.ingest import _cores

    session = SimpleNamespace(sparkContext=SimpleNamespace(master=master, defaultParallelism=parallelism))
    assert _cores(session) == expected


def test_tasks_per_batch_without_a_spark_context() -> None:
    from pipelines.ingest import _cores

    class Connect:  # Spark Connect sessions have no SparkContext
        @property
        def sparkContext(self):
            raise RuntimeError("not available in Spark Connect")

    assert _cores(Connect()) == 8
