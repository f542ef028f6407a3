"""The types history and state exchange, so that neither package imports the other.

Why: ``history`` decodes a micro-batch and hands the state tables what they depend on;
``state`` folds that into the current-state tables. Both need the same few shapes (a decoded
group record, the reduced batch, the log order, the change-set column), and keeping them here,
below both packages, keeps the flow one-way: sources -> decode -> history -> state.
Nothing here imports another ``pipelines`` module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

    A named tuple, not a frozen dataclass: one is built per group record on the executor
    and again on the driver (unpickled), and a frozen dataclass costs ~0.9 us to build
    against ~0.25 us (a group-heavy batch holds ~800k)."""

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


@dataclass
class StateInput:
    """What the state tables need of a batch: offset commits (at least their
    :func:`state_rows`) and the decoded group records."""

    offset_commits: pa.Table
    group_records: list[GroupRecord] = field(default_factory=list)
    #: (cluster_id, offsets_partition, min_offset, max_offset) of every offset-commit row of
    #: the batch: where the commit audit (pipelines.state.audit) reads the batch back from
    #: the history; None when built without it.
    commit_ranges: pa.Table | None = None

    def __getstate__(self) -> tuple:
        """Pickled with the group records as columns (a list per field), not as objects.

        Why: a batch's state input crosses from each Spark task to the driver pickled, and
        two objects per record cost more than their fields (a 204k-record group-heavy
        batch, 84k group records, collector paused: 0.48 -> 0.37 s CPU to write, 0.33 ->
        0.29 s to read, 15.1 -> 14.1 MB). Values that several records share stay shared:
        they are one pickle's memo."""
        recs = self.group_records
        columns = ([g.cluster_id for g in recs], [g.group_id for g in recs],
                   *(map(list, zip(*(g.record for g in recs), strict=True)) if recs
                     else ([] for _ in LatestRecord._fields)))
        return self.offset_commits, self.commit_ranges, columns

    def __setstate__(self, state: tuple) -> None:
        self.offset_commits, self.commit_ranges, (clusters, groups, *latest) = state
        self.group_records = list(map(GroupRecord, clusters, groups,
                                      map(LatestRecord._make, zip(*latest, strict=True))))


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


def last_record_indices(records: list[GroupRecord], skipped: frozenset[int] = frozenset()) -> set[int]:
    """Indices of the record at the greatest log position per (cluster, group, type, member),
    records of the ``skipped`` types left out; of two at one position the later in the list
    wins, as ``pipelines.state.offsets.last_per_key``'s stable log-order sort ranks them."""
    last: dict[tuple, int] = {}
    for i, g in enumerate(records):
        r = g.record
        if r.record_type in skipped:
            continue
        key = (g.cluster_id, g.group_id, r.record_type, r.subkey)
        j = last.get(key)
        if j is None or (r.offsets_partition, r.offset) >= (records[j].record.offsets_partition,
                                                            records[j].record.offset):
            last[key] = i
    return set(last.values())


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
    per group (the group's last activity) and one commit per (cluster, topic id) (id -> name). A task
    hands only these to the driver; the state built from them equals the state built from
    every row, because each is a "last by log position" over a key these rows cover.
    Runs on every row of the hot path, so it ranks a narrow copy and never sorts data
    that is already in log order (the usual case).
    """
    n = offset_commits.num_rows
    if n == 0:
        return offset_commits
    order = log_order(offset_commits)
    keys = offset_commits.select([*OFFSET_KEY, "is_tombstone", "topic_id"])
    if order is not None:
        keys = keys.take(order)
    rank = pa.array(np.arange(n, dtype=np.int64))
    commit_rank = pc.if_else(keys.column("is_tombstone"), pa.scalar(None, pa.int64()), rank)
    keys = keys.append_column("_rank", rank).append_column("_commit_rank", commit_rank)
    by_topic_id = keys.group_by(["cluster_id", "topic_id"], use_threads=False).aggregate([("_rank", "max")])
    winners = [
        keys.group_by(OFFSET_KEY, use_threads=False).aggregate([("_rank", "max")]).column("_rank_max"),
        keys.group_by(["cluster_id", "group_id"], use_threads=False)
            .aggregate([("_commit_rank", "max")]).column("_commit_rank_max"),
        by_topic_id.filter(pc.is_valid(by_topic_id.column("topic_id"))).column("_rank_max"),
    ]
    ranks = distinct_sorted(np.concatenate([w.drop_null().to_numpy() for w in winners]))
    return offset_commits.take(ranks if order is None else order[ranks])
