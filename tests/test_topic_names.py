"""KIP-848 assignments name topics by id; when the log never names the topic, the snapshot
resolves it from the cluster (Metadata v10+ / ConsumerGroupDescribe ids), keeps it in
``topic_names`` and fills it into ``group_members`` and ``group_generations``."""

from __future__ import annotations

import base64
from pathlib import Path

from deltalake import DeltaTable

from pipelines.decode.records import encode_key, encode_value
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.live import capture_snapshot
from pipelines.reconcile.cluster.rows import kafka_uuid
from pipelines.reconcile.snapshot import store_snapshot
from pipelines.sources.record_batches.writer import SegmentWriter
from tests.support.fake_broker import FakeGroup, FakeKafkaCluster, FakeMember

T0 = 1_795_000_000_000
FAST = {"timeout_s": 5, "request_timeout_ms": 5000, "retry_backoff_ms": 10, "max_backoff_ms": 50}


def _rows(lake: Path, table: str) -> list[dict]:
    return DeltaTable(str(lake / table)).to_pyarrow_table().to_pylist()


def _kip848_log(data: Path, topic_id: str) -> None:
    """A KIP-848 group whose one member owns partitions 0-2 of a topic known only by id."""
    g, m = {"group_id": "g-848"}, {"group_id": "g-848", "member_id": "Zx848member"}
    tps = [{"topic_id": topic_id, "partitions": [0, 1, 2]}]
    records = [
        (5, m, {"instance_id": None, "rack_id": None, "client_id": "rd", "client_host": "/10.0.0.9",
                "subscribed_topic_names": ["orders"], "subscribed_topic_regex": "",
                "rebalance_timeout_ms": 300000, "server_assignor": None,
                "classic_member_metadata": None}),
        (3, g, {"epoch": 1}),
        (7, m, {"topic_partitions": tps}),
        (6, g, {"assignment_epoch": 1}),
        (8, m, {"member_epoch": 1, "previous_member_epoch": 0, "state": 0,
                "assigned_partitions": tps, "partitions_pending_revocation": []}),
    ]
    with SegmentWriter(data, 0) as w:
        w.append([(encode_key(t, k), encode_value(t, 0, v)) for t, k, v in records], timestamp=T0)


def test_snapshot_names_topics_the_log_never_named(tmp_path: Path) -> None:
    with FakeKafkaCluster(num_brokers=1) as fk:
        fk.add_topic("orders", 3, log_end_offsets=[10, 10, 10])
        fk.set_watermarks("__consumer_offsets", 0, log_end_offset=5)
        fk.add_group(FakeGroup("g-848", group_type="consumer", state="Stable", members=[
            FakeMember("Zx848member", client_id="rd", assigned_partitions={"orders": [0, 1, 2]},
                       subscribed_topic_names=["orders"])]))
        fk.commit("g-848", "orders", 0, 7)
        orders_id = kafka_uuid(fk.topic_ids["orders"])
        assert orders_id == base64.urlsafe_b64encode(fk.topic_ids["orders"].bytes).decode().rstrip("=")
        _kip848_log(tmp_path / "data", orders_id)
        lake = tmp_path / "lake"
        ingest_segments_local(tmp_path / "data", lake)
        (member,) = _rows(lake, "group_members")
        assert member["assigned_partitions"][0]["topic"] is None  # the log never names it
        assert {r["topic"] for r in _rows(lake, "group_generations")} == {orders_id}
        snap = capture_snapshot(fk.bootstrap_servers, **FAST)
    assert snap.topic_names.get(orders_id) == "orders"
    engine = DeltaRsEngine(lake)
    written = store_snapshot(engine, snap)
    assert written["topic_names"] == len(snap.topic_names)  # orders and __consumer_offsets
    (member,) = _rows(lake, "group_members")
    assert member["assigned_partitions"] == [{"topic": "orders", "topic_id": orders_id,
                                              "partitions": [0, 1, 2]}]
    gens = _rows(lake, "group_generations")
    assert {(r["topic"], r["partition"], r["client_id"]) for r in gens} == {
        ("orders", p, "rd") for p in range(3)}
    names = {r["topic_id"]: (r["topic_name"], r["source"]) for r in _rows(lake, "topic_names")}
    assert names[orders_id] == ("orders", "cluster_metadata")
    again = store_snapshot(engine, snap)  # the same snapshot stored twice changes nothing
    assert not again.get("topic_names") and not again.get("group_generations")
