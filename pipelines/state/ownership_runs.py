"""The ownership replay of ``group_generations`` (:mod:`pipelines.state.generations` says
what the rows mean) as runs of records, column by column.

A *scope* is a classic group's generations, or one KIP-848/streams member's assignments.
Each record of a scope holds a set of keys (generation, member, topic, partition), and a
key's row opens at the first of a run of the scope's consecutive records that hold it and
closes at the scope's next record. So each record's keys are listed once, as flat columns,
and the rows fall out of one sort of them. A row opened without its member's client id
takes it from the member's next metadata records (:meth:`_Listing.fill`).

Why: the record-by-record replay this replaced kept a Python row and a dict entry per open
key and touched them at every record of the scope; on a group-heavy batch (560k records, a
948k-row change set; ``benchmarks/state_step.py``) it took 3.2 s of the driver's CPU, this
2.6 s. Its rows are the oracle of ``tests/test_generations_replay.py``.

Where two changed rows may be one interval (a record replayed again by another query over
the same log, a group's records in two offsets partitions, an interval the lake holds
twice), each interval's row is the one changed last, as a MERGE must see each once.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import contract, stored_column
from pipelines.model import GROUP_SCHEMA, GroupColumns, micros
from pipelines.state.held_keys import (
    Attrs,
    KeyGroups,
    Owned,
    assignment_keys,
    classic_key_groups,
    key_columns,
    member_attrs,
    streams_owned,
)
from pipelines.state.key_ids import key_ids

#: the change-set column naming the ``is_open`` partition a changed row is stored in
STORED_COLUMN = stored_column("is_open")
_NONE: Attrs = (None, None, None, None)
ATTR_COLUMNS = ("group_instance_id", "client_id", "client_host", "subscribed_topics")
#: the group types whose rows wait for their member's metadata record (classic rows carry theirs)
WAITING_TYPES = ("consumer", "streams")
_STAMP = pa.timestamp("us", tz="UTC")


def replay_runs(open_rows: pa.Table | None, events: GroupColumns,
                topic_names: dict[str, str], cluster_id: str, updated_at: datetime,
                members: dict[tuple[str, str], dict[str, Any]] | None = None,
                unfilled_rows: pa.Table | None = None,
                topologies: dict[str, dict[str, Any]] | None = None) -> pa.Table:
    """Rows to upsert into ``group_generations`` after replaying ``events`` (see
    :func:`pipelines.state.generations.generation_changes`)."""
    stored = _Stored.of(open_rows, unfilled_rows)
    listing = _Listing(topic_names, members, topologies)
    listing.add_stored(stored)
    listing.add_events(events, stored)
    return listing.changes(stored, cluster_id, updated_at)


class _Stored:
    """The stored rows the replay reads: the open ones (first), then those still waiting for
    their member's metadata that are not open; where each stored interval is; the log
    positions (offsets partition, offset) that start one (``starts``) and each group's
    offsets partition (``partition_of``; ``twice`` if a group's rows name two)."""

    def __init__(self, table: pa.Table, opened: int, at: dict[tuple, bool], twice: bool,
                 places: list[tuple[str, int, int]]) -> None:
        self.table, self.opened, self.at = table, opened, at
        self.starts = {(partition, offset) for _, partition, offset in places}
        self.partition_of: dict[str, int] = {}
        for group_id, partition, _ in places:
            twice = twice or self.partition_of.setdefault(group_id, partition) != partition
        self.twice = twice
        self.columns = {c: table.column(c).to_pylist() for c in
                        ("group_id", "group_type", "generation", "member_id", "topic", "partition", "client_id")}

    @classmethod
    def of(cls, open_rows: pa.Table | None, unfilled_rows: pa.Table | None) -> _Stored:
        schema = contract("group_generations").arrow_schema
        tables = [schema.empty_table() if t is None else t.select(schema.names).cast(schema)
                  for t in (open_rows, unfilled_rows)]
        opened, waiting = _intervals(tables[0]), _intervals(tables[1])
        # the partition each stored interval is in (an open row's, if one is)
        at = dict(zip(waiting, tables[1].column("is_open").to_pylist(), strict=True)) | \
            dict(zip(opened, tables[0].column("is_open").to_pylist(), strict=True))
        known = set(opened)
        keep = [i for i, interval in enumerate(waiting) if interval not in known]
        twice = len(known) < len(opened) or len({waiting[i] for i in keep}) < len(keep)
        table = pa.concat_tables([tables[0], tables[1].take(pa.array(keep, pa.int64()))])
        every = pa.concat_tables(tables)
        places = list(zip(*(every.column(c).to_pylist() for c in ("group_id", "offsets_partition", "valid_from_offset")),
                          strict=True))
        return cls(table, len(opened), at, twice, places)


#: a row's identity in the table: its key and where it started
INTERVAL = ("group_id", "generation", "member_id", "topic", "partition", "group_type", "valid_from_offset")


def _intervals(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(c).to_pylist() for c in INTERVAL), strict=True)) if table.num_rows else []


class _Listing:
    """The records of every scope in log order, and the keys each holds, as flat lists.

    A scope's *record* here is one of its assignment records, a group tombstone closing it,
    or (event -1) its stored open rows; the keys of record ``r`` are the entries with
    groups with ``group_at == r``. The stored open rows' keys come first, one per stored row,
    in order."""

    def __init__(self, topic_names: dict[str, str], members: dict | None, topologies: dict | None) -> None:
        self.names = topic_names
        self.members = dict(members or {})
        self.topologies = dict(topologies or {})
        self.scope_of: dict[tuple[str, str, str], int] = {}
        self.scope_key: list[tuple[str, str, str]] = []  # (group, group type, member or "")
        self.member_scopes: dict[tuple[str, str], list[int]] = {}  # (group, type) -> live scopes
        self.at_scope: list[int] = []  # per record: its scope
        self.at_event: list[int] = []  # per record: its event (-1: the stored rows)
        self.stamp: list[int | None] = []  # per event
        self.offset: list[int] = []
        self.partition: list[int] = []
        # per group of keys (a member's in one record): its record, generation, member,
        # attrs (index into ``attrs``) and how many keys; every key's (topic, partition)
        self.group_at: list[int] = []
        self.gen: list[int] = []
        self.member: list[str] = []
        self.attr: list[int] = []
        self.count: list[int] = []
        self.key_topic: list[str] = []
        self.key_partition: list[int] = []
        self.owned_of: dict[int, tuple] = {}  # id of an assignment value -> its listing (assignment_keys)
        self.attrs: list[Attrs] = [_NONE]
        self.attr_of: dict[int, int] = {}  # id of a member's metadata value -> its attrs
        self.kept: list[Any] = []  # those values, alive while their ids are used
        # (group, member) -> the events of its metadata records and their attrs
        self.meta: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        # per classic record with a value: its record, its row of the events and how many
        # groups of keys the lists above held then (its members' groups go there)
        self.classic_at: list[int] = []
        self.classic_row: list[int] = []
        self.classic_after: list[int] = []
        self.events = GROUP_SCHEMA.empty_table()  # the events, in log order
        self._classic_attrs: list[pa.Array] = []
        self._key_groups: KeyGroups | None = None
        self._attr_columns: list[pa.Array] | None = None
        self._event_columns: dict[str, pa.Array] = {}
        self.shared = False

    def _scope(self, group_id: str, group_type: str, member_id: str) -> int:
        key = (group_id, group_type, member_id)
        scope = self.scope_of.get(key)
        if scope is None:
            scope = self.scope_of[key] = len(self.scope_key)
            self.scope_key.append(key)
            if group_type != "classic":
                self.member_scopes.setdefault((group_id, group_type), []).append(scope)
        return scope

    def _record(self, scope: int, event: int) -> int:
        self.at_scope.append(scope)
        self.at_event.append(event)
        return len(self.at_scope) - 1

    def _keys(self, at: int, generation: int, member_id: str, owned: Owned, attr: int) -> None:
        """A group of keys: the partitions ``owned`` holds, held by one member of record ``at``."""
        self.group_at.append(at)
        self.gen.append(generation)
        self.member.append(member_id)
        self.attr.append(attr)
        self.count.append(len(owned[0]))
        self.key_topic.extend(owned[0])
        self.key_partition.extend(owned[1])

    def _member_attr(self, info: dict[str, Any] | None) -> int:
        if not info:
            return 0
        attr = self.attr_of.get(id(info))
        if attr is None:
            attr = self.attr_of[id(info)] = len(self.attrs)
            self.attrs.append(member_attrs(info))
            self.kept.append(info)
        return attr

    def add_stored(self, stored: _Stored) -> None:
        """The stored open rows' keys, under one record per scope before any event."""
        c = stored.columns
        records: dict[int, int] = {}
        for i in range(stored.opened):
            group_type = c["group_type"][i]
            scope = self._scope(c["group_id"][i], group_type, "" if group_type == "classic" else c["member_id"][i])
            at = records.get(scope)
            if at is None:
                at = records[scope] = self._record(scope, -1)
            self._keys(at, c["generation"][i], c["member_id"][i], ([c["topic"][i]], [c["partition"][i]]), 0)

    def add_events(self, events: GroupColumns, stored: _Stored) -> None:
        """Every record in log order. Notes whether two changed rows may be one interval
        (``shared``): a record replayed again (its log position starts a stored row), a
        group's records (or stored rows) in two offsets partitions (their offsets may meet)
        or an interval the lake holds twice. By position, not offset alone: an offset of one
        partition starting a stored row of another made every batch after the first look
        replayed (~0.4 s of a group-heavy batch's replay for nothing). The usual records'
        steps are inlined: this runs once per group record, over the columns' values (no
        object per record)."""
        partition_of = dict(stored.partition_of)
        starts = stored.starts
        start_offsets = {offset for _, offset in starts}
        self.shared = stored.twice
        stamps, offsets, partitions = self.stamp, self.offset, self.partition
        scope_of, at_scope, at_event = self.scope_of, self.at_scope, self.at_event
        members, owned_of, names, attr_of = self.members, self.owned_of, self.names, self.attr_of
        group_at, gens, member, attrs, count = self.group_at, self.gen, self.member, self.attr, self.count
        key_topic, key_partition = self.key_topic, self.key_partition
        events = events.in_log_order()  # one cluster's: by offsets partition and offset
        self.events = events.table
        classic_at, classic_row, classic_after = self.classic_at, self.classic_row, self.classic_after
        columns = (events.table.column(n).to_pylist() for n in _EVENT_COLUMNS)
        for group_id, kind, subkey, tombstone, partition, offset, stamp, value in zip(*columns, events.values,
                                                                                     strict=True):
            if (offset in start_offsets and (partition, offset) in starts) or \
                    partition_of.setdefault(group_id, partition) != partition:
                self.shared = True
            event = len(stamps)
            stamps.append(stamp)
            offsets.append(offset)
            partitions.append(partition)
            if kind == 8:
                scope = scope_of.get((group_id, "consumer", subkey))
                if scope is None:
                    scope = self._scope(group_id, "consumer", subkey)
                at = len(at_scope)
                at_scope.append(scope)
                at_event.append(event)
                if not tombstone:
                    # keyed by the value object, which the events keep alive (its id is its own)
                    listed = owned_of.get(id(value)) if value else None
                    if listed is None:
                        listed = assignment_keys(value or {}, names)
                        if value:
                            owned_of[id(value)] = listed
                    epoch, topics, numbers = listed
                    info = members.get((group_id, subkey))
                    attr = attr_of.get(id(info), -1) if info else 0
                    group_at.append(at)
                    gens.append(epoch)
                    member.append(subkey)
                    attrs.append(attr if attr >= 0 else self._member_attr(info))
                    count.append(len(topics))
                    key_topic.extend(topics)
                    key_partition.extend(numbers)
            elif kind == 5 or kind == 19:
                self._metadata(group_id, subkey, None if tombstone else value, event)
            elif kind == 2:  # a classic generation: its members are listed from columns (_classic_groups)
                scope = scope_of.get((group_id, "classic", ""))
                if scope is None:
                    scope = self._scope(group_id, "classic", "")
                if not tombstone:
                    classic_at.append(len(at_scope))
                    classic_row.append(event)
                    classic_after.append(len(group_at))
                at_scope.append(scope)
                at_event.append(event)
            elif kind == 22:
                self._streams(group_id, subkey, None if tombstone else value or {}, event)
            elif kind == 23:
                if value:
                    self.topologies[group_id] = value
            elif (kind == 3 or kind == 17) and tombstone:  # the group is gone: every member's rows close
                for scope in self.member_scopes.pop((group_id, "consumer" if kind == 3 else "streams"), ()):
                    self._record(scope, event)
                    del scope_of[self.scope_key[scope]]

    def _streams(self, group_id: str, member_id: str, value: dict[str, Any] | None, event: int) -> None:
        """A streams member's assignment (``value``; None: its tombstone)."""
        at = self._record(self._scope(group_id, "streams", member_id), event)
        if value is None:
            return
        attr = self._member_attr(self.members.get((group_id, member_id)))
        owned = streams_owned(value, self.topologies.get(group_id))
        self._keys(at, value.get("member_epoch", 0), member_id, key_columns(owned), attr)

    def _metadata(self, group_id: str, member_id: str, value: dict[str, Any] | None, event: int) -> None:
        """A KIP-848/streams member's metadata (``value``; None or empty: the member left)."""
        if not value:
            self.members.pop((group_id, member_id), None)
            return
        self.members[(group_id, member_id)] = value
        events, attrs = self.meta.setdefault((group_id, member_id), ([], []))
        events.append(event)
        attrs.append(self._member_attr(value))

    def key_groups(self) -> KeyGroups:
        """Every group of keys in listing order: those the lists hold, and each classic
        record's members' (:meth:`_classic_groups`) where the record was replayed."""
        if self._key_groups is None:
            listed = KeyGroups(np.array(self.group_at, np.int64), np.array(self.gen, np.int64),
                                pa.array(self.member, pa.string()), np.array(self.attr, np.int64),
                                np.array(self.count, np.int64), pa.array(self.key_topic, pa.string()),
                                np.array(self.key_partition, np.int64))
            classic, after = self._classic_groups()
            self._key_groups = listed.merged(classic, after)
        return self._key_groups

    def _classic_groups(self) -> tuple[KeyGroups, np.ndarray]:
        """The classic records' groups of keys (:func:`classic_key_groups`), their members'
        attrs after every other; and per group how many other groups precede it."""
        groups, owner, self._classic_attrs = classic_key_groups(
            self.events, np.array(self.classic_row, np.int64), np.array(self.classic_at, np.int64), len(self.attrs))
        return groups, np.array(self.classic_after, np.int64)[owner]

    def fill(self, group_id: str, member_id: str, after: int) -> tuple[int, int, int] | None:
        """The attrs a row waiting for its member's metadata since event ``after`` ends with,
        and the events of the first and the last record that filled it (None: none did):
        each metadata record after it fills it in, until one gives it a client id."""
        meta = self.meta.get((group_id, member_id))
        if meta is None:
            return None
        events, attrs = meta
        i = bisect_right(events, after)
        if i == len(events):
            return None
        first = events[i]
        while self.attrs[attrs[i]][1] is None and i + 1 < len(events):
            i += 1
        return attrs[i], first, events[i]

    def changes(self, stored: _Stored, cluster_id: str, updated_at: datetime) -> pa.Table:
        """The changed rows as a ``group_generations`` change set (:data:`STORED_COLUMN`
        included): the new rows in the order they opened, then the stored rows in the order
        they were first changed; where two may be one interval, the one changed last.

        Of two rows that start at one offset (the order a reader of the change set depends
        on: ``last_ended`` keeps the later of two ended rows of a key that start at one
        offset) that is the order the record-by-record replay changed them in: a stored row
        and a new one start at one offset only where a record is replayed again."""
        runs = _Runs(self)
        new_attr, new_last = runs.attr.copy(), np.maximum(2 * runs.opened + 1, 2 * runs.closed)
        for j in np.flatnonzero(runs.waiting(self)):
            group_id = self.scope_key[runs.scope[j]][0]
            filled = self.fill(group_id, runs.member[int(runs.first[j])].as_py(), int(runs.opened[j]))
            if filled is not None:
                new_attr[j], new_last[j] = filled[0], max(new_last[j], 2 * filled[2])
        closed = np.full(len(stored.table), -1, np.int64)
        closed[runs.closed_stored] = runs.closed_at
        attr, first, last = self._stored_fills(stored, closed)
        changed = np.flatnonzero(first >= 0)
        changed = changed[np.argsort(first[changed], kind="stable")]
        table = pa.concat_tables([runs.table(self, new_attr, stored.at if self.shared else None),
                                  self._stored_table(stored, changed, closed[changed], attr[changed])])
        if self.shared:  # of the rows of one interval, the one changed last
            listed = np.r_[runs.first + len(stored.table), changed]  # a fill reaches stored rows first
            table = _last_per_interval(table, np.r_[new_last, last[changed]], listed)
        n = table.num_rows
        schema = contract("group_generations").arrow_schema
        table = table.set_column(schema.get_field_index("cluster_id"), schema.field("cluster_id"),
                                 pa.repeat(pa.scalar(cluster_id, pa.string()), n))
        stamp = pa.scalar(micros(updated_at), pa.int64()).cast(_STAMP)
        return table.set_column(schema.get_field_index("updated_at"), schema.field("updated_at"),
                                pa.repeat(stamp, n))

    def _stored_fills(self, stored: _Stored, closed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per stored row, the attrs the batch's metadata records fill it in with (-1: none),
        and when the batch first and last changes it (closes or fills it): events, the last
        as ``2 * event`` (-1: not changed)."""
        attr = np.full(len(stored.table), -1, np.int64)
        first, last = closed.copy(), np.where(closed < 0, -1, 2 * closed)
        c = stored.columns
        for i in range(len(stored.table)):
            if c["client_id"][i] is None and c["group_type"][i] in WAITING_TYPES:
                filled = self.fill(c["group_id"][i], c["member_id"][i], -1)
                if filled is not None:
                    attr[i] = filled[0]
                    first[i] = filled[1] if first[i] < 0 else min(first[i], filled[1])
                    last[i] = max(last[i], 2 * filled[2])
        return attr, first, last

    def attr_columns(self) -> list[pa.Array]:
        """The four attribute columns (:data:`ATTR_COLUMNS`) of every attrs, built once."""
        if self._attr_columns is None:
            self.key_groups()  # the classic members' attrs follow the others
            schema = contract("group_generations").arrow_schema
            self._attr_columns = [pa.array([a[i] for a in self.attrs], schema.field(name).type)
                                  for i, name in enumerate(ATTR_COLUMNS)]
            if self._classic_attrs:
                self._attr_columns = [pa.concat_arrays([column, classic.cast(column.type)]) for column, classic
                                      in zip(self._attr_columns, self._classic_attrs, strict=True)]
        return self._attr_columns

    def attrs_table(self, picked: np.ndarray) -> list[pa.Array]:
        """The four attribute columns of the attrs ``picked``."""
        take = pa.array(picked, pa.int64())
        return [column.take(take) for column in self.attr_columns()]

    def event_column(self, name: str, events: np.ndarray, type_: pa.DataType) -> pa.Array:
        """Per-event column ``name`` (stamp, offset, partition) at ``events`` (-1: null)."""
        column = self._event_columns.get(name)
        if column is None:
            column = self._event_columns[name] = pa.array(getattr(self, name), pa.int64())
        return column.take(pa.array(np.where(events < 0, 0, events), mask=events < 0)).cast(type_)

    def _stored_table(self, stored: _Stored, rows: np.ndarray, closed_at: np.ndarray,
                      attr: np.ndarray) -> pa.Table:
        """The stored rows ``rows`` with the batch's changes: closed at event ``closed_at``
        (-1: not closed), attributes from attrs ``attr`` (-1: as stored)."""
        schema = contract("group_generations").arrow_schema
        table = stored.table.take(pa.array(rows, pa.int64()))
        was_open = table.column("is_open")
        closing = pa.array(closed_at >= 0)
        for name, values in (("valid_to", "stamp"), ("valid_to_offset", "offset")):
            i = schema.get_field_index(name)
            fresh = self.event_column(values, closed_at, schema.field(name).type)
            table = table.set_column(i, schema.field(name), pc.if_else(closing, fresh, table.column(i)))
        filling = pa.array(attr >= 0)
        fresh_attrs = self.attrs_table(np.where(attr < 0, 0, attr))
        for name, fresh in zip(ATTR_COLUMNS, fresh_attrs, strict=True):
            i = schema.get_field_index(name)
            table = table.set_column(i, schema.field(name), pc.if_else(filling, fresh, table.column(i)))
        i = schema.get_field_index("is_open")
        table = table.set_column(i, schema.field("is_open"), pc.is_null(table.column("valid_to")))
        return table.append_column(STORED_COLUMN, was_open)


class _Runs:
    """The rows a listing's keys make: per run of a scope's consecutive records holding a
    key, one row, opened at the run's first record and closed at the scope's next one.

    Of the runs that start at an event (new rows): ``first`` (the key entry whose columns
    the row takes), ``opened`` and ``closed`` (events; -1: still open) and ``attr``; of those
    that start at the stored rows and end in the batch: ``closed_stored`` (stored rows) and
    ``closed_at`` (events)."""

    def __init__(self, listing: _Listing) -> None:
        at_scope = np.array(listing.at_scope, np.int64)
        at_event = np.array(listing.at_event, np.int64)
        ordinal, next_at = _ordinals(at_scope)
        groups = listing.key_groups()
        # each key's group of keys, and that group's record
        self.group = np.repeat(np.arange(len(groups.count)), groups.count)
        key_at = groups.group_at[self.group]
        self.topic = groups.key_topic
        self.member = groups.member.take(pa.array(self.group))
        scope, place = at_scope[key_at], ordinal[key_at]
        self.gen = groups.gen[self.group]
        self.partition = groups.key_partition
        key = key_ids([pa.array(scope), pa.array(self.gen), self.member, self.topic, pa.array(self.partition)])[0]
        # by key, then place; of equal rows the earlier first (one radix sort of an int64)
        order = np.argsort(key * (int(place.max()) + 1 if len(place) else 1) + place, kind="stable")
        key, place = key[order], place[order]
        same_key = np.r_[False, key[1:] == key[:-1]][:len(key)]
        repeat = same_key & (np.r_[-1, place[:-1]] == place)  # a key a record lists twice
        last = np.r_[~repeat[1:], True][:len(repeat)]  # the last listing of a key in its record: its attrs win
        attr = groups.attr[self.group][order][last]
        # the row a stored key is: the later of two stored rows of one key (as the record
        # by record replay holds it; a renamed topic id can make two)
        stored_entry = order[last]
        entry, same_key, place = order[~repeat], same_key[~repeat], place[~repeat]
        starts = np.flatnonzero(~same_key | (np.r_[-2, place[:-1]] + 1 != place))
        ends = np.r_[starts[1:] - 1, len(entry) - 1][:len(starts)]
        closing = next_at[key_at[entry[ends]]]
        closed = np.where(closing < 0, -1, at_event[np.where(closing < 0, 0, closing)])
        opened = at_event[key_at[entry[starts]]]
        fresh = opened >= 0
        by_opening = np.argsort(entry[starts][fresh], kind="stable")  # keys are listed in log order
        self.first = entry[starts][fresh][by_opening]
        self.opened, self.closed = opened[fresh][by_opening], closed[fresh][by_opening]
        self.attr = attr[starts][fresh][by_opening]
        self.scope = scope[self.first]
        ended = ~fresh & (closed >= 0)
        self.closed_stored, self.closed_at = stored_entry[starts][ended], closed[ended]

    def waiting(self, listing: _Listing) -> np.ndarray:
        """Which new rows wait for their member's metadata (no client id yet)."""
        client = listing.attr_columns()[ATTR_COLUMNS.index("client_id")]
        waits = np.array([k[1] in WAITING_TYPES for k in listing.scope_key], bool)
        return client.is_null().to_numpy(zero_copy_only=False)[self.attr] & waits[self.scope]

    def table(self, listing: _Listing, attr: np.ndarray, stored_at: dict[tuple, bool] | None) -> pa.Table:
        """The new rows as ``group_generations`` rows (cluster and update time left empty),
        each naming the partition its interval is stored in (``stored_at``; None: none is)."""
        schema = contract("group_generations").arrow_schema
        n = len(self.first)
        first = pa.array(self.first, pa.int64())
        scopes = pa.array(self.scope, pa.int64())
        instance, client, host, subscribed = listing.attrs_table(attr)
        columns = {
            "cluster_id": pa.nulls(n, pa.string()),
            "group_id": pa.array([k[0] for k in listing.scope_key], pa.string()).take(scopes),
            "group_type": pa.array([k[1] for k in listing.scope_key], pa.string()).take(scopes),
            "generation": pa.array(self.gen[self.first]),
            "member_id": self.member.take(first),
            "group_instance_id": instance, "client_id": client, "client_host": host,
            "subscribed_topics": subscribed,
            "topic": self.topic.take(first),
            "partition": pa.array(self.partition[self.first]),
            "valid_from": listing.event_column("stamp", self.opened, _STAMP),
            "valid_to": listing.event_column("stamp", self.closed, _STAMP),
            "valid_from_offset": listing.event_column("offset", self.opened, pa.int64()),
            "valid_to_offset": listing.event_column("offset", self.closed, pa.int64()),
            "is_open": pa.array(self.closed < 0),
            "offsets_partition": listing.event_column("partition", self.opened, pa.int32()),
            "updated_at": pa.nulls(n, _STAMP),
        }
        table = pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)
        where = [True] * n if stored_at is None else [stored_at.get(i, True) for i in _intervals(table)]
        return table.append_column(STORED_COLUMN, pa.array(where, pa.bool_()))


#: the event columns ``add_events`` reads, in the order it unpacks them
_EVENT_COLUMNS = ("group_id", "record_type", "subkey", "is_tombstone", "offsets_partition", "offset",
                  "record_timestamp")


def _last_per_interval(table: pa.Table, last: np.ndarray, listed: np.ndarray) -> pa.Table:
    """Of the rows of each interval, the one changed ``last`` (of two changed at one event, the
    one ``listed`` later), in table order."""
    rank = np.lexsort((listed, last))
    ranked = table.select(list(INTERVAL)).append_column("_rank", pa.array(np.argsort(rank)))
    best = ranked.group_by(list(INTERVAL), use_threads=False).aggregate([("_rank", "max")])
    return table.take(pa.array(np.sort(rank[best.column("_rank_max").to_numpy()])))


def _ordinals(at_scope: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each record's place among its scope's records, and the scope's next record (-1: none)."""
    n = len(at_scope)
    order = np.argsort(at_scope, kind="stable")
    ordered = at_scope[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]][:n]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    ordinal = np.empty(n, np.int64)
    ordinal[order] = np.arange(n) - start
    following = np.full(n, -1, np.int64)
    same = ~first[1:]
    following[:-1][same] = order[1:][same]
    next_at = np.empty(n, np.int64)
    next_at[order] = following
    return ordinal, next_at
