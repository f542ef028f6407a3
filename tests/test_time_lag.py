"""Exact time lag in ``snapshot`` (issue 11 item 1), against the in-test Kafka protocol server.

Every expected timestamp below is a constant the test wrote into the log itself, never a
value computed by the code under test; request counts come from the fake broker's per-API
counters, so "one Fetch per broker, not per partition" is asserted, not assumed.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from pipelines.reconcile.cluster.live import capture_snapshot
from pipelines.reconcile.cluster.record_times import PARTITION_BYTES, plan
from pipelines.reconcile.cluster.rows import LagRow
from tests.support.fake_broker import FakeKafkaCluster, control_batch, record_batch

FAST = {"timeout_s": 5, "request_timeout_ms": 5000, "retry_backoff_ms": 10, "max_backoff_ms": 50}
UTC = dt.timezone.utc
T0 = 1_763_950_000_123  # epoch ms, deliberately not a round second


def _utc(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)


def _lag(rows: list[LagRow]) -> dict[tuple[str, str, int], LagRow]:
    return {(r.group_id, r.topic, r.partition): r for r in rows}


def _batch_with_gap(offsets_ts: list[tuple[int, int]]) -> bytes:
    """A v2 batch whose records keep only some offsets, as log compaction leaves it."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for offset, ts in offsets_ts:
        builder.append(offset, ts, b"k", b"v", [])
    return bytes(builder.build())


def test_time_lag_exact_to_the_millisecond_and_reasons_when_unknowable() -> None:
    with FakeKafkaCluster(num_brokers=2) as fk:
        fk.add_topic("t", 6)
        # p0: two batches; the committed offset 2 lies inside the first (skip to it exactly)
        fk.append_records("t", 0, record_batch([(b"k", b"v")] * 5, timestamp_ms=T0))  # 0-4
        fk.append_records("t", 0, record_batch([(b"k", b"v")] * 3,
                                               timestamp_ms=T0 + 90_061_007))  # 5-7
        fk.commit("g", "t", 0, 2)      # record 2: T0 + 2; newest is offset 7: T0 + 90_061_009
        fk.commit("caught", "t", 0, 8)  # at the log end: time lag 0
        fk.commit("past", "t", 0, 12)   # past the end
        # p1: retention deleted offsets below 3
        fk.append_records("t", 1, record_batch([(b"k", b"v")] * 6, timestamp_ms=T0 + 500))
        fk.set_watermarks("t", 1, log_start_offset=3)
        fk.commit("g", "t", 1, 1)
        # p2: compaction removed offset 1 (records 0, 2, 3 kept in the one batch)
        fk.set_log("t", 2, _batch_with_gap([(0, T0 + 10), (2, T0 + 30), (3, T0 + 40)]))
        fk.commit("g", "t", 2, 1)
        fk.commit("g2", "t", 2, 2)      # offset 2 survives compaction: exact
        # p3: an open transaction at offsets 2-3 holds the last stable offset at 2
        fk.append_records("t", 3, record_batch([(b"k", b"v")] * 2, timestamp_ms=T0 + 7))
        fk.append_records("t", 3, record_batch([(b"k", b"v")] * 2, timestamp_ms=T0 + 9_000,
                                               producer_id=7, producer_epoch=0,
                                               transactional=True))
        fk.commit("g", "t", 3, 0)       # newest visible is offset 1 (LSO - 1): T0 + 8
        fk.commit("g2", "t", 3, 3)      # beyond the last stable offset
        # p4: a batch larger than the first fetch limit: asked again with a larger one
        big = b"x" * (PARTITION_BYTES * 2)
        fk.append_records("t", 4, record_batch([(b"k", big)] * 2, timestamp_ms=T0 + 100))
        fk.append_records("t", 4, record_batch([(b"k", b"v")], timestamp_ms=T0 + 250))
        fk.commit("g", "t", 4, 1)
        # p5: a committed transaction: the newest record is its COMMIT marker
        fk.append_records("t", 5, record_batch([(b"k", b"v")] * 2, timestamp_ms=T0 + 1,
                                               producer_id=9, producer_epoch=0,
                                               transactional=True))
        fk.append_records("t", 5, control_batch(producer_id=9, commit=True,
                                                timestamp_ms=T0 + 77))
        fk.commit("g", "t", 5, 1)

        snap = capture_snapshot(fk.bootstrap_servers, **FAST)

    lag = _lag(snap.lag)
    r = lag[("g", "t", 0)]
    assert (r.committed_offset, r.log_end_offset, r.lag) == (2, 8, 6)
    assert r.committed_timestamp == _utc(T0 + 2)
    assert (r.newest_offset, r.newest_timestamp) == (7, _utc(T0 + 90_061_009))
    assert r.time_lag_ms == 90_061_007 and r.time_lag_reason is None

    caught = lag[("caught", "t", 0)]
    assert (caught.lag, caught.time_lag_ms, caught.time_lag_reason) == (0, 0, None)
    assert caught.committed_timestamp is None and caught.newest_timestamp == _utc(T0 + 90_061_009)
    past = lag[("past", "t", 0)]
    assert (past.lag, past.time_lag_ms, past.time_lag_reason) == (0, None, "committed_past_end")

    gone = lag[("g", "t", 1)]
    assert (gone.time_lag_ms, gone.time_lag_reason) == (None, "committed_before_log_start")
    assert gone.newest_timestamp == _utc(T0 + 505)
    ends = {(e.topic, e.partition): e for e in snap.log_end_offsets}
    assert ends[("t", 1)].log_start_offset == 3 and ends[("t", 0)].log_start_offset == 0

    compacted = lag[("g", "t", 2)]
    assert (compacted.time_lag_ms, compacted.time_lag_reason) == (None, "committed_record_absent")
    kept = lag[("g2", "t", 2)]
    assert (kept.committed_timestamp, kept.newest_offset) == (_utc(T0 + 30), 3)
    assert kept.time_lag_ms == 10

    txn = lag[("g", "t", 3)]
    assert (txn.newest_offset, txn.newest_timestamp, txn.time_lag_ms) == (1, _utc(T0 + 8), 1)
    assert lag[("g2", "t", 3)].time_lag_reason == "beyond_last_stable_offset"

    large = lag[("g", "t", 4)]
    assert (large.committed_timestamp, large.time_lag_ms) == (_utc(T0 + 101), 149)

    marker = lag[("g", "t", 5)]
    assert (marker.newest_offset, marker.newest_timestamp) == (2, _utc(T0 + 77))
    assert marker.committed_timestamp == _utc(T0 + 2)  # record 1 of the batch: T0 + 1 + 1
    assert marker.time_lag_ms == 75  # T0 + 77 - (T0 + 2): the marker is the newest record


def test_thousand_partitions_cost_a_few_fetches_per_broker_not_one_per_partition() -> None:
    """1,000 partitions over 3 brokers, two groups at different offsets: one Fetch per broker
    per distinct offset (each record is its own ~3 KB batch here, so one read under the 4 KB
    per-partition limit cannot serve two offsets), i.e. 3 x 3 requests, against 3,000 for
    per-partition reads."""
    brokers, partitions = 3, 1000
    value = b"v" * 3000
    with FakeKafkaCluster(num_brokers=brokers) as fk:
        fk.add_topic("big", partitions)
        for p in range(partitions):
            for i in range(4):  # offsets 0..3, each its own batch, ts = T0 + p*1000 + i*7
                fk.append_records("big", p, record_batch([(b"k", value)],
                                                         timestamp_ms=T0 + p * 1000 + i * 7))
            fk.commit("slow", "big", p, 0)
            fk.commit("fast", "big", p, 2)
        fk.reset_counters()
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
        fetches = fk.count("Fetch")
        per_broker = {b: fk.count("Fetch", broker_id=b) for b in fk.broker_ids}
        list_offsets = fk.count("ListOffsets")
        fetch_versions = {r.api_version for r in fk.requests_for("Fetch")}

    assert fetches == brokers * 3, fetches  # offsets 0, 2 and the newest (3)
    assert set(per_broker.values()) == {3}
    assert list_offsets <= brokers * 6  # offsets topic HW + LSO; held HW, LSO, start, by time
    assert max(fetch_versions) >= 4
    lag = _lag(snap.lag)
    assert len(lag) == 2 * partitions
    for p in range(partitions):
        slow, fast = lag[("slow", "big", p)], lag[("fast", "big", p)]
        assert slow.committed_timestamp == _utc(T0 + p * 1000)
        assert slow.newest_timestamp == _utc(T0 + p * 1000 + 21)
        assert (slow.time_lag_ms, fast.time_lag_ms) == (21, 7)
        assert (slow.lag, fast.lag) == (4, 2)


def test_fetch_refused_by_acls_is_a_reason_not_a_failure() -> None:
    """Fetch needs READ on the topic (ListOffsets only DESCRIBE): without it the time lag is
    null with the broker's error named, and the offset lag is still there."""
    with FakeKafkaCluster(num_brokers=1) as fk:
        fk.add_topic("t", 1)
        fk.append_records("t", 0, record_batch([(b"k", b"v")] * 3, timestamp_ms=T0))
        fk.commit("g", "t", 0, 1)
        fk.enable_sasl({"reader": "pw"}, mechanisms=("PLAIN",))
        fk.grant("reader", describe_topics=["t", "__consumer_offsets"], describe_groups=["g"])
        snap = capture_snapshot(fk.bootstrap_servers, security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="PLAIN", sasl_plain_username="reader",
                                sasl_plain_password="pw", **FAST)
    row = _lag(snap.lag)[("g", "t", 0)]
    assert row.lag == 2
    assert (row.time_lag_ms, row.time_lag_reason) == (None, "fetch_error:TOPIC_AUTHORIZATION_FAILED")


def test_producers_rate_from_list_offsets_by_timestamp() -> None:
    """produce_rate: ListOffsets by timestamp (one request per broker) finds the first offset
    of the 15 minutes before the capture: 10 records older than that, 30 inside -> 30 / 900
    offsets per second; a partition with nothing that recent -> 0."""
    now = int(time.time() * 1000)
    with FakeKafkaCluster(num_brokers=2) as fk:
        fk.add_topic("t", 2)
        fk.append_records("t", 0, record_batch([(b"k", b"v")] * 10, timestamp_ms=now - 1_200_000))
        fk.append_records("t", 0, record_batch([(b"k", b"v")] * 30, timestamp_ms=now - 300_000))
        fk.append_records("t", 1, record_batch([(b"k", b"v")] * 5, timestamp_ms=now - 3_600_000))
        fk.commit("g", "t", 0, 4)
        fk.commit("g", "t", 1, 2)
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
        list_offsets = fk.requests_for("ListOffsets")
    lag = _lag(snap.lag)
    assert lag[("g", "t", 0)].produce_rate == 30 / 900
    assert lag[("g", "t", 1)].produce_rate == 0.0
    assert len(list_offsets) <= 2 * 6  # 6 ListOffsets rounds, each one request per broker


def test_an_undecodable_batch_is_a_reason_and_the_rest_is_read() -> None:
    """A batch whose attributes claim gzip over plain bytes cannot be decoded: that row says
    undecodable_batch, the snapshot and the other partitions are unaffected."""
    import struct

    with FakeKafkaCluster(num_brokers=1) as fk:
        fk.add_topic("t", 2)
        bad = bytearray(record_batch([(b"k", b"v")] * 3, timestamp_ms=T0))
        struct.pack_into(">h", bad, 21, struct.unpack_from(">h", bad, 21)[0] | 0x01)
        fk.set_log("t", 0, bytes(bad))
        fk.append_records("t", 1, record_batch([(b"k", b"v")] * 3, timestamp_ms=T0))
        fk.commit("g", "t", 0, 1)
        fk.commit("g", "t", 1, 1)
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
    lag = _lag(snap.lag)
    assert lag[("g", "t", 0)].time_lag_reason == "undecodable_batch"
    assert lag[("g", "t", 0)].lag == 2
    assert (lag[("g", "t", 1)].time_lag_ms, lag[("g", "t", 1)].time_lag_reason) == (1, None)


@pytest.mark.parametrize(("committed", "end", "stable", "start", "expected"), [
    (None, 10, 10, 0, "no_committed_offset"), (-1, 10, 10, 0, "no_committed_offset"),
    (3, None, None, None, "no_log_end_offset"), (11, 10, 10, 0, "committed_past_end"),
    (10, 10, 8, 0, "caught_up"), (9, 10, 8, 0, "beyond_last_stable_offset"),
    (2, 10, 10, 3, "committed_before_log_start"), (3, 10, 10, 3, None), (3, 10, None, None, None),
])
def test_plan_decides_what_needs_reading(committed, end, stable, start, expected) -> None:
    assert plan(committed, end, stable, start) == expected


def test_recorded_capture_has_time_lag_only_where_caught_up(tmp_path: Path) -> None:
    """A recorded capture never read the log: lagging rows say not_captured, caught-up rows
    have time lag 0 (no read needed to know it)."""
    from pipelines.reconcile.cluster.lag import lag_rows as _lag_rows
    from pipelines.reconcile.cluster.rows import LogEndOffsetRow, OffsetRow

    rows = _lag_rows([OffsetRow("g", "t", 0, 5, -1, ""), OffsetRow("g", "t", 1, 9, -1, "")],
                     [LogEndOffsetRow("t", 0, 9, 9), LogEndOffsetRow("t", 1, 9, 9)])
    by = {r.partition: r for r in rows}
    assert (by[0].time_lag_ms, by[0].time_lag_reason) == (None, "not_captured")
    assert (by[1].time_lag_ms, by[1].time_lag_reason) == (0, None)


def test_older_lake_gains_the_time_lag_columns_in_place(tmp_path: Path) -> None:
    """snapshot_lag / snapshot_log_end_offsets written before issue 11 still take snapshots:
    the nullable columns are added in place and old rows read null."""
    from deltalake import DeltaTable, write_deltalake

    from pipelines.lake.contracts import contract
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.reconcile.cluster.rows import ClusterSnapshot, LogEndOffsetRow
    from pipelines.reconcile.snapshot import store_snapshot

    engine = DeltaRsEngine(tmp_path / "lake")
    now = dt.datetime(2026, 11, 24, tzinfo=UTC)
    new_lag = ["committed_timestamp", "newest_offset", "newest_timestamp", "time_lag_ms",
               "time_lag_reason", "commit_rate", "est_catch_up_s", "committed_past_end",
               "produce_rate"]
    for name, drop, row in [
        ("snapshot_lag", new_lag, {"group_id": "g", "topic": "t", "partition": 0,
                                   "committed_offset": 1, "log_end_offset": 3, "lag": 2}),
        ("snapshot_log_end_offsets", ["log_start_offset"],
         {"topic": "t", "partition": 0, "log_end_offset": 3, "last_stable_offset": 3}),
    ]:
        schema = contract(name).arrow_schema
        for column in drop:
            schema = schema.remove(schema.get_field_index(column))
        DeltaTable.create(engine.path(name), schema)
        write_deltalake(engine.path(name), pa.Table.from_pylist([{
            "cluster_id": "default", "snapshot_id": "old", "captured_at": now, **row}],
            schema=schema), mode="append")
    lag = LagRow("g", "t", 0, 2, 5, 3, False, committed_timestamp=_utc(T0), newest_offset=4,
                 newest_timestamp=_utc(T0 + 5), time_lag_ms=5)
    store_snapshot(engine, ClusterSnapshot("new", now + dt.timedelta(seconds=1), "t",
                                           log_end_offsets=[LogEndOffsetRow("t", 0, 5, 5, 1)],
                                           lag=[lag]))
    rows = {r["snapshot_id"]: r for r in engine.read("snapshot_lag").to_pylist()}
    assert rows["old"]["time_lag_ms"] is None and rows["old"]["committed_timestamp"] is None
    assert rows["new"]["time_lag_ms"] == 5
    assert rows["new"]["committed_timestamp"] == _utc(T0)
    ends = {r["snapshot_id"]: r for r in engine.read("snapshot_log_end_offsets").to_pylist()}
    assert ends["old"]["log_start_offset"] is None and ends["new"]["log_start_offset"] == 1


def _check_catch_up_estimate(engine) -> None:
    """commit_rate / est_catch_up_s from offset_commits rows with known times: 100 -> 400 ->
    700 over 600 s is 1 offset/s; a commit outside the 15-minute window, a tombstone and
    another group do not count; a rewind gives no rate."""
    from pipelines.lake.contracts import contract
    from pipelines.reconcile.cluster.rows import ClusterSnapshot
    from pipelines.reconcile.snapshot import with_catch_up_estimates

    at = dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    rows = []

    def commit(group: str, p: int, offset: int | None, seconds_before: float) -> None:
        rows.append({"cluster_id": "c", "group_id": group, "topic": "t", "partition": p,
                     "committed_offset": offset, "leader_epoch": -1, "metadata": "",
                     "commit_timestamp": at - dt.timedelta(seconds=seconds_before),
                     "is_tombstone": offset is None, "record_type": 1, "offsets_partition": 0,
                     "offset": len(rows), "record_timestamp": at, "is_transactional": False,
                     "ingested_at": at})

    commit("g", 0, 0, 3600)  # outside the window
    commit("g", 0, 100, 600)
    commit("g", 0, 400, 300)
    commit("g", 0, None, 200)  # tombstone
    commit("g", 0, 700, 0)
    commit("g", 1, 50, 100)    # a rewind in the window
    commit("g", 1, 10, 50)
    commit("other", 0, 5, 500)
    commit("other", 0, 5000, 10)
    spec = contract("offset_commits")
    engine.append(spec, pa.Table.from_pylist(rows, schema=spec.arrow_schema), "t", 0)
    snap = ClusterSnapshot("s", at, "t", lag=[
        LagRow("g", "t", 0, 700, 1000, 300, False), LagRow("g", "t", 1, 10, 20, 10, False),
        LagRow("g", "t", 2, 5, 5, 0, False)])
    est = {r.partition: (r.commit_rate, r.est_catch_up_s)
           for r in with_catch_up_estimates(engine, snap, "c").lag}
    assert est == {0: (1.0, 300.0), 1: (None, None), 2: (None, 0.0)}
    # producers adding 0.5 offsets/s halve the net pace; at 1.0 the group never gains
    for produced, eta in ((0.5, 600.0), (1.0, None), (2.0, None)):
        busy = replace(snap, lag=[replace(snap.lag[0], produce_rate=produced)])
        assert with_catch_up_estimates(engine, busy, "c").lag[0].est_catch_up_s == eta


def test_catch_up_estimate_from_the_commit_history(tmp_path: Path) -> None:
    from pipelines.lake.engines import DeltaRsEngine

    _check_catch_up_estimate(DeltaRsEngine(tmp_path / "lake"))


@pytest.mark.spark
def test_catch_up_estimate_with_the_delta_spark_engine(spark, tmp_path: Path) -> None:
    """The delta-spark engine filters the history window in Spark's scan (not after reading
    the whole history); same answers."""
    from pipelines.lake.engines import SparkDeltaEngine
    from pipelines.spark import has_delta_jars
    from tests.test_optional_jvm_ends import NO_DELTA

    if not has_delta_jars(spark):
        pytest.skip(NO_DELTA)
    _check_catch_up_estimate(SparkDeltaEngine(spark, tmp_path / "lake"))

# --------------------------------------------------------------- the demo lake, end to end

CLUSTER = "demo"
STEP_MS = 3  # the record at offset o carries timestamp T0 + 3 * o


def _single_record_batch(offset: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(offset, T0 + STEP_MS * offset, b"k", b"v", [])
    return bytes(builder.build())


@pytest.fixture(scope="module")
def demo_lag(tmp_path_factory: pytest.TempPathFactory):
    """The demo generator's lake, and a live snapshot of a fake cluster holding the demo's
    final committed offsets, whose logs keep (as compaction would) just the records at those
    offsets and a newest record 4 past the highest: expected lags follow from the manifest."""
    from collections import defaultdict

    from pipelines.demo import generate_cluster
    from pipelines.ingest import ingest_segments_local
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.reconcile.snapshot import store_snapshot

    root = tmp_path_factory.mktemp("time-lag-demo")
    manifest = generate_cluster(root / "data", scale=1)
    ingest_segments_local(root / "data", root / "lake", cluster_id=CLUSTER)
    by_tp: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (_, t, p), c in manifest.committed.items():
        by_tp[(t, p)].append(c.offset)
    newest = {tp: max(offsets) + 4 for tp, offsets in by_tp.items()}
    with FakeKafkaCluster(num_brokers=3) as fk:
        for topic in sorted({t for t, _ in by_tp}):
            count = max(p for t, p in by_tp if t == topic) + 1
            fk.add_topic(topic, count)
        for (t, p), offsets in sorted(by_tp.items()):
            log = b"".join(_single_record_batch(o) for o in sorted({*offsets, newest[(t, p)]}))
            fk.set_log(t, p, log, log_start_offset=min(offsets))
        for (g, t, p), c in manifest.committed.items():
            fk.commit(g, t, p, c.offset)
        fk.reset_counters()
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
        fetches, brokers = fk.count("Fetch"), len(fk.broker_ids)
    store_snapshot(DeltaRsEngine(root / "lake"), snap, CLUSTER)
    want = {}
    for (g, t, p), c in manifest.committed.items():
        end = newest[(t, p)] + 1
        want[(g, t, p)] = (end - c.offset, STEP_MS * (newest[(t, p)] - c.offset)
                           if c.offset < end else 0)
    yield root / "lake", manifest, want, snap, (fetches, brokers)


def test_demo_snapshot_time_lag_and_bounded_fetches(demo_lag) -> None:
    _, manifest, want, snap, (fetches, brokers) = demo_lag
    distinct = max(len({c.offset for (_, t, p), c in manifest.committed.items() if (t, p) == tp})
                   for tp in {(t, p) for _, t, p in manifest.committed})
    assert fetches <= brokers * (distinct + 1)  # + the newest record; never per partition
    got = {(r.group_id, r.topic, r.partition): (r.lag, r.time_lag_ms) for r in snap.lag}
    assert got == want


def test_lag_queries_show_time_lag_beside_offset_lag(demo_lag) -> None:
    from pipelines.queries import run_duckdb

    lake, manifest, want, snap, _ = demo_lag
    rows = run_duckdb(lake, "lag_by_partition", cluster_id=CLUSTER).to_pylist()
    assert {r["snapshot_id"] for r in rows} == {snap.snapshot_id}
    got = {(r["group_id"], r["topic"], r["partition"]): (r["lag"], r["time_lag_ms"])
           for r in rows}
    assert got == want
    for r in rows:
        key = (r["group_id"], r["topic"], r["partition"])
        committed = manifest.committed[key].offset
        assert r["committed_timestamp"] == _utc(T0 + STEP_MS * committed)
        assert r["time_lag_reason"] is None
        assert r["est_catch_up_s"] == (0.0 if r["lag"] == 0 else None)  # no recent commits
    groups = {r["group_id"]: r for r in run_duckdb(lake, "lag_by_group",
                                                   cluster_id=CLUSTER).to_pylist()}
    for g, r in groups.items():
        mine = [v for k, v in want.items() if k[0] == g]
        assert r["total_lag"] == sum(lag for lag, _ in mine)
        assert r["max_time_lag_ms"] == max(ms for _, ms in mine)
        assert r["partitions_with_time_lag"] == len(mine)


def test_lag_by_partition_says_why_a_time_lag_is_missing(demo_lag) -> None:
    """An older snapshot chosen by id has no time lag (recorded without reading the log)."""
    from pipelines.queries import run_duckdb

    lake, *_ = demo_lag
    rows = run_duckdb(lake, "lag_by_partition", cluster_id=CLUSTER,
                      snapshot_id="no-such-snapshot").to_pylist()
    assert rows and all(r["time_lag_ms"] is None for r in rows)
    assert {r["time_lag_reason"] for r in rows} == {"no_snapshot"}


@pytest.mark.spark
@pytest.mark.parametrize("name", ["lag_by_partition", "lag_by_group"])
def test_lag_queries_same_time_lag_in_spark(spark, demo_lag, name: str) -> None:
    from pipelines.queries import run_duckdb, run_spark

    lake, *_ = demo_lag

    def norm(table: pa.Table) -> list[dict]:
        return [{k: v.astimezone(UTC) if isinstance(v, dt.datetime) else v
                 for k, v in row.items()} for row in table.to_pylist()]

    duck = norm(run_duckdb(lake, name, cluster_id=CLUSTER))
    assert any(r.get("time_lag_ms") or r.get("max_time_lag_ms") for r in duck)
    assert norm(run_spark(spark, lake, name, cluster_id=CLUSTER).toArrow()) == duck


def test_report_lag_section_shows_time_lag(demo_lag, tmp_path: Path) -> None:
    from pipelines.report.html import write_report

    lake, _, want, _, _ = demo_lag
    out = tmp_path / "report.html"
    write_report(lake, out)
    text = out.read_text(encoding="utf-8")
    assert "Time lag (newest record - next record to read)" in text
    assert "catch-up (estimate)" in text
    worst = max(ms for _, ms in want.values())
    assert f"({worst:,} ms)" in text  # the exact figure, beside the offset lag
