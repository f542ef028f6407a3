"""Share and streams groups described live (issue 12 item 3), against the loopback fake broker.

The live capture used to list share/streams groups (ListGroups) without describing them, so
their epochs and members were compared only from recordings. Now ShareGroupDescribe (api
key 77, v1, KIP-932) and StreamsGroupDescribe (api key 89, v0, KIP-1071) are sent to each
group's coordinator where ApiVersions offers them, and fill the same snapshot columns the
recorded path fills. Expected values below are the fake broker's state, written out by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kafka.protocol.api_key import ApiKey

from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.live import capture_snapshot
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.cluster.rows import GroupRow, MemberRow
from pipelines.reconcile.inputs import LakeState, load_lake_state, load_snapshot_state
from pipelines.reconcile.reconcile import classify
from pipelines.reconcile.snapshot import latest_snapshot, store_snapshot
from tests.conftest import corpus_path
from tests.support.fake_broker import (
    GROUP_AUTHORIZATION_FAILED,
    OFFSETS_TOPIC,
    FakeGroup,
    FakeKafkaCluster,
    FakeMember,
)

FAST = {"timeout_s": 5, "request_timeout_ms": 5000, "retry_backoff_ms": 10, "max_backoff_ms": 50}
INVALID_GROUP_ID = 24
HWS = [11, 22, 33, 44, 55]


def _populate(fk: FakeKafkaCluster) -> None:
    fk.add_topic("work", 3, log_end_offsets=[10, 10, 10])
    fk.add_topic("audit", 1, log_end_offsets=[5])
    for p, hw in enumerate(HWS):
        fk.set_watermarks(OFFSETS_TOPIC, p, log_end_offset=hw)
    fk.add_group(FakeGroup("s-live", group_type="share", protocol_type="share", state="Stable",
                           group_epoch=5, assignment_epoch=4, assignor_name="simple", members=[
        FakeMember("share-m-a", client_id="share-1", client_host="/10.0.0.5", member_epoch=4,
                   subscribed_topic_names=["work"], assigned_partitions={"work": [2, 0]}),
        FakeMember("share-m-b", client_id="share-2", client_host="/10.0.0.6", member_epoch=4,
                   subscribed_topic_names=["work", "audit"],
                   assigned_partitions={"work": [1], "audit": [0]}),
    ]))
    fk.add_group(FakeGroup("s-empty", group_type="share", protocol_type="share", state="Empty",
                           group_epoch=3, assignment_epoch=2))
    fk.add_group(FakeGroup("st-live", group_type="streams", protocol_type="streams",
                           state="Stable", group_epoch=7, assignment_epoch=6,
                           subtopologies={"0": ["work"]}, members=[
        FakeMember("streams-m", client_id="app-StreamThread-1-consumer", client_host="/10.0.0.7",
                   member_epoch=7, process_id="p-1", active_tasks={"0": [0, 1, 2]}),
    ]))


def _capture(fk: FakeKafkaCluster):
    return capture_snapshot(fk.bootstrap_servers, **FAST)


def test_live_capture_describes_share_and_streams_groups() -> None:
    with FakeKafkaCluster() as fk:
        _populate(fk)
        snap = _capture(fk)
        coordinators = {g: fk.coordinator_of(g) for g in ("s-live", "s-empty", "st-live")}
        share_requests = fk.requests_for(ApiKey.ShareGroupDescribe)
        streams_requests = fk.requests_for(ApiKey.StreamsGroupDescribe)
    groups = {g.group_id: g for g in snap.groups}
    assert groups == {
        "s-live": GroupRow("s-live", "share", "Stable", "share", None, coordinators["s-live"],
                           group_epoch=5, assignment_epoch=4),
        "s-empty": GroupRow("s-empty", "share", "Empty", "share", None, coordinators["s-empty"],
                            group_epoch=3, assignment_epoch=2),
        "st-live": GroupRow("st-live", "streams", "Stable", "streams", None,
                            coordinators["st-live"], group_epoch=7, assignment_epoch=6),
    }
    assert sorted(snap.members, key=lambda m: (m.group_id, m.member_id)) == [
        MemberRow("s-live", "share-m-a", None, "share-1", "/10.0.0.5",
                  [{"topic": "work", "partitions": [0, 2]}]),
        MemberRow("s-live", "share-m-b", None, "share-2", "/10.0.0.6",
                  [{"topic": "audit", "partitions": [0]}, {"topic": "work", "partitions": [1]}]),
        # streams members are assigned tasks, not topic partitions (as the recorded path)
        MemberRow("st-live", "streams-m", None, "app-StreamThread-1-consumer", "/10.0.0.7", None),
    ]
    assert snap.errors == [] and snap.not_described == [] and not snap.partial
    # one request per coordinator, at the versions spoken, sent to the group's coordinator
    assert {(r.broker_id, r.api_version) for r in share_requests} == {
        (coordinators["s-live"], 1), (coordinators["s-empty"], 1)}
    assert sorted(g for r in share_requests for g in r.group_ids) == ["s-empty", "s-live"]
    assert [(r.broker_id, r.api_version, r.group_ids) for r in streams_requests] == [
        (coordinators["st-live"], 0, ("st-live",))]
    # the Arrow tables carry the described epochs
    tables = snap.to_arrow()
    epochs = {r["group_id"]: (r["group_epoch"], r["assignment_epoch"])
              for r in tables["snapshot_groups"].to_pylist()}
    assert epochs == {"s-live": (5, 4), "s-empty": (3, 2), "st-live": (7, 6)}


def _lake_matching(n_partitions: int = 5) -> LakeState:
    """The lake's view of the fake broker's share/streams groups, written by hand."""
    from pipelines.decode import partition_for as _partition_for

    lake = LakeState(log_end=dict(enumerate(HWS)))
    for gid, gtype, state, epochs, members in (
            ("s-live", "share", "Stable", (5, 4), {"share-m-a", "share-m-b"}),
            ("s-empty", "share", "Empty", (3, 2), set()),
            ("st-live", "streams", "Stable", (7, 6), {"streams-m"})):
        p = _partition_for(gid, n_partitions)
        lake.groups[gid] = {"group_id": gid, "group_type": gtype, "group_state": state,
                            "protocol_type": gtype, "num_members": len(members),
                            "offsets_partition": p, "last_record_offset": HWS[p] - 1,
                            "generation": epochs[0], "assignment_epoch": epochs[1]}
        lake.members[gid] = set(members)
    return lake


def _group_rows(lake: LakeState, snap_state) -> dict[str, dict]:
    return {r["group_id"]: r for r in classify(lake, snap_state, 5) if r["level"] == "group"}


def test_reconcile_compares_live_share_and_streams_answers(tmp_path: Path) -> None:
    with FakeKafkaCluster() as fk:
        _populate(fk)
        snap = _capture(fk)
    engine = DeltaRsEngine(tmp_path / "lake")
    store_snapshot(engine, snap)
    state = load_snapshot_state(engine, latest_snapshot(engine))
    rows = _group_rows(_lake_matching(), state)
    assert {g: (r["classification"], r["explained"]) for g, r in rows.items()} == {
        "s-live": ("match", True), "s-empty": ("match", True), "st-live": ("match", True)}
    # an epoch, a state and a member set that differ each fail, naming the row
    lake = _lake_matching()
    lake.groups["s-live"]["generation"] = 6
    lake.groups["st-live"]["group_state"] = "Empty"
    lake.members["s-empty"] = {"ghost"}
    lake.groups["s-empty"]["num_members"] = 1
    rows = _group_rows(lake, state)
    assert (rows["s-live"]["classification"], rows["s-live"]["explained"]) == (
        "state_mismatch", False)
    assert "group epoch: lake 6 vs broker 5" in rows["s-live"]["detail"]
    assert (rows["st-live"]["classification"], rows["st-live"]["explained"]) == (
        "state_mismatch", False)
    assert "state: lake Empty vs broker Stable" in rows["st-live"]["detail"]
    assert (rows["s-empty"]["classification"], rows["s-empty"]["explained"]) == (
        "member_mismatch", False)
    assert "ghost" in rows["s-empty"]["detail"]
    lake = _lake_matching()
    lake.groups["st-live"]["assignment_epoch"] = 5
    row = _group_rows(lake, state)["st-live"]
    assert (row["classification"], row["detail"]) == (
        "state_mismatch", "assignment epoch: lake 5 vs broker 6")


def test_broker_without_the_apis_lists_them_not_described() -> None:
    with FakeKafkaCluster() as fk:
        _populate(fk)
        fk.set_max_version(ApiKey.ShareGroupDescribe, -1)
        fk.set_max_version(ApiKey.StreamsGroupDescribe, -1)
        snap = _capture(fk)
        assert fk.count(ApiKey.ShareGroupDescribe) == fk.count(ApiKey.StreamsGroupDescribe) == 0
        coordinators = {g: fk.coordinator_of(g) for g in ("s-live", "s-empty", "st-live")}
    assert snap.not_described == [
        f"s-empty: ShareGroupDescribe not offered by broker {coordinators['s-empty']}",
        f"s-live: ShareGroupDescribe not offered by broker {coordinators['s-live']}",
        f"st-live: StreamsGroupDescribe not offered by broker {coordinators['st-live']}"]
    assert snap.errors == [] and not snap.partial and snap.members == []
    assert {(g.group_id, g.group_state, g.group_epoch, g.error_code) for g in snap.groups} == {
        ("s-live", "Stable", None, 0), ("s-empty", "Empty", None, 0),
        ("st-live", "Stable", None, 0)}


def test_broker_without_the_apis_gives_no_failure(tmp_path: Path) -> None:
    with FakeKafkaCluster() as fk:
        _populate(fk)
        fk.set_max_version(ApiKey.ShareGroupDescribe, -1)
        fk.set_max_version(ApiKey.StreamsGroupDescribe, -1)
        snap = _capture(fk)
    engine = DeltaRsEngine(tmp_path / "lake")
    store_snapshot(engine, snap)
    lake = _lake_matching()
    lake.groups["s-live"]["generation"] = 9  # not described: epochs cannot be compared
    rows = _group_rows(lake, load_snapshot_state(engine, latest_snapshot(engine)))
    assert {g: r["classification"] for g, r in rows.items()} == {
        "s-live": "match", "s-empty": "match", "st-live": "match"}
    assert "members not compared" in rows["s-live"]["detail"]


def test_describe_errors_per_group() -> None:
    """GROUP_AUTHORIZATION_FAILED: not_authorized (the existing handling); any other error:
    the group's row carries it and the snapshot's errors name it. Other groups unaffected."""
    with FakeKafkaCluster() as fk:
        _populate(fk)
        fk.inject_group_error("s-live", GROUP_AUTHORIZATION_FAILED,
                              apis=[ApiKey.ShareGroupDescribe])
        fk.inject_group_error("st-live", INVALID_GROUP_ID, apis=[ApiKey.StreamsGroupDescribe])
        snap = _capture(fk)
    groups = {g.group_id: g for g in snap.groups}
    assert (groups["s-live"].error_name, groups["s-live"].group_epoch) == (
        "GROUP_AUTHORIZATION_FAILED", None)
    assert snap.not_authorized == ["group:s-live"]
    assert groups["st-live"].error_code == INVALID_GROUP_ID
    assert snap.errors == ["StreamsGroupDescribe st-live: INVALID_GROUP_ID"]
    assert (groups["s-empty"].error_code, groups["s-empty"].group_epoch) == (0, 3)
    assert snap.members == []  # the groups that had members failed to describe


# ------------------------------------------------------------------ golden scenario-d

_STATE_ROW = re.compile(r"^(\S+)\s+\S+\s*\(\d+\)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _feed_scenario_d(fk: FakeKafkaCluster, live: Path) -> None:
    """The fake broker answers what scenario-d's real 4.x broker answered: ListGroups from
    list_groups.json, epochs and members from the kafka-share-groups.sh /
    kafka-streams-groups.sh --describe outputs (read here independently of the code under
    test)."""
    listed = {g["group_id"]: g for g in json.loads((live / "list_groups.json").read_text())["groups"]
              if g["group_type"] in ("share", "streams")}
    epochs = {}
    for name in ("cli_share_describe_state.txt", "cli_streams_describe_state.txt"):
        for line in (live / name).read_text().splitlines():
            m = _STATE_ROW.match(line)
            if m:
                epochs[m[1]] = (int(m[3]), int(m[4]))
    members: dict[str, list[FakeMember]] = {g: [] for g in listed}
    for line in (live / "cli_share_describe_members_verbose.txt").read_text().splitlines():
        f = line.split()
        if len(f) == 7 and f[0] in listed:
            topic, _, parts = f[6].partition(":")
            members[f[0]].append(FakeMember(f[1], client_id=f[3], client_host=f[2],
                                            member_epoch=int(f[5]),
                                            assigned_partitions={topic: [int(p) for p in parts.split(",")]}))
    for line in (live / "cli_streams_describe_members_verbose.txt").read_text().splitlines():
        f = line.split()
        if len(f) >= 8 and f[0] in listed:
            members[f[0]].append(FakeMember(f[3], client_id=f[7], member_epoch=int(f[5]),
                                            process_id=f[6]))
    for gid, g in listed.items():
        fk.add_group(FakeGroup(gid, group_type=g["group_type"], protocol_type=g["protocol_type"],
                               state=g["group_state"], group_epoch=epochs[gid][0],
                               assignment_epoch=epochs[gid][1], members=members[gid]))


def _share_streams(snap) -> tuple[list, list]:
    ids = {g.group_id for g in snap.groups if g.group_type in ("share", "streams")}
    groups = sorted((g.group_id, g.group_type, g.group_state, g.protocol_type, g.group_epoch,
                     g.assignment_epoch, g.error_code) for g in snap.groups if g.group_id in ids)
    members = sorted((m.group_id, m.member_id, m.group_instance_id, m.client_id,
                      # the streams tool prints no host, so the recording has none
                      m.client_host if m.group_id.startswith("d-share") else None,
                      json.dumps(m.assignment)) for m in snap.members if m.group_id in ids)
    return groups, members


def test_scenario_d_live_path_equals_recorded_path_and_the_lake(tmp_path: Path) -> None:
    scenario = corpus_path("golden", "scenario-d")
    live = scenario / "live"
    recorded = snapshot_from_recorded(live)
    with FakeKafkaCluster() as fk:
        _feed_scenario_d(fk, live)
        snap = _capture(fk)
    assert snap.not_described == [] and snap.errors == []
    live_groups, live_members = _share_streams(snap)
    assert len(live_groups) == 7 and len(live_members) == 4
    assert (live_groups, live_members) == _share_streams(recorded)
    # the lake ingested from scenario-d's segments agrees with the live answers
    ingest_segments_local(scenario / "segments", tmp_path / "lake")
    engine = DeltaRsEngine(tmp_path / "lake")
    store_snapshot(engine, snap)
    rows = classify(load_lake_state(engine, "default"),
                    load_snapshot_state(engine, latest_snapshot(engine)), None)
    got = {r["group_id"]: (r["classification"], r["detail"]) for r in rows
           if r["level"] == "group" and r["group_id"] in {g[0] for g in live_groups}}
    assert set(got) == {g[0] for g in live_groups}
    assert {g: c for g, (c, _) in got.items()} == {g[0]: "match" for g in live_groups}, got


@pytest.fixture(autouse=True)
def _quiet_kafka(caplog) -> None:
    caplog.set_level("WARNING", logger="kafka")
