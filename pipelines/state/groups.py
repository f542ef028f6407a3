"""Group state as the coordinator rebuilds it: which groups exist, their type, state and members.

Input is the latest record per (record type, member/regex) of one group, tombstones
included (the ``group_records_latest`` table), plus the group's last offset commit.
The rules are those of the coordinator's replay (spec 2.3-2.5):

* a classic group is its latest GroupMetadata record; Empty without members, else Stable;
* KIP-848/share/streams records create their group; the family's metadata tombstone
  removes it; the current type is the family with the latest live record;
* an offset commit for a group that does not exist creates a "simple" group (classic,
  Empty, protocol type ""), so a simple group exists when a commit follows the last
  group tombstone;
* consumer-group state comes from the persisted epochs: Empty, Assigning (group epoch
  ahead of the target assignment), Reconciling (a member not yet at the target), Stable.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from pipelines.model import LatestRecord

OFFSET_ACTIVITY = 1  # record_type of the "last offset commit" row in group_records_latest
CLASSIC = 2
CONSUMER_TYPES = frozenset({3, 4, 5, 6, 7, 8, 16})
SHARE_TYPES = frozenset({9, 10, 11, 12, 13, 14, 15})
STREAMS_TYPES = frozenset({17, 18, 19, 20, 21, 22, 23})
FAMILY_METADATA_TYPE = {"consumer": 3, "share": 11, "streams": 17}

CONSUMER_MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}
STREAMS_MEMBER_STATES = {1: "STABLE", 2: "UNREVOKED_TASKS", 3: "UNRELEASED_TASKS", 127: "UNKNOWN"}


def family(record_type: int) -> str | None:
    if record_type == CLASSIC:
        return "classic"
    if record_type in CONSUMER_TYPES:
        return "consumer"
    if record_type in SHARE_TYPES:
        return "share"
    if record_type in STREAMS_TYPES:
        return "streams"
    return None


def derive_group(
    group_id: str, records: list[LatestRecord], topic_names: dict[str, str] | None = None,
    has_offsets: bool = True,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The group's row for ``consumer_groups`` (None when it does not exist) and its members.

    ``has_offsets``: whether the group holds any live committed offset. An offset-only
    ("simple") group whose offsets were all deleted has no record left that would load it:
    the coordinator's replay creates no group from an empty record set, so neither do we.
    """
    topic_names = topic_names or {}
    by_family: dict[str, list[LatestRecord]] = {}
    activity = None
    for rec in records:
        if rec.record_type == OFFSET_ACTIVITY:
            activity = rec
            continue
        fam = family(rec.record_type)
        if fam:
            by_family.setdefault(fam, []).append(rec)

    live: dict[str, LatestRecord] = {}  # family -> its latest live record
    for fam, recs in by_family.items():
        if _family_exists(fam, recs):
            live[fam] = max((r for r in recs if not r.is_tombstone), key=lambda r: r.position)
    last_tombstone = max(
        (r.position for recs in by_family.values() for r in recs if r.is_tombstone
         and r.record_type in (CLASSIC, 3, 11, 17)),
        default=None,
    )
    latest_any = max((r for recs in by_family.values() for r in recs), key=lambda r: r.position,
                     default=None)
    anchor = latest_any or activity
    if live:
        current = max(live, key=lambda f: live[f].position)
        recs = by_family[current]
        if current == "classic":
            group, members = _classic(group_id, live["classic"])
        else:
            group, members = _modern(group_id, current, recs, topic_names)
    elif activity is not None and has_offsets and (last_tombstone is None
                                                   or activity.position > last_tombstone):
        group, members = _simple(group_id), []
    else:
        return None, []
    last = max((r for r in (latest_any, activity) if r is not None), key=lambda r: r.position)
    group.update(
        offsets_partition=(anchor or last).offsets_partition,
        last_record_offset=last.offset,
        last_record_timestamp=last.record_timestamp,
        last_commit_offset=activity.offset if activity else None,
        num_members=len(members),
    )
    return group, members


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ms_to_datetime(ms: int | None) -> datetime | None:
    """A record's epoch-millisecond field as a timestamp (the tables' timestamps are
    microsecond columns: a raw millisecond integer would land 1000x too early); -1 = unset."""
    if ms is None or ms < 0:
        return None
    return _EPOCH + timedelta(milliseconds=ms)


def _family_exists(fam: str, recs: list[LatestRecord]) -> bool:
    live = [r for r in recs if not r.is_tombstone]
    if not live:
        return False
    if fam == "classic":
        return True
    meta_type = FAMILY_METADATA_TYPE[fam]
    meta = [r for r in recs if r.record_type == meta_type]
    # The metadata tombstone is written last when a group is deleted (members first).
    return not (meta and meta[0].is_tombstone and all(r.position < meta[0].position for r in live))


def _simple(group_id: str) -> dict[str, Any]:
    return {"group_id": group_id, "group_type": "simple", "group_state": "Empty",
            "protocol_type": "", "protocol": None, "generation": None, "assignment_epoch": None,
            "leader": None, "current_state_timestamp": None}


def _classic(group_id: str, rec: LatestRecord) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    v = rec.value or {}
    members = []
    for m in v.get("members") or ():
        sub = m.get("subscription") if isinstance(m.get("subscription"), dict) else {}
        asg = m.get("assignment") if isinstance(m.get("assignment"), dict) else {}
        members.append({
            "group_id": group_id, "group_type": "classic", "member_id": m["member_id"],
            "group_instance_id": m.get("group_instance_id"), "client_id": m.get("client_id"),
            "client_host": m.get("client_host"),
            "rebalance_timeout_ms": m.get("rebalance_timeout", m.get("session_timeout")),
            "session_timeout_ms": m.get("session_timeout"),
            "subscribed_topics": sub.get("topics"), "subscribed_topic_regex": None,
            "member_epoch": v.get("generation"), "member_state": None,
            "assigned_partitions": [
                {"topic": tp["topic"], "topic_id": None, "partitions": tp["partitions"]}
                for tp in asg.get("assigned_partitions") or ()
            ] if asg else None,
            "partitions_pending_revocation": None,
        })
    group = {
        "group_id": group_id, "group_type": "classic",
        "group_state": "Stable" if members else "Empty",
        "protocol_type": v.get("protocol_type"), "protocol": v.get("protocol"),
        "generation": v.get("generation"), "assignment_epoch": None, "leader": v.get("leader"),
        "current_state_timestamp": ms_to_datetime(v.get("current_state_timestamp")),
    }
    return group, members


def _modern(group_id: str, fam: str, recs: list[LatestRecord],
            topic_names: dict[str, str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    live = {(r.record_type, r.subkey): r.value or {} for r in recs if not r.is_tombstone}
    meta_type = FAMILY_METADATA_TYPE[fam]
    meta = live.get((meta_type, ""), {})
    names = dict(topic_names)
    for (rtype, _), value in live.items():
        if rtype in (4, 9, 18):  # partition metadata records carry topic id -> name
            names.update({t["topic_id"]: t["topic_name"] for t in value.get("topics") or ()})
    target_type = {"consumer": 6, "share": 12, "streams": 20}[fam]
    member_meta_type = {"consumer": 5, "share": 10, "streams": 19}[fam]
    current_type = {"consumer": 8, "share": 14, "streams": 22}[fam]
    assignment_epoch = live.get((target_type, ""), {}).get("assignment_epoch")
    member_ids = sorted({sub for (rtype, sub) in live if sub and rtype in (member_meta_type, current_type)})
    states = STREAMS_MEMBER_STATES if fam == "streams" else CONSUMER_MEMBER_STATES

    def resolve(tps: list[dict] | None) -> list[dict] | None:
        if tps is None:
            return None
        return [{"topic": names.get(tp.get("topic_id"), tp.get("subtopology_id")),
                 "topic_id": tp.get("topic_id"), "partitions": tp["partitions"]} for tp in tps]

    members = []
    stable = True
    for mid in member_ids:
        md = live.get((member_meta_type, mid), {})
        cur = live.get((current_type, mid), {})
        classic = md.get("classic_member_metadata") or {}
        assigned = cur.get("assigned_partitions", cur.get("active_tasks"))
        pending = cur.get("partitions_pending_revocation", cur.get("active_tasks_pending_revocation"))
        state_code = cur.get("state")
        if state_code is not None and states.get(state_code) != "STABLE":
            stable = False
        if cur.get("member_epoch") != assignment_epoch:
            stable = False
        members.append({
            "group_id": group_id, "group_type": fam, "member_id": mid,
            "group_instance_id": md.get("instance_id"), "client_id": md.get("client_id"),
            "client_host": md.get("client_host"),
            "rebalance_timeout_ms": md.get("rebalance_timeout_ms"),
            "session_timeout_ms": classic.get("session_timeout_ms"),
            "subscribed_topics": md.get("subscribed_topic_names"),
            "subscribed_topic_regex": md.get("subscribed_topic_regex"),
            "member_epoch": cur.get("member_epoch"),
            "member_state": states.get(state_code, None if state_code is None else f"UNKNOWN({state_code})"),
            "assigned_partitions": resolve(assigned),
            "partitions_pending_revocation": resolve(pending),
        })
    epoch = meta.get("epoch")
    if not members:
        state = "Empty"
    elif epoch is not None and assignment_epoch is not None and epoch > assignment_epoch:
        state = "Assigning"
    elif not stable:
        state = "Reconciling"
    else:
        state = "Stable"
    assignors = {live.get((member_meta_type, m), {}).get("server_assignor") for m in member_ids}
    group = {
        "group_id": group_id, "group_type": fam, "group_state": state,
        "protocol_type": "consumer" if fam == "consumer" else fam,
        "protocol": assignors.pop() if len(assignors) == 1 else None,
        "generation": epoch, "assignment_epoch": assignment_epoch, "leader": None,
        "current_state_timestamp": None,
    }
    return group, members
