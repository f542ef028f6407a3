"""The live-cluster snapshot client against the loopback fake broker, and on golden scenario A.

Each fault test states what it proves; the fake broker routes like a real coordinator
(NOT_COORDINATOR off-coordinator) and counts every request, so "how many requests, to whom,
at which version" is asserted, not assumed.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import OffsetSpec
from kafka.protocol.api_key import ApiKey

from pipelines.reconcile.cluster.errors import ClusterUnreachable
from pipelines.reconcile.cluster.live import capture_snapshot
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.cluster.rows import SCHEMAS, ClusterSnapshot
from tests.support.fake_broker import (
    GROUP_AUTHORIZATION_FAILED,
    OFFSETS_TOPIC,
    FakeGroup,
    FakeKafkaCluster,
    FakeMember,
    consumer_assignment,
    consumer_subscription,
    control_batch,
    record_batch,
)

FAST = {"timeout_s": 5, "request_timeout_ms": 5000, "retry_backoff_ms": 10, "max_backoff_ms": 50}


def _populate(fk: FakeKafkaCluster) -> None:
    """Groups of both types, members (one static), offsets, watermarks."""
    fk.add_topic("orders", 3, log_end_offsets=[100, 200, 300])
    fk.add_topic("payments", 2, log_end_offsets=[40, 50])
    for p, hw in enumerate([11, 22, 33, 44, 55]):
        fk.set_watermarks(OFFSETS_TOPIC, p, log_end_offset=hw)
    fk.add_group(FakeGroup("g-classic", state="Stable", protocol="range", members=[
        FakeMember("m-1", client_id="c1", client_host="/10.0.0.1",
                   metadata=consumer_subscription(["orders"]),
                   assignment=consumer_assignment({"orders": [0, 1]})),
        FakeMember("m-2", client_id="c2", group_instance_id="static-2",
                   metadata=consumer_subscription(["orders"]),
                   assignment=consumer_assignment({"orders": [2]})),
    ]))
    fk.commit("g-classic", "orders", 0, 90, leader_epoch=4, metadata="m1@gen3")
    fk.commit("g-classic", "orders", 1, 150)
    fk.commit("g-classic", "orders", 2, 300)
    fk.add_group(FakeGroup("g-empty", state="Empty"))
    fk.commit("g-empty", "payments", 0, 10, metadata="before")
    fk.commit("g-assign", "payments", 1, 45, metadata='{"batchId":4}')  # assign()-only group
    fk.add_group(FakeGroup("g-848", group_type="consumer", state="Stable", members=[
        FakeMember("Zx848member", client_id="rd", group_instance_id="rd-static-1",
                   assigned_partitions={"orders": [2, 0, 1]}, subscribed_topic_names=["orders"]),
    ]))
    fk.commit("g-848", "orders", 1, 199, metadata="rd\x00")


@pytest.fixture
def kafka() -> Iterator[FakeKafkaCluster]:
    with FakeKafkaCluster(num_brokers=3) as fk:
        _populate(fk)
        yield fk


def _offsets(snapshot: ClusterSnapshot) -> dict[tuple[str, str | None, int | None], tuple]:
    return {(r.group_id, r.topic, r.partition): (r.committed_offset, r.leader_epoch, r.metadata,
                                                 r.error_name) for r in snapshot.offsets}


EXPECTED_OFFSETS = {
    ("g-classic", "orders", 0): (90, 4, "m1@gen3", None),
    ("g-classic", "orders", 1): (150, -1, "", None),
    ("g-classic", "orders", 2): (300, -1, "", None),
    ("g-empty", "payments", 0): (10, -1, "before", None),
    ("g-assign", "payments", 1): (45, -1, '{"batchId":4}', None),
    ("g-848", "orders", 1): (199, -1, "rd\x00", None),
}


def _requests_with(fk: FakeKafkaCluster, api: ApiKey, group_id: str) -> list:
    return [r for r in fk.requests_for(api) if group_id in r.group_ids]


# ------------------------------------------------------------------------------ happy path


def test_happy_path_groups_members_offsets_lag(kafka: FakeKafkaCluster) -> None:
    snap = capture_snapshot(kafka.bootstrap_servers, **FAST)

    # the snapshot point was read before any group was listed
    log = kafka.requests
    first_list_offsets = next(i for i, r in enumerate(log) if r.api_key == ApiKey.ListOffsets)
    first_list_groups = next(i for i, r in enumerate(log) if r.api_key == ApiKey.ListGroups)
    assert first_list_offsets < first_list_groups
    assert [(p.offsets_partition, p.high_watermark, p.last_stable_offset) for p in snap.points] \
        == [(0, 11, 11), (1, 22, 22), (2, 33, 33), (3, 44, 44), (4, 55, 55)]

    # ListGroups went to every broker, once
    assert {b: kafka.count(ApiKey.ListGroups, broker_id=b) for b in kafka.broker_ids} \
        == {b: 1 for b in kafka.broker_ids}

    groups = {g.group_id: g for g in snap.groups}
    assert {g: (r.group_type, r.group_state, r.protocol_type, r.protocol, r.error_code)
            for g, r in groups.items()} == {
        "g-848": ("consumer", "Stable", "consumer", "uniform", 0),
        "g-assign": ("classic", "Empty", "", "", 0),
        "g-classic": ("classic", "Stable", "consumer", "range", 0),
        "g-empty": ("classic", "Empty", "consumer", "", 0),
    }
    assert all(r.coordinator_id == kafka.coordinator_of(g) for g, r in groups.items())
    # classic groups via DescribeGroups, the KIP-848 group via ConsumerGroupDescribe
    assert _requests_with(kafka, ApiKey.ConsumerGroupDescribe, "g-848")
    assert not _requests_with(kafka, ApiKey.DescribeGroups, "g-848")

    members = {(m.group_id, m.member_id): m for m in snap.members}
    assert set(members) == {("g-classic", "m-1"), ("g-classic", "m-2"), ("g-848", "Zx848member")}
    assert members[("g-classic", "m-1")].assignment == [{"topic": "orders", "partitions": [0, 1]}]
    assert members[("g-classic", "m-1")].client_host == "/10.0.0.1"
    assert members[("g-classic", "m-2")].group_instance_id == "static-2"
    assert members[("g-848", "Zx848member")].assignment == [
        {"topic": "orders", "partitions": [0, 1, 2]}]
    assert members[("g-848", "Zx848member")].group_instance_id == "rd-static-1"

    assert _offsets(snap) == EXPECTED_OFFSETS
    lag = {(r.group_id, r.topic, r.partition): (r.committed_offset, r.log_end_offset, r.lag)
           for r in snap.lag}
    assert lag == {
        ("g-classic", "orders", 0): (90, 100, 10), ("g-classic", "orders", 1): (150, 200, 50),
        ("g-classic", "orders", 2): (300, 300, 0), ("g-empty", "payments", 0): (10, 40, 30),
        ("g-assign", "payments", 1): (45, 50, 5), ("g-848", "orders", 1): (199, 200, 1),
    }
    assert {(e.topic, e.partition) for e in snap.log_end_offsets} == {
        ("orders", 0), ("orders", 1), ("orders", 2), ("payments", 0), ("payments", 1)}
    assert snap.errors == []

    tables = snap.to_arrow()
    assert set(tables) == set(SCHEMAS)
    for name, table in tables.items():
        assert table.schema == SCHEMAS[name]
        assert set(table.column("snapshot_id").to_pylist()) <= {snap.snapshot_id}
    assert tables["snapshot_offsets"].num_rows == 6
    assert tables["snapshot_members"].column("assignment").to_pylist()[0] is not None


def test_assignment_decoder_falls_back_to_kafka_python(kafka: FakeKafkaCluster,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the project's consumer-protocol decoder, kafka-python's decodes assignments."""
    monkeypatch.setitem(sys.modules, "pipelines.decode.consumer_protocol", None)
    snap = capture_snapshot(kafka.bootstrap_servers, **FAST)
    assert {m.member_id: m.assignment for m in snap.members if m.group_id == "g-classic"} == {
        "m-1": [{"topic": "orders", "partitions": [0, 1]}],
        "m-2": [{"topic": "orders", "partitions": [2]}]}


# ------------------------------------------------------------------------------ faults


@pytest.mark.parametrize("fault", ["load_in_progress", "coordinator_not_available"])
def test_retriable_coordinator_errors_then_success(kafka: FakeKafkaCluster, fault: str) -> None:
    """COORDINATOR_LOAD_IN_PROGRESS (retry as is) / COORDINATOR_NOT_AVAILABLE (look up again)
    for the first 2 OffsetFetch answers of one group: the third attempt succeeds, the result
    equals the fault-free one, and only that group was retried."""
    getattr(kafka, fault)("g-classic", count=2)
    snap = capture_snapshot(kafka.bootstrap_servers, **FAST)
    assert _offsets(snap) == EXPECTED_OFFSETS
    assert len(_requests_with(kafka, ApiKey.OffsetFetch, "g-classic")) == 3
    assert len(_requests_with(kafka, ApiKey.OffsetFetch, "g-empty")) == 1
    if fault == "coordinator_not_available":  # re-discovered each time
        assert len(_requests_with(kafka, ApiKey.FindCoordinator, "g-classic")) == 3


def test_retries_are_bounded(kafka: FakeKafkaCluster) -> None:
    """A group that never finishes loading ends as one error row after max_retries, quickly;
    the other groups are unaffected."""
    kafka.load_in_progress("g-empty", count=1000)
    started = time.monotonic()
    snap = capture_snapshot(kafka.bootstrap_servers, max_retries=3, **FAST)
    assert time.monotonic() - started < 5
    got = _offsets(snap)
    assert got[("g-empty", None, None)] == (None, None, None, "COORDINATOR_LOAD_IN_PROGRESS")
    assert len(_requests_with(kafka, ApiKey.OffsetFetch, "g-empty")) == 4
    assert {k: v for k, v in got.items() if k[0] != "g-empty"} == {
        k: v for k, v in EXPECTED_OFFSETS.items() if k[0] != "g-empty"}


def test_coordinator_moved(kafka: FakeKafkaCluster) -> None:
    """The group moved after FindCoordinator answered: the old broker says NOT_COORDINATOR,
    the client looks it up again and gets the answers from the new coordinator."""
    old = kafka.coordinator_of("g-classic")
    new = next(b for b in kafka.broker_ids if b != old)
    kafka.move_coordinator("g-classic", new, stale_answers=1)

    snap = capture_snapshot(kafka.bootstrap_servers, **FAST)
    assert _offsets(snap) == EXPECTED_OFFSETS
    row = next(g for g in snap.groups if g.group_id == "g-classic")
    assert (row.coordinator_id, row.group_state, row.error_code) == (new, "Stable", 0)
    assert len([m for m in snap.members if m.group_id == "g-classic"]) == 2
    describes = _requests_with(kafka, ApiKey.DescribeGroups, "g-classic")
    assert [r.broker_id for r in describes] == [old, new]  # NOT_COORDINATOR, then success
    assert len(_requests_with(kafka, ApiKey.FindCoordinator, "g-classic")) == 2
    assert [r.broker_id for r in _requests_with(kafka, ApiKey.OffsetFetch, "g-classic")] == [new]


def test_one_group_of_a_batch_fails_others_fine() -> None:
    """GROUP_AUTHORIZATION_FAILED for one group inside a v8 batch: one error row for it (no
    retry, it is not retriable), correct rows for the rest of the same request."""
    with FakeKafkaCluster(num_brokers=2) as fk:
        _populate(fk)
        for gid in ("g-classic", "g-empty", "g-assign", "g-848"):
            fk.groups[gid].coordinator = fk.broker_ids[0]
        fk.inject_group_error("g-empty", GROUP_AUTHORIZATION_FAILED)
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
        fetches = fk.requests_for(ApiKey.OffsetFetch)
        assert [(r.api_version, sorted(r.group_ids)) for r in fetches] == [
            (8, ["g-848", "g-assign", "g-classic", "g-empty"])]
    expected = {k: v for k, v in EXPECTED_OFFSETS.items() if k[0] != "g-empty"}
    expected[("g-empty", None, None)] = (None, None, None, "GROUP_AUTHORIZATION_FAILED")
    assert _offsets(snap) == expected
    assert [r.error_code for r in snap.offsets if r.group_id == "g-empty"] == [30]


def test_older_broker_without_offset_fetch_v8() -> None:
    """A broker advertising OffsetFetch v7 (and FindCoordinator v3, no batched keys): one
    OffsetFetch per group, all at v7, and the same answers as the v8 path."""
    with FakeKafkaCluster(num_brokers=3, max_versions={ApiKey.OffsetFetch: 7,
                                                       ApiKey.FindCoordinator: 3}) as fk:
        _populate(fk)
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
        fetches = fk.requests_for(ApiKey.OffsetFetch)
        finds = fk.requests_for(ApiKey.FindCoordinator)
    assert _offsets(snap) == EXPECTED_OFFSETS
    assert sorted(r.group_ids for r in fetches) == [
        ("g-848",), ("g-assign",), ("g-classic",), ("g-empty",)]
    assert {r.api_version for r in fetches} == {7}
    assert all(len(r.group_ids) == 1 and r.api_version == 3 for r in finds)


def test_require_stable_records_unstable_offset_commit(kafka: FakeKafkaCluster) -> None:
    """A pending transactional offset: with require_stable the partition is recorded as
    UNSTABLE_OFFSET_COMMIT (offset -1, no lag); without it the last committed offset shows."""
    kafka.add_pending_transactional_offset("g-classic", "orders", 1)
    stable = capture_snapshot(kafka.bootstrap_servers, require_stable=True, **FAST)
    plain = capture_snapshot(kafka.bootstrap_servers, require_stable=False, **FAST)
    assert _offsets(stable)[("g-classic", "orders", 1)] == (-1, -1, "", "UNSTABLE_OFFSET_COMMIT")
    lag = next(r for r in stable.lag if (r.group_id, r.partition) == ("g-classic", 1))
    assert (lag.committed_offset, lag.lag) == (None, None)
    assert {k: v for k, v in _offsets(stable).items() if k != ("g-classic", "orders", 1)} == {
        k: v for k, v in EXPECTED_OFFSETS.items() if k != ("g-classic", "orders", 1)}
    assert _offsets(plain) == EXPECTED_OFFSETS
    assert stable.require_stable and not plain.require_stable


def test_thousand_groups_one_coordinator_one_offset_fetch() -> None:
    """1,000 groups on one coordinator: exactly one OffsetFetch v8 request (KIP-709), one
    batched FindCoordinator and one DescribeGroups."""
    with FakeKafkaCluster(num_brokers=3) as fk:
        fk.add_topic("t", 4, log_end_offsets=1000)
        coordinator = fk.broker_ids[1]
        for i in range(1000):
            gid = f"group-{i:04d}"
            fk.add_group(FakeGroup(gid, coordinator=coordinator))
            fk.commit(gid, "t", i % 4, i)
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
        fetches = fk.requests_for(ApiKey.OffsetFetch)
        assert [(r.broker_id, r.api_version, len(r.group_ids)) for r in fetches] == [
            (coordinator, 8, 1000)]
        assert fk.count(ApiKey.FindCoordinator) == 1
        assert fk.count(ApiKey.DescribeGroups) == 1
    assert len(snap.groups) == 1000
    assert len(snap.offsets) == 1000
    assert all(r.error_code == 0 for r in snap.offsets)
    assert sum(r.lag for r in snap.lag) == sum(1000 - i for i in range(1000))


def test_broker_down_is_reported_not_fatal(kafka: FakeKafkaCluster) -> None:
    """One broker unreachable after bootstrap: the capture finishes, names the broker whose
    ListGroups failed, and still returns the groups the other brokers coordinate."""
    down = kafka.broker_ids[-1]
    kafka.stop_broker(down)
    snap = capture_snapshot(kafka.address(kafka.broker_ids[0]), max_retries=2, **FAST)
    assert any(f"ListGroups on broker {down}" in e for e in snap.errors)
    listed = {g.group_id for g in snap.groups}
    assert listed == {g for g in EXPECTED_GROUPS if kafka.coordinator_of(g) != down}
    assert all(p.high_watermark is None for p in snap.points
               if kafka.partition(OFFSETS_TOPIC, p.offsets_partition).leader == down)


EXPECTED_GROUPS = ("g-classic", "g-empty", "g-assign", "g-848")


def test_unreachable_bootstrap_raises_one_clear_error() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ClusterUnreachable) as info:
        capture_snapshot(f"127.0.0.1:{port}", timeout_s=1)
    assert time.monotonic() - started < 4
    assert str(info.value) == f"cannot reach bootstrap servers 127.0.0.1:{port} within 1s"
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------ golden


def test_snapshot_from_recorded_scenario_a(scenario_a: Path) -> None:
    live = scenario_a / "live"
    snap = snapshot_from_recorded(live)
    fetched = json.loads((live / "offset_fetch.json").read_text())
    expected_rows = sum(1 for g in fetched["groups"] for t in g["topics"]
                        for p in t["partitions"] if p["error_code"] == 0)
    assert expected_rows == 59
    assert sum(1 for r in snap.offsets if r.error_code == 0 and r.topic is not None) == expected_rows
    assert len(snap.offsets) == expected_rows

    listed = json.loads((live / "list_groups.json").read_text())["groups"]
    assert {g.group_id: (g.group_type, g.group_state, g.protocol_type) for g in snap.groups} == {
        g["group_id"]: (g["group_type"], g["group_state"], g["protocol_type"]) for g in listed}
    assert all(g.error_code == 0 for g in snap.groups)

    static = {m.member_id: m.assignment for m in snap.members if m.group_id == "a-static"}
    described = json.loads((live / "describe_groups.json").read_text())["groups"]
    a_static = next(g for g in described if g["group_id"] == "a-static")
    assert static == {m["member_id"]: m["member_assignment_decoded"]["assigned_partitions"]
                      for m in a_static["members"]}
    rd = [m for m in snap.members if m.group_id == "a-848-rdkafka"]
    assert [(m.group_instance_id, m.assignment) for m in rd] == [
        ("rd-static-1", [{"topic": "clicks", "partitions": list(range(8))}])]

    capture_log = json.loads((scenario_a / "capture_log.json").read_text())
    assert {p.offsets_partition: p.high_watermark for p in snap.points} == {
        int(k): v["high_watermark"] for k, v in capture_log["co_end_offsets_before"].items()}
    lag = {(r.group_id, r.topic, r.partition): r.lag for r in snap.lag}
    assert lag[("a-bulk-loop", "bulk", 0)] == 0
    assert all(v is not None and v >= 0 for v in lag.values())
    tables = snap.to_arrow()
    assert tables["snapshot_offsets"].num_rows == expected_rows
    assert tables["snapshot_groups"].num_rows == len(listed)
    assert snapshot_from_recorded(live).snapshot_id == snap.snapshot_id  # deterministic


# ------------------------------------------------------------------------------ fake broker


def test_kafka_python_admin_client_against_fake(kafka: FakeKafkaCluster) -> None:
    """kafka-python's own KafkaAdminClient works against the fake (independent of our client)."""
    with KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers,
                          request_timeout_ms=5000) as admin:
        listed = {g["group_id"]: (g["group_type"], g["group_state"]) for g in admin.list_groups()}
        described = admin.describe_groups(["g-classic"])["g-classic"]
        offsets = admin.list_group_offsets(["g-classic", "g-assign"])
        ends = admin.list_partition_offsets({TopicPartition("orders", 2): OffsetSpec.LATEST})
    assert listed == {"g-classic": ("classic", "Stable"), "g-empty": ("classic", "Empty"),
                      "g-assign": ("classic", "Empty"), "g-848": ("consumer", "Stable")}
    assert described["protocol_data"] == "range" and len(described["members"]) == 2
    assert offsets["g-assign"][TopicPartition("payments", 1)].offset == 45
    assert ends[TopicPartition("orders", 2)].offset == 300


# ------------------------------------------------------------------------------ Fetch


def test_kafka_consumer_read_committed_against_fake_fetch() -> None:
    """kafka-python's KafkaConsumer (assign + seek + poll) reads real v2 batches from the fake
    broker: read_committed skips the aborted transaction, returns the committed one, and stops
    at the last stable offset before a still-open transaction; read_uncommitted sees it all."""
    with FakeKafkaCluster(num_brokers=2) as fk:
        fk.add_topic("t", 2)
        fk.append_records("t", 1, record_batch([(b"k0", b"v0"), (b"k1", b"v1")]))      # 0-1
        fk.append_records("t", 1, record_batch([(b"a0", b"x"), (b"a1", b"y")],         # 2-3
                                               producer_id=7, producer_epoch=0, transactional=True))
        fk.append_records("t", 1, record_batch([(b"c0", b"z")], producer_id=8,          # 4
                                               producer_epoch=0, transactional=True))
        fk.append_records("t", 1, control_batch(producer_id=7, commit=False))           # 5
        fk.append_records("t", 1, control_batch(producer_id=8, commit=True))            # 6
        fk.append_records("t", 1, record_batch([(b"k2", b"v2")]))                       # 7
        fk.append_records("t", 1, record_batch([(b"o0", b"open")], producer_id=9,       # 8
                                               producer_epoch=0, transactional=True))
        part = fk.partition("t", 1)
        assert (part.high_watermark, part.last_stable_offset) == (9, 8)

        seen = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = KafkaConsumer(bootstrap_servers=fk.bootstrap_servers, group_id=None,
                                     isolation_level=isolation, enable_auto_commit=False,
                                     fetch_max_wait_ms=50, request_timeout_ms=5000)
            tp = TopicPartition("t", 1)
            try:
                consumer.assign([tp])
                consumer.seek(tp, 0)
                end = consumer.end_offsets([tp])[tp]
                keys = []
                deadline = time.monotonic() + 10
                while consumer.position(tp) < end and time.monotonic() < deadline:
                    for record in consumer.poll(timeout_ms=200).get(tp, []):
                        keys.append((record.offset, record.key))
                seen[isolation] = (end, keys)
            finally:
                consumer.close()
        assert fk.count(ApiKey.Fetch) >= 2
    assert seen["read_committed"] == (8, [(0, b"k0"), (1, b"k1"), (4, b"c0"), (7, b"k2")])
    assert seen["read_uncommitted"] == (9, [(0, b"k0"), (1, b"k1"), (2, b"a0"), (3, b"a1"),
                                            (4, b"c0"), (7, b"k2"), (8, b"o0")])


def _consume_all(bootstrap: str, topic: str, partitions: int, isolation: str
                 ) -> list[tuple[int, int, str, str | None]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level=isolation,
                             enable_auto_commit=False, fetch_max_wait_ms=50,
                             request_timeout_ms=5000)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out = []
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + 20
        while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                out.extend((tp.partition, r.offset, r.key.hex(),
                            None if r.value is None else r.value.hex()) for r in records)
    finally:
        consumer.close()
    return sorted(out)


def test_fake_fetch_serves_real_segments_like_the_broker(scenario_a: Path) -> None:
    """The real scenario-A ``__consumer_offsets`` segments (none/gzip/zstd batches, commit and
    abort markers) served by the fake Fetch: a kafka-python consumer gets exactly what it got
    from the real Kafka 4.0 broker, in both isolation levels."""
    segments = scenario_a / "segments"
    partitions = len(list(segments.glob(f"{OFFSETS_TOPIC}-*")))
    with FakeKafkaCluster(num_brokers=2, offsets_topic_partitions=partitions) as fk:
        for p in range(partitions):
            fk.load_segments(OFFSETS_TOPIC, p,
                             sorted((segments / f"{OFFSETS_TOPIC}-{p}").glob("*.log")))
        got = {iso: _consume_all(fk.bootstrap_servers, OFFSETS_TOPIC, partitions, iso)
               for iso in ("read_committed", "read_uncommitted")}
    for iso, records in got.items():
        with (scenario_a / f"consumed_{iso}.jsonl").open() as fh:
            expected = sorted((r["partition"], r["offset"], r["key"], r["value"])
                              for r in map(json.loads, fh))
        assert records == expected, iso


def test_fake_broker_is_bounded() -> None:
    """The fake cluster shuts itself down after max_lifetime_s even if nobody stops it."""
    fk = FakeKafkaCluster(num_brokers=1, max_lifetime_s=0.2).start()
    port = fk.port(fk.broker_ids[0])
    deadline = time.monotonic() + 5
    while fk.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not fk.running
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    fk.stop()  # still safe
