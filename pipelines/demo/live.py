"""The brokers' answers right after the history ends, as a recorded capture (``OUT_DIR/live``).

Why: the pipeline's snapshot -> reconcile step needs a live cluster's answers; these are
written from the generator's bookkept state (its manifest), never from the segment files, in
the recorded-capture format of ``shared/corpus/golden/scenario-a``, so reconciling a lake
against them checks the decoder and the replay end to end without a broker.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.decode import encode_assignment, encode_subscription
from pipelines.demo.manifest import Committed, DemoManifest
from pipelines.demo.world import TP

__all__ = ["CAPTURE_DELAY_MS", "write_live_capture"]

#: The recorded capture starts this long after the last record (its snapshot point).
CAPTURE_DELAY_MS = 5_000
#: Brokers of the simulated cluster; the coordinator of offsets partition p is broker p % 3.
_BROKERS = 3
_GROUP_ID_NOT_FOUND = 69
#: librdkafka's ConsumerGroupState names, as ``describe_consumer_groups`` prints them.
_RDKAFKA_STATES = {"Stable": "STABLE", "Empty": "EMPTY", "Dead": "DEAD",
                   "Assigning": "ASSIGNING", "Reconciling": "RECONCILING",
                   "PreparingRebalance": "PREPARING_REBALANCE",
                   "CompletingRebalance": "COMPLETING_REBALANCE"}
_SYNTHETIC = ("synthesized by pipelines.demo from the generator's bookkept state (its "
              "manifest), not captured from a broker and not decoded from the segments")


def _write_json(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _coordinator(offsets_partition: int) -> dict[str, Any]:
    broker = offsets_partition % _BROKERS
    return {"id": broker, "host": f"broker-{broker}.demo.invalid", "port": 9092}


def _tp_pairs(assignment: dict[str, list[int]] | None) -> list[list[Any]]:
    return [[t, p] for t, ps in sorted((assignment or {}).items()) for p in sorted(ps)]


def _classic_member_answer(m: dict[str, Any]) -> dict[str, Any]:
    """One DescribeGroups member: the consumer-protocol blobs as hex, plus their decoding.

    The blobs are re-encoded (version 0, no user data) from the bookkept subscription and
    assignment: the coordinator serves the bytes the client sent, which the manifest does
    not keep, but what they say is the same.
    """
    topics = list(m["subscribed_topics"])
    assigned = [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(m["assignment"].items())]
    metadata = encode_subscription({"version": 0, "topics": topics, "user_data": b""})
    assignment = encode_assignment({"version": 0, "assigned_partitions": assigned,
                                    "user_data": b""})
    return {
        "member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
        "client_id": m["client_id"], "client_host": m["client_host"],
        "member_metadata": {"hex": metadata.hex()},
        "member_assignment": {"hex": assignment.hex()},
        "member_metadata_decoded": {"topics": topics, "user_data": {"hex": ""}},
        "member_assignment_decoded": {"assigned_partitions": assigned, "user_data": {"hex": ""}},
    }

def write_live_capture(manifest: DemoManifest, out_dir: Path | str | None = None) -> Path:
    """Write the cluster's answers at the end of the history as a recorded capture.

    Files (the formats of ``shared/corpus/golden/scenario-a``, which
    :func:`pipelines.reconcile.cluster.recorded.snapshot_from_recorded` reads): ``live/list_groups.json``
    (ListGroups v5), ``live/describe_groups.json`` (DescribeGroups v6, classic members with
    hex and decoded blobs; consumer groups answer GROUP_ID_NOT_FOUND as on a 4.0 broker),
    ``live/consumer_group_describe.json`` (librdkafka's describe_consumer_groups: KIP-848
    members and every group's coordinator), ``live/offset_fetch.json`` and
    ``live/offset_fetch_require_stable.json`` (OffsetFetch v8, topics=null; equal, as the
    simulation ends every transaction), ``live/log_end_offsets.json`` and
    ``capture_log.json`` (the ``__consumer_offsets`` high watermarks read before the capture,
    which is the snapshot point, and its start time).

    Everything comes from ``manifest``: groups and members from the bookkept group state,
    offsets from the bookkept committed offsets, high watermarks from the log writers' next
    offsets. Producers are not simulated, so a user partition's log end offset is the
    furthest position any group committed (aborted ones included) plus a seeded slack.
    Returns the ``live`` directory.
    """
    root = Path(out_dir if out_dir is not None else manifest.out_dir)
    live = root / "live"
    live.mkdir(parents=True, exist_ok=True)
    groups = sorted(manifest.groups.items())
    _write_json(live / "list_groups.json", _list_groups(groups))
    _write_json(live / "describe_groups.json", _describe_groups(groups))
    _write_json(live / "consumer_group_describe.json", _consumer_group_describe(groups))
    for require_stable, name in ((False, "offset_fetch.json"),
                                 (True, "offset_fetch_require_stable.json")):
        _write_json(live / name, _offset_fetch(manifest, groups, require_stable=require_stable))
    _write_json(live / "log_end_offsets.json", _log_end_offsets(manifest))
    _write_json(root / "capture_log.json", _capture_log(manifest, groups))
    return live


def _list_groups(groups: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """ListGroups v5: every group, KIP-848 ones typed ``consumer``, the others ``classic``."""
    listed = [{"group_id": gid, "protocol_type": g["protocol_type"], "group_state": g["state"],
               "group_type": "consumer" if g["group_type"] == "consumer" else "classic"}
              for gid, g in groups]
    return {"_type": "ListGroupsResponse", "_version": 5, "throttle_time_ms": 0, "error_code": 0,
            "groups": listed, "_note": _SYNTHETIC}


def _describe_groups(groups: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """DescribeGroups v6: classic members with their blobs; consumer groups are not classic."""
    described = []
    for gid, g in groups:
        if g["group_type"] == "consumer":
            described.append({
                "error_code": _GROUP_ID_NOT_FOUND,
                "error_message": f"Group {gid} is not a classic group.", "group_id": gid,
                "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": None, "error_name": "GroupIdNotFoundError"})
            continue
        described.append({
            "error_code": 0, "error_message": None, "group_id": gid, "group_state": g["state"],
            "protocol_type": g["protocol_type"],
            "protocol_data": (g["protocol"] or "") if g["members"] else "",
            "members": [_classic_member_answer(m) for m in g["members"]],
            "authorized_operations": None, "error_name": "NoError"})
    return {"_type": "DescribeGroupsResponse", "_version": 6, "throttle_time_ms": 0,
            "groups": described, "_note": _SYNTHETIC}


def _consumer_group_describe(groups: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """librdkafka's describe_consumer_groups: members (with targets for KIP-848) and coordinator."""
    cgd: dict[str, Any] = {}
    for gid, g in groups:
        modern = g["group_type"] == "consumer"
        cgd[gid] = {
            "group_id": gid, "is_simple_consumer_group": g["group_type"] == "simple",
            "state": _RDKAFKA_STATES.get(g["state"], "UNKNOWN"),
            "type": "CONSUMER" if modern else "CLASSIC",
            "partition_assignor": g["assignor"] if modern else (
                (g["protocol"] or "") if g["members"] else ""),
            "coordinator": _coordinator(g["offsets_partition"]),
            "members": [{
                "member_id": m["member_id"], "client_id": m["client_id"],
                "host": m["client_host"], "group_instance_id": m["group_instance_id"],
                "assignment": _tp_pairs(m["assignment"]),
                "target_assignment": _tp_pairs(m["target_assignment"]) if modern else None,
            } for m in g["members"]],
        }
    cgd["_note"] = _SYNTHETIC
    return cgd


def _offset_fetch(manifest: DemoManifest, groups: list[tuple[str, dict[str, Any]]], *,
                  require_stable: bool) -> dict[str, Any]:
    """OffsetFetch v8 (topics=null) for every listed group, from the bookkept committed offsets."""
    by_group: dict[str, dict[str, list[tuple[int, Committed]]]] = {}
    for (gid, topic, partition), c in sorted(manifest.committed.items()):
        by_group.setdefault(gid, {}).setdefault(topic, []).append((partition, c))
    return {
        "_type": "OffsetFetchResponse", "_version": 8, "throttle_time_ms": 0,
        "groups": [{
            "group_id": gid,
            "topics": [{"name": topic, "partitions": [{
                "partition_index": partition, "committed_offset": c.offset,
                "committed_leader_epoch": c.leader_epoch, "metadata": c.metadata,
                "error_code": 0, "error_name": "NoError"} for partition, c in parts]}
                for topic, parts in sorted(by_group.get(gid, {}).items())],
            "error_code": 0, "error_name": "NoError"} for gid, _ in groups],
        "_note": f"OffsetFetch v8, topics=null for every group listed by ListGroups; "
                 f"require_stable={require_stable}; {_SYNTHETIC}"}


def _log_end_offsets(manifest: DemoManifest) -> dict[str, dict[str, dict[str, int]]]:
    """User partitions' log end offsets: the furthest committed position plus a seeded slack
    (an offset committed beyond the end on purpose is not the end: its floor is)."""
    furthest: dict[TP, int] = {}
    floors = {(f["topic"], f["partition"]): f["offset"] for f in manifest.audit.get("log_end_floor", ())}
    for (_, topic, partition), c in manifest.committed.items():
        offset = min(c.offset, floors.get((topic, partition), c.offset))  # beyond the end: not the end
        furthest[(topic, partition)] = max(furthest.get((topic, partition), 0), offset)
    for a in manifest.aborted:
        furthest[(a.topic, a.partition)] = max(furthest.get((a.topic, a.partition), 0), a.offset)
    rng = random.Random(f"offsetlake-demo/{manifest.seed}/log-end-offsets")
    ends: dict[str, dict[str, dict[str, int]]] = {}
    for topic, info in sorted(manifest.topics.items()):
        for partition in range(info["partitions"]):
            leo = furthest.get((topic, partition), 0) + rng.randint(0, 400)
            ends.setdefault(topic, {})[str(partition)] = {
                "log_start_offset": 0, "log_end_offset": leo, "last_stable_offset": leo}
    return ends


def _capture_log(manifest: DemoManifest, groups: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The snapshot point: start time and ``__consumer_offsets`` high watermarks before it."""
    started_ms = manifest.end_ms + CAPTURE_DELAY_MS
    started = datetime.fromtimestamp(started_ms / 1000, tz=timezone.utc)
    return {
        "started": started.strftime("%Y-%m-%dT%H:%M:%S+0000"), "started_ms": started_ms,
        "offsets_partitions": sorted(manifest.partitions),
        "co_end_offsets_before": {
            str(p): {"log_start_offset": 0, "high_watermark": info["next_offset"],
                     "last_stable_offset": info["next_offset"]}
            for p, info in sorted(manifest.partitions.items())},
        "groups": [gid for gid, _ in groups],
        "brokers": [_coordinator(b)["host"] for b in range(_BROKERS)],
        "_note": _SYNTHETIC,
    }
