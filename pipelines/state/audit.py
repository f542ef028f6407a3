"""The commit audit, run: read a batch's commits back, attribute them
(:mod:`pipelines.state.attribution`), flag anomalies (:mod:`pipelines.state.anomalies`) and
write ``commit_attribution``, ``offset_anomalies`` and the ``offset_audit_cursor`` exactly
once; the same after a snapshot (its log bounds), and over a whole history (the backfill of
a lake older than the audit, ``maintain --rebuild-audit``).

Batch independence: a commit's owner is always decided by group records at earlier log
positions of the same ``__consumer_offsets`` partition, so they were applied in this or an
earlier batch; the per-key "previous commit" and "group deleted at" facts carry over
batches in the small ``offset_audit_cursor`` table. Exactly once: the cursor is written
last, each table with the batch's transaction id; a replay recomputes from the cursor as
it was before the batch (unchanged until the cursor commits) and skips what landed.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine, read_batch
from pipelines.lake.keys import KeyFilter, distinct_keys, quote_identifier, sql_literal
from pipelines.model import (
    OP,
    GroupColumns,
    GroupRecord,
    LatestRecord,
    StateInput,
    distinct_sorted,
    kept_rows,
)
from pipelines.state import last_ended, topics
from pipelines.state.anomalies import (
    ANOMALIES,
    bound_anomalies,
    log_bound_anomalies,
    ownership_anomalies,
    sequence_anomalies,
)
from pipelines.state.attribution import (
    ATTRIBUTION,
    TS,
    attribute,
    attribution_at,
    batch_generation_rows,
    generation_rows,
)
from pipelines.state.key_ids import key_ids

log = logging.getLogger(__name__)

CURSOR = "offset_audit_cursor"
TABLES = (ATTRIBUTION, ANOMALIES, CURSOR)
#: group-level metadata records whose tombstone deletes the group (classic, consumer, share, streams)
GROUP_RECORD_TYPES = (2, 3, 11, 17)

_COMMIT_COLUMNS = ["cluster_id", "group_id", "topic", "partition", "committed_offset", "leader_epoch",
                   "commit_timestamp", "is_tombstone", "offsets_partition", "offset", "record_timestamp"]


def ensure_tables(engine: DeltaEngine) -> None:
    for name in TABLES:
        engine.ensure(contract(name))


# ---------------------------------------------------------------------------------------------
# Ingest: one batch
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PositionRanges(KeyFilter):
    """Rows of (cluster, offsets partition) keys with ``offset`` within a range per key:
    pushed into both engines' scans like any :class:`KeyFilter` (file statistics on
    ``offset`` skip the history files of other batches)."""

    ranges: tuple[tuple[str, int, int, int], ...] = ()

    @classmethod
    def of_ranges(cls, ranges: pa.Table) -> PositionRanges:
        rows = tuple((r["cluster_id"], r["offsets_partition"], r["min_offset"], r["max_offset"])
                     for r in ranges.to_pylist())
        return cls(("cluster_id", "offsets_partition"), frozenset((c, p) for c, p, _, _ in rows), ranges=rows)

    def to_sql(self, alias: str | None = None) -> str:
        if not self.ranges:
            return "FALSE"

        def q(column: str) -> str:
            return quote_identifier(column) if alias is None else f"{alias}.{quote_identifier(column)}"

        terms = [f"({q('cluster_id')} = {sql_literal(c)} AND {q('offsets_partition')} = {p} AND "
                 f"{q('offset')} BETWEEN {lo} AND {hi})" for c, p, lo, hi in self.ranges]
        return "(" + " OR ".join(terms) + ")"

    def to_arrow(self) -> pc.Expression:
        expr = pc.scalar(False)
        for c, p, lo, hi in self.ranges:
            expr = expr | (KeyFilter.of(("cluster_id", "offsets_partition"), {(c, p)}).to_arrow()
                           & (pc.field("offset") >= lo) & (pc.field("offset") <= hi))
        return expr


def batch_commits(engine: DeltaEngine, batch: StateInput, app_id: str | None = None,
                  batch_id: int | None = None) -> pa.Table:
    """Every offset-commit row of this batch, read back from the ``offset_commits`` history
    (the driver holds only the batch's state rows), in log order, one row per position.

    Why two ways: the batch's positions interleave with every other batch's in the files'
    statistics (partitions grow at their own pace), so a read of the table by position
    ranges scans the whole history. When this engine committed the batch's files itself
    (the usual case: ``app_id``/``batch_id`` given), they are read alone: they hold every
    position of the ranges (a batch reads each partition's log range contiguously; other
    copies of a position carry the same commit); otherwise (a replay after a restart, the
    backfill's ranges, delta-spark) the table is read by the ranges."""
    ranges = batch.commit_ranges
    if ranges is None or ranges.num_rows == 0:
        return contract("offset_commits").arrow_schema.empty_table().select(_COMMIT_COLUMNS)
    where = PositionRanges.of_ranges(ranges)
    return _dedupe_positions(read_batch(engine, "offset_commits", _COMMIT_COLUMNS, where, app_id, batch_id,
                                        dictionaries=("cluster_id", "group_id", "topic")))


def _dedupe_positions(table: pa.Table) -> pa.Table:
    """``table`` in log order, one row per (cluster, offsets partition, position).

    A batch read back from its own files is a few runs in log order (each task wrote its
    partitions' ranges in order, the tasks' files come in any order): the runs are put in
    order as slices, no row copied; rows are sorted only when runs overlap."""
    if table.num_rows == 0:
        return table
    c = pc.dictionary_encode(table.column("cluster_id")).combine_chunks().indices.to_numpy()
    p = table.column("offsets_partition").to_numpy()
    o = table.column("offset").to_numpy()
    if not _in_order(c, p, o):
        table, c, p, o = _runs_in_order(table, c, p, o)
    if not _in_order(c, p, o):
        order = np.lexsort((o, p, c))
        table, c, p, o = table.take(order), c[order], p[order], o[order]
    keep = np.ones(len(o), bool)
    keep[1:] = (c[1:] != c[:-1]) | (p[1:] != p[:-1]) | (o[1:] != o[:-1])
    return table if keep.all() else kept_rows(table, pa.array(keep))


def _runs_in_order(table: pa.Table, c: np.ndarray, p: np.ndarray, o: np.ndarray
                   ) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """The table's runs in (cluster, partition, position) order ordered by their first row.

    A run is cut where the order falls back and where the partition changes: one task's
    file can end with a partition below the one the next file starts with, and a run
    spanning both would be put before runs of the partitions between (1M-commit batches
    of the 10M history were sorted row by row: 0.98 s each)."""
    cut = (np.diff(c) != 0) | (np.diff(p.astype(np.int64)) != 0) | (np.diff(o) < 0)
    starts = np.r_[0, np.flatnonzero(cut) + 1]
    if len(starts) > 4096:  # rows in no order to speak of: sorting them is as cheap
        return table, c, p, o
    ends = np.r_[starts[1:], len(o)]
    runs = np.lexsort((o[starts], p[starts], c[starts]))
    rows = np.concatenate([np.arange(starts[r], ends[r]) for r in runs])
    table = pa.concat_tables([table.slice(starts[r], ends[r] - starts[r]) for r in runs])
    return table, c[rows], p[rows], o[rows]


def _in_order(c: np.ndarray, p: np.ndarray, o: np.ndarray) -> bool:
    """Whether rows are sorted by (cluster code, partition, position)."""
    return bool(np.all(_ascending(c, p, o)))


def _ascending(c: np.ndarray, p: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Per row after the first, whether it sorts at or after the row before it."""
    dc, dp, do = np.diff(c), np.diff(p.astype(np.int64)), np.diff(o)
    return (dc > 0) | ((dc == 0) & ((dp > 0) | ((dp == 0) & (do >= 0))))


def audit_batch(engine: DeltaEngine, batch: StateInput, app_id: str, batch_id: int,
                now: datetime, replayed: pa.Table | None = None) -> dict[str, int]:
    """Attribute and check this batch's commits (after the state tables took the batch);
    rows written per table. ``replayed``: the ``group_generations`` change set the state
    step made of this batch, when it did: then no ended ownership row is read, only
    ``ownership_last_ended``, which takes the batch after this."""
    if batch.commit_ranges is None or engine.committed(CURSOR, app_id, batch_id):
        return {}
    ensure_tables(engine)
    written: dict[str, int] = {}
    # earlier commits may find their owner by the names this batch learned, whatever else
    # the batch holds (a batch of partition metadata alone left them unresolved for good)
    clusters = {c for c, in distinct_keys(batch.groups.table, ("cluster_id",))} | \
        set(batch.commit_ranges.column("cluster_id").to_pylist())
    if _names_learned(engine, clusters, now):
        written.update(revisit_unresolved(engine, clusters, f"{app_id}#names", batch_id, now))
    commits = batch_commits(engine, batch, app_id, batch_id)
    audited = batch.groups.take(batch.groups.rows_of(GROUP_RECORD_TYPES))
    events = list(zip(*(audited.table.column(n).to_pylist() for n in ("cluster_id", "group_id")),
                      audited.latest(), strict=True))
    groups = distinct_keys(commits, ("cluster_id", "group_id"))
    groups |= distinct_keys(audited.table, ("cluster_id", "group_id"))
    if not groups:
        return written
    cursor = engine.read(CURSOR, None, KeyFilter.of(("cluster_id", "group_id"), groups)).to_pylist()
    commits, events = _not_yet_audited(commits, events, cursor)
    if commits.num_rows == 0 and not events:
        return written
    live = _live(commits)
    gens = batch_generation_rows(engine, live, replayed) if replayed is not None and last_ended.ready(engine) \
        else generation_rows(engine, live)
    attribution = attribute(live, gens, now)
    # new positions only: an append (no scan of the table), idempotent by the transaction
    # id. Written on a thread while the anomalies are found, where the engine allows: its
    # writer releases the GIL, and a batch's tables may land in any order as long as the
    # cursor lands last.
    append = functools.partial(engine.append, contract(ATTRIBUTION), attribution, app_id, batch_id)
    on_thread = attribution.num_rows > 0 and engine.concurrent_tables
    with ThreadPoolExecutor(1, thread_name_prefix="offsetlake-audit") as writer:
        appending = writer.submit(append) if on_thread else None
        appended = append() if attribution.num_rows and not on_thread else False
        anomalies, new_cursor = sequence_anomalies(commits, events, cursor, attribution, now)
        anomalies += ownership_anomalies(attribution, now)
        anomalies += log_bound_anomalies(engine, live, attribution, now, "ingest")
        if anomalies and engine.merge(contract(ANOMALIES), contract(ANOMALIES).change_set(anomalies), app_id, batch_id):
            written[ANOMALIES] = len(anomalies)
    if appending is not None:
        appended = appending.result()  # its error, if any, before the cursor
    if appended:
        written[ATTRIBUTION] = attribution.num_rows
    if engine.merge(contract(CURSOR), contract(CURSOR).change_set(new_cursor), app_id, batch_id):
        written[CURSOR] = len(new_cursor)
    return written


def _live(commits: pa.Table) -> pa.Table:
    """The commits that are not offset tombstones (a batch usually holds none: no copy; a
    few are cut out of it, 7.8M commits: 1.8 -> 0.02 s)."""
    tombstone = commits.column("is_tombstone")
    if tombstone.null_count == 0 and not pc.any(tombstone).as_py():
        return commits
    return kept_rows(commits, pc.fill_null(pc.invert(tombstone), False))


def _not_yet_audited(commits: pa.Table, events: list[tuple[str, str, Any]], cursor: list[dict[str, Any]]
                     ) -> tuple[pa.Table, list[tuple[str, str, Any]]]:
    """The batch without what the cursor says is audited already: commits at or before their
    key's last audited position, group records at or before their group's last audited
    commit (a batch replayed after a backfill covered it, or a full replay under a fresh
    checkpoint). In a normal batch, every position lies after the cursor's: nothing is cut.
    Group records after a group's last commit are applied again, which is idempotent."""
    last: dict[tuple, int] = {}
    group_last: dict[tuple, int] = {}
    for r in cursor:
        if r["partition"] >= 0 and r["last_position"] is not None:
            last[(r["cluster_id"], r["group_id"], r["topic"], r["partition"])] = r["last_position"]
            key = (r["cluster_id"], r["group_id"])
            group_last[key] = max(group_last.get(key, -1), r["last_position"])
    if not group_last:
        return commits, events
    events = [e for e in events if e[2].offset > group_last.get((e[0], e[1]), -1)]
    if commits.num_rows == 0:
        return commits, events
    lows = commits.group_by(["cluster_id", "group_id"], use_threads=False).aggregate([("offset", "min")])
    if all(low > group_last.get((c, g), -1) for c, g, low in zip(
            *(lows.column(n).to_pylist() for n in ("cluster_id", "group_id", "offset_min")), strict=True)):
        return commits, events
    # each commit's key's last audited position, the keys numbered by Arrow: no Python object
    # per commit (a whole batch replayed under a fresh checkpoint takes this path)
    names = ("cluster_id", "group_id", "topic", "partition")
    audited = list(last)
    mine, theirs = key_ids([commits.column(n) for n in names],
                           [pa.array([key[i] for key in audited]) for i in range(len(names))])
    before = np.full(max(int(mine.max()), int(theirs.max())) + 1, -1, np.int64)
    before[theirs] = np.fromiter(last.values(), np.int64, len(last))
    keep = commits.column("offset").to_numpy() > before[mine]
    return commits.filter(pa.array(keep, pa.bool_())), events


def revisit_unresolved(engine: DeltaEngine, clusters: set[str], app_id: str, version: int,
                       now: datetime) -> dict[str, int]:
    """Attribute again the commits left ``topic_unresolved`` (after new topic names were
    stored); ownership anomalies found now are added. Rows written per table."""
    if not clusters or not engine.exists(ATTRIBUTION) or engine.committed(ATTRIBUTION, app_id, version):
        return {}
    cols = ["cluster_id", "group_id", "topic", "partition", "committed_offset", "leader_epoch",
            "commit_timestamp", "offsets_partition", "offset", "record_timestamp"]
    # this scans the table (files mix every attribution): the attribution column alone first,
    # as most scans find nothing to revisit (10M commits: 1.4 s for the 11 columns), then
    # only the columns attribute() reads
    unresolved = KeyFilter.of(("cluster_id", "attribution"), {(c, "topic_unresolved") for c in clusters})
    if engine.read(ATTRIBUTION, ["attribution"], unresolved).num_rows == 0:
        return {}
    pending = engine.read(ATTRIBUTION, [*cols, "attribution"], unresolved)
    pending = pending.filter(pc.equal(pending.column("attribution"), "topic_unresolved")).select(cols)
    if pending.num_rows == 0:
        return {}
    again = attribute(pending, generation_rows(engine, pending), now)
    changed = again.filter(pc.not_equal(again.column("attribution"), "topic_unresolved"))
    written: dict[str, int] = {}
    if changed.num_rows and engine.merge(contract(ATTRIBUTION), changed.append_column(
            OP, pa.array(["upsert"] * changed.num_rows)), app_id, version):
        written[ATTRIBUTION] = changed.num_rows
    found = ownership_anomalies(changed, now)
    if found and engine.merge(contract(ANOMALIES), contract(ANOMALIES).change_set(found), app_id, version):
        written[ANOMALIES] = len(found)
    return written


def _names_learned(engine: DeltaEngine, clusters: set[str], now: datetime) -> bool:
    """Whether this batch stored a topic name (apply_state stamps its rows with ``now``)."""
    if not clusters or not engine.exists(topics.TABLE):
        return False
    table = engine.read(topics.TABLE, ["updated_at"], KeyFilter.of(("cluster_id",), {(c,) for c in clusters}))
    return bool(table.num_rows) and pc.any(pc.equal(table.column("updated_at"),
                                                    pa.scalar(now, TS))).as_py() is True


# ---------------------------------------------------------------------------------------------
# After a snapshot: the current offsets against its log bounds
# ---------------------------------------------------------------------------------------------


def snapshot_anomalies(engine: DeltaEngine, cluster_id: str, snapshot_id: str,
                       now: datetime) -> int:
    """After a snapshot is stored: the current committed offsets against its log bounds
    (past the end, below the start); rows written to ``offset_anomalies``."""
    revisit_unresolved(engine, {cluster_id}, f"offsetlake-attribution-{cluster_id}-{snapshot_id}", 0, now)
    if not engine.exists("committed_offsets") or not engine.exists("snapshot_log_end_offsets"):
        return 0
    bounds = engine.read("snapshot_log_end_offsets", None,
                         KeyFilter.of(("cluster_id", "snapshot_id"), {(cluster_id, snapshot_id)}))
    if bounds.num_rows == 0:
        return 0
    current = engine.read("committed_offsets", None, KeyFilter.of(("cluster_id",), {(cluster_id,)}))

    def attributed(rows: pa.Table, _numbers) -> tuple[list[Any], list[Any]]:
        """The flagged offsets' attribution, read at their positions only."""
        if not engine.exists(ATTRIBUTION):
            return [None] * rows.num_rows, [None] * rows.num_rows
        cols = ["cluster_id", "offsets_partition", "offset"]
        at = engine.read(ATTRIBUTION, [*cols, "attribution", "member_id"],
                         KeyFilter.of(cols, zip(*(rows.column(c).to_pylist() for c in cols), strict=True)))
        who, member = attribution_at(at, rows)
        return who.to_pylist(), member.to_pylist()

    # the current offsets were committed before this snapshot: both checks apply to them
    out = bound_anomalies(current, bounds, None, now, "snapshot", attributed)
    if not out:
        return 0
    ensure_tables(engine)
    app_id = f"offsetlake-anomalies-{cluster_id}-{snapshot_id}"
    return len(out) if engine.merge(contract(ANOMALIES), contract(ANOMALIES).change_set(out), app_id, 0) else 0


# ---------------------------------------------------------------------------------------------
# Backfill: a lake whose history predates the audit
# ---------------------------------------------------------------------------------------------

#: the Delta transaction app id of the automatic backfill (its own, apart from ingest's)
BACKFILL_APP = "offsetlake-audit-backfill"
#: the backfill's chunks are versions 1..n of its app id; 0 marks it started, this one done
BACKFILL_DONE = 1 << 40
#: offset commits per backfill chunk (memory of one chunk ~ this many commit rows)
BACKFILL_CHUNK = 100_000


def backfill_clusters(engine: DeltaEngine) -> list[str]:
    """Clusters whose history the audit does not cover, where the audit must be backfilled.

    Call before the audit tables are created. Two cases: the lake holds history but no
    ``offset_audit_cursor`` (ingested before the audit existed); or a backfill was started
    (its app id's version 0 is in the cursor) and did not finish (a crash). A lake whose
    cursor table exists was audited batch by batch from its first ingest, so its pending
    batches are replayed by the ingest itself (a backfill there would audit them twice).
    """
    if engine.exists(CURSOR) and (not engine.committed(CURSOR, BACKFILL_APP, 0)
                                  or engine.committed(CURSOR, BACKFILL_APP, BACKFILL_DONE)):
        return []
    return _history_clusters(engine)


def _history_clusters(engine: DeltaEngine) -> list[str]:
    """Every cluster with offset commits or group records (from the state tables: one row per
    key, not per record)."""
    clusters: set[str] = set()
    for table in ("committed_offsets", "group_records_latest"):
        if engine.exists(table):
            clusters |= set(pc.unique(engine.read(table, ["cluster_id"]).column(0)).to_pylist())
    return sorted(c for c in clusters if c is not None)


def backfill(engine: DeltaEngine, clusters: list[str], app_id: str = BACKFILL_APP,
             chunk: int | None = None, now: datetime | None = None) -> int:
    """Audit the whole history of ``clusters`` in log order through :func:`audit_batch` (the
    per-batch code path, not a second implementation); offset commits covered.

    Why chunks: each (cluster, offsets partition) is cut into position ranges of ``chunk``
    commits, walked in (cluster, offsets partition, offset) order, so one chunk's rows are
    all that is held; a group's records all live in one offsets partition, so the per-group
    cursor carries over chunks as over batches. Exactly once: version 0 of ``app_id`` marks
    the start, chunk i is batch i, :data:`BACKFILL_DONE` the end; the plan depends only on
    the history, which no ingest changes before the backfill is done (ingest runs it first),
    so a rerun after a crash skips the chunks that landed and redoes the rest.
    """
    if not clusters or not engine.exists("offset_commits"):
        return 0
    now = now or datetime.now(timezone.utc)
    chunk = chunk or BACKFILL_CHUNK
    started = time.perf_counter()
    empty = contract(CURSOR).arrow_schema.empty_table()
    engine.append(contract(CURSOR), empty, app_id, 0)  # started: creates the cursor table
    ensure_tables(engine)
    batch_id, covered = 0, 0
    for cluster_id in clusters:
        for part in _offsets_partitions(engine, cluster_id):
            for batch, n in _chunks(engine, cluster_id, part, chunk):
                batch_id += 1
                audit_batch(engine, batch, app_id, batch_id, now)
                covered += n
    engine.append(contract(CURSOR), empty, app_id, BACKFILL_DONE)
    seconds = time.perf_counter() - started
    log.info("audit backfill %s: %d offset commits of %d cluster(s) in %d chunks, %.1f s",
             app_id, covered, len(clusters), batch_id, seconds)
    return covered


def _offsets_partitions(engine: DeltaEngine, cluster_id: str) -> list[int]:
    parts: set[int] = set()
    only = KeyFilter.of(("cluster_id",), {(cluster_id,)})
    for table in ("offset_commits", "group_metadata"):
        if engine.exists(table):
            parts |= set(pc.unique(engine.read(table, ["offsets_partition"], only).column(0)).to_pylist())
    return sorted(p for p in parts if p is not None)


def _chunks(engine: DeltaEngine, cluster_id: str, part: int, chunk: int):
    """(StateInput, commits) per position range of one offsets partition: ranges cut every
    ``chunk`` commits and together covering every position, group records included."""
    where = KeyFilter.of(("cluster_id", "offsets_partition"), {(cluster_id, part)})
    offsets = distinct_sorted(engine.read("offset_commits", ["offset"], where).column(0).to_numpy())
    gm = engine.read("group_metadata", ["group_id", "record_type", "is_tombstone", "offset"], where) \
        if engine.exists("group_metadata") else None
    if gm is not None:
        gm = gm.filter(pc.is_in(gm.column("record_type"), pa.array(GROUP_RECORD_TYPES, gm.schema.field(
            "record_type").type)))
        gm = gm.take(pc.sort_indices(gm, [("offset", "ascending")]))
    events: list[GroupRecord] = []
    seen: set[int] = set()
    for r in (gm.to_pylist() if gm is not None else []):
        if r["offset"] not in seen:
            seen.add(r["offset"])
            events.append(GroupRecord(cluster_id, r["group_id"], LatestRecord(
                r["record_type"], "", bool(r["is_tombstone"]), None, part, r["offset"])))
    last = max([int(o) for o in offsets[-1:]] + [e.record.offset for e in events[-1:]], default=0)
    starts = [0] + [int(o) for o in offsets[chunk::chunk]]
    ends = [s - 1 for s in starts[1:]] + [last]
    positions = np.array([e.record.offset for e in events], np.int64)
    for lo, hi in zip(starts, ends, strict=True):
        mine = events[np.searchsorted(positions, lo, side="left"):np.searchsorted(positions, hi, side="right")]
        n = int(np.searchsorted(offsets, hi, side="right") - np.searchsorted(offsets, lo, side="left"))
        if not n and not mine:
            continue
        ranges = pa.table({"cluster_id": [cluster_id], "offsets_partition": pa.array([part], pa.int32()),
                           "min_offset": pa.array([lo], pa.int64()), "max_offset": pa.array([hi], pa.int64())})
        yield StateInput(contract("offset_commits").arrow_schema.empty_table(), GroupColumns.of(mine), ranges), n


def rebuild(engine: DeltaEngine, clusters: list[str] | None = None) -> int:
    """``maintain --rebuild-audit``: empty the three audit tables and audit the whole history
    again (a fresh app id: a crash leaves them partial, and a rerun rebuilds them again);
    offset commits covered."""
    clusters = _history_clusters(engine) if clusters is None else clusters
    for name in TABLES:
        engine.overwrite(contract(name), contract(name).arrow_schema.empty_table())
    return backfill(engine, clusters, f"offsetlake-audit-rebuild-{uuid.uuid4()}")
