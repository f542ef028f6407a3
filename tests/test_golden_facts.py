"""Close the class of "plausible but wrong" columns (issue 12 item 5).

Every column of ``consumer_groups``, ``group_members`` and ``snapshot_*`` that the broker
also answers is compared with the recorded live answers (the raw files, not our snapshot
parser's reading of them), and every timestamp column of every table must lie within the
data's time range (a millisecond integer stored into a microsecond column lands in 1970).
Runs on golden scenarios A and D when ../shared is there and on a generated cluster (the
demo generator writes its brokers' answers in the same recorded format) always.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.lag import lag_rows as _lag_rows
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.cluster.rows import LogEndOffsetRow, OffsetRow
from pipelines.reconcile.snapshot import snapshot_summary, store_snapshot
from tests.conftest import corpus_path

BOOKKEEPING = {"ingested_at", "updated_at", "stored_at", "reconciled_at", "run_at", "detected_at"}
_STATES = {"STABLE": "Stable", "EMPTY": "Empty", "ASSIGNING": "Assigning",
           "RECONCILING": "Reconciling", "DEAD": "Dead"}


class Built:
    """A lake ingested from segments plus the recorded answers stored as a snapshot."""

    def __init__(self, root: Path, segments: Path, live: Path) -> None:
        self.started = datetime.now(timezone.utc)
        self.lake = root / "lake"
        self.live = live
        ingest_segments_local(segments, self.lake)
        self.snapshot = snapshot_from_recorded(live)
        store_snapshot(DeltaRsEngine(self.lake), self.snapshot)

    def rows(self, table: str) -> list[dict[str, Any]]:
        return DeltaTable(str(self.lake / table)).to_pyarrow_table().to_pylist()

    def json(self, name: str) -> Any:
        return json.loads((self.live / name).read_text())


@pytest.fixture(scope="module", params=["generated", "scenario-a", "scenario-d"])
def built(request, tmp_path_factory) -> Built:
    root = tmp_path_factory.mktemp(f"facts-{request.param}")
    if request.param == "generated":
        generate_cluster(root / "data", num_partitions=4, seed=21)
        return Built(root, root / "data", root / "data" / "live")
    scenario = corpus_path("golden", request.param)
    return Built(root, scenario / "segments", scenario / "live")


def _listed(built: Built) -> dict[str, dict[str, Any]]:
    return {g["group_id"]: g for g in built.json("list_groups.json")["groups"]}


def test_consumer_groups_equal_list_groups(built: Built) -> None:
    """type, state, protocol type: ListGroups v5; 'simple' is classic with protocol type ''."""
    lake = {r["group_id"]: r for r in built.rows("consumer_groups")}
    listed = _listed(built)
    assert set(lake) == set(listed)
    for gid, g in listed.items():
        row = lake[gid]
        lake_type = "classic" if row["group_type"] == "simple" else row["group_type"]
        assert (lake_type, row["group_state"], row["protocol_type"]) == (
            g["group_type"].lower(), g["group_state"], g["protocol_type"]), gid
        if row["group_type"] == "simple":
            assert g["protocol_type"] == "" and g["group_state"] == "Empty"


def test_classic_groups_and_members_equal_describe_groups(built: Built) -> None:
    lake = {r["group_id"]: r for r in built.rows("consumer_groups")}
    members = defaultdict(dict)
    for m in built.rows("group_members"):
        members[m["group_id"]][m["member_id"]] = m
    for g in built.json("describe_groups.json")["groups"]:
        if g.get("error_code") or lake[g["group_id"]]["group_type"] != "classic":
            continue
        row = lake[g["group_id"]]
        assert row["num_members"] == len(g["members"]), g["group_id"]
        if g["members"]:
            assert row["protocol"] == g["protocol_data"], g["group_id"]
        assert set(members[g["group_id"]]) == {m["member_id"] for m in g["members"]}
        for m in g["members"]:
            mine = members[g["group_id"]][m["member_id"]]
            for col in ("group_instance_id", "client_id", "client_host"):
                assert mine[col] == m[col], (g["group_id"], col)
            decoded = m.get("member_assignment_decoded") or {}
            want = {(tp["topic"], p) for tp in decoded.get("assigned_partitions") or ()
                    for p in tp["partitions"]}
            got = {(tp["topic"], p) for tp in mine["assigned_partitions"] or () for p in tp["partitions"]}
            assert got == want, (g["group_id"], m["member_id"])


def test_consumer_protocol_groups_and_members_equal_consumer_group_describe(built: Built) -> None:
    """KIP-848 groups: members, client ids, hosts, assignments by topic *name* (ids resolved),
    the server assignor where members chose one."""
    path = built.live / "consumer_group_describe.json"
    if not path.exists():
        pytest.skip("this recording has no ConsumerGroupDescribe answers")
    lake = {r["group_id"]: r for r in built.rows("consumer_groups")}
    members = defaultdict(dict)
    for m in built.rows("group_members"):
        members[m["group_id"]][m["member_id"]] = m
    described = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}
    compared = 0
    for gid, d in described.items():
        if str(d.get("type")).upper() != "CONSUMER":
            continue
        row = lake[gid]
        assert row["group_state"] == _STATES[d["state"]], gid
        assert row["num_members"] == len(d["members"]), gid
        if row["protocol"] is not None:
            assert row["protocol"] == d["partition_assignor"], gid
        assert set(members[gid]) == {m["member_id"] for m in d["members"]}, gid
        for m in d["members"]:
            mine = members[gid][m["member_id"]]
            assert (mine["client_id"], mine["client_host"], mine["group_instance_id"]) == (
                m["client_id"], m["host"], m["group_instance_id"]), (gid, m["member_id"])
            got = {(tp["topic"], p) for tp in mine["assigned_partitions"] or () for p in tp["partitions"]}
            assert got == {(t, p) for t, p in m["assignment"]}, (gid, m["member_id"])
            compared += 1
    assert compared or not described


_CLI_ROW = re.compile(r"^(\S+)\s+\S+\s*\(\d+\)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _cli_states(path: Path) -> dict[str, tuple[str, int, int, int]]:
    """kafka-share-groups.sh / kafka-streams-groups.sh --describe --state --verbose rows."""
    out = {}
    for line in path.read_text().splitlines():
        m = _CLI_ROW.match(line)
        if m:
            out[m[1]] = (m[2], int(m[3]), int(m[4]), int(m[5]))
    return out


def test_share_and_streams_groups_equal_their_describe(built: Built) -> None:
    """State, group epoch, assignment epoch and member count of share and streams groups,
    as kafka-share-groups.sh / kafka-streams-groups.sh answered them (ShareGroupDescribe,
    StreamsGroupDescribe)."""
    files = [built.live / "cli_share_describe_state.txt", built.live / "cli_streams_describe_state.txt"]
    if not all(f.exists() for f in files):
        pytest.skip("this recording has no share/streams group answers")
    lake = {r["group_id"]: r for r in built.rows("consumer_groups")}
    answers = {**_cli_states(files[0]), **_cli_states(files[1])}
    assert answers
    snap = {r["group_id"]: r for r in built.rows("snapshot_groups")
            if r["snapshot_id"] == built.snapshot.snapshot_id}
    for gid, (state, epoch, assignment_epoch, num) in answers.items():
        row = lake[gid]
        assert (row["group_state"], row["generation"], row["assignment_epoch"], row["num_members"]) == (
            state, epoch, assignment_epoch, num), gid
        assert (snap[gid]["group_state"], snap[gid]["group_epoch"], snap[gid]["assignment_epoch"]) == (
            state, epoch, assignment_epoch), gid


def test_snapshot_tables_equal_the_recorded_answers(built: Built) -> None:
    sid = built.snapshot.snapshot_id

    def mine(table: str) -> list[dict[str, Any]]:
        return [r for r in built.rows(table) if r["snapshot_id"] == sid]

    listed = _listed(built)
    groups = {r["group_id"]: r for r in mine("snapshot_groups")}
    assert set(groups) == set(listed)
    for gid, g in listed.items():
        assert (groups[gid]["group_type"], groups[gid]["group_state"], groups[gid]["protocol_type"]) == (
            g["group_type"].lower(), g["group_state"], g["protocol_type"])
    fetched = {}
    for g in built.json("offset_fetch.json")["groups"]:
        for t in g.get("topics") or ():
            for p in t["partitions"]:
                fetched[(g["group_id"], t["name"], p["partition_index"])] = (
                    p["committed_offset"], p.get("committed_leader_epoch", -1), p["metadata"])
    offsets = {(r["group_id"], r["topic"], r["partition"]): (
        r["committed_offset"], r["leader_epoch"], r["metadata"]) for r in mine("snapshot_offsets")
        if r["topic"] is not None}
    assert offsets == fetched
    ends = built.json("log_end_offsets.json")
    for r in mine("snapshot_log_end_offsets"):
        marks = ends[r["topic"]][str(r["partition"])]
        assert (r["log_end_offset"], r["last_stable_offset"]) == (
            marks["log_end_offset"], marks["last_stable_offset"])
    for r in mine("snapshot_lag"):
        end = ends[r["topic"]][str(r["partition"])]["log_end_offset"]
        committed = fetched[(r["group_id"], r["topic"], r["partition"])][0]
        assert r["log_end_offset"] == end
        if committed is not None and committed >= 0:
            assert r["lag"] == max(end - committed, 0) and r["lag"] >= 0
            assert r["committed_past_end"] == (committed > end)
    capture = json.loads((built.live.parent / "capture_log.json").read_text())
    points = {r["offsets_partition"]: (r["high_watermark"], r["last_stable_offset"])
              for r in mine("snapshot_points")}
    assert points == {int(p): (m["high_watermark"], m["last_stable_offset"])
                      for p, m in capture["co_end_offsets_before"].items()}
    members = {(r["group_id"], r["member_id"]): r for r in mine("snapshot_members")}
    for g in built.json("describe_groups.json")["groups"]:
        for m in g.get("members") or ():
            row = members[(g["group_id"], m["member_id"])]
            assert (row["client_id"], row["client_host"], row["group_instance_id"]) == (
                m["client_id"], m["client_host"], m["group_instance_id"])


def test_every_timestamp_lies_within_the_datas_time_range(built: Built) -> None:
    """Data timestamps within the recorded records' range (an hour of slack: a group's state
    timestamp may precede its first record); bookkeeping timestamps within this test run.
    Reconciles first, so the reconciliation and quality tables are checked too."""
    from pipelines.reconcile.reconcile import run_reconcile

    run_reconcile(built.lake, data_docs=False)
    raw = DeltaTable(str(built.lake / "offsets_raw")).to_pyarrow_table(columns=["timestamp"])
    stamps = [t for t in raw.column("timestamp").to_pylist() if t is not None]
    low, high = min(stamps) - timedelta(hours=1), max(stamps) + timedelta(hours=1)
    now = datetime.now(timezone.utc) + timedelta(minutes=1)
    checked = 0
    for table_dir in sorted(p for p in built.lake.iterdir() if (p / "_delta_log").exists()):
        table = DeltaTable(str(table_dir)).to_pyarrow_table()
        for field in table.schema:
            if not pa.types.is_timestamp(field.type):
                continue
            values = [v for v in table.column(field.name).to_pylist() if v is not None]
            lo, hi = (built.started - timedelta(seconds=1), now) if field.name in BOOKKEEPING \
                else (low, high)
            bad = [v for v in values if not lo <= v <= hi]
            assert not bad, f"{table_dir.name}.{field.name}: {bad[:3]} outside [{lo}, {hi}]"
            checked += bool(values)
    assert checked >= 10  # the check ran over real columns
    assert (built.lake / "reconciliation" / "_delta_log").exists()


def test_commits_past_the_log_end_are_not_negative_lag(tmp_path: Path) -> None:
    """A committed offset past the log end is legal (any client may commit it; a truncated or
    recreated topic leaves one): lag 0, flagged, never summed in as a negative number."""
    offsets = [OffsetRow("g", "t", 0, 60, -1, ""), OffsetRow("g", "t", 1, 40, -1, "")]
    ends = [LogEndOffsetRow("t", 0, 50, 50), LogEndOffsetRow("t", 1, 50, 50)]
    rows = {r.partition: r for r in _lag_rows(offsets, ends)}
    assert (rows[0].lag, rows[0].committed_past_end) == (0, True)
    assert (rows[1].lag, rows[1].committed_past_end) == (10, False)
    from pipelines.reconcile.cluster.rows import ClusterSnapshot

    snap = ClusterSnapshot("s", datetime(2026, 1, 1, tzinfo=timezone.utc), "t", offsets=offsets,
                           log_end_offsets=ends, lag=list(rows.values()))
    engine = DeltaRsEngine(tmp_path / "lake")
    summary = snapshot_summary(snap, engine, "default", store_snapshot(engine, snap))
    stored = DeltaTable(str(tmp_path / "lake" / "snapshot_lag")).to_pyarrow_table().to_pylist()
    assert {(r["partition"], r["lag"], r["committed_past_end"]) for r in stored} == {
        (0, 0, True), (1, 10, False)}
    assert (summary["total_lag"], summary["committed_past_end"]) == (10, 1)


def test_share_and_streams_members_equal_their_describe(built: Built) -> None:
    """Member ids, client ids and member epochs of share and streams groups; share
    assignments by topic name (the log names them by id: resolved at snapshot time)."""
    share = built.live / "cli_share_describe_members_verbose.txt"
    streams = built.live / "cli_streams_describe_members_verbose.txt"
    if not (share.exists() and streams.exists()):
        pytest.skip("this recording has no share/streams member answers")
    lake = {(r["group_id"], r["member_id"]): r for r in built.rows("group_members")
            if r["group_type"] in ("share", "streams")}
    want = {}
    for line in share.read_text().splitlines():
        f = line.split()
        if len(f) == 7 and f[0].startswith("d-share"):
            parts = {(t, int(p)) for a in f[6].split(";") for t, _, ps in [a.rpartition(":")]
                     for p in ps.split(",")}
            want[(f[0], f[1])] = (f[3], f[2], int(f[5]), parts)
    for line in streams.read_text().splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].startswith("d-streams"):
            want[(f[0], f[3])] = (f[7], None, int(f[5]), None)
    assert want and set(lake) == set(want)
    for key, (client_id, host, epoch, parts) in want.items():
        row = lake[key]
        assert (row["client_id"], row["member_epoch"]) == (client_id, epoch), key
        if host is not None:
            assert row["client_host"] == host, key
        if parts is not None:
            got = {(tp["topic"], p) for tp in row["assigned_partitions"] for p in tp["partitions"]}
            assert got == parts, key


def test_gate_passes_with_every_group_type_compared(built: Built) -> None:
    """The lake and the recorded answers agree, and the gate says so having compared share
    and streams groups too (no 'not compared' escape)."""
    from pipelines.reconcile.reconcile import run_reconcile

    result = run_reconcile(built.lake, data_docs=False)
    assert result.passed, result.summary["unexplained"] or result.summary["blocked_by"]
    rows = [r for r in result.reconciliation.table.to_pylist() if r["level"] == "group"]
    assert rows and all("not compared" not in (r["detail"] or "") for r in rows)
    assert {r["classification"] for r in rows} == {"match"}
