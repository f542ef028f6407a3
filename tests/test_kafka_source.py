"""The ``offsetlake-kafka`` Python Data Source against the fake broker serving real segments.

Why these tests: the source's one job is to deliver exactly what a read_committed consumer sees
(no aborted transactional commits, nothing past the last stable offset, no gaps, no duplicates)
across micro-batches and restarts. The golden scenario-a segments hold gzip/zstd, transactional
batches and COMMIT/ABORT markers; ``consumed_read_committed.jsonl`` is what a real consumer read
from the real broker.
"""

from __future__ import annotations

import bisect
import json
import logging
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from pipelines.sources.batching import spread_budget
from pipelines.sources.kafka import reader as kafka_reader
from pipelines.sources.kafka.errors import (
    KafkaDataLoss,
    KafkaFetchError,
    KafkaReadTimeout,
    KafkaSourceConfigError,
    KafkaTopicNotFound,
    KafkaUnreachable,
    explain_failure,
)
from pipelines.sources.kafka.options import SOURCE_NAME, SourceOptions
from pipelines.sources.kafka.reader import read_partition, select_committed
from pipelines.sources.kafka.spark_source import (
    plan_end_offsets,
    register,
    spark_schema,
)
from pipelines.sources.kafka.wire import describe_topic
from pipelines.sources.raw import PACKED_COLUMN, RAW_ARROW_SCHEMA, unpacked
from pipelines.sources.raw import SPARK_RAW_SCHEMA as SPARK_ARROW_SCHEMA
from pipelines.sources.record_batches.arrow_reader import bytes_to_arrow, read_segments_arrow
from pipelines.sources.segments.files import find_segments
from tests.support.fake_broker import (
    OFFSETS_TOPIC,
    FakeKafkaCluster,
    FakePartition,
    control_batch,
    record_batch,
)
from tests.support.golden_kafka import serving_scenario

log = logging.getLogger(__name__)

Row = tuple[int, int, str, str | None]  # partition, offset, key hex, value hex
UNREACHABLE = "127.0.0.1:1"


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def _registered(spark) -> None:
    """The suite's one SparkSession (tests/conftest.py), with this source registered."""
    register(spark)


@pytest.fixture
def golden_kafka(scenario_a: Path) -> Iterator[FakeKafkaCluster]:
    """Fake brokers serving the five real scenario-a ``__consumer_offsets`` logs."""
    with serving_scenario(scenario_a, max_lifetime_s=300) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def expected_read_committed(scenario_a: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """(partition, offset) -> the record a real read_committed consumer got."""
    out = {}
    with open(scenario_a / "consumed_read_committed.jsonl") as fh:
        for line in fh:
            rec = json.loads(line)
            out[(rec["partition"], rec["offset"])] = rec
    return out


# ------------------------------------------------------------------------------- helpers


def _rows(table: pa.Table) -> list[Row]:
    cols = table.select(["offsets_partition", "offset", "key", "value"]).to_pydict()
    return [(p, o, k.hex(), None if v is None else v.hex())
            for p, o, k, v in zip(cols["offsets_partition"], cols["offset"], cols["key"],
                                  cols["value"], strict=True)]


def _expected_rows(expected: dict[tuple[int, int], dict[str, Any]]) -> set[Row]:
    return {(r["partition"], r["offset"], r["key"], r["value"]) for r in expected.values()}


def _run_available_now(spark: Any, options: dict[str, str], checkpoint: Path,
                       timeout_s: float = 120) -> tuple[list[tuple[int, pa.Table]], Any]:
    """One ``availableNow`` run into foreachBatch; returns [(batch id, rows)] and the query."""
    batches: list[tuple[int, pa.Table]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append((batch_id, df.toArrow()))

    df = spark.readStream.format(SOURCE_NAME).options(**options).load()
    assert df.schema == spark_schema()
    query = (df.writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    finished = query.awaitTermination(timeout_s)
    assert finished, f"availableNow query did not finish within {timeout_s}s"
    return batches, query


def _end_offsets(query: Any) -> dict[str, int]:
    end = query.lastProgress["sources"][0]["endOffset"]
    return json.loads(end) if isinstance(end, str) else end


def _all_rows(batches: list[tuple[int, pa.Table]]) -> list[Row]:
    return [row for _, table in batches for row in _rows(table)]


# ------------------------------------------------------------------------------- pure parts


def test_spark_arrow_schema_is_what_spark_validates() -> None:
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    assert from_arrow_schema(RAW_ARROW_SCHEMA) == spark_schema()
    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(SPARK_ARROW_SCHEMA)


def test_spread_budget_is_fair_and_bounded() -> None:
    grants = spread_budget({"0": 50, "1": 83, "2": 16057, "3": 65, "4": 118}, 1000)
    assert grants == {"0": 50, "1": 83, "2": 684, "3": 65, "4": 118}
    grants = spread_budget({"0": 10, "1": 10, "2": 10}, 2)  # budget below partition count
    assert sum(grants.values()) == 2 and max(grants.values()) == 1
    assert spread_budget({"0": 0, "1": 5}, 0) == {"0": 0, "1": 0}
    assert spread_budget({"0": 3, "1": 4}, 100) == {"0": 3, "1": 4}


def test_plan_end_offsets_limits() -> None:
    start = {"0": 10, "1": 0}
    lso = {"0": 20, "1": 1000}
    assert plan_end_offsets(start, lso, ReadAllAvailable()) == lso
    assert plan_end_offsets(start, lso, ReadMaxRows(100)) == {"0": 20, "1": 90}
    assert plan_end_offsets(start, {"0": 10, "1": 0}, ReadMaxRows(100)) == start
    with pytest.raises(KafkaDataLoss):
        plan_end_offsets(start, {"0": 5, "1": 0}, None)
    assert plan_end_offsets(start, {"0": 5, "1": 0}, None, fail_on_data_loss=False) == start


def test_options_map_kafka_settings_and_reject_contradictions() -> None:
    opts = SourceOptions.from_options({
        "bootstrap_servers": "b1:9092,b2:9092",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.plain.username": "u",
        "kafka.sasl.plain.password": "p",
        "kafka.ssl.check.hostname": "false",
        "request_timeout_ms": "15000",
        "client_id": "cli",
        "max_records_per_batch": "1000",
        "starting_offsets": '{"0": 5, "3": -1}',
    })
    assert opts.kafka == {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                          "sasl_plain_username": "u", "sasl_plain_password": "p",
                          "ssl_check_hostname": False, "request_timeout_ms": 15000,
                          "client_id": "cli"}
    assert opts.starting_offsets == {0: 5, 3: -1}
    config = opts.consumer_config()
    assert config["isolation_level"] == "read_committed"
    assert config["enable_auto_commit"] is False and config["group_id"] is None
    for bad in ({"kafka.isolation.level": "read_uncommitted"}, {"kafka.api.version": "3.9"},
                {"kafka.no.such.setting": "1"}, {"kafka.request.timeout.ms": "soon"},
                {"kafka.enable.auto.commit": "true"}, {"starting_offsets": "yesterday"}):
        with pytest.raises(KafkaSourceConfigError):
            SourceOptions.from_options({"bootstrap_servers": "b:1", **bad})
    with pytest.raises(KafkaSourceConfigError, match="bootstrap_servers is required"):
        SourceOptions.from_options({})


def test_describe_topic_reports_the_last_stable_offset() -> None:
    with FakeKafkaCluster(num_brokers=1, max_lifetime_s=60) as kafka:
        kafka.append_records(OFFSETS_TOPIC, 0, record_batch([(b"k0", b"v0"), (b"k1", b"v1")]))
        kafka.append_records(OFFSETS_TOPIC, 0, record_batch(
            [(b"k2", b"v2")], producer_id=42, producer_epoch=0, transactional=True))
        kafka.append_records(OFFSETS_TOPIC, 0, record_batch([(b"k3", b"v3")]))
        described = describe_topic(kafka.bootstrap_servers)
        assert kafka.partition(OFFSETS_TOPIC, 0).high_watermark == 4
    assert described == {0: (0, 2), 1: (0, 0), 2: (0, 0), 3: (0, 0), 4: (0, 0)}


def test_describe_topic_unreachable_fails_fast_with_one_line() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaUnreachable) as err:
        describe_topic(UNREACHABLE, timeout_s=1.5)
    assert time.monotonic() - started < 8
    assert explain_failure(err.value) == (
        f"KafkaUnreachable: cannot reach broker(s) {UNREACHABLE} within 1.5s")


def test_read_partition_guards(golden_kafka: FakeKafkaCluster) -> None:
    """Direct reads: RAW schema; a target past the LSO times out; deleted offsets are loss."""
    opts = SourceOptions.from_options({"bootstrap_servers": golden_kafka.bootstrap_servers,
                                       "read_timeout_s": "1"})
    batches = list(read_partition(opts, 3, 0, 65, cluster_id="c"))
    assert all(b.schema.equals(RAW_ARROW_SCHEMA) for b in batches)
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == sorted(set(offsets)) and offsets[-1] < 65
    with pytest.raises(KafkaReadTimeout, match="no progress at offset 50"):
        list(read_partition(opts, 0, 0, 60))
    golden_kafka.set_watermarks(OFFSETS_TOPIC, 4, log_start_offset=10)
    with pytest.raises(KafkaDataLoss, match="offset 0 is no longer in the log"):
        list(read_partition(opts, 4, 0, 118))
    lenient = SourceOptions.from_options({"bootstrap_servers": golden_kafka.bootstrap_servers,
                                          "fail_on_data_loss": "false"})
    first = next(read_partition(lenient, 4, 0, 118))
    assert first.column("offset")[0].as_py() == 10


# ------------------------------------------------------------------------------- Spark


@pytest.mark.spark
@pytest.mark.corpus
@pytest.mark.slow
def test_available_now_reads_exactly_read_committed_then_resumes(
        spark: Any, golden_kafka: FakeKafkaCluster,
        expected_read_committed: dict[tuple[int, int], dict[str, Any]]) -> None:
    kafka = golden_kafka
    options = {"bootstrap_servers": kafka.bootstrap_servers, "max_records_per_batch": "5000",
               "connect_timeout_s": "5", "read_timeout_s": "30"}
    lso = {str(p): kafka.partition(OFFSETS_TOPIC, p).last_stable_offset for p in range(5)}
    with tempfile.TemporaryDirectory(prefix="offsetlake-kafka-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"

        # 1. the whole golden topic, several size-limited batches
        t0 = time.monotonic()
        batches, query = _run_available_now(spark, options, checkpoint)
        log.info("golden run: %d batches in %.1fs", len(batches), time.monotonic() - t0)
        rows = _all_rows(batches)
        assert len([b for b in batches if b[1].num_rows]) >= 3, "max_records_per_batch ignored"
        assert all(t.num_rows <= 5000 for _, t in batches)
        assert len(rows) == len(set(rows)), "duplicates across batches"
        assert set(rows) == _expected_rows(expected_read_committed)
        assert _end_offsets(query) == lso

        table = pa.concat_tables([t for _, t in batches])
        meta = table.select(["offsets_partition", "offset", "timestamp", "timestamp_type",
                             "partition_leader_epoch"]).to_pylist()
        for m in meta:
            want = expected_read_committed[(m["offsets_partition"], m["offset"])]
            assert int(m["timestamp"].timestamp() * 1000) == want["timestamp"]
            assert (m["timestamp_type"], m["partition_leader_epoch"]) == (
                want["timestamp_type"], want["leader_epoch"])
        assert set(table.column("source").to_pylist()) == {"kafka"}
        assert set(table.column("source_position").to_pylist()) == {-1}
        assert set(table.column("is_control").to_pylist()) == {False}
        assert set(table.column("cluster_id").to_pylist()) == {kafka.cluster_id}
        for unknown in ("producer_id", "is_transactional", "control_type", "magic",
                        "compression", "batch_base_offset", "crc_valid"):
            assert table.column(unknown).null_count == table.num_rows, unknown

        # 2. append: plain commits, an aborted and a committed transaction, an open one
        def append(p: int, raw: bytes) -> int:
            return kafka.append_records(OFFSETS_TOPIC, p, raw)[0]

        new: set[Row] = set()
        o = append(1, record_batch([(b"\x00\x01new-1a", b"v1a"), (b"\x00\x01new-1b", None)]))
        new |= {(1, o, b"\x00\x01new-1a".hex(), b"v1a".hex()), (1, o + 1, b"\x00\x01new-1b".hex(),
                                                                None)}
        append(3, record_batch([(b"aborted-a", b"x"), (b"aborted-b", b"y")], producer_id=7001,
                               producer_epoch=0, transactional=True, compression_type=1))
        append(3, control_batch(producer_id=7001, commit=False))
        o = append(3, record_batch([(b"committed", b"z")], producer_id=7002, producer_epoch=0,
                                   transactional=True))
        new.add((3, o, b"committed".hex(), b"z".hex()))
        append(3, control_batch(producer_id=7002, commit=True))
        o = append(3, record_batch([(b"plain-3", b"w")]))
        new.add((3, o, b"plain-3".hex(), b"w".hex()))
        open_at = append(0, record_batch([(b"open-txn", b"t")], producer_id=7003,
                                         producer_epoch=0, transactional=True))
        after_open = append(0, record_batch([(b"behind-open", b"b")]))

        batches, query = _run_available_now(spark, options, checkpoint)
        rows = _all_rows(batches)
        assert sorted(rows) == sorted(new), "restart must deliver only the new committed records"
        assert _end_offsets(query)["0"] == open_at, "must stop at the open transaction (LSO)"

        # 3. the open transaction commits: its record and the one behind it arrive
        append(0, control_batch(producer_id=7003, commit=True))
        batches, query = _run_available_now(spark, options, checkpoint)
        assert sorted(_all_rows(batches)) == [
            (0, open_at, b"open-txn".hex(), b"t".hex()),
            (0, after_open, b"behind-open".hex(), b"b".hex())]
        assert _end_offsets(query)["0"] == after_open + 2  # past the COMMIT marker


@pytest.mark.spark
@pytest.mark.corpus
def test_batch_read_matches_read_committed(
        spark: Any, golden_kafka: FakeKafkaCluster,
        expected_read_committed: dict[tuple[int, int], dict[str, Any]]) -> None:
    df = (spark.read.format(SOURCE_NAME)
          .option("bootstrap_servers", golden_kafka.bootstrap_servers)
          .option("cluster_id", "golden-a").load())
    table = df.toArrow()
    rows = _rows(table)
    assert len(rows) == len(set(rows))
    assert set(rows) == _expected_rows(expected_read_committed)
    assert set(table.column("cluster_id").to_pylist()) == {"golden-a"}


@pytest.mark.spark
@pytest.mark.corpus
def test_packed_batch_read_carries_the_same_records(spark: Any, golden_kafka: FakeKafkaCluster) -> None:
    def read(packed: str) -> pa.Table:
        return (spark.read.format(SOURCE_NAME).option("bootstrap_servers", golden_kafka.bootstrap_servers)
                .option("cluster_id", "golden-a").option("include_batch_metadata", "true")
                .option("packed", packed).load().toArrow())

    plain, packed = read("false"), read("true")
    assert packed.column_names == [PACKED_COLUMN] and packed.num_rows < plain.num_rows / 100
    order = [("offsets_partition", "ascending"), ("offset", "ascending")]
    assert unpacked(packed).sort_by(order).equals(plain.sort_by(order))


@pytest.mark.spark
def test_stream_unreachable_broker_fails_fast_with_one_line(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    started = time.monotonic()
    with pytest.raises(StreamingQueryException) as err:
        _run_available_now(spark, {"bootstrap_servers": UNREACHABLE, "connect_timeout_s": "2"},
                           tmp_path / "checkpoint", timeout_s=60)
    elapsed = time.monotonic() - started
    assert explain_failure(err.value) == (
        f"KafkaUnreachable: cannot reach broker(s) {UNREACHABLE} within 2s")
    assert elapsed < 20, f"took {elapsed:.1f}s"


# ------------------------------------------------------------------------------- raw Fetch path

#: Columns the Fetch path fills with include_batch_metadata, as the segment reader does.
BATCH_FACTS = ("producer_id", "producer_epoch", "is_transactional", "is_control", "control_type",
               "magic", "compression", "batch_base_offset", "crc_valid",
               "partition_leader_epoch", "timestamp_type", "key", "value")


@pytest.fixture(scope="module")
def golden_segment_rows(scenario_a: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """(partition, offset) -> what the segment reader reports for every record of the golden
    logs (aborted and control records included)."""
    out = {}
    for plog in find_segments(scenario_a / "segments"):
        for batch in read_segments_arrow(plog.segments):
            for row in batch.select(["offsets_partition", "offset", "timestamp",
                                     *BATCH_FACTS]).to_pylist():
                out[(row["offsets_partition"], row["offset"])] = row
    return out


def _txn_batches() -> list[bytes]:
    """Offsets 0 plain | 1-2 producer 7, gzip | 3 producer 8 | 4 ABORT 7 | 5 COMMIT 8 |
    6 producer 7 again | 7 COMMIT 7 | 8 plain."""
    txn = {"producer_epoch": 0, "transactional": True}
    return [record_batch([(b"plain-0", b"v")]),
            record_batch([(b"aborted-1", b"x"), (b"aborted-2", b"y")], producer_id=7,
                         compression_type=1, **txn),
            record_batch([(b"committed-3", b"z")], producer_id=8, **txn),
            control_batch(producer_id=7, commit=False),
            control_batch(producer_id=8, commit=True),
            record_batch([(b"committed-6", b"w")], producer_id=7, **txn),
            control_batch(producer_id=7, commit=True),
            record_batch([(b"plain-8", b"u")])]


def _offsets(data: bytes) -> list[int]:
    return [o for b in bytes_to_arrow(data) for o in b.column("offset").to_pylist()]


def test_select_committed_applies_read_committed_like_the_java_consumer() -> None:
    """Pure: the aborted (gzip) batch is dropped by producer id until the ABORT marker, a later
    transaction of the same producer is kept, markers are kept only on request."""
    log_ = FakePartition(OFFSETS_TOPIC, 0, leader=1)
    for raw in _txn_batches():
        log_.append(raw)
    end = log_.high_watermark
    raw = log_.read(0, end, 1 << 20, at_least_one=True)
    aborted = log_.aborted_transactions(0, end)
    assert aborted == [(7, 1)]

    plain = select_committed(raw, 0, aborted, keep_control=False)
    assert _offsets(plain.data) == [0, 3, 6, 8]
    assert (plain.next_offset, plain.batches, plain.aborted_batches, plain.control_batches,
            plain.partial_tail_bytes) == (9, 8, 1, 3, 0)
    audit = pa.Table.from_batches(list(bytes_to_arrow(
        select_committed(raw, 0, aborted, keep_control=True).data)))
    assert audit.column("offset").to_pylist() == [0, 3, 4, 5, 6, 7, 8]
    assert audit.column("control_type").to_pylist() == [
        None, None, "ABORT", "COMMIT", None, "COMMIT", None]
    assert _offsets(select_committed(raw, 0, [], keep_control=False).data) == [0, 1, 2, 3, 6, 8]
    # a fetch from inside the aborted batch gets the whole batch back, and drops it
    from_2 = log_.read(2, end, 1 << 20, at_least_one=True)
    assert _offsets(select_committed(from_2, 2, log_.aborted_transactions(2, end),
                                     keep_control=False).data) == [3, 6, 8]

    # an incomplete last batch is left for the next fetch, not parsed
    before_last = len(log_.read(0, 8, 1 << 20, at_least_one=True))
    cut = select_committed(raw[:-10], 0, aborted, keep_control=False)
    assert (_offsets(cut.data), cut.next_offset, cut.partial_tail_bytes) == (
        [0, 3, 6], 8, len(raw) - 10 - before_last)
    tiny = select_committed(raw[:11], 0, aborted, keep_control=False)
    assert (tiny.data, tiny.next_offset, tiny.batches, tiny.partial_tail_bytes) == (b"", 0, 0, 11)
    bad = bytearray(raw)
    struct.pack_into(">i", bad, 8, -5)
    with pytest.raises(KafkaFetchError, match="length -5"):
        select_committed(bytes(bad), 0, aborted, keep_control=False)


def test_fetch_path_drops_an_aborted_compressed_transaction() -> None:
    with FakeKafkaCluster(num_brokers=1, max_lifetime_s=60) as kafka:
        for raw in _txn_batches():
            kafka.append_records(OFFSETS_TOPIC, 0, raw)
        bootstrap = kafka.bootstrap_servers
        plain_opts = SourceOptions.from_options({"bootstrap_servers": bootstrap})
        audit_opts = SourceOptions.from_options({"bootstrap_servers": bootstrap,
                                                 "include_batch_metadata": "true"})
        plain = pa.Table.from_batches(list(read_partition(plain_opts, 0, 0, 9)))
        audit = pa.Table.from_batches(list(read_partition(audit_opts, 0, 0, 9, cluster_id="c")))
        from_2 = pa.Table.from_batches(list(read_partition(plain_opts, 0, 2, 9)))
    assert plain.schema.equals(RAW_ARROW_SCHEMA)
    assert plain.column("key").to_pylist() == [b"plain-0", b"committed-3", b"committed-6",
                                               b"plain-8"]
    assert set(plain.column("is_control").to_pylist()) == {False}
    for hidden in ("producer_id", "is_transactional", "control_type", "compression"):
        assert plain.column(hidden).null_count == plain.num_rows, hidden
    assert from_2.column("offset").to_pylist() == [3, 6, 8]

    assert audit.column("offset").to_pylist() == [0, 3, 4, 5, 6, 7, 8]
    assert audit.column("producer_id").to_pylist() == [-1, 8, 7, 8, 7, 7, -1]
    assert audit.column("is_transactional").to_pylist() == [False, *[True] * 5, False]
    assert audit.column("is_control").to_pylist() == [False, False, True, True, False, True,
                                                      False]
    assert audit.column("control_type").to_pylist() == [
        None, None, "ABORT", "COMMIT", None, "COMMIT", None]
    assert set(audit.column("compression").to_pylist()) == {"none"}  # the gzip batch is gone
    assert set(audit.column("source").to_pylist()) == {"kafka"}
    assert set(audit.column("source_position").to_pylist()) == {-1}
    assert set(audit.column("cluster_id").to_pylist()) == {"c"}


def test_missing_topic_fails_with_one_line() -> None:
    with FakeKafkaCluster(num_brokers=1, max_lifetime_s=60) as kafka:
        with pytest.raises(KafkaTopicNotFound, match="topic no-such-topic not found"):
            describe_topic(kafka.bootstrap_servers, topic="no-such-topic", timeout_s=5)
        assert "no-such-topic" not in kafka.topics


def _broker_style_read(self: FakePartition, fetch_offset: int, upper: int, max_bytes: int, *,
                       at_least_one: bool) -> bytes:
    """``FakePartition.read`` as a real broker slices its log: ``max_bytes`` of it, the last
    batch cut wherever the budget ends (a whole first batch when it alone exceeds the budget)."""
    out = bytearray()
    i = bisect.bisect_left(self._last_offsets, fetch_offset)
    while i < len(self._batches) and self._batches[i].base_offset < upper:
        data = self._batches[i].data
        room = max_bytes - len(out)
        if len(data) > room:
            out += data if not out and at_least_one else data[:room]
            break
        out += data
        i += 1
    return bytes(out)


@pytest.mark.corpus
def test_partial_batches_in_small_fetches_yield_everything_exactly_once(
        golden_kafka: FakeKafkaCluster,
        expected_read_committed: dict[tuple[int, int], dict[str, Any]],
        golden_segment_rows: dict[tuple[int, int], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(FakePartition, "read", _broker_style_read)
    tails: list[int] = []
    real_select = kafka_reader.select_committed

    def counting(*args: Any, **kwargs: Any) -> kafka_reader.CommittedBatches:
        kept = real_select(*args, **kwargs)
        tails.append(kept.partial_tail_bytes)
        return kept

    monkeypatch.setattr(kafka_reader, "select_committed", counting)
    opts = SourceOptions.from_options({
        "bootstrap_servers": golden_kafka.bootstrap_servers, "include_batch_metadata": "true",
        "kafka.max.partition.fetch.bytes": "1500", "arrow_batch_rows": "700",
        "read_timeout_s": "30"})
    lso = {p: golden_kafka.partition(OFFSETS_TOPIC, p).last_stable_offset for p in range(5)}
    batches: list[pa.RecordBatch] = []
    with caplog.at_level(logging.WARNING, logger="pipelines"):
        for p in range(5):
            batches += read_partition(opts, p, 0, lso[p])
    table = pa.Table.from_batches(batches)
    controls = table.column("is_control").to_pylist()
    rows = _rows(table)
    data = [r for r, c in zip(rows, controls, strict=True) if not c]
    markers = [(r[0], r[1]) for r, c in zip(rows, controls, strict=True) if c]
    assert len(data) == len(set(data)) and set(data) == _expected_rows(expected_read_committed)
    want_markers = {k for k, r in golden_segment_rows.items() if r["is_control"] and k[1] < lso[k[0]]}
    assert want_markers and len(markers) == len(set(markers)) and set(markers) == want_markers
    assert sum(1 for t in tails if t) > 100, "the fetches should have ended mid-batch"
    assert all(b.num_rows <= 700 for b in batches)
    noise = [r.getMessage() for r in caplog.records
             if r.levelno >= logging.WARNING and r.name.startswith("pipelines")]
    assert noise == [], "a cut-off batch is not corruption"


@pytest.mark.corpus
def test_leader_move_mid_read_refreshes_metadata_and_resumes(
        golden_kafka: FakeKafkaCluster,
        expected_read_committed: dict[tuple[int, int], dict[str, Any]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    part = golden_kafka.partition(OFFSETS_TOPIC, 2)
    old, new = part.leader, next(b for b in golden_kafka.broker_ids if b != part.leader)
    served: list[int] = []
    real_read = FakePartition.read

    def read(self: FakePartition, *args: Any, **kwargs: Any) -> bytes:
        out = real_read(self, *args, **kwargs)
        if self is part:
            served.append(len(out))
            if len(served) == 3:  # the pipelined next fetch already goes to the old leader
                self.leader = new
        return out

    monkeypatch.setattr(FakePartition, "read", read)
    opts = SourceOptions.from_options({"bootstrap_servers": golden_kafka.bootstrap_servers,
                                       "kafka.max.partition.fetch.bytes": "65536",
                                       "read_timeout_s": "30"})
    table = pa.Table.from_batches(list(read_partition(opts, 2, 0, part.last_stable_offset)))
    rows = _rows(table)
    assert len(rows) == len(set(rows))
    assert set(rows) == {r for r in _expected_rows(expected_read_committed) if r[0] == 2}
    fetch_key = 1  # ApiKey.Fetch
    by_broker = {b: sum(n for (node, api, _), n in golden_kafka.counts.items()
                        if node == b and api == fetch_key) for b in (old, new)}
    assert by_broker[old] >= 4 and by_broker[new] > 0, by_broker


@pytest.mark.corpus
def test_leader_dying_mid_read_fails_within_read_timeout(golden_kafka: FakeKafkaCluster) -> None:
    part = golden_kafka.partition(OFFSETS_TOPIC, 2)
    opts = SourceOptions.from_options({"bootstrap_servers": golden_kafka.bootstrap_servers,
                                       "read_timeout_s": "2", "arrow_batch_rows": "500",
                                       "kafka.max.partition.fetch.bytes": "65536"})
    batches = read_partition(opts, 2, 0, part.last_stable_offset)
    first = next(batches)
    golden_kafka.stop_broker(part.leader)
    started = time.monotonic()
    with pytest.raises(KafkaReadTimeout) as err:
        list(batches)
    assert time.monotonic() - started < 10
    assert explain_failure(err.value).startswith(
        "KafkaReadTimeout: partition 2 of __consumer_offsets: no progress at offset ")
    assert first.num_rows == 500


@pytest.mark.spark
@pytest.mark.corpus
@pytest.mark.slow
def test_stream_with_batch_metadata_shows_markers_and_segment_facts(
        spark: Any, golden_kafka: FakeKafkaCluster, tmp_path: Path,
        expected_read_committed: dict[tuple[int, int], dict[str, Any]],
        golden_segment_rows: dict[tuple[int, int], dict[str, Any]]) -> None:
    """Through the streaming source: the data records a real read_committed consumer got, plus
    every COMMIT/ABORT marker below the LSO, each row with the batch facts the segment reader
    reports for that offset."""
    kafka = golden_kafka
    options = {"bootstrap_servers": kafka.bootstrap_servers, "max_records_per_batch": "5000",
               "include_batch_metadata": "true", "connect_timeout_s": "5",
               "read_timeout_s": "30"}
    lso = {p: kafka.partition(OFFSETS_TOPIC, p).last_stable_offset for p in range(5)}
    batches, query = _run_available_now(spark, options, tmp_path / "checkpoint")
    assert len([b for b in batches if b[1].num_rows]) >= 3
    table = pa.concat_tables([t for _, t in batches])
    controls = table.column("is_control").to_pylist()
    rows = _rows(table)
    data = [r for r, c in zip(rows, controls, strict=True) if not c]
    markers = [(r[0], r[1]) for r, c in zip(rows, controls, strict=True) if c]
    assert len(data) == len(set(data)) and set(data) == _expected_rows(expected_read_committed)
    want_markers = {k for k, r in golden_segment_rows.items() if r["is_control"] and k[1] < lso[k[0]]}
    assert want_markers and len(markers) == len(set(markers)) and set(markers) == want_markers
    assert _end_offsets(query) == {str(p): o for p, o in lso.items()}

    for row in table.select(["offsets_partition", "offset", "timestamp", *BATCH_FACTS]).to_pylist():
        key = (row["offsets_partition"], row["offset"])
        want = golden_segment_rows[key]
        assert {c: row[c] for c in ("timestamp", *BATCH_FACTS)} == {
            c: want[c] for c in ("timestamp", *BATCH_FACTS)}, key
    assert set(table.column("source").to_pylist()) == {"kafka"}
    assert set(table.column("source_position").to_pylist()) == {-1}
    assert set(table.column("cluster_id").to_pylist()) == {kafka.cluster_id}


def _consumer_baseline(opts: SourceOptions, partition: int, start: int, end: int) -> int:
    """The KafkaConsumer loop the Fetch path replaced (poll until the position reaches ``end``,
    records into Arrow columns), kept as the throughput baseline. Returns the row count."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**opts.consumer_config())
    tp = TopicPartition(opts.topic, partition)
    rows = 0
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        while position < end:
            polled = consumer.poll(timeout_ms=1000, max_records=opts.arrow_batch_rows)
            records = [r for r in polled.get(tp, ()) if r.offset < end]
            if records:
                batch = pa.RecordBatch.from_arrays(
                    [pa.array([r.offset for r in records], pa.int64()),
                     pa.array([r.timestamp for r in records], pa.int64()),
                     pa.array([r.key for r in records], pa.binary()),
                     pa.array([r.value for r in records], pa.binary())],
                    names=["offset", "timestamp", "key", "value"])
                rows += batch.num_rows
            position = consumer.position(tp)
    finally:
        consumer.close(autocommit=False)
    return rows


@pytest.mark.slow
def test_throughput_consumer_path_vs_fetch_path(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Prints records/s of both read paths on a ~200k-record demo log (no assertion on speed:
    the fake broker shares this process and the machine is shared)."""
    from pipelines.demo import generate_cluster

    generate_cluster(tmp_path, scale=40, live=False)
    logs = find_segments(tmp_path)
    with FakeKafkaCluster(num_brokers=3, offsets_topic_partitions=len(logs),
                          max_lifetime_s=600) as kafka:
        for plog in logs:
            kafka.load_segments(OFFSETS_TOPIC, plog.offsets_partition,
                                [s.path for s in plog.segments])
        ends = {pl.offsets_partition: kafka.partition(OFFSETS_TOPIC, pl.offsets_partition)
                .last_stable_offset for pl in logs}
        opts = SourceOptions.from_options({"bootstrap_servers": kafka.bootstrap_servers})

        def fetch_rows(p: int, end: int) -> int:
            return sum(b.num_rows for b in read_partition(opts, p, 0, end))

        def consumer_rows(p: int, end: int) -> int:
            return _consumer_baseline(opts, p, 0, end)

        def timed(read: Any) -> tuple[int, float]:
            read(0, min(ends[0], 100))  # warm-up: imports, first connections
            started = time.perf_counter()
            rows = sum(read(p, end) for p, end in ends.items())
            return rows, time.perf_counter() - started

        consumer_n, consumer_s = timed(consumer_rows)
        fetch_n, fetch_s = timed(fetch_rows)
    line = (f"throughput, {sum(ends.values())} offsets in {len(ends)} partitions, fake broker "
            f"in-process: KafkaConsumer path {consumer_n / consumer_s:,.0f} records/s "
            f"({consumer_s:.2f}s), Fetch path {fetch_n / fetch_s:,.0f} records/s "
            f"({fetch_s:.2f}s), {consumer_s / fetch_s:.1f}x")
    log.info(line)
    with capsys.disabled():
        print(f"\n{line}")
    assert fetch_n == consumer_n > 150_000


def test_ingest_through_kafka_equals_the_brokers_offset_fetch(
    spark: Any, golden_kafka: FakeKafkaCluster, scenario_a: Path, tmp_path: Path
) -> None:
    """`offsetlake ingest --source kafka` on the real recorded log: the coordinator's state."""
    from pipelines.ingest import IngestConfig, run_ingest
    from tests.test_ingest import lake_offsets, live_offsets

    lake = tmp_path / "lake"
    report = run_ingest(spark, IngestConfig(source="kafka", lake=lake,
                                            bootstrap_servers=golden_kafka.bootstrap_servers,
                                            max_records_per_batch=4000))
    assert report.batches >= 4
    assert report.statuses["control"] == 7  # the COMMIT/ABORT markers, kept for the audit
    assert lake_offsets(lake) == live_offsets(scenario_a)


def test_spark_planner_processes_unpickle_the_source_without_the_client(tmp_path: Path) -> None:
    """Spark starts a Python process to create the data source (and one to plan each read)
    before any record is read: unpickling the source's class and creating it loads neither
    kafka-python nor pyarrow nor numpy (~0.27 s of every Kafka run's start, one after the
    other)."""
    import subprocess
    import sys

    from pyspark import cloudpickle

    from pipelines.sources.kafka.spark_source import KafkaConsumerOffsetsDataSource

    blob = tmp_path / "source.pickle"
    blob.write_bytes(cloudpickle.dumps(KafkaConsumerOffsetsDataSource))
    code = (
        "import pickle, sys\n"
        f"cls = pickle.loads(open({str(blob)!r}, 'rb').read())\n"
        "source = cls({'bootstrap_servers': '127.0.0.1:1', 'packed': 'true'})\n"
        "assert cls.name() == 'offsetlake-kafka'\n"
        "print([m for m in ('kafka', 'pyarrow', 'numpy') if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
