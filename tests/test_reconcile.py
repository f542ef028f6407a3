"""Snapshots in the lake, reconciliation against them, and the Great Expectations gate.

The golden tests build a real lake from scenario A's segments (no Spark) and reconcile it
with the broker answers recorded at the same moment: everything must match, and one
changed offset must fail the gate by name. The synthetic test drives every class through
hand-made lake tables and snapshots written through the contracts and the engine; the
live test goes through the fake broker end to end.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.decode import partition_for
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaRsEngine
from pipelines.model import OP
from pipelines.reconcile.classes import EXPLAINED
from pipelines.reconcile.cluster.errors import UNSTABLE_OFFSET_COMMIT, error_name
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.cluster.rows import (
    SCHEMAS,
    ClusterSnapshot,
    GroupRow,
    MemberRow,
    OffsetRow,
    PointRow,
)
from pipelines.reconcile.quality import run_quality_gate
from pipelines.reconcile.reconcile import NoSnapshotError, reconcile, run_reconcile
from pipelines.reconcile.snapshot import (
    RUNS_TABLE,
    SNAPSHOT_TABLES,
    latest_snapshot,
    store_snapshot,
    take_snapshot,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
GROUP_AUTHORIZATION_FAILED = 30
TOPIC_AUTHORIZATION_FAILED = 29


# ------------------------------------------------------------------------------ helpers


def _copy_lake(src: Path, dst: Path) -> DeltaRsEngine:
    shutil.copytree(src, dst)
    return DeltaRsEngine(dst)


def _rows(engine: DeltaRsEngine, table: str) -> list[dict[str, Any]]:
    return engine.read(table).to_pylist()


def _by_key(rows: list[dict[str, Any]], level: str = "offset") -> dict[tuple, dict[str, Any]]:
    return {(r["group_id"], r["topic"], r["partition"]): r for r in rows if r["level"] == level}


_DEFAULTS: dict[str, dict[str, Any]] = {
    "committed_offsets": {"leader_epoch": -1, "metadata": "", "value_version": 3,
                          "commit_timestamp": NOW, "record_timestamp": NOW, "updated_at": NOW},
    "consumer_groups": {"num_members": 0, "last_record_offset": 0, "updated_at": NOW},
    "group_members": {"group_type": "classic", "updated_at": NOW},
    "group_records_latest": {"subkey": "", "updated_at": NOW},
    "offsets_raw": {"decode_status": "ok", "timestamp": NOW, "ingested_at": NOW,
                    "ingest_batch_id": 0},
}


def write_lake(engine: DeltaRsEngine, table: str, rows: list[dict[str, Any]],
               cluster_id: str = "default") -> None:
    """Append hand-made rows through the table's contract (defaults fill NOT NULL columns)."""
    spec = contract(table)
    loose = pa.schema([f.with_nullable(True) for f in spec.arrow_schema])
    data = pa.Table.from_pylist(
        [{"cluster_id": cluster_id, **_DEFAULTS.get(table, {}), **r} for r in rows], schema=loose)
    engine.append(spec, spec.conform(data), f"test-{uuid.uuid4()}", 0)


def gid(base: str, partition: int, n: int) -> str:
    """A group id that Kafka's hash puts in ``partition`` of ``n`` (stable across runs)."""
    for k in range(10_000):
        name = base if k == 0 else f"{base}-{k}"
        if partition_for(name, n) == partition:
            return name
    raise AssertionError("no name found")


# ------------------------------------------------------------------------------ golden


@pytest.fixture(scope="module")
def golden_lake(scenario_a: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Scenario A's segments ingested without Spark (about 3 s, once per module)."""
    from pipelines.ingest import ingest_segments_local

    lake = tmp_path_factory.mktemp("golden") / "lake"
    ingest_segments_local(scenario_a / "segments", lake)
    return lake


def test_golden_scenario_a_matches_the_broker(golden_lake: Path, scenario_a: Path,
                                              tmp_path: Path) -> None:
    engine = _copy_lake(golden_lake, tmp_path / "lake")
    snap = snapshot_from_recorded(scenario_a / "live")
    written = store_snapshot(engine, snap)
    assert written == {"snapshot_groups": 14, "snapshot_members": 3, "snapshot_offsets": 59,
                       "snapshot_log_end_offsets": len(snap.log_end_offsets),
                       "snapshot_lag": 59, "snapshot_points": 5, RUNS_TABLE: 1}
    assert store_snapshot(engine, snap) == dict.fromkeys(written, 0)  # idempotent
    for name in SNAPSHOT_TABLES:  # every row stamped; columns as cluster.py builds them
        table = engine.read(name)
        assert set(table.column("snapshot_id").to_pylist()) == {snap.snapshot_id}
        assert set(table.column("cluster_id").to_pylist()) == {"default"}
        assert set(table.column("captured_at").to_pylist()) == {snap.captured_at}
        schema = contract(name).arrow_schema
        assert all(schema.field(f.name).type == f.type for f in SCHEMAS[name])

    result = run_reconcile(engine.root)
    s = result.summary
    assert result.passed, json.dumps(s, indent=1, default=str)
    assert s["offset_classes"] == {"match": 59}
    assert s["group_classes"] == {"match": 14}
    assert s["unexplained_count"] == 0 and s["gate"]["failed"] == []
    assert (s["num_partitions"], s["num_partitions_source"]) == (5, "snapshot")

    rows = _rows(engine, "reconciliation")
    assert len(rows) == 73 and {r["reconcile_id"] for r in rows} == {s["reconcile_id"]}
    assert {r["snapshot_id"] for r in rows} == {snap.snapshot_id}
    bulk = _by_key(rows)[("a-bulk-loop", "bulk", 0)]
    assert bulk["lake_committed_offset"] == bulk["broker_committed_offset"]
    assert bulk["lake_log_end"] == bulk["snapshot_high_watermark"] == 16057
    groups = {r["group_id"]: r for r in rows if r["level"] == "group"}
    assert (groups["a-bulk-loop"]["lake_group_type"], groups["a-bulk-loop"]["broker_group_type"]) \
        == ("simple", "classic")
    assert groups["a-848-rdkafka"]["broker_group_state"] == "Stable"

    quality = _rows(engine, "quality_results")
    assert quality and all(q["success"] for q in quality)
    assert {q["run_id"] for q in quality} == {s["gate"]["run_id"]}
    assert {"committed_offsets", "consumer_groups", "group_members", "offset_commits",
            "reconciliation"} <= {q["table"] for q in quality}
    assert any(q["expectation"] == "partition_for(group_id, 5) == offsets_partition"
               and q["table"] == "offset_commits" for q in quality)
    index = Path(s["gate"]["data_docs"])
    assert index == engine.root / "_quality" / "data_docs" / "index.html" and index.exists()
    assert list((index.parent / "validations").rglob("*reconciliation*.html"))


def test_golden_changed_offset_fails_gate_by_name(golden_lake: Path, scenario_a: Path,
                                                  tmp_path: Path) -> None:
    engine = _copy_lake(golden_lake, tmp_path / "lake")
    store_snapshot(engine, snapshot_from_recorded(scenario_a / "live"))
    key = ("a-classic-multi", "orders", 1)
    spec = contract("committed_offsets")
    current = engine.read("committed_offsets").to_pylist()
    row = next(r for r in current if (r["group_id"], r["topic"], r["partition"]) == key)
    changed = {**row, "committed_offset": row["committed_offset"] + 7}
    engine.merge(spec, pa.Table.from_pylist([{**changed, OP: "upsert"}]), "test-edit", 0)

    result = run_reconcile(engine.root)
    s = result.summary
    assert not result.passed
    assert s["unexplained"] == [{
        "level": "offset", "group": key[0], "topic": key[1], "partition": key[2],
        "class": "offset_mismatch",
        "detail": f"committed offset: lake {row['committed_offset'] + 7} vs broker "
                  f"{row['committed_offset']}"}]
    failed = s["gate"]["failed"]
    assert [f["expectation"] for f in failed] == [
        "no unexplained difference in the latest reconciliation"]
    assert failed[0]["unexpected_count"] == 1
    assert failed[0]["examples"] == [{"level": "offset", "group_id": key[0], "topic": key[1],
                                      "partition": key[2], "classification": "offset_mismatch",
                                      "explained": False}]
    stored = [q for q in _rows(engine, "quality_results") if not q["success"]]
    assert [q["expectation"] for q in stored] == [failed[0]["expectation"]]
    assert key[0] in stored[0]["details_json"]


def test_golden_require_stable_answers(golden_lake: Path, scenario_a: Path,
                                       tmp_path: Path) -> None:
    """Whatever UNSTABLE_OFFSET_COMMIT rows the recording holds are open_transaction and
    explained (scenario A's transactions were all complete at capture: there are none)."""
    live = scenario_a / "live"
    answers = json.loads((live / "offset_fetch_require_stable.json").read_text())
    unstable = {(g["group_id"], t["name"], p["partition_index"])
                for g in answers["groups"] for t in g.get("topics") or []
                for p in t["partitions"] if p.get("error_code") == UNSTABLE_OFFSET_COMMIT}
    engine = _copy_lake(golden_lake, tmp_path / "lake")
    snap = snapshot_from_recorded(live, require_stable=True)
    store_snapshot(engine, snap)
    result = run_reconcile(engine.root, data_docs=False)
    rows = _by_key(_rows(engine, "reconciliation"))
    assert {k for k, r in rows.items() if r["classification"] == "open_transaction"} == unstable
    assert all(rows[k]["explained"] for k in unstable)
    assert result.passed and result.summary["require_stable"] is True
    assert result.summary["offset_classes"] == {
        "match": 59 - len(unstable), **({"open_transaction": len(unstable)} if unstable else {})}
    # the plain capture has the same id: storing it too would be silently skipped, so refused
    with pytest.raises(ValueError, match="require_stable"):
        store_snapshot(engine, snapshot_from_recorded(live))


# ------------------------------------------------------------------------------ synthetic

N = 5
BEHIND_P = 0  # the one __consumer_offsets partition the lake has not caught up on


def _synthetic(engine: DeltaRsEngine) -> tuple[ClusterSnapshot, dict[str, str]]:
    """A lake and a snapshot exercising every class; returns the snapshot and group ids."""
    other = [p for p in range(N) if p != BEHIND_P]
    g = {name: gid(f"g-{name}", other[i % len(other)], N) for i, name in enumerate(
        ["match", "mismatch", "tomb", "denied", "txn", "ahead", "rebalancing", "state",
         "type", "members", "simple", "new", "gone"])}
    g["behind"] = gid("g-behind", BEHIND_P, N)
    ahead_p = partition_for(g["ahead"], N)
    lake_end = {p: 100 for p in range(N)}
    hw = {p: 100 for p in range(N)}
    hw[BEHIND_P] = 120  # the lake stopped 20 records short of the snapshot point
    hw[ahead_p] = 99  # the lake ingested one record past the snapshot point (offset 99)

    def op(group: str) -> int:
        return partition_for(group, N)

    def lake_offset(group: str, topic: str, part: int, offset: int, record: int = 10,
                    **kw: Any) -> dict[str, Any]:
        return {"group_id": group, "topic": topic, "partition": part, "committed_offset": offset,
                "offsets_partition": op(group), "offset": record, **kw}

    write_lake(engine, "committed_offsets", [
        lake_offset(g["match"], "orders", 0, 10, leader_epoch=3, metadata="m"),
        lake_offset(g["match"], "secret", 0, 5),
        lake_offset(g["mismatch"], "orders", 0, 10),
        lake_offset(g["mismatch"], "orders", 1, 10, leader_epoch=2),
        lake_offset(g["mismatch"], "orders", 2, 10, metadata="lake"),
        lake_offset(g["mismatch"], "payments", 0, 3),
        lake_offset(g["tomb"], "orders", 0, 8),
        lake_offset(g["denied"], "orders", 0, 8),
        lake_offset(g["denied"], "orders", 1, 9),
        lake_offset(g["txn"], "orders", 0, 100),
        lake_offset(g["ahead"], "orders", 0, 70, record=99),
        lake_offset(g["behind"], "orders", 0, 40, record=5),
    ])

    def group(name: str, gtype: str, state: str, ptype: str | None, members: int = 0,
              last: int = 10) -> dict[str, Any]:
        return {"group_id": g[name], "group_type": gtype, "group_state": state,
                "protocol_type": ptype, "num_members": members,
                "offsets_partition": op(g[name]), "last_record_offset": last}

    write_lake(engine, "consumer_groups", [
        group("match", "classic", "Empty", "consumer"),
        group("mismatch", "classic", "Empty", "consumer"),
        group("denied", "classic", "Empty", "consumer"),
        group("txn", "classic", "Empty", "consumer"),
        group("ahead", "simple", "Empty", ""),
        group("behind", "simple", "Empty", ""),
        group("rebalancing", "classic", "Stable", "consumer", 1),
        group("state", "consumer", "Stable", "consumer"),
        group("type", "simple", "Empty", ""),
        group("members", "classic", "Stable", "consumer", 2),
        group("simple", "simple", "Empty", ""),
        group("gone", "classic", "Empty", "consumer"),
    ])
    write_lake(engine, "group_members", [
        {"group_id": g["rebalancing"], "member_id": "r-1"},
        {"group_id": g["members"], "member_id": "m-a"},
        {"group_id": g["members"], "member_id": "m-b"},
    ])
    write_lake(engine, "group_records_latest", [  # g-tomb: GroupMetadata tombstone last
        {"group_id": g["tomb"], "record_type": 2, "is_tombstone": True,
         "offsets_partition": op(g["tomb"]), "offset": 12}])
    write_lake(engine, "offsets_raw", [
        {"offsets_partition": p, "offset": end - 1} for p, end in lake_end.items()])

    def broker_group(name: str, gtype: str, state: str, ptype: str) -> GroupRow:
        return GroupRow(g[name], gtype, state, ptype, "", 1)

    def ok(name: str, topic: str, part: int, offset: int, epoch: int = -1,
           metadata: str = "") -> OffsetRow:
        return OffsetRow(g[name], topic, part, offset, epoch, metadata)

    snap = ClusterSnapshot(
        snapshot_id="synthetic-1", captured_at=NOW, source="synthetic", require_stable=True,
        groups=[
            broker_group("match", "classic", "Empty", "consumer"),
            broker_group("mismatch", "classic", "Empty", "consumer"),
            broker_group("denied", "classic", "Empty", "consumer"),
            broker_group("txn", "classic", "Empty", "consumer"),
            broker_group("ahead", "classic", "Empty", ""),
            broker_group("behind", "classic", "Empty", ""),
            broker_group("rebalancing", "classic", "PreparingRebalance", "consumer"),
            broker_group("state", "consumer", "Reconciling", "consumer"),
            broker_group("type", "consumer", "Empty", "consumer"),
            broker_group("members", "classic", "Stable", "consumer"),
            broker_group("simple", "classic", "Empty", ""),
            broker_group("new", "classic", "Empty", "consumer"),
        ],
        members=[MemberRow(g["members"], "m-a", None, "c", "/h", None),
                 MemberRow(g["members"], "m-c", None, "c", "/h", None)],
        offsets=[
            ok("match", "orders", 0, 10, 3, "m"),
            ok("match", "payments", 0, 4),
            OffsetRow(g["match"], "secret", 0, -1, -1, "", TOPIC_AUTHORIZATION_FAILED,
                      error_name(TOPIC_AUTHORIZATION_FAILED)),
            ok("mismatch", "orders", 0, 12),
            ok("mismatch", "orders", 1, 10, 3),
            ok("mismatch", "orders", 2, 10, -1, "broker"),
            OffsetRow(g["denied"], None, None, None, None, None, GROUP_AUTHORIZATION_FAILED,
                      error_name(GROUP_AUTHORIZATION_FAILED)),
            OffsetRow(g["txn"], "orders", 0, -1, -1, "", UNSTABLE_OFFSET_COMMIT,
                      error_name(UNSTABLE_OFFSET_COMMIT)),
            ok("ahead", "orders", 0, 60),
            ok("behind", "orders", 0, 50),
            ok("behind", "orders", 1, 7),
        ],
        points=[PointRow(p, hw[p], hw[p]) for p in range(N)])
    return snap, g


def test_every_class_on_synthetic_lake(tmp_path: Path) -> None:
    engine = DeltaRsEngine(tmp_path / "lake")
    with pytest.raises(NoSnapshotError, match="offsetlake snapshot"):
        reconcile(engine)
    snap, g = _synthetic(engine)
    store_snapshot(engine, snap)
    rec = reconcile(engine)
    offsets = _by_key(rec.table.to_pylist())
    expected_offsets = {
        (g["match"], "orders", 0): "match",
        (g["match"], "payments", 0): "missing_in_lake",
        (g["match"], "secret", 0): "not_authorized",  # TOPIC_AUTHORIZATION_FAILED (issue 14)
        (g["mismatch"], "orders", 0): "offset_mismatch",
        (g["mismatch"], "orders", 1): "leader_epoch_mismatch",
        (g["mismatch"], "orders", 2): "metadata_mismatch",
        (g["mismatch"], "payments", 0): "missing_on_broker",
        (g["tomb"], "orders", 0): "group_tombstoned",
        (g["denied"], "orders", 0): "not_authorized",  # GROUP_AUTHORIZATION_FAILED
        (g["denied"], "orders", 1): "not_authorized",
        (g["txn"], "orders", 0): "open_transaction",
        (g["ahead"], "orders", 0): "lake_ahead",
        (g["behind"], "orders", 0): "lake_behind",
        (g["behind"], "orders", 1): "lake_behind",
    }
    assert {k: r["classification"] for k, r in offsets.items()} == expected_offsets
    groups = {r["group_id"]: r["classification"] for r in rec.table.to_pylist()
              if r["level"] == "group"}
    assert groups == {
        g["match"]: "match", g["mismatch"]: "match", g["denied"]: "match", g["txn"]: "match",
        g["ahead"]: "match", g["behind"]: "match", g["simple"]: "match",
        g["rebalancing"]: "state_transient", g["state"]: "state_mismatch",
        g["type"]: "type_mismatch", g["members"]: "member_mismatch",
        g["new"]: "missing_in_lake", g["gone"]: "missing_on_broker"}
    for r in rec.table.to_pylist():
        assert r["explained"] is EXPLAINED[r["classification"]]

    # side-by-side values and the reasons
    mis = offsets[(g["mismatch"], "orders", 1)]
    assert (mis["lake_leader_epoch"], mis["broker_leader_epoch"]) == (2, 3)
    txn = offsets[(g["txn"], "orders", 0)]
    assert (txn["lake_committed_offset"], txn["broker_error_name"]) == (100, "UNSTABLE_OFFSET_COMMIT")
    behind = offsets[(g["behind"], "orders", 0)]
    assert (behind["lake_log_end"], behind["snapshot_high_watermark"]) == (100, 120)
    assert behind["detail"].startswith("offset_mismatch: the lake has ingested")
    denied = offsets[(g["denied"], "orders", 0)]
    assert "GROUP_AUTHORIZATION_FAILED" in denied["detail"]
    assert denied["broker_error_code"] == GROUP_AUTHORIZATION_FAILED
    assert "tombstone" in offsets[(g["tomb"], "orders", 0)]["detail"]
    members = next(r for r in rec.table.to_pylist() if r["group_id"] == g["members"])
    assert "['m-b']" in members["detail"] and "['m-c']" in members["detail"]

    # the gate fails and names exactly the unexplained rows
    result = run_reconcile(engine.root, data_docs=False)
    assert not result.passed
    named = {(u["group"], u["topic"], u["partition"], u["class"])
             for u in result.summary["unexplained"]}
    assert named == {(r["group_id"], r["topic"], r["partition"], r["classification"])
                     for r in result.reconciliation.table.to_pylist() if not r["explained"]}
    assert (g["mismatch"], "orders", 0, "offset_mismatch") in named
    assert (g["new"], None, None, "missing_in_lake") in named
    assert [f["expectation"] for f in result.summary["gate"]["failed"]] == [
        "no unexplained difference in the latest reconciliation"]
    # without the gate: no GX, verdict from the rows
    plain = run_reconcile(engine.root, gate=False)
    assert plain.summary["gate"] == {"ran": False} and not plain.passed


def test_group_level_fetch_error_without_lake_offsets(tmp_path: Path) -> None:
    engine = DeltaRsEngine(tmp_path / "lake")
    write_lake(engine, "consumer_groups", [{
        "group_id": "g-x", "group_type": "classic", "group_state": "Empty",
        "protocol_type": "consumer", "offsets_partition": partition_for("g-x", 50)}])
    store_snapshot(engine, ClusterSnapshot(
        snapshot_id="s", captured_at=NOW, source="t",
        groups=[GroupRow("g-x", "classic", None, "consumer", None, 1, 16, "NOT_COORDINATOR")],
        offsets=[OffsetRow("g-x", None, None, None, None, None, 15,
                           "COORDINATOR_NOT_AVAILABLE")]))
    rec = reconcile(engine, num_partitions=50)
    rows = {(r["level"], r["topic"]): r for r in rec.table.to_pylist()}
    assert rows[("offset", None)]["classification"] == "fetch_error"
    assert rows[("offset", None)]["broker_error_name"] == "COORDINATOR_NOT_AVAILABLE"
    assert rows[("group", None)]["classification"] == "fetch_error"
    assert (rec.num_partitions, rec.num_partitions_source) == (50, "flag")  # no points


def test_lake_stopped_at_last_stable_offset_is_lake_behind(tmp_path: Path) -> None:
    """A read_committed lake stops at the LSO while a transaction is open (spec 2.4): the
    difference is lake_behind, explained, and says so."""
    engine = DeltaRsEngine(tmp_path / "lake")
    p = partition_for("g-lso", 3)
    write_lake(engine, "committed_offsets", [{
        "group_id": "g-lso", "topic": "t", "partition": 0, "committed_offset": 5,
        "offsets_partition": p, "offset": 50}])
    write_lake(engine, "consumer_groups", [{
        "group_id": "g-lso", "group_type": "simple", "group_state": "Empty",
        "protocol_type": "", "offsets_partition": p, "last_record_offset": 50}])
    write_lake(engine, "offsets_raw", [{"offsets_partition": p, "offset": 99}])
    store_snapshot(engine, ClusterSnapshot(
        snapshot_id="s", captured_at=NOW, source="t",
        groups=[GroupRow("g-lso", "classic", "Empty", "", "", 1)],
        offsets=[OffsetRow("g-lso", "t", 0, 9, -1, "")],
        points=[PointRow(q, 120 if q == p else 0, 100 if q == p else 0) for q in range(3)]))
    row = _by_key(reconcile(engine).table.to_pylist())[("g-lso", "t", 0)]
    assert (row["classification"], row["explained"]) == ("lake_behind", True)
    assert "last stable offset 100" in row["detail"]
    assert (row["lake_log_end"], row["snapshot_last_stable_offset"]) == (100, 100)


def test_cli_options_become_typed_client_settings() -> None:
    from pipelines.reconcile.snapshot import _client_config

    assert _client_config({"request.timeout.ms": "5000", "timeout_s": "2.5",
                           "ssl_check_hostname": "false", "max_retries": "3",
                           "sasl.mechanism": "SCRAM-SHA-512", "sasl.plain.username": "u",
                           "sasl_plain_password": "12345", "security.protocol": "SASL_SSL"}) == {
        "request_timeout_ms": 5000, "timeout_s": 2.5, "ssl_check_hostname": False,
        "max_retries": 3, "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "u",
        "sasl_plain_password": "12345", "security_protocol": "SASL_SSL"}
    # issue 14: SASL settings under a protocol without SASL were silently ignored before
    from pipelines.kafka_options import KafkaOptionError

    with pytest.raises(KafkaOptionError, match=r"security\.protocol is SSL"):
        _client_config({"sasl_plain_password": "12345", "security.protocol": "SSL"})


def test_quality_gate_names_broken_expectations(tmp_path: Path) -> None:
    """Wrong offsets_partition, an offset below -1, a commit timestamp far outside the
    history: each expectation fails on its own, with the row's key in the details."""
    engine = DeltaRsEngine(tmp_path / "lake")
    good_p = partition_for("g-ok", 10)
    write_lake(engine, "offsets_raw", [{"offsets_partition": good_p, "offset": 0,
                                        "timestamp": NOW},
                                       {"offsets_partition": good_p, "offset": 1,
                                        "timestamp": NOW + timedelta(minutes=5)}])
    write_lake(engine, "committed_offsets", [
        {"group_id": "g-ok", "topic": "t", "partition": 0, "committed_offset": 1,
         "offsets_partition": good_p, "offset": 0},
        {"group_id": "g-ok", "topic": "t", "partition": 1, "committed_offset": -5,
         "offsets_partition": good_p, "offset": 1,
         "commit_timestamp": NOW + timedelta(days=3)},
        {"group_id": "g-wrong", "topic": "t", "partition": 0, "committed_offset": 3,
         "offsets_partition": (partition_for("g-wrong", 10) + 1) % 10, "offset": 2},
    ])
    report = run_quality_gate(engine, num_partitions=10, data_docs=False)
    failed = {(o.table, o.expectation): o for o in report.failed()}
    assert set(failed) == {
        ("committed_offsets", "committed_offset >= -1"),
        ("committed_offsets", "partition_for(group_id, 10) == offsets_partition"),
        ("committed_offsets", "commit_timestamp within the history's record time range "
                              "± 1:00:00"),
    }
    assert not report.passed
    wrong = failed[("committed_offsets", "partition_for(group_id, 10) == offsets_partition")]
    assert wrong.unexpected_count == 1 and wrong.examples()[0]["group_id"] == "g-wrong"
    stored = {q["expectation"]: q for q in _rows(engine, "quality_results")
              if q["table"] == "committed_offsets"}
    assert stored["committed_offset >= -1"]["success"] is False
    assert stored["one current row per (cluster_id, group_id, topic, partition)"]["success"]


# ------------------------------------------------------------------------------ live (fake broker)

FAST = {"timeout_s": 5, "request_timeout_ms": 5000, "retry_backoff_ms": 10, "max_backoff_ms": 50}


@pytest.fixture
def fake_kafka() -> Iterator[Any]:
    from tests.support.fake_broker import (
        OFFSETS_TOPIC,
        FakeGroup,
        FakeKafkaCluster,
        FakeMember,
        consumer_assignment,
        consumer_subscription,
    )

    with FakeKafkaCluster(num_brokers=2) as fk:
        fk.add_topic("orders", 3, log_end_offsets=[100, 200, 300])
        fk.add_topic("payments", 2, log_end_offsets=[40, 50])
        for p, hw in enumerate([11, 22, 33, 44, 55]):
            fk.set_watermarks(OFFSETS_TOPIC, p, log_end_offset=hw)
        fk.add_group(FakeGroup("g-classic", state="Stable", protocol="range", members=[
            FakeMember("m-1", metadata=consumer_subscription(["orders"]),
                       assignment=consumer_assignment({"orders": [0, 1, 2]}))]))
        fk.commit("g-classic", "orders", 0, 90, leader_epoch=4, metadata="m1@gen3")
        fk.commit("g-classic", "orders", 1, 150)
        fk.add_group(FakeGroup("g-empty", state="Empty"))
        fk.commit("g-empty", "payments", 0, 10, metadata="before")
        fk.commit("g-assign", "payments", 1, 45, metadata='{"batchId":4}')
        fk.add_group(FakeGroup("g-848", group_type="consumer", state="Stable", members=[
            FakeMember("Zx848", assigned_partitions={"orders": [0, 1, 2]},
                       subscribed_topic_names=["orders"])]))
        fk.commit("g-848", "orders", 1, 199, metadata="rd\x00")
        fk.add_pending_transactional_offset("g-classic", "orders", 1)
        yield fk


def test_live_snapshot_through_fake_broker_reconciles(fake_kafka: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    engine = DeltaRsEngine(lake)
    first = take_snapshot(lake, fake_kafka.bootstrap_servers, cluster_id="fake",
                          kafka_config={k: str(v) for k, v in FAST.items()})  # CLI passes strings
    assert first["offsets"] == 5 and first["groups"] == 4 and first["errors"] == []
    summary = take_snapshot(lake, fake_kafka.bootstrap_servers, cluster_id="fake",
                            require_stable=True, kafka_config=FAST)
    assert summary["offset_errors"] == {"UNSTABLE_OFFSET_COMMIT": 1}
    assert summary["rows_written"]["snapshot_points"] == 5
    latest = latest_snapshot(engine, "fake")
    assert latest is not None and latest.snapshot_id == summary["snapshot_id"]
    assert latest.require_stable and latest.num_offsets_partitions == 5
    lag = engine.read("snapshot_lag").to_pylist()  # lag history: both snapshots kept
    assert {r["snapshot_id"] for r in lag} == {first["snapshot_id"], summary["snapshot_id"]}
    assert {r["cluster_id"] for r in lag} == {"fake"}

    n = 5
    offsets = [("g-classic", "orders", 0, 90, 4, "m1@gen3"), ("g-classic", "orders", 1, 150, -1, ""),
               ("g-empty", "payments", 0, 10, -1, "before"),
               ("g-assign", "payments", 1, 45, -1, '{"batchId":4}'),
               ("g-848", "orders", 1, 199, -1, "rd\x00")]
    write_lake(engine, "committed_offsets", [
        {"group_id": gr, "topic": t, "partition": p, "committed_offset": o, "leader_epoch": e,
         "metadata": m, "offsets_partition": partition_for(gr, n), "offset": 3}
        for gr, t, p, o, e, m in offsets], cluster_id="fake")
    write_lake(engine, "consumer_groups", [
        {"group_id": gr, "group_type": gt, "group_state": st, "protocol_type": pt,
         "num_members": nm, "offsets_partition": partition_for(gr, n)}
        for gr, gt, st, pt, nm in [("g-classic", "classic", "Stable", "consumer", 1),
                                   ("g-empty", "classic", "Empty", "consumer", 0),
                                   ("g-assign", "simple", "Empty", "", 0),
                                   ("g-848", "consumer", "Stable", "consumer", 1)]],
        cluster_id="fake")
    write_lake(engine, "group_members", [
        {"group_id": "g-classic", "member_id": "m-1"},
        {"group_id": "g-848", "member_id": "Zx848", "group_type": "consumer"}], cluster_id="fake")
    write_lake(engine, "offsets_raw", [
        {"offsets_partition": p, "offset": hw - 1} for p, hw in enumerate([11, 22, 33, 44, 55])],
        cluster_id="fake")

    result = run_reconcile(lake, cluster_id="fake", num_partitions=50)
    s = result.summary
    assert result.passed, json.dumps(s, indent=1, default=str)
    assert s["snapshot_id"] == summary["snapshot_id"]
    assert (s["num_partitions"], s["num_partitions_source"]) == (5, "snapshot")  # beats the flag
    assert s["offset_classes"] == {"match": 4, "open_transaction": 1}
    assert s["group_classes"] == {"match": 4}
    rows = _by_key(result.reconciliation.table.to_pylist())
    txn = rows[("g-classic", "orders", 1)]
    assert (txn["classification"], txn["explained"], txn["lake_committed_offset"]) \
        == ("open_transaction", True, 150)
