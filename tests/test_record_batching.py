"""``max_records_per_batch`` counts records, not offsets, on compacted partitions (issue 9).

Why: ``__consumer_offsets`` is always compacted, so its offsets are mostly holes; a budget
spent on offset ranges gave mostly empty micro-batches. The log here is built the way the
cleaner leaves one: records far apart, batches keeping their base and last offsets, a big
batch a budget must cut inside, compressed batches, an aborted transaction with its marker.
Both sources (Kafka over the in-test broker, segment files) must then cut micro-batches of
exactly ``min(budget, what is left)`` records, together reading every record once.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.sources.batching import fill_budget, spread_budget
from pipelines.sources.kafka.counting import PartitionCounter
from pipelines.sources.kafka.options import OFFSETS_TOPIC, SourceOptions
from pipelines.sources.kafka.reader import read_partition
from pipelines.sources.kafka.wire import KafkaOffsetsClient
from pipelines.sources.raw import unpacked
from pipelines.sources.record_batches.writer import NewRecord, encode_batch, encode_control_batch
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import index_partition, plan_end_offsets
from tests.support.fake_broker import FakeKafkaCluster

GAP = 37  # offsets per record kept by the "cleaner"


def compacted_log(partition: int) -> tuple[bytes, int]:
    """A cleaned partition: (batch bytes, number of data records a consumer reads)."""
    out, records, offset, ts = bytearray(), 0, 5, 1_700_000_000_000
    codecs = ("none", "gzip", "zstd")
    for i in range(30 + 7 * partition):
        size = 45 if i == 11 else 1 + (i * 7 + partition) % 5  # one batch bigger than a budget
        recs = [NewRecord(offset + GAP * j, ts + i, f"k{partition}-{i}-{j}".encode(), b"v" * 20)
                for j in range(size)]
        last = recs[-1].offset + 3  # the cleaner keeps the batch's last offset
        out += encode_batch(recs, base_offset=offset - 2, compression=codecs[i % 3],
                            last_offset_delta=last - (offset - 2))
        records += size
        offset = last + 1 + GAP
        if i % 9 == 4:  # an aborted transaction: data batch, then its ABORT marker
            pid = 900 + i
            aborted = [NewRecord(offset, ts, b"gone", b"x")]
            out += encode_batch(aborted, base_offset=offset, producer_id=pid, producer_epoch=0,
                                is_transactional=True)
            out += encode_control_batch("ABORT", offset=offset + 1, producer_id=pid,
                                        producer_epoch=0, timestamp=ts)
            offset += 2 + GAP
    return bytes(out), records


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[bytes, int]]:
    return {p: compacted_log(p) for p in range(3)}


@pytest.fixture(scope="module")
def broker(cleaned: dict[int, tuple[bytes, int]]) -> Any:
    with FakeKafkaCluster(num_brokers=1, offsets_topic_partitions=len(cleaned),
                          max_lifetime_s=900) as kafka:
        for p, (raw, _) in cleaned.items():
            kafka.set_log(OFFSETS_TOPIC, p, raw, log_start_offset=0)
        yield kafka


def _offsets(opts: SourceOptions, p: int, start: int, end: int) -> list[int]:
    return [o for b in read_partition(opts, p, start, end) for o in b.column("offset").to_pylist()]


@pytest.mark.parametrize("metadata", ["false", "true"])
def test_counter_ends_a_partition_after_exactly_n_records(broker: Any, metadata: str) -> None:
    """Cut by the counter at every budget, the reads hold exactly ``min(n, rest)`` records
    each and together every record of the full read, once (markers too with metadata)."""
    opts = SourceOptions.from_options({"bootstrap_servers": broker.bootstrap_servers,
                                       "include_batch_metadata": metadata})
    lso = broker.partition(OFFSETS_TOPIC, 1).last_stable_offset
    everything = _offsets(opts, 1, 0, lso)
    assert len(everything) * 20 < lso  # mostly holes
    with KafkaOffsetsClient(opts) as client:
        for n in (1, 3, 7, 50, 10_000):
            counter = PartitionCounter(client.wire, opts, 1)
            start, got = 0, []
            while start < lso:
                counter.plan(start, lso)
                taken = counter.take(n)
                counter.close()
                piece = _offsets(opts, 1, start, counter.end)
                assert len(piece) == taken == min(n, len(everything) - len(got)), (n, start)
                assert counter.end > start
                got += piece
                start = counter.end
            assert got == everything, n


class _Known:
    """A taker with a known backlog (for comparing with :func:`spread_budget`)."""

    def __init__(self, backlog: int) -> None:
        self.left = backlog

    @property
    def done(self) -> bool:
        return self.left == 0

    def take(self, n: int) -> int:
        got = min(n, self.left)
        self.left -= got
        return got


@pytest.mark.parametrize("budget", [0, 1, 2, 5, 100, 1000, 5000])
def test_fill_budget_shares_like_spread_budget(budget: int) -> None:
    backlog = {"0": 50, "1": 83, "2": 16057, "3": 65, "4": 118, "5": 0}
    takers = {p: _Known(n) for p, n in backlog.items()}
    taken = fill_budget(takers, budget)
    grants = {p: backlog[p] - t.left for p, t in takers.items()}
    assert taken == sum(grants.values()) == min(budget, sum(backlog.values()))
    want = spread_budget(backlog, budget)
    assert all(abs(grants[p] - want[p]) <= 1 for p in backlog), (grants, want)


def test_segment_plan_counts_records_on_a_compacted_partition(
        cleaned: dict[int, tuple[bytes, int]], tmp_path: Path) -> None:
    """The segments source plans on its index: the backlog in as many micro-batches as
    ``budget`` records each needs, evenly sized."""
    for p, (raw, _) in cleaned.items():
        directory = tmp_path / f"{OFFSETS_TOPIC}-{p}"
        directory.mkdir()
        (directory / f"{0:020d}.log").write_bytes(raw)
    indexes = {str(pl.directory.name): index_partition(pl) for pl in find_segments(tmp_path)}
    total = sum(len(i.offsets) for i in indexes.values())
    start: dict[str, int] = {}
    sizes = []
    while True:
        end = plan_end_offsets(indexes, start, 50)
        size = sum(int(((i.offsets >= start.get(k, 0)) & (i.offsets < end[k])).sum())
                   for k, i in indexes.items())
        if size == 0:
            break
        sizes.append(size)
        start = end
    assert total % 50 and total > 100  # a remainder to spread over several batches
    assert_even_batches(sizes, total, 50)


def _run(spark: Any, fmt: str, options: dict[str, str], checkpoint: Path) -> list[pa.Table]:
    tables: list[pa.Table] = []
    df = spark.readStream.format(fmt).options(packed="true", **options).load()
    query = (df.writeStream.foreachBatch(lambda d, _: tables.append(unpacked(d.toArrow())))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(180), "availableNow did not finish"
    return tables


@pytest.mark.spark
@pytest.mark.parametrize("source", ["kafka", "segments"])
def test_streaming_batches_are_cut_by_records(spark: Any, broker: Any, source: str,
                                              cleaned: dict[int, tuple[bytes, int]],
                                              tmp_path: Path) -> None:
    """Through Spark (availableNow, 60 records per batch): ceil(records / 60) micro-batches,
    every one full but the last, every record once, as the ingest job reads them."""
    budget = 60
    if source == "kafka":
        from pipelines.sources.kafka import spark_source

        spark_source.register(spark)
        fmt = spark_source.SOURCE_NAME
        options = {"bootstrap_servers": broker.bootstrap_servers, "cluster_id": "c"}
    else:
        from pipelines.sources.segments import spark_source

        spark_source.register(spark)
        for p, (raw, _) in cleaned.items():
            (tmp_path / "data" / f"{OFFSETS_TOPIC}-{p}").mkdir(parents=True)
            (tmp_path / "data" / f"{OFFSETS_TOPIC}-{p}" / f"{0:020d}.log").write_bytes(raw)
        fmt = spark_source.NAME
        options = {"path": str(tmp_path / "data"), "cluster_id": "c"}
    tables = _run(spark, fmt, {**options, "max_records_per_batch": str(budget)}, tmp_path / "cp")
    table = pa.concat_tables(tables)
    data = table.filter(pa.compute.invert(table.column("is_control")))
    records = sum(n for _, n in cleaned.values())
    rows = list(zip(data.column("offsets_partition").to_pylist(),
                    data.column("offset").to_pylist(), strict=True))
    assert len(rows) == len(set(rows)) == records
    sizes = [t.num_rows for t in tables]
    assert len(sizes) == math.ceil(table.num_rows / budget) > 1, sizes
    if source == "kafka":  # counted by fetching ahead: full batches, then the rest
        assert all(s == budget for s in sizes[:-1]) and 0 < sizes[-1] <= budget, sizes
    else:  # the index knows the backlog: as many batches, evenly sized
        assert_even_batches(sizes, table.num_rows, budget)


def assert_even_batches(sizes: list[int], records: int, budget: int) -> None:
    """``sizes`` are ``records`` cut into ceil(records / budget) batches of at most ``budget``
    records whose sizes differ by one at most, the larger first (which fixes every size)."""
    assert sum(sizes) == records and len(sizes) == math.ceil(records / budget), sizes
    assert max(sizes) <= budget and max(sizes) - min(sizes) <= 1, sizes
    assert sizes == sorted(sizes, reverse=True), sizes
