"""The types history and state exchange, so that neither package imports the other.

Why: ``history`` decodes a micro-batch and hands the state tables what they depend on;
``state`` folds that into the current-state tables. Both need the same few shapes (a decoded
group record, a batch's group records as columns, the reduced batch, the log order, the
change-set column), and keeping them here, below both packages, keeps the flow one-way:
sources -> decode -> history -> state.
Nothing here imports another ``pipelines`` module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Change-set column of a state table's merge: "upsert" or "delete".
OP = "_op"
#: The logical key of a committed offset (key types 0 and 1 are one key).
OFFSET_KEY = ["cluster_id", "group_id", "topic", "partition"]


class LatestRecord(NamedTuple):
    """One row of ``group_records_latest`` with its value decoded. ``record_timestamp`` is
    in microseconds since the epoch, UTC (what Arrow stores; a datetime is accepted too).

    A named tuple, not a frozen dataclass: the driver builds one per group record a step
    reads as an object (:meth:`GroupColumns.latest`), and a frozen dataclass costs ~0.9 us
    to build against ~0.25 us (a group-heavy batch holds ~500k group records)."""

    record_type: int
    subkey: str
    is_tombstone: bool
    value: dict[str, Any] | None
    offsets_partition: int
    offset: int
    record_timestamp: Any = None
    value_version: int | None = None

    @property
    def position(self) -> tuple[int, int]:
        return (self.offset, self.offsets_partition)


@dataclass
class GroupRecord:
    """A decoded group record (type 2 and up), kept for the state replay."""

    cluster_id: str
    group_id: str
    record: LatestRecord


#: The record type of classic ``GroupMetadata`` (``pipelines.decode.records.GROUP_METADATA_TYPE``).
CLASSIC_TYPE = 2
_PARTITIONS = pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))]))
#: A classic group's members as the ownership replay lists them: each member's attributes and
#: the partitions its assignment holds (the fields of ``group_metadata.members`` it reads).
CLASSIC_MEMBERS = pa.list_(pa.struct([
    ("member_id", pa.string()), ("group_instance_id", pa.string()), ("client_id", pa.string()),
    ("client_host", pa.string()), ("subscribed_topics", pa.list_(pa.string())),
    ("assigned_partitions", _PARTITIONS)]))
#: The columns of :class:`GroupColumns`: a group record's every field but its value
#: (``record_timestamp`` in microseconds since the epoch, as :class:`LatestRecord` keeps it),
#: and of a classic ``GroupMetadata`` record (null for other types) its generation and
#: members, which the ownership replay reads without the value.
GROUP_SCHEMA = pa.schema([
    ("cluster_id", pa.string()), ("group_id", pa.string()), ("record_type", pa.int16()),
    ("subkey", pa.string()), ("is_tombstone", pa.bool_()), ("offsets_partition", pa.int32()),
    ("offset", pa.int64()), ("record_timestamp", pa.int64()), ("value_version", pa.int16()),
    ("classic_generation", pa.int32()), ("classic_members", CLASSIC_MEMBERS)])


def classic_member(member: dict[str, Any]) -> dict[str, Any]:
    """A decoded classic member (its subscription and assignment decoded, or left as bytes
    when their protocol is not ``consumer``) as an element of ``group_metadata.members``
    (and, of those fields, :data:`CLASSIC_MEMBERS`)."""
    sub = member.get("subscription") if isinstance(member.get("subscription"), dict) else {}
    asg = member.get("assignment") if isinstance(member.get("assignment"), dict) else {}
    return {
        "member_id": member.get("member_id"),
        "group_instance_id": member.get("group_instance_id"),
        "client_id": member.get("client_id"),
        "client_host": member.get("client_host"),
        "rebalance_timeout_ms": member.get("rebalance_timeout"),
        "session_timeout_ms": member.get("session_timeout"),
        "subscribed_topics": sub.get("topics"),
        "owned_partitions": sub.get("owned_partitions"),
        "assigned_partitions": asg.get("assigned_partitions"),
    }


def classic_columns(record_types: list[int], values: list[dict[str, Any] | None]) -> tuple[pa.Array, pa.Array]:
    """The ``classic_generation`` and ``classic_members`` columns of records of
    ``record_types`` with ``values`` (the tasks take them from ``group_metadata``'s)."""
    generation: list[int | None] = []
    members: list[list[dict[str, Any]] | None] = []
    for record_type, value in zip(record_types, values, strict=True):
        classic = record_type == CLASSIC_TYPE and value is not None
        generation.append(value.get("generation") if classic else None)
        members.append([classic_member(m) for m in value.get("members") or ()] if classic else None)
    return pa.array(generation, pa.int32()), pa.array(members, CLASSIC_MEMBERS)
_BASE_SCHEMA = pa.schema(list(GROUP_SCHEMA)[:-2])
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def micros(stamp: datetime | int | None) -> int | None:
    """A timestamp as microseconds since the epoch (naive means UTC, as in Arrow)."""
    if stamp is None or isinstance(stamp, int):
        return stamp
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return (stamp - _EPOCH) // timedelta(microseconds=1)


@dataclass
class GroupColumns:
    """A batch's decoded group records as columns (:data:`GROUP_SCHEMA`), each row's decoded
    value beside them in ``values`` (one object for the rows that share a value).

    Why columns: a group-heavy batch brings the driver ~500k group records, and most of its
    steps read only their types, keys and positions (log order, the last record per key,
    the rows of the types a step reads). Over columns each is a few numpy passes, where a
    pass over objects cost ~0.3-1 us a record, and the objects (:meth:`records`,
    :meth:`latest`) are made only for the rows whose values a step reads. They also cross
    from the tasks pickled as Arrow columns and one list of values."""

    table: pa.Table
    values: list[dict[str, Any] | None]

    @classmethod
    def empty(cls) -> GroupColumns:
        return cls(GROUP_SCHEMA.empty_table(), [])

    @classmethod
    def of(cls, records: list[GroupRecord]) -> GroupColumns:
        """``records`` as columns (a datetime ``record_timestamp`` as microseconds)."""
        recs = [g.record for g in records]
        table = pa.table({
            "cluster_id": [g.cluster_id for g in records], "group_id": [g.group_id for g in records],
            "record_type": [r.record_type for r in recs], "subkey": [r.subkey for r in recs],
            "is_tombstone": [r.is_tombstone for r in recs], "offsets_partition": [r.offsets_partition for r in recs],
            "offset": [r.offset for r in recs], "record_timestamp": [micros(r.record_timestamp) for r in recs],
            "value_version": [r.value_version for r in recs]}, schema=_BASE_SCHEMA)
        return cls._with_classic(table, [r.value for r in recs])

    @classmethod
    def _with_classic(cls, table: pa.Table, values: list[dict[str, Any] | None]) -> GroupColumns:
        """``table`` (the columns but :data:`GROUP_SCHEMA`'s classic ones) and ``values``,
        the classic columns made from the values."""
        generation, members = classic_columns(table.column("record_type").to_pylist(), values)
        table = table.append_column("classic_generation", generation).append_column("classic_members", members)
        return cls(table, values)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled as pickled, or as the version before pickled it, without the classic
        columns (a stopped run's checkpoint keeps the batches it had not committed, and the
        next run commits them, maybe after an upgrade): those made from the values."""
        if "classic_members" not in state["table"].column_names:
            state = GroupColumns._with_classic(state["table"], state["values"]).__dict__
        self.__dict__.update(state)

    @staticmethod
    def concat(parts: list[GroupColumns]) -> GroupColumns:
        if not parts:
            return GroupColumns.empty()
        return GroupColumns(pa.concat_tables([p.table for p in parts]), [v for p in parts for v in p.values])

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: np.ndarray) -> GroupColumns:
        """The ``rows``, in that order."""
        return GroupColumns(self.table.take(pa.array(rows, pa.int64())), [self.values[i] for i in rows.tolist()])

    def in_log_order(self) -> GroupColumns:
        """The rows by (cluster, offsets partition, offset), ties in row order."""
        if len(self) < 2:
            return self
        cluster = pc.dictionary_encode(self.table.column("cluster_id").combine_chunks())
        rank = pc.rank(cluster.dictionary, "ascending").to_numpy()  # the clusters' order by name
        code = rank[cluster.indices.to_numpy()]
        partition = self.table.column("offsets_partition").to_numpy()
        offset = self.table.column("offset").to_numpy()
        order = np.lexsort((np.arange(len(self)), offset, partition, code))
        if np.all(order[1:] > order[:-1]):
            return self
        return self.take(order)

    def rows_of(self, types: frozenset[int] | tuple[int, ...]) -> np.ndarray:
        """The rows of the record ``types``, in order."""
        record_type = self.table.column("record_type").to_numpy()
        return np.flatnonzero(np.isin(record_type, np.array(sorted(types), record_type.dtype)))

    def latest(self, rows: np.ndarray | None = None) -> list[LatestRecord]:
        """The ``rows`` (all by default), in order, as :class:`LatestRecord` objects."""
        part = self if rows is None else self.take(rows)
        t = part.table
        head = (t.column(n).to_pylist() for n in ("record_type", "subkey", "is_tombstone"))
        tail = (t.column(n).to_pylist() for n in ("offsets_partition", "offset", "record_timestamp", "value_version"))
        return list(map(LatestRecord._make, zip(*head, part.values, *tail, strict=True)))

    def records(self, rows: np.ndarray | None = None) -> list[GroupRecord]:
        """The ``rows`` (all by default), in order, as :class:`GroupRecord` objects."""
        part = self if rows is None else self.take(rows)
        return list(map(GroupRecord, part.table.column("cluster_id").to_pylist(),
                        part.table.column("group_id").to_pylist(), part.latest()))


@dataclass
class StateInput:
    """What the state tables need of a batch: offset commits (at least their
    :func:`state_rows`) and the decoded group records."""

    offset_commits: pa.Table
    groups: GroupColumns = field(default_factory=GroupColumns.empty)
    #: (cluster_id, offsets_partition, min_offset, max_offset) of every offset-commit row of
    #: the batch: where the commit audit (pipelines.state.audit) reads the batch back from
    #: the history; None when built without it.
    commit_ranges: pa.Table | None = None

    @property
    def group_records(self) -> list[GroupRecord]:
        """The group records as objects, in order."""
        return self.groups.records()

    def __setstate__(self, state: dict[str, Any] | tuple) -> None:
        """Unpickled as pickled (its fields), or from the form the version before wrote: the
        group records as one list per field. A stopped run keeps the batches it decoded but
        had not committed in its checkpoint (``pending_batches``), and the next run commits
        them, maybe after an upgrade."""
        if isinstance(state, tuple):
            offset_commits, commit_ranges, (clusters, groups, *fields) = state
            records = list(map(GroupRecord, clusters, groups, map(LatestRecord._make, zip(*fields, strict=True))))
            state = {"offset_commits": offset_commits, "groups": GroupColumns.of(records),
                     "commit_ranges": commit_ranges}
        self.__dict__.update(state)


def micros_of(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A timestamp column as int64 microseconds since the epoch (whatever its unit): the form
    :class:`LatestRecord` and the ownership replay keep timestamps in, since Python ints cost
    nothing to make, pickle or turn back into Arrow, where a datetime costs ~2-4 us each way."""
    return column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())


#: Group record types of which the state tables read every record of a batch, in log order:
#: the ownership replay (state/apply.py, state/generations.py: 2, 3, 5, 8, 17, 19, 22, 23),
#: topic names (state/topics.py: 4, 9, 18) and the commit audit (state/audit.py: 2, 3, 11,
#: 17). Of any other type only the last record per key counts (``group_records_latest``).
EVERY_RECORD_TYPES = frozenset({2, 3, 4, 5, 8, 9, 11, 17, 18, 19, 22, 23})


def last_by_position(key: np.ndarray, partition: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """The rows of the last record per ``key`` by log position (offsets partition, offset;
    of two at one position, the later row), in row order."""
    if not len(key):
        return np.zeros(0, np.int64)
    order = np.lexsort((np.arange(len(key)), offset, partition, key))
    last = np.r_[key[order][1:] != key[order][:-1], True]
    return np.sort(order[last])


def distinct_sorted(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a 1-D integer array, by a sort.

    Why not ``np.unique``: since numpy 2.3 it finds distinct integers with a hash table,
    which costs ~1 us a value when most values are distinct (7.2M log positions: 7.45 s,
    against 0.07 s sorted here). A stable sort is a radix sort or a timsort, fast on the
    ascending runs that log positions come in."""
    ordered = np.sort(values, kind="stable")
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def log_order(table: pa.Table) -> np.ndarray | None:
    """Row indices in log position order, or None when the rows are in that order already."""
    part = table.column("offsets_partition").to_numpy()
    offset = table.column("offset").to_numpy()
    dp, do = np.diff(part), np.diff(offset)
    if np.all((dp > 0) | ((dp == 0) & (do > 0))):
        return None
    return np.lexsort((offset, part))


def kept_rows(table: pa.Table, keep: pa.Array | pa.ChunkedArray, most_runs: int = 256) -> pa.Table:
    """``table`` without the rows ``keep`` (no nulls) drops. Dropping a few rows of many (a
    batch's group records among its offset commits, its offset tombstones, a read's aborted
    transactional records, a batch's duplicate positions) keeps a few runs
    of rows: those are sliced out, no column copied (a filter copied every column: 1.9 s for
    7.2M commits); rows kept in more than ``most_runs`` runs are filtered."""
    kept = np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)
    edges = np.flatnonzero(np.diff(np.r_[False, kept, False].astype(np.int8)))
    starts, ends = edges[::2], edges[1::2]
    if len(starts) > most_runs:
        return table.filter(keep)
    if not len(starts):
        return table.slice(0, 0)
    return pa.concat_tables([table.slice(int(a), int(b - a)) for a, b in zip(starts, ends, strict=True)])


def state_rows(offset_commits: pa.Table) -> pa.Table:
    """The few rows of a batch's offset commits that the state tables can depend on.

    The last record per offset key (the committed offset), the last non-tombstone commit
    per group and offsets partition (the group's last activity) and its last record of any
    kind there (so the driver sees every offsets partition a group id has records in, offset
    tombstones only too: :mod:`pipelines.state.split_groups`), and one commit per (cluster,
    topic id) (id -> name). A task
    hands only these to the driver; the state built from them equals the state built from
    every row, because each is a "last by log position" over a key these rows cover.
    Runs on every row of the hot path, so it ranks a narrow copy and never sorts data
    that is already in log order (the usual case).
    """
    n = offset_commits.num_rows
    if n == 0:
        return offset_commits
    order = log_order(offset_commits)
    keys = offset_commits.select([*OFFSET_KEY, "offsets_partition", "is_tombstone", "topic_id"])
    if order is not None:
        keys = keys.take(order)
    rank = pa.array(np.arange(n, dtype=np.int64))
    commit_rank = pc.if_else(keys.column("is_tombstone"), pa.scalar(None, pa.int64()), rank)
    keys = keys.append_column("_rank", rank).append_column("_commit_rank", commit_rank)
    by_topic_id = keys.group_by(["cluster_id", "topic_id"], use_threads=False).aggregate([("_rank", "max")])
    per_partition = keys.group_by(["cluster_id", "group_id", "offsets_partition"], use_threads=False) \
        .aggregate([("_commit_rank", "max"), ("_rank", "max")])
    winners = [
        keys.group_by(OFFSET_KEY, use_threads=False).aggregate([("_rank", "max")]).column("_rank_max"),
        per_partition.column("_commit_rank_max"),
        per_partition.column("_rank_max"),
        by_topic_id.filter(pc.is_valid(by_topic_id.column("topic_id"))).column("_rank_max"),
    ]
    ranks = distinct_sorted(np.concatenate([w.drop_null().to_numpy() for w in winners]))
    return offset_commits.take(ranks if order is None else order[ranks])
