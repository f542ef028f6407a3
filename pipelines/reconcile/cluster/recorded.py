"""A snapshot read from a recorded capture folder (e.g. the golden corpus' ``live/``).

Why: reconciliation and its tests must run against real brokers' answers without a broker;
a recording holds those answers as JSON (ListGroups, DescribeGroups, librdkafka's
describe_consumer_groups, OffsetFetch, log end offsets) plus the Kafka CLI tools' output for
share and streams groups. This module turns them into the same
:class:`~pipelines.reconcile.cluster.rows.ClusterSnapshot` a live capture produces.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.reconcile.cluster.errors import NONE, error_name
from pipelines.reconcile.cluster.lag import lag_rows
from pipelines.reconcile.cluster.rows import (
    ClusterSnapshot,
    GroupRow,
    LogEndOffsetRow,
    MemberRow,
    OffsetRow,
    PointRow,
    decode_assignment,
    group_type,
    new_snapshot_id,
)

_LIBRDKAFKA_STATES = {
    "STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead", "UNKNOWN": "Unknown",
    "PREPARING_REBALANCE": "PreparingRebalance", "COMPLETING_REBALANCE": "CompletingRebalance",
    "ASSIGNING": "Assigning", "RECONCILING": "Reconciling",
}


def _read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def _hex_bytes(value: Any) -> bytes | None:
    if isinstance(value, dict) and "hex" in value:
        return bytes.fromhex(value["hex"])
    if isinstance(value, str):
        return bytes.fromhex(value)
    return None


_CLI_STATE_ROW = re.compile(r"^(\S+)\s+\S+\s*\(\d+\)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _recorded_cli_epochs(live: Path) -> dict[str, tuple[int, int]]:
    """Group epoch and assignment epoch per share/streams group from a recording's
    ``kafka-share-groups.sh`` / ``kafka-streams-groups.sh --describe --state --verbose``."""
    out: dict[str, tuple[int, int]] = {}
    for name in ("cli_share_describe_state.txt", "cli_streams_describe_state.txt"):
        path = live / name
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                m = _CLI_STATE_ROW.match(line)
                if m:
                    out[m[1]] = (int(m[3]), int(m[4]))
    return out


def _recorded_cli_members(live: Path, types: dict[str, str]) -> list[MemberRow]:
    """Share and streams group members from a recording's ``kafka-share-groups.sh`` /
    ``kafka-streams-groups.sh --describe --members --verbose`` output (ShareGroupDescribe /
    StreamsGroupDescribe: DescribeGroups answers these groups with error 69, so the tools'
    answers are the only member view a recording has)."""
    out: list[MemberRow] = []
    share = live / "cli_share_describe_members_verbose.txt"
    if share.exists():
        for line in share.read_text(encoding="utf-8").splitlines():
            f = line.split()
            if len(f) < 6 or types.get(f[0]) != "share":
                continue
            assignment = []
            for part in (f[6].split(";") if len(f) > 6 else ()):
                topic, _, parts = part.rpartition(":")
                if topic:
                    assignment.append({"topic": topic, "partitions": sorted(int(x) for x in parts.split(",") if x)})
            out.append(MemberRow(f[0], f[1], None, f[3], f[2], assignment))
    streams = live / "cli_streams_describe_members_verbose.txt"
    if streams.exists():
        for line in streams.read_text(encoding="utf-8").splitlines():
            f = line.split()
            if len(f) >= 8 and types.get(f[0]) == "streams":
                out.append(MemberRow(f[0], f[3], None, f[7], None, None))  # tasks, not partitions
    return out


def snapshot_from_recorded(live_dir: Path | str, *, require_stable: bool = False
                           ) -> ClusterSnapshot:
    """The same snapshot built from a recorded capture folder (e.g. golden ``live/``).

    Reads ``list_groups.json`` (ListGroups), ``describe_groups.json`` (DescribeGroups, bytes
    as hex), ``consumer_group_describe.json`` (librdkafka's describe_consumer_groups),
    ``offset_fetch.json`` or, with ``require_stable``, ``offset_fetch_require_stable.json``,
    ``log_end_offsets.json``, and ``../capture_log.json`` for the ``__consumer_offsets``
    watermarks read before the capture and its start time. Missing optional files just
    leave their part empty.
    """
    live = Path(live_dir)
    errors: list[str] = []
    groups, members = _recorded_groups(live)
    captured_at, points = _recorded_point(live, errors)
    members.extend(_recorded_cli_members(live, {g.group_id: g.group_type for g in groups}))
    described_epochs = _recorded_cli_epochs(live)
    groups = [replace(g, group_epoch=described_epochs[g.group_id][0],
                      assignment_epoch=described_epochs[g.group_id][1])
              if g.group_id in described_epochs and g.group_type in ("share", "streams") else g
              for g in groups]
    offsets = _recorded_offsets(live / ("offset_fetch_require_stable.json" if require_stable
                                        else "offset_fetch.json"))
    ends = _recorded_ends(live, offsets, errors)
    return ClusterSnapshot(
        snapshot_id=new_snapshot_id(captured_at, salt=str(live.resolve())),
        captured_at=captured_at, source=str(live), require_stable=require_stable,
        groups=sorted(groups, key=lambda r: r.group_id), members=members, offsets=offsets,
        log_end_offsets=ends, lag=lag_rows(offsets, ends), points=points, errors=errors)


def _recorded_point(live: Path, errors: list[str]) -> tuple[datetime, list[PointRow]]:
    """The capture's start time and the ``__consumer_offsets`` watermarks read before it
    (``../capture_log.json``); without it, no snapshot point (an error) and the listing's
    file time."""
    capture_log_path = live.parent / "capture_log.json"
    points: list[PointRow] = []
    if not capture_log_path.exists():
        errors.append(f"{capture_log_path} absent: no snapshot point")
        return datetime.fromtimestamp((live / "list_groups.json").stat().st_mtime,
                                      tz=timezone.utc), points
    capture_log = _read_json(capture_log_path)
    captured_at = datetime.fromtimestamp(capture_log["started_ms"] / 1000, tz=timezone.utc)
    for part, marks in sorted(capture_log.get("co_end_offsets_before", {}).items(),
                              key=lambda kv: int(kv[0])):
        points.append(PointRow(int(part), marks.get("high_watermark"),
                               marks.get("last_stable_offset")))
    return captured_at, points


def _recorded_groups(live: Path) -> tuple[list[GroupRow], list[MemberRow]]:
    """Group rows from ListGroups, completed by DescribeGroups (classic groups) or
    librdkafka's describe_consumer_groups (KIP-848 consumer groups), with their members."""
    listed = _read_json(live / "list_groups.json")
    lg_version = int(listed.get("_version", 5))
    described: dict[str, dict[str, Any]] = {}
    if (live / "describe_groups.json").exists():
        described = {g["group_id"]: g for g in _read_json(live / "describe_groups.json")["groups"]}
    cgd: dict[str, dict[str, Any]] = {}
    if (live / "consumer_group_describe.json").exists():
        cgd = {k: v for k, v in _read_json(live / "consumer_group_describe.json").items()
               if not k.startswith("_")}
    groups: list[GroupRow] = []
    members: list[MemberRow] = []
    for g in listed["groups"]:
        gid = g["group_id"]
        gtype = group_type(g.get("group_type") if lg_version >= 5 else None)
        state = g.get("group_state") if lg_version >= 4 else None
        protocol_type = g.get("protocol_type")
        protocol = None
        error = NONE
        modern = cgd.get(gid)
        coordinator = (modern or {}).get("coordinator", {}).get("id")
        if gtype in ("classic", "unknown") and gid in described:
            d = described[gid]
            error = int(d.get("error_code") or 0)
            state = state or d.get("group_state")
            protocol = d.get("protocol_data")
            members.extend(_recorded_classic_members(gid, d, protocol_type))
        elif gtype == "consumer" and modern is not None:
            state = state or _LIBRDKAFKA_STATES.get(str(modern.get("state")), modern.get("state"))
            protocol = modern.get("partition_assignor")
            members.extend(_recorded_consumer_members(gid, modern))
        groups.append(GroupRow(gid, gtype, state, protocol_type, protocol, coordinator, error,
                               error_name(error)))
    return groups, members


def _recorded_classic_members(gid: str, d: dict[str, Any], protocol_type: str | None
                              ) -> list[MemberRow]:
    """A DescribeGroups group's members; consumer-protocol assignments decoded."""
    consumer_protocol = (d.get("protocol_type") or protocol_type) == "consumer"
    rows = []
    for m in d.get("members", []):
        blob = _hex_bytes(m.get("member_assignment"))
        rows.append(MemberRow(
            gid, m["member_id"], m.get("group_instance_id"), m.get("client_id"),
            m.get("client_host"),
            decode_assignment(blob, gid, m["member_id"]) if consumer_protocol else None))
    return rows


def _recorded_consumer_members(gid: str, modern: dict[str, Any]) -> list[MemberRow]:
    """A describe_consumer_groups group's members, assignments grouped by topic."""
    rows = []
    for m in modern.get("members", []):
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in m.get("assignment") or []:
            by_topic[topic].append(int(partition))
        rows.append(MemberRow(
            gid, m["member_id"], m.get("group_instance_id"), m.get("client_id"),
            m.get("host"),
            [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]))
    return rows


def _recorded_offsets(fetch_file: Path) -> list[OffsetRow]:
    """OffsetFetch answers: one error row per failed group, else one row per partition."""
    offsets: list[OffsetRow] = []
    for grp in _read_json(fetch_file)["groups"]:
        code = int(grp.get("error_code") or 0)
        if code:
            offsets.append(OffsetRow(grp["group_id"], None, None, None, None, None, code,
                                     error_name(code)))
            continue
        for t in grp.get("topics") or []:
            for p in t["partitions"]:
                pcode = int(p.get("error_code") or 0)
                offsets.append(OffsetRow(
                    grp["group_id"], t["name"], int(p["partition_index"]),
                    p.get("committed_offset"), p.get("committed_leader_epoch", -1),
                    p.get("metadata"), pcode, error_name(pcode)))
    return offsets


def _recorded_ends(live: Path, offsets: list[OffsetRow], errors: list[str]
                   ) -> list[LogEndOffsetRow]:
    """Log end offsets of every partition some group holds an offset for."""
    ends: list[LogEndOffsetRow] = []
    held = sorted({(r.topic, r.partition) for r in offsets
                   if r.topic is not None and r.partition is not None})
    if not (live / "log_end_offsets.json").exists():
        errors.append(f"{live / 'log_end_offsets.json'} absent: no lag")
        return ends
    leo = _read_json(live / "log_end_offsets.json")
    for topic, partition in held:
        marks = leo.get(topic, {}).get(str(partition))
        if marks is None:
            errors.append(f"no recorded log end offset for {topic}-{partition}")
            ends.append(LogEndOffsetRow(topic, partition, None, None))
        else:
            ends.append(LogEndOffsetRow(topic, partition, marks.get("log_end_offset"),
                                        marks.get("last_stable_offset")))
    return ends
