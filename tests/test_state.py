"""Ownership history and group replay rules on the golden recording (no Spark needed)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.ingest import ingest_segments_local
from pipelines.lake.contracts import contract
from pipelines.model import LatestRecord, StateInput, state_rows
from pipelines.state.apply import _latest_group_record_changes
from pipelines.state.groups import derive_group
from pipelines.state.offsets import offset_changes
from pipelines.state.topics import batch_names


@pytest.fixture(scope="module")
def lake(scenario_a: Path, tmp_path_factory) -> Path:
    lake = tmp_path_factory.mktemp("state") / "lake"
    ingest_segments_local(scenario_a / "segments", lake)
    return lake


def generations(lake: Path, group: str) -> list[dict]:
    rows = DeltaTable(str(lake / "group_generations")).to_pyarrow_table().to_pylist()
    return sorted((r for r in rows if r["group_id"] == group),
                  key=lambda r: (r["valid_from_offset"], r["member_id"], r["topic"], r["partition"]))


def test_kip70_subscription_change_is_auditable(lake: Path) -> None:
    """MANIFEST: a-kip70 subscribes [foo], then [foo, bar] (rebalance), then leaves."""
    rows = generations(lake, "a-kip70")
    gen1 = [r for r in rows if r["generation"] == 1]
    gen2 = [r for r in rows if r["generation"] == 2]
    assert {(r["topic"], r["partition"]) for r in gen1} == {("foo", 0), ("foo", 1), ("foo", 2)}
    assert all(r["subscribed_topics"] == ["foo"] for r in gen1)
    assert {(r["topic"], r["partition"]) for r in gen2} == {("foo", 0), ("foo", 1), ("foo", 2),
                                                            ("bar", 0), ("bar", 1)}
    assert all(r["subscribed_topics"] == ["foo", "bar"] for r in gen2)
    assert all(r["valid_to"] == gen2[0]["valid_from"] for r in gen1)  # closed by the rebalance
    assert all(r["valid_to"] is not None for r in gen2)  # the member left: nobody owns them now


def test_static_member_replacement_keeps_the_generation(lake: Path, scenario_a: Path) -> None:
    """MANIFEST: static-a-2 restarts without LeaveGroup; its member id is replaced in place."""
    rows = [r for r in generations(lake, "a-static") if r["group_instance_id"] == "static-a-2"
            and r["generation"] == 2]
    member_ids = list(dict.fromkeys(r["member_id"] for r in rows))
    assert len(member_ids) == 2
    old = [r for r in rows if r["member_id"] == member_ids[0]]
    new = [r for r in rows if r["member_id"] == member_ids[1]]
    assert {(r["topic"], r["partition"]) for r in old} == {(r["topic"], r["partition"]) for r in new}
    assert all(r["valid_to"] == new[0]["valid_from"] for r in old)
    assert all(r["valid_to"] is None for r in new)
    described = json.loads((scenario_a / "live" / "describe_groups.json").read_text())["groups"]
    live_ids = {m["member_id"] for g in described if g["group_id"] == "a-static" for m in g["members"]}
    assert member_ids[1] in live_ids and member_ids[0] not in live_ids


def test_consumer_group_assignments_resolve_topic_names(lake: Path) -> None:
    rows = [r for r in generations(lake, "a-848-rdkafka") if r["valid_to"] is None]
    assert {r["client_id"] for r in rows} == {"rd-static"}
    assert {(r["topic"], r["partition"]) for r in rows} == {("clicks", p) for p in range(8)}


def _rec(rtype: int, offset: int, value: dict | None, subkey: str = "") -> LatestRecord:
    return LatestRecord(rtype, subkey, value is None, value, 0, offset)


def test_simple_group_exists_only_after_a_commit_following_the_last_tombstone() -> None:
    commit = LatestRecord(1, "", False, None, 0, 10)
    assert derive_group("g", [commit])[0]["group_type"] == "simple"
    tomb_after = _rec(2, 11, None)
    assert derive_group("g", [commit, tomb_after])[0] is None
    tomb_before = _rec(2, 9, None)
    assert derive_group("g", [commit, tomb_before])[0]["group_type"] == "simple"


def test_latest_family_wins_after_conversion() -> None:
    classic = {"protocol_type": "consumer", "generation": 3, "protocol": "range", "leader": None,
               "current_state_timestamp": 1, "members": []}
    records = [_rec(2, 5, None), _rec(3, 6, {"epoch": 2}), _rec(6, 7, {"assignment_epoch": 2})]
    group, members = derive_group("g", records)
    assert (group["group_type"], group["group_state"], members) == ("consumer", "Empty", [])
    back = [_rec(3, 8, None), _rec(6, 8, None), _rec(2, 9, classic)]
    group, _ = derive_group("g", back)
    assert (group["group_type"], group["group_state"], group["generation"]) == ("classic", "Empty", 3)


def test_replay_state_keeps_value_versions(lake: Path) -> None:
    rows = DeltaTable(str(lake / "group_records_latest")).to_pyarrow_table().to_pylist()
    versions = {(r["record_type"], r["value_version"]) for r in rows if not r["is_tombstone"] and r["record_type"] != 1}
    assert versions and {v for _, v in versions} <= {0, 3}  # golden: GroupMetadata v3, KIP-848 v0
    assert all(v == 3 for t, v in versions if t == 2)


# ----------------------------------------------------------------------------- what a task ships to the driver

_commit = st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["g1", "g2", "g3"]),
                    st.sampled_from(["t", "u"]), st.integers(0, 2), st.booleans(),
                    st.sampled_from([None, 1, 2]))  # topic id generation (a recreated topic has a new id)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(_commit, max_size=60), seed=st.integers(0, 2**16))
def test_state_rows_give_the_same_state_as_every_row(rows: list, seed: int) -> None:
    """The driver builds the state from ``state_rows`` only: it must equal the state from all rows
    (committed offsets, each group's last activity, topic id -> name), in any row order."""
    groups_partition = {"g1": 0, "g2": 1, "g3": 0}  # a group's records stay in one partition
    table = pa.Table.from_pylist([
        {"cluster_id": c, "group_id": g, "topic": t, "partition": p, "committed_offset": None if tomb else i,
         "is_tombstone": tomb, "topic_id": tid and f"id-{t}{tid}", "offsets_partition": groups_partition[g], "offset": i,
         "record_timestamp": datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=i)}
        for i, (c, g, t, p, tomb, tid) in enumerate(rows)
    ], schema=contract("offset_commits").arrow_schema)
    table = table.take(pa.array(random.Random(seed).sample(range(len(rows)), len(rows)), pa.int64()))
    reduced = state_rows(table)
    assert reduced.num_rows <= table.num_rows
    now = datetime(2026, 2, 1, tzinfo=timezone.utc)
    assert offset_changes(reduced, now).equals(offset_changes(table, now))
    everything, few = StateInput(table), StateInput(reduced)
    assert _latest_group_record_changes(few, now).equals(_latest_group_record_changes(everything, now))
    assert batch_names(few) == batch_names(everything)
