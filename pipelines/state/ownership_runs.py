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
2.6 s, and with the records and their keys found column by column (nineteenth session)
~1.5 s. Its rows are the oracle of ``tests/test_generations_replay.py``.

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
    classic_key_groups,
    key_columns,
    member_attrs,
    member_owned,
    streams_owned,
)
from pipelines.state.key_ids import key_ids
from pipelines.state.ownership_stored import (
    Stored,
    intervals,
    last_per_interval,
    meets_stored,
)

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
    stored = Stored.of(open_rows, unfilled_rows)
    listing = _Listing(topic_names, members, topologies)
    listing.add_stored(stored)
    listing.add_events(events, stored)
    return listing.changes(stored, cluster_id, updated_at)


class _Listing:
    """The records of every scope in log order, and the keys each holds, as flat columns.

    A scope's *record* here is one of its assignment records, a group tombstone closing it,
    or (event -1) its stored open rows; the keys of record ``r`` are the entries with
    groups with ``group_at == r``. The stored open rows' keys come first, one per stored row,
    in order (Python lists, :meth:`add_stored`); the batch's follow by record (arrays,
    :meth:`add_events`)."""

    def __init__(self, topic_names: dict[str, str], members: dict | None, topologies: dict | None) -> None:
        self.names = topic_names
        self.members = dict(members or {})
        self.topologies = dict(topologies or {})
        self.scope_of: dict[tuple[str, str, str], int] = {}
        self.scope_key: list[tuple[str, str, str]] = []  # (group, group type, member or "")
        self.member_scopes: dict[tuple[str, str], list[int]] = {}  # (group, type) -> live scopes
        # per record: its scope, and its event (-1: the stored rows); arrays once the
        # events are added
        self.at_scope: list[int] | np.ndarray = []
        self.at_event: list[int] | np.ndarray = []
        # per group of keys (a member's in one record): its record, generation, member,
        # attrs (index into ``attrs``) and how many keys; every key's (topic, partition)
        self.group_at: list[int] = []
        self.gen: list[int] = []
        self.member: list[str] = []
        self.attr: list[int] = []
        self.count: list[int] = []
        self.key_topic: list[str] = []
        self.key_partition: list[int] = []
        self.attrs: list[Attrs] = [_NONE]
        self.attr_of: dict[int, int] = {}  # id of a member's metadata value -> its attrs
        self.kept: list[Any] = []  # those values, alive while their ids are used
        # (group, member) -> the events of its metadata records and their attrs
        self.meta: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        # the classic records with a value: their rows of the events and their records
        self.classic_row = np.zeros(0, np.int64)
        self.classic_at = np.zeros(0, np.int64)
        self.events = GROUP_SCHEMA.empty_table()  # the events, in log order
        self._event_groups: list[KeyGroups] = []
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

    def add_stored(self, stored: Stored) -> None:
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

    def add_events(self, events: GroupColumns, stored: Stored) -> None:
        """Every record of the batch in log order, column by column: the records of each
        scope (an assignment record, a classic generation, a group's tombstone closing its
        members' scopes) and the groups of keys they hold. Notes whether two changed rows
        may be one interval (``shared``: :func:`meets_stored`).

        Why columns: the record-by-record pass this replaced (a dict lookup, a list append
        or two per record) cost ~2 us a record, ~0.5 s of a group-heavy batch's commit; only
        a record's listing (per distinct value) and a member's metadata (per record) are
        Python here."""
        events = events.in_log_order()  # one cluster's: by offsets partition and offset
        t = self.events = events.table
        self.shared = stored.twice
        n = t.num_rows
        if not n:
            return
        kind = t.column("record_type").to_numpy().astype(np.int64)
        tomb = t.column("is_tombstone").to_numpy(zero_copy_only=False).astype(bool)
        groups = pc.dictionary_encode(t.column("group_id").combine_chunks())
        members = pc.dictionary_encode(t.column("subkey").combine_chunks())
        group, member = groups.indices.to_numpy().astype(np.int64), members.indices.to_numpy().astype(np.int64)
        names, member_names = groups.dictionary.to_pylist(), members.dictionary.to_pylist()
        self.shared = self.shared or meets_stored(stored, group, names, t)
        scoped = np.flatnonzero(np.isin(kind, list(_SCOPED)))
        record = self._event_records(kind, tomb, group, member, names, member_names, scoped)
        attr = self._member_attrs(kind, tomb, group, member, names, member_names, events.values)
        live = ~tomb[scoped]
        rows = {k: scoped[live & (kind[scoped] == k)] for k in _SCOPED}
        at = {k: record[live & (kind[scoped] == k)] for k in _SCOPED}
        self.classic_row, self.classic_at = rows[2], at[2]
        self._event_groups = [self._assignment_groups(t, rows[8], at[8], attr, events.values),
                              self._streams_groups(t, kind, tomb, group, names, rows[22], at[22], attr, events.values)]

    def _event_records(self, kind: np.ndarray, tomb: np.ndarray, group: np.ndarray, member: np.ndarray,
                       names: list[str], member_names: list[str], scoped: np.ndarray) -> np.ndarray:
        """The records of the events, after the stored rows': one per ``scoped`` event, in
        its scope, and per group tombstone one in each scope of the group's members it
        closes. A scope is (group, type, member) and how many of the group's tombstones
        of its type precede it: a member's scope closed by a tombstone starts again after
        it. Returns each scoped event's record."""
        span = len(kind) + 1
        stype = np.searchsorted(np.array(list(_SCOPED)), kind[scoped])  # its index in _TYPES
        deleting = np.flatnonzero(tomb & np.isin(kind, (3, 17)))
        dtype = np.where(kind[deleting] == 3, 1, 2)
        before = np.sort((group[deleting] * 3 + dtype) * span + deleting)

        def closed_before(key: np.ndarray, event: np.ndarray) -> np.ndarray:
            return np.searchsorted(before, key * span + event) - np.searchsorted(before, key * span)

        epoch = closed_before(group[scoped] * 3 + stype, scoped)
        who = np.where(stype == 0, -1, member[scoped])
        ids = key_ids([pa.array(group[scoped]), pa.array(stype), pa.array(who), pa.array(epoch)])[0]
        first = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, np.int64)
        first[ids[::-1]] = np.arange(len(ids))[::-1]
        scope_id = np.empty(len(first), np.int64)
        opened: dict[tuple[int, int, int], list[int]] = {}  # (group, type, epoch) -> its new scopes
        for d, row in enumerate(first.tolist()):
            key = (names[group[scoped[row]]], _TYPES[stype[row]], "" if who[row] < 0 else member_names[who[row]])
            scope = self.scope_of.get(key) if epoch[row] == 0 else None
            if scope is None:
                scope = len(self.scope_key)
                self.scope_key.append(key)
                opened.setdefault((int(group[scoped[row]]), int(stype[row]), int(epoch[row])), []).append(scope)
            scope_id[d] = scope
        rec_scope, rec_event = [scope_id[ids]], [scoped]
        for d, k, e in zip(deleting.tolist(), dtype.tolist(), closed_before(group[deleting] * 3 + dtype,
                                                                            deleting).tolist(), strict=True):
            g = int(group[d])
            closing = (self.member_scopes.get((names[g], _TYPES[k]), []) if e == 0 else []) + opened.get((g, k, e), [])
            rec_scope.append(np.array(closing, np.int64))
            rec_event.append(np.full(len(closing), d, np.int64))
        event = np.concatenate(rec_event)
        order = np.argsort(event, kind="stable")
        base = len(self.at_scope)
        self.at_scope = np.r_[np.array(self.at_scope, np.int64), np.concatenate(rec_scope)[order]]
        self.at_event = np.r_[np.array(self.at_event, np.int64), event[order]]
        place = np.empty(len(order), np.int64)
        place[order] = np.arange(len(order))
        return base + place[:len(scoped)]

    def _member_attrs(self, kind: np.ndarray, tomb: np.ndarray, group: np.ndarray, member: np.ndarray,
                      names: list[str], member_names: list[str], values: list) -> np.ndarray:
        """Per event, the attrs of its member's metadata as of it: its last metadata record
        before it (none, a tombstone or an empty value: the member left), else what the
        lake held before the batch. Every metadata record's attrs go to ``meta`` (for
        :meth:`fill`)."""
        n, span = len(kind), len(kind) + 1
        who = group * (len(member_names) + 1) + member
        meta = np.flatnonzero(np.isin(kind, (5, 19)))
        meta_attr = np.zeros(len(meta), np.int64)
        for j, row in enumerate(meta.tolist()):
            info = None if tomb[row] else values[row]
            if info:
                meta_attr[j] = attr = self._member_attr(info)
                events, attrs = self.meta.setdefault((names[group[row]], member_names[member[row]]), ([], []))
                events.append(row)
                attrs.append(attr)
        keys = who[meta] * span + meta
        order = np.argsort(keys, kind="stable")
        keys, meta_attr = keys[order], meta_attr[order]
        at = np.searchsorted(keys, who * span + np.arange(n)) - 1
        found = (at >= 0) & (keys[np.maximum(at, 0)] // span == who) if len(keys) else np.zeros(n, bool)
        attr = np.where(found, meta_attr[np.maximum(at, 0)] if len(keys) else 0, -1)
        initial: dict[int, int] = {}
        for row in np.flatnonzero(~found & np.isin(kind, (8, 22))).tolist():
            w = int(who[row])
            if w not in initial:
                initial[w] = self._member_attr(self.members.get((names[group[row]], member_names[member[row]])))
            attr[row] = initial[w]
        return attr

    def _assignment_groups(self, t: pa.Table, rows: np.ndarray, at: np.ndarray, attr: np.ndarray,
                           values: list) -> KeyGroups:
        """The KIP-848 assignment records' groups of keys (one each), each with its own epoch.

        Keys are listed once per distinct pair of partition lists, not per value: the decoder
        shares those lists between values that differ in their epochs only
        (pipelines/decode/codegen.py), so their identity names an assignment while the values
        are alive (group-heavy history: ~69k distinct values, ~150 distinct assignments)."""
        mine = [values[row] or {} for row in rows.tolist()]
        lists = [(id(v.get("assigned_partitions")), id(v.get("partitions_pending_revocation"))) for v in mine]
        first: dict[tuple[int, int], dict] = {}
        for held, value in zip(lists, mine, strict=True):
            first.setdefault(held, value)
        place = {held: j for j, held in enumerate(first)}
        listed = [member_owned(value, self.names) for value in first.values()]
        n = len(listed)
        distinct = KeyGroups(np.zeros(n, np.int64), np.zeros(n, np.int64), pa.nulls(n, pa.string()),
                             np.zeros(n, np.int64), np.array([len(topics) for topics, _ in listed], np.int64),
                             pa.array([x for topics, _ in listed for x in topics], pa.string()),
                             np.array([x for _, numbers in listed for x in numbers], np.int64))
        groups = distinct.take(np.array([place[held] for held in lists], np.int64))  # keys with each
        groups.gen = np.array([v.get("member_epoch", 0) for v in mine], np.int64)
        groups.group_at, groups.attr = at, attr[rows]
        groups.member = t.column("subkey").take(pa.array(rows, pa.int64())).combine_chunks().cast(pa.string())
        return groups

    def _streams_groups(self, t: pa.Table, kind: np.ndarray, tomb: np.ndarray, group: np.ndarray,
                        names: list[str], rows: np.ndarray, at: np.ndarray, attr: np.ndarray,
                        values: list) -> KeyGroups:
        """The streams assignment records' groups of keys (one each): a member's tasks as
        the partitions of its group's topology as of the record (the last topology record
        before it with a value, else the lake's)."""
        topologies, mine = dict(self.topologies), set(rows.tolist())
        gen, member, count, topic, number = [], [], [], [], []
        subkeys = t.column("subkey")
        for row in np.flatnonzero(np.isin(kind, (22, 23))).tolist():
            value = None if tomb[row] else values[row] or {}
            if kind[row] == 23:
                if value:
                    topologies[names[group[row]]] = value
            elif row in mine:
                owned = key_columns(streams_owned(value, topologies.get(names[group[row]])))
                gen.append(value.get("member_epoch", 0))
                member.append(subkeys[row].as_py())
                count.append(len(owned[0]))
                topic += owned[0]
                number += owned[1]
        return KeyGroups(at, np.array(gen, np.int64), pa.array(member, pa.string()), attr[rows],
                         np.array(count, np.int64), pa.array(topic, pa.string()), np.array(number, np.int64))

    def key_groups(self) -> KeyGroups:
        """Every group of keys in listing order: the stored rows' (first, as listed), then
        the events' by record (a classic record's members in order)."""
        if self._key_groups is None:
            listed = KeyGroups(np.array(self.group_at, np.int64), np.array(self.gen, np.int64),
                               pa.array(self.member, pa.string()), np.array(self.attr, np.int64),
                               np.array(self.count, np.int64), pa.array(self.key_topic, pa.string()),
                               np.array(self.key_partition, np.int64))
            classic, self._classic_attrs = classic_key_groups(self.events, self.classic_row, self.classic_at,
                                                                 len(self.attrs))
            events = KeyGroups.concat([*self._event_groups, classic])
            self._key_groups = KeyGroups.concat([listed, events.take(np.argsort(events.group_at, kind="stable"))])
        return self._key_groups

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

    def changes(self, stored: Stored, cluster_id: str, updated_at: datetime) -> pa.Table:
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
            table = last_per_interval(table, np.r_[new_last, last[changed]], listed)
        n = table.num_rows
        schema = contract("group_generations").arrow_schema
        table = table.set_column(schema.get_field_index("cluster_id"), schema.field("cluster_id"),
                                 pa.repeat(pa.scalar(cluster_id, pa.string()), n))
        stamp = pa.scalar(micros(updated_at), pa.int64()).cast(_STAMP)
        return table.set_column(schema.get_field_index("updated_at"), schema.field("updated_at"),
                                pa.repeat(stamp, n))

    def _stored_fills(self, stored: Stored, closed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
            source = {"stamp": "record_timestamp", "offset": "offset", "partition": "offsets_partition"}[name]
            column = self._event_columns[name] = self.events.column(source).combine_chunks().cast(pa.int64())
        return column.take(pa.array(np.where(events < 0, 0, events), mask=events < 0)).cast(type_)

    def _stored_table(self, stored: Stored, rows: np.ndarray, closed_at: np.ndarray,
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
        where = [True] * n if stored_at is None else [stored_at.get(i, True) for i in intervals(table)]
        return table.append_column(STORED_COLUMN, pa.array(where, pa.bool_()))


#: the record types that are records of a scope, and the group type of their scopes
_SCOPED = {2: "classic", 8: "consumer", 22: "streams"}
#: the scopes' group types, numbered as ``_Listing._event_records`` numbers them
_TYPES = tuple(_SCOPED.values())


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
