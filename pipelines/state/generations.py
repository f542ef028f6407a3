"""Ownership history: who owned which partition from which generation/time to which.

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

Each row is one ownership interval: a key (group, generation, member, topic, partition,
group type) is open at most once at a time, and an interval that ends and starts again
under the same generation is a second row, told apart by ``valid_from_offset``. The table
is partitioned by ``is_open``; the replay remembers which partition each stored row is in,
so that the MERGE reads only the partitions its rows are in (the open one, usually).

The replay keeps each row as a list of the columns in :data:`ROW_COLUMNS` (its first six
are its key while open), timestamps as microseconds, and returns the changed rows as an
Arrow table: a group-heavy batch opens and closes a row per member, partition and
rebalance, and a dict per row, three indexes per key, datetimes and a dict-to-Arrow
conversion cost more than the replay itself (benchmarks/group_heavy.py, 2M records: 11.3 ->
5.1 s in all).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa

from pipelines.lake.contracts import contract, stored_column
from pipelines.model import LatestRecord, micros_of

#: The group record types the replay reads (every one, in log order).
REPLAYED_TYPES = (2, 3, 5, 8, 17, 19, 22, 23)
# group, generation, member, topic, partition, group type: a KIP-848 member epoch can equal
# the classic generation the same member id had before an online upgrade (mixed-migrate)
GenKey = tuple[str, int, str, str, int, str]
#: A row's columns, in the order the replay keeps them (cluster_id and updated_at are the
#: same for every row of one replay: they are added as whole columns).
ROW_COLUMNS = ("group_id", "generation", "member_id", "topic", "partition", "group_type",
               "group_instance_id", "client_id", "client_host", "subscribed_topics",
               "valid_from", "valid_to", "valid_from_offset", "valid_to_offset", "offsets_partition")
_CLIENT, _VALID_TO, _VALID_FROM_OFFSET, _VALID_TO_OFFSET = 7, 11, 12, 13
#: after the columns, a row's last cell: the ``is_open`` partition its stored version is in
#: (a row not stored yet says True: no stored row has its interval, so it matches nothing;
#: a row a record replayed again opened names the stored row of its interval, if read)
_STORED = len(ROW_COLUMNS)
#: and after it whether the row is among the changed ones yet
_CHANGED = _STORED + 1
#: the partition column and the change-set column naming where a changed row is stored
STORED_COLUMN = stored_column("is_open")
# a row's attributes: group_instance_id, client_id, client_host, subscribed_topics
Attrs = tuple[Any, Any, Any, Any]
Row = list[Any]


def _classic_rows(group_id: str, rec: LatestRecord) -> dict[GenKey, Attrs]:
    value = rec.value or {}
    generation = value.get("generation", 0)
    rows = {}
    for m in value.get("members") or ():
        sub = m.get("subscription") if isinstance(m.get("subscription"), dict) else {}
        asg = m.get("assignment") if isinstance(m.get("assignment"), dict) else {}
        attrs = (m.get("group_instance_id"), m.get("client_id"), m.get("client_host"), sub.get("topics"))
        member_id = m["member_id"]
        owned = [(tp["topic"], p) for tp in asg.get("assigned_partitions") or () for p in tp["partitions"]]
        for topic, partition in owned or [("", -1)]:
            rows[(group_id, generation, member_id, topic, partition, "classic")] = attrs
    return rows


def _member_attrs(member: dict[str, Any]) -> Attrs:
    return (member.get("instance_id"), member.get("client_id"), member.get("client_host"),
            member.get("subscribed_topic_names"))


def _member_rows(group_id: str, rec: LatestRecord, topic_names: dict[str, str],
                 attrs: Attrs) -> dict[GenKey, Attrs]:
    value = rec.value or {}
    epoch = value.get("member_epoch", 0)
    # a partition pending revocation is still the member's until it acknowledges the
    # revocation (it commits it first): owned until a later assignment drops it
    held = [*(value.get("assigned_partitions") or ()), *(value.get("partitions_pending_revocation") or ())]
    owned = [(topic_names.get(tp["topic_id"], tp["topic_id"]), p) for tp in held for p in tp["partitions"]]
    member_id = rec.subkey
    return {(group_id, epoch, member_id, topic, partition, "consumer"): attrs
            for topic, partition in owned or [("", -1)]}


def _streams_rows(group_id: str, rec: LatestRecord, topology: dict[str, Any] | None,
                  attrs: Attrs) -> dict[GenKey, Attrs]:
    """A streams member's active tasks (pending revocation included) as the source-topic
    partitions they read: task (subtopology s, partition p) reads partition p of every
    source and repartition-source topic of s (from the group's topology record)."""
    value = rec.value or {}
    epoch = value.get("member_epoch", 0)
    subtopologies = {st.get("subtopology_id"): st for st in (topology or {}).get("subtopologies") or ()}
    owned = []
    for task in [*(value.get("active_tasks") or ()), *(value.get("active_tasks_pending_revocation") or ())]:
        st = subtopologies.get(task.get("subtopology_id")) or {}
        topics = [*(st.get("source_topics") or ()),
                  *(t.get("name") for t in st.get("repartition_source_topics") or () if t.get("name"))]
        owned += [(t, p) for t in topics for p in task.get("partitions") or ()]
    return {(group_id, epoch, rec.subkey, topic, partition, "streams"): attrs
            for topic, partition in sorted(set(owned)) or [("", -1)]}


def stored_rows(table: pa.Table | None) -> list[Row]:
    """``group_generations`` rows read from the lake, as the replay keeps them (timestamps
    as microseconds, :func:`pipelines.model.micros_of`; the partition they are in last)."""
    if table is None or not table.num_rows:
        return []
    columns = [table.column(c) for c in ROW_COLUMNS]
    columns = [micros_of(c) if pa.types.is_timestamp(c.type) else c for c in columns]
    columns.append(table.column("is_open"))
    return [[*r, False] for r in zip(*(c.to_pylist() for c in columns), strict=True)]


def interval(row: Row) -> tuple:
    """A row's identity in the table: its key and where it started."""
    return (*row[:6], row[_VALID_FROM_OFFSET])


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def micros(stamp: datetime | int | None) -> int | None:
    """A timestamp as microseconds since the epoch (naive means UTC, as in Arrow)."""
    if stamp is None or isinstance(stamp, int):
        return stamp
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return (stamp - _EPOCH) // _MICROSECOND


def generation_changes(
    open_rows: pa.Table | None,
    events: Iterable[tuple[str, LatestRecord]],
    topic_names: dict[str, str],
    cluster_id: str,
    updated_at: datetime,
    members: dict[tuple[str, str], dict[str, Any]] | None = None,
    unfilled_rows: pa.Table | None = None,
    topologies: dict[str, dict[str, Any]] | None = None,
) -> pa.Table:
    """Rows to upsert into ``group_generations`` after replaying ``events`` in log order,
    each with the partition its stored version is in (:data:`STORED_COLUMN`).

    ``open_rows`` are the currently open rows (valid_to null) of the groups in ``events``;
    ``members`` maps (group, member id) to the KIP-848 member metadata (client id, host...)
    *before* the events (it is updated by the type-5 events); ``unfilled_rows`` are stored
    KIP-848 rows of those groups still without member metadata (client id null).
    """
    replay = _Replay(stored_rows(open_rows), topic_names, members, stored_rows(unfilled_rows), topologies)
    events = sorted(events, key=lambda e: (e[1].offsets_partition, e[1].offset))
    if replay.may_share_intervals(events):
        replay.by_interval = {}
    for group_id, rec in events:
        replay.apply(group_id, rec)
    rows = replay.changed if replay.by_interval is None else list(replay.by_interval.values())
    return changes_table(rows, cluster_id, updated_at)


def changes_table(rows: list[Row], cluster_id: str, updated_at: datetime) -> pa.Table:
    """The replay's rows as a ``group_generations`` table, column by column, and the
    partition each one's stored version is in (:data:`STORED_COLUMN`)."""
    schema = contract("group_generations").arrow_schema
    if not rows:
        return schema.empty_table().append_column(STORED_COLUMN, pa.array([], pa.bool_()))
    columns = dict(zip((*ROW_COLUMNS, STORED_COLUMN), _transposed(rows), strict=True))
    n = len(rows)
    columns["cluster_id"], columns["updated_at"] = [cluster_id] * n, [micros(updated_at)] * n
    columns["is_open"] = [to is None for to in columns["valid_to"]]
    table = pa.Table.from_arrays([pa.array(columns[f.name], f.type) for f in schema], schema=schema)
    return table.append_column(STORED_COLUMN, pa.array(columns[STORED_COLUMN], pa.bool_()))


def stored_change_set(rows: list[dict[str, Any]], ops: list[str]) -> pa.Table:
    """Stored rows (read from the lake, ``is_open`` included) as a change set that names
    the partition each is in (renamed topics: the old key deleted, the new one upserted)."""
    table = contract("group_generations").change_set(rows, ops)
    return table.append_column(STORED_COLUMN, pa.array([r["is_open"] for r in rows], pa.bool_()))


def _transposed(rows: list[Row], step: int = 1024) -> list[list[Any]]:
    """The rows' cells column by column, ``step`` rows at a time.

    Why in chunks: the replay's rows lie scattered in memory (opened and closed all through
    a batch), and a list comprehension per column visits every row once per column, a cache
    miss each time. ``zip`` transposes a chunk while its rows are still cached: 5x faster on
    a group-heavy batch (379k rows: 0.63 -> 0.13 s)."""
    columns: list[list[Any]] = [[] for _ in range(_CHANGED + 1)]
    for start in range(0, len(rows), step):
        for column, cells in zip(columns, zip(*rows[start:start + step], strict=True), strict=True):
            column.extend(cells)
    return columns[:_STORED + 1]


class _Replay:
    """The replay's state: the open rows of each group's classic generation and of each
    KIP-848/streams member, the rows changed so far, the rows waiting for their member's
    metadata, and the members' and topologies' records. One record costs what the rows it
    touches cost, not its group's or the whole batch's."""

    def __init__(self, open_rows: list[Row], topic_names: dict[str, str],
                 members: dict[tuple[str, str], dict[str, Any]] | None,
                 unfilled_rows: list[Row], topologies: dict[str, dict[str, Any]] | None) -> None:
        self.topic_names = topic_names
        self.members = dict(members or {})
        # streams group -> its topology record (type 23) before the events
        self.topologies = dict(topologies or {})
        # group -> open classic rows by key; (group, group type) -> member -> open rows by key
        self.classic: dict[str, dict[GenKey, Row]] = {}
        self.by_member: dict[tuple[str, str], dict[str, dict[GenKey, Row]]] = {}
        # the rows changed so far, in the order of their first change (each marked _CHANGED);
        # or, when two rows may be one interval, by interval (the later change wins, as
        # the MERGE must see each interval once): see may_share_intervals
        self.changed: list[Row] = []
        self.by_interval: dict[tuple, Row] | None = None
        # (group, member) -> KIP-848/streams rows without the member's metadata yet
        self.waiting: dict[tuple[str, str], list[Row]] = {}
        # where each stored row the replay reads is, by interval: a record replayed again
        # reopens a stored interval, and its row must name the partition the MERGE finds it in
        self.stored_at = {interval(row): row[_STORED] for row in (*unfilled_rows, *open_rows)}
        opened = set()
        for row in open_rows:
            key = tuple(row[:6])
            self._scope(key)[key] = row
            opened.add(interval(row))
            self._wait(row)
        unfilled = [row for row in unfilled_rows if interval(row) not in opened]
        for row in unfilled:
            self._wait(row)
        # stored rows that are one interval (the lake holds it twice)
        self.stored_twice = len(opened) < len(open_rows) or len({interval(r) for r in unfilled}) < len(unfilled)

    def may_share_intervals(self, events: list[tuple[str, LatestRecord]]) -> bool:
        """Whether two changed rows may be one interval: a record replayed again reopens a
        stored row's (its offset is a stored row's start), records of one group come from
        two offsets partitions (their offsets may meet), or the lake holds an interval
        twice (a record that comes twice opens nothing the second time). Then the rows are
        kept by interval; else in a list, with no key built per row (a group-heavy batch
        changes ~1M rows)."""
        if self.stored_twice:
            return True
        starts = {key[-1] for key in self.stored_at}
        partition_of: dict[str, int] = {}
        for group_id, rec in events:
            if rec.offset in starts or partition_of.setdefault(group_id, rec.offsets_partition) != rec.offsets_partition:
                return True
        return False

    def _change(self, row: Row) -> None:
        """Count ``row`` among the changed rows."""
        if self.by_interval is not None:
            self.by_interval[interval(row)] = row
        elif not row[_CHANGED]:
            row[_CHANGED] = True
            self.changed.append(row)

    def _scope(self, key: GenKey) -> dict[GenKey, Row]:
        """The open rows a key belongs with: its group's classic generation, or its member's."""
        if key[5] == "classic":
            return self.classic.setdefault(key[0], {})
        return self.by_member.setdefault((key[0], key[5]), {}).setdefault(key[2], {})

    def _wait(self, row: Row) -> None:
        if row[_CLIENT] is None and row[5] in ("consumer", "streams"):
            self.waiting.setdefault((row[0], row[2]), []).append(row)

    def apply(self, group_id: str, rec: LatestRecord) -> None:
        """One group record, in log order."""
        kind = rec.record_type
        if kind == 2:
            mine = self.classic.setdefault(group_id, {})
            self.replace(mine, {} if rec.is_tombstone else _classic_rows(group_id, rec), rec)
        elif kind in (8, 22):
            group_type = "consumer" if kind == 8 else "streams"
            mine = self.by_member.setdefault((group_id, group_type), {}).setdefault(rec.subkey, {})
            if rec.is_tombstone:
                new = {}
            else:
                attrs = _member_attrs(self.members.get((group_id, rec.subkey), {}))
                new = _member_rows(group_id, rec, self.topic_names, attrs) if kind == 8 else \
                    _streams_rows(group_id, rec, self.topologies.get(group_id), attrs)
            self.replace(mine, new, rec)
        elif kind == 23:
            if rec.value:
                self.topologies[group_id] = rec.value
        elif kind in (5, 19):
            if rec.is_tombstone or not rec.value:
                self.members.pop((group_id, rec.subkey), None)
            else:
                self.members[(group_id, rec.subkey)] = rec.value
                self.fill(group_id, rec.subkey, rec.value)
        elif (kind == 3 or kind == 17) and rec.is_tombstone:
            for mine in self.by_member.pop((group_id, "consumer" if kind == 3 else "streams"), {}).values():
                self.replace(mine, {}, rec)

    def replace(self, mine: dict[GenKey, Row], new: dict[GenKey, Attrs], rec: LatestRecord) -> None:
        """Close the open rows of ``mine`` the record no longer holds, open its new ones (a
        key already open stays open: same owner, same generation, same ownership)."""
        stamp, offset, partition = micros(rec.record_timestamp), rec.offset, rec.offsets_partition
        changed, by_interval = self.changed, self.by_interval
        for key in [k for k in mine if k not in new]:
            row = mine.pop(key)
            row[_VALID_TO], row[_VALID_TO_OFFSET] = stamp, offset
            # _change, inlined: a group-heavy batch closes ~half a million rows
            if by_interval is not None:
                by_interval[(*key, row[_VALID_FROM_OFFSET])] = row
            elif not row[_CHANGED]:
                row[_CHANGED] = True
                changed.append(row)
        for key, attrs in new.items():
            if key in mine:
                continue
            if by_interval is None:  # no stored row has the interval (may_share_intervals)
                mine[key] = row = [*key, *attrs, stamp, None, offset, None, partition, True, True]
                changed.append(row)
            else:
                at = (*key, offset)
                row = [*key, *attrs, stamp, None, offset, None, partition, self.stored_at.get(at, True), True]
                mine[key] = by_interval[at] = row
            if attrs[1] is None:  # its member's client id (the rows _wait keeps)
                self._wait(row)

    def fill(self, group_id: str, member_id: str, info: dict[str, Any]) -> None:
        """A member's metadata record fills the KIP-848 rows opened before it."""
        attrs = _member_attrs(info)
        waiting = self.waiting.pop((group_id, member_id), [])
        for row in waiting:
            if row[_CLIENT] is None:
                row[6:10] = attrs
                self._change(row)
        still = [row for row in waiting if row[_CLIENT] is None]
        if still:  # metadata without a client id: the rows wait for the next record
            self.waiting[(group_id, member_id)] = still
