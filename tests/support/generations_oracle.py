"""Oracle for tests/test_generations_replay.py: the group_generations replay as it was
before its per-group and per-member indexes (pipelines/state/generations.py), verbatim but
for one change made since: a row is an ownership interval, so a key closed and opened
again under the same generation is two rows (told apart by ``valid_from_offset``; the
later one no longer overwrites the earlier), and each row says whether it is open.

Ownership history: who owned which partition from which generation/time to which.

A classic GroupMetadata record starts a generation: the previous generation's rows are
closed and one row per (member, partition) of the new assignment is opened. A KIP-848
current-assignment record does the same for one member at its member epoch (partitions
pending revocation included: the member holds them until it acknowledges). Tombstones
close rows. Rows are only ever closed, never deleted, so rebalances and KIP-70
subscription changes stay auditable.

A KIP-848 row takes its member's metadata (client id, host, subscription) as of the
record that opened it: member-metadata records (type 5) are replayed in log order with
the rest. A row opened before its member's first metadata record is filled in by that
record later, whatever batch it lands in: the table does not depend on batch boundaries.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pipelines.model import LatestRecord

# group, generation, member, topic, partition, group type: a KIP-848 member epoch can equal
# the classic generation the same member id had before an online upgrade (mixed-migrate)
GenKey = tuple[str, int, str, str, int, str]


def _classic_rows(group_id: str, rec: LatestRecord) -> dict[GenKey, dict[str, Any]]:
    value = rec.value or {}
    generation = value.get("generation", 0)
    rows = {}
    for m in value.get("members") or ():
        sub = m.get("subscription") if isinstance(m.get("subscription"), dict) else {}
        asg = m.get("assignment") if isinstance(m.get("assignment"), dict) else {}
        base = {"group_type": "classic", "group_instance_id": m.get("group_instance_id"),
                "client_id": m.get("client_id"), "client_host": m.get("client_host"),
                "subscribed_topics": sub.get("topics")}
        owned = [(tp["topic"], p) for tp in asg.get("assigned_partitions") or () for p in tp["partitions"]]
        for topic, partition in owned or [("", -1)]:
            rows[(group_id, generation, m["member_id"], topic, partition, "classic")] = base
    return rows


def _member_attrs(member: dict[str, Any]) -> dict[str, Any]:
    return {"group_instance_id": member.get("instance_id"), "client_id": member.get("client_id"),
            "client_host": member.get("client_host"),
            "subscribed_topics": member.get("subscribed_topic_names")}


def _member_rows(group_id: str, rec: LatestRecord, topic_names: dict[str, str],
                 member: dict[str, Any]) -> dict[GenKey, dict[str, Any]]:
    value = rec.value or {}
    epoch = value.get("member_epoch", 0)
    base = {"group_type": "consumer", **_member_attrs(member)}
    # a partition pending revocation is still the member's until it acknowledges the
    # revocation (it commits it first): owned until a later assignment drops it
    held = [*(value.get("assigned_partitions") or ()), *(value.get("partitions_pending_revocation") or ())]
    owned = [(topic_names.get(tp["topic_id"], tp["topic_id"]), p) for tp in held for p in tp["partitions"]]
    return {(group_id, epoch, rec.subkey, topic, partition, "consumer"): base
            for topic, partition in owned or [("", -1)]}


def _streams_rows(group_id: str, rec: LatestRecord, topology: dict[str, Any] | None,
                  member: dict[str, Any]) -> dict[GenKey, dict[str, Any]]:
    """A streams member's active tasks (pending revocation included) as the source-topic
    partitions they read: task (subtopology s, partition p) reads partition p of every
    source and repartition-source topic of s (from the group's topology record)."""
    value = rec.value or {}
    epoch = value.get("member_epoch", 0)
    base = {"group_type": "streams", **_member_attrs(member)}
    subtopologies = {st.get("subtopology_id"): st for st in (topology or {}).get("subtopologies") or ()}
    owned = []
    for task in [*(value.get("active_tasks") or ()), *(value.get("active_tasks_pending_revocation") or ())]:
        st = subtopologies.get(task.get("subtopology_id")) or {}
        topics = [*(st.get("source_topics") or ()),
                  *(t.get("name") for t in st.get("repartition_source_topics") or () if t.get("name"))]
        owned += [(t, p) for t in topics for p in task.get("partitions") or ()]
    return {(group_id, epoch, rec.subkey, topic, partition, "streams"): base
            for topic, partition in sorted(set(owned)) or [("", -1)]}


def _key(r: dict[str, Any]) -> GenKey:
    return (r["group_id"], r["generation"], r["member_id"], r["topic"], r["partition"], r["group_type"])


def _interval(r: dict[str, Any]) -> tuple:
    return (*_key(r), r["valid_from_offset"])


def generation_changes(
    open_rows: Iterable[dict[str, Any]],
    events: Iterable[tuple[str, LatestRecord]],
    topic_names: dict[str, str],
    cluster_id: str,
    updated_at: datetime,
    members: dict[tuple[str, str], dict[str, Any]] | None = None,
    unfilled_rows: Iterable[dict[str, Any]] = (),
    topologies: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Rows to upsert into ``group_generations`` after replaying ``events`` in log order.

    ``open_rows`` are the currently open rows (valid_to null) of the groups in ``events``;
    ``members`` maps (group, member id) to the KIP-848 member metadata (client id, host...)
    *before* the events (it is updated by the type-5 events); ``unfilled_rows`` are stored
    KIP-848 rows of those groups still without member metadata (client id null).
    """
    replay = _Replay(open_rows, topic_names, cluster_id, updated_at, members, unfilled_rows,
                     topologies)
    for group_id, rec in sorted(events, key=lambda e: (e[1].offsets_partition, e[1].offset)):
        replay.apply(group_id, rec)
    return [{**r, "is_open": r["valid_to"] is None} for r in replay.changed.values()]


class _Replay:
    """The replay's state: the open rows by key, the rows changed so far, the stored rows
    still waiting for their member's metadata, and the members' and topologies' records."""

    def __init__(self, open_rows: Iterable[dict[str, Any]], topic_names: dict[str, str],
                 cluster_id: str, updated_at: datetime,
                 members: dict[tuple[str, str], dict[str, Any]] | None,
                 unfilled_rows: Iterable[dict[str, Any]],
                 topologies: dict[str, dict[str, Any]] | None) -> None:
        self.topic_names, self.cluster_id, self.updated_at = topic_names, cluster_id, updated_at
        self.members = dict(members or {})
        # streams group -> its topology record (type 23) before the events
        self.topologies = dict(topologies or {})
        self.open_by_key: dict[GenKey, dict[str, Any]] = {_key(r): dict(r) for r in open_rows}
        opened = {_interval(r) for r in self.open_by_key.values()}
        self.unfilled: dict[tuple, dict[str, Any]] = {
            _interval(r): dict(r) for r in unfilled_rows
            if r["group_type"] in ("consumer", "streams") and r["client_id"] is None
            and _interval(r) not in opened}
        self.changed: dict[tuple, dict[str, Any]] = {}  # by interval

    def apply(self, group_id: str, rec: LatestRecord) -> None:
        """One group record, in log order."""
        open_by_key, members = self.open_by_key, self.members
        in_group = [k for k in open_by_key if k[0] == group_id]
        if rec.record_type == 2:
            new = {} if rec.is_tombstone else _classic_rows(group_id, rec)
            self.close([k for k in in_group if open_by_key[k]["group_type"] == "classic" and k not in new], rec)
            self.open_(new, rec)
        elif rec.record_type == 8:
            mine = [k for k in in_group if k[2] == rec.subkey and open_by_key[k]["group_type"] == "consumer"]
            info = members.get((group_id, rec.subkey), {})
            new = {} if rec.is_tombstone else _member_rows(group_id, rec, self.topic_names, info)
            self.close([k for k in mine if k not in new], rec)
            self.open_(new, rec)
        elif rec.record_type == 22:
            mine = [k for k in in_group if k[2] == rec.subkey and open_by_key[k]["group_type"] == "streams"]
            info = members.get((group_id, rec.subkey), {})
            new = {} if rec.is_tombstone else _streams_rows(group_id, rec, self.topologies.get(group_id), info)
            self.close([k for k in mine if k not in new], rec)
            self.open_(new, rec)
        elif rec.record_type == 23:
            if rec.value:
                self.topologies[group_id] = rec.value
        elif rec.record_type == 17 and rec.is_tombstone:
            self.close([k for k in in_group if open_by_key[k]["group_type"] == "streams"], rec)
        elif rec.record_type in (5, 19):
            if rec.is_tombstone or not rec.value:
                members.pop((group_id, rec.subkey), None)
            else:
                members[(group_id, rec.subkey)] = rec.value
                self.fill(group_id, rec.subkey, rec.value)
        elif rec.record_type == 3 and rec.is_tombstone:
            self.close([k for k in in_group if open_by_key[k]["group_type"] == "consumer"], rec)

    def fill(self, group_id: str, member_id: str, info: dict[str, Any]) -> None:
        """A member's metadata record fills the KIP-848 rows opened before it."""
        attrs = _member_attrs(info)
        for rows in (self.open_by_key, self.changed, self.unfilled):
            for key, row in list(rows.items()):
                if key[0] == group_id and key[2] == member_id and row["group_type"] in ("consumer", "streams") \
                        and row["client_id"] is None:
                    row.update(attrs, updated_at=self.updated_at)
                    self.changed[_interval(row)] = row

    def close(self, keys: list[GenKey], rec: LatestRecord) -> None:
        for key in keys:
            row = self.open_by_key.pop(key)
            row.update(valid_to=rec.record_timestamp, valid_to_offset=rec.offset, updated_at=self.updated_at)
            self.changed[_interval(row)] = row

    def open_(self, new: dict[GenKey, dict[str, Any]], rec: LatestRecord) -> None:
        for key, attrs in new.items():
            if key in self.open_by_key:
                continue  # same owner, same generation: still the same ownership
            row = {"cluster_id": self.cluster_id, "group_id": key[0], "generation": key[1],
                   "member_id": key[2], "topic": key[3], "partition": key[4], **attrs,
                   "valid_from": rec.record_timestamp, "valid_to": None,
                   "valid_from_offset": rec.offset, "valid_to_offset": None,
                   "offsets_partition": rec.offsets_partition, "updated_at": self.updated_at}
            self.open_by_key[key] = row
            self.changed[_interval(row)] = row
