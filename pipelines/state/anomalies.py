"""Which commits look wrong: ``offset_anomalies`` rows. Rewinds, leader-epoch regressions
and a commit resurrecting a deleted group (in log order, from the audit cursor's facts);
zombie commits and commits for partitions the group never assigned (from the attribution);
commits past the log end or below the log start (against the snapshots' log bounds).
Pure computation over Arrow tables; :mod:`pipelines.state.audit` reads and writes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.engines import DeltaEngine
from pipelines.lake.keys import KeyFilter, distinct_keys
from pipelines.model import distinct_sorted, micros_of
from pipelines.state.attribution import REASONS
from pipelines.state.key_ids import key_ids

ANOMALIES = "offset_anomalies"
#: kind -> (severity, reason)
KINDS = {
    "offset_rewind": ("warning", "committed offset lower than the previous commit of the key "
                                 "(a reset or reprocessing)"),
    "leader_epoch_regression": ("warning", "leader epoch lower than the previous commit's "
                                           "(a stale or restarted client)"),
    "commit_after_group_deleted": ("warning", "first commit after the group's tombstone "
                                              "(DeleteGroups), with no new group record between: "
                                              "the commit recreated the group"),
    "zombie_commit": ("critical", REASONS["zombie"]),
    "unassigned_partition": ("warning", REASONS["unassigned"]),
    "past_log_end": ("critical", "committed offset beyond the partition's log end offset at a "
                                 "snapshot taken after the commit: the consumer resets "
                                 "(auto.offset.reset) on its next fetch"),
    "below_log_start": ("warning", "committed offset below the partition's log start offset "
                                   "at the snapshot: records were deleted by retention before "
                                   "the group read them (data skipped)"),
}


# A rewind the group's no-member state explains (admin reset) is informational.
_REWIND_INFO = {"group_empty", "no_membership"}


def anomaly_row(kind: str, c: dict[str, Any], now: datetime, source: str, **evidence: Any) -> dict[str, Any]:
    severity, reason = KINDS[kind]
    if kind == "offset_rewind" and c.get("attribution") in _REWIND_INFO:
        severity = "info"
    return {"cluster_id": c["cluster_id"], "kind": kind, "severity": severity,
            "group_id": c["group_id"], "topic": c["topic"], "partition": c["partition"],
            "committed_offset": c["committed_offset"], "leader_epoch": c.get("leader_epoch"),
            "offsets_partition": c["offsets_partition"], "offset": c["offset"],
            "commit_timestamp": c.get("commit_timestamp"), "record_timestamp": c.get("record_timestamp"),
            "attribution": c.get("attribution"), "member_id": c.get("member_id"),
            "previous_offset": None, "previous_leader_epoch": None, "previous_position": None,
            "log_start_offset": None, "log_end_offset": None, "snapshot_id": None,
            "snapshot_captured_at": None, "reason": reason, "detected_by": source,
            "detected_at": now, **evidence}


class LiveAttribution:
    """The attribution of a batch's commits, looked up by their row in the batch.

    ``attribution`` holds one row per commit that is not an offset tombstone, in the commits'
    order (``attribute`` over :func:`pipelines.state.audit._live`), so a commit's row there is
    its rank among them: a take, where a search by position sorted the whole attribution for
    every lookup (7.8M commits: 0.94 s of the batch's 3.9 s of sequence checks)."""

    def __init__(self, attribution: pa.Table, commits: pa.Table) -> None:
        self.live = pc.fill_null(pc.equal(commits.column("is_tombstone"), False), False)
        count = pc.sum(self.live).as_py() or 0
        if count != attribution.num_rows:
            raise ValueError(f"{attribution.num_rows} attribution rows for {count} live commits")
        self.attribution, self.row = attribution, None

    def at(self, rows: np.ndarray) -> tuple[list[Any], list[Any]]:
        """(attribution, member_id) of the commits at ``rows`` (live ones) of the batch."""
        if not len(rows):
            return [], []
        if self.row is None:  # ranked on the first lookup (most batches flag nothing)
            self.row = np.cumsum(self.live.to_numpy(zero_copy_only=False)) - 1
        where = pa.array(self.row[rows])
        return (self.attribution.column("attribution").take(where).to_pylist(),
                self.attribution.column("member_id").take(where).to_pylist())


def sequence_anomalies(commits: pa.Table, events: list[tuple[str, str, Any]],
                       cursor: list[dict[str, Any]], attribution: pa.Table, now: datetime
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rewinds, leader-epoch regressions and commits after a group tombstone, in log order
    from the cursor (the facts before this batch); returns anomalies and the new cursor rows.
    ``attribution`` is one row per live commit, in order (see :class:`LiveAttribution`).

    Vectorized over the batch: the cursor's last commit per key is prepended as a row at
    position -1, rows are sorted by (key, position) and each compared with the row before
    it; an offset tombstone forgets the key's previous offset and epoch.
    """
    key_cols = ["cluster_id", "group_id", "topic", "partition"]
    rows, prior, prior_position = _after_cursor(cursor, commits)
    real = np.r_[np.zeros(prior, bool), np.ones(commits.num_rows, bool)]
    out: list[dict[str, Any]] = []
    new_cursor: list[dict[str, Any]] = []
    attributed = LiveAttribution(attribution, commits)
    if commits.num_rows:
        kid = key_ids([rows.column(c) for c in key_cols])[0]
        pos = rows.column("offset").to_numpy().astype(np.int64)
        order = _by_key_and_position(kid, pos)
        # where each row's record lies: the cursor's rows (sorted first at -1) at the position
        # it kept, so a previous commit in an earlier batch is named as in the same batch
        where = np.r_[prior_position, pos[prior:]][order]
        k, pos, real_o = kid[order], pos[order], real[order]
        off = pc.fill_null(rows.column("committed_offset"), -1).to_numpy().astype(np.int64)[order]
        tomb = rows.column("is_tombstone").to_numpy(zero_copy_only=False)[order]
        epoch = pc.fill_null(rows.column("leader_epoch"), -1).to_numpy().astype(np.int64)[order]
        first = np.r_[True, k[1:] != k[:-1]]
        after_tomb = np.r_[False, tomb[:-1]]
        has_prev = ~first & ~after_tomb
        prev = np.r_[-1, off[:-1]]
        # the last epoch >= 0 up to each row, not crossing a tombstone or a key change: a
        # forward fill by running maxima of row numbers (the last known row so far, the
        # start of the row's run), not a pandas grouped fill (a 7.8M-commit batch's sequence
        # checks: 2.17 -> 2.02 s)
        boundary = first | after_tomb
        last_known = _last_in_run((epoch >= 0) & ~tomb, _run_starts(boundary))
        filled = np.where(last_known >= 0, epoch[np.maximum(last_known, 0)], np.nan)
        prev_epoch = np.r_[np.nan, filled[:-1]]
        prev_epoch[boundary] = np.nan
        live = real_o & ~tomb
        rewind = live & has_prev & (off < prev)
        regress = live & (epoch >= 0) & ~np.isnan(prev_epoch) & (epoch < np.nan_to_num(prev_epoch, nan=-1))
        flagged = rewind | regress
        if flagged.any():
            idx = order[flagged]
            full = _rows_at(commits, idx - prior)
            who, member = attributed.at(idx - prior)
            for at, c, w, m in zip(np.flatnonzero(flagged).tolist(), full.to_pylist(), who, member, strict=True):
                c.update(attribution=w, member_id=m)
                ev = {"previous_offset": int(prev[at]) if has_prev[at] else None,
                      "previous_leader_epoch": None if np.isnan(prev_epoch[at]) else int(prev_epoch[at]),
                      "previous_position": int(where[at - 1]) if has_prev[at] and where[at - 1] >= 0 else None}
                if rewind[at]:
                    out.append(anomaly_row("offset_rewind", c, now, "ingest", **ev))
                if regress[at]:
                    out.append(anomaly_row("leader_epoch_regression", c, now, "ingest", **ev))
        last = np.r_[k[1:] != k[:-1], True] & real_o
        lk = rows.select(key_cols).take(pa.array(order[last])).to_pylist()
        for i, r in zip(np.flatnonzero(last), lk, strict=True):
            t = bool(tomb[i])
            new_cursor.append({**r, "last_offset": None if t else int(off[i]),
                               "last_leader_epoch": None if t or np.isnan(filled[i]) else int(filled[i]),
                               "last_position": int(pos[i]), "group_deleted_at": None,
                               "offsets_deleted": None, "updated_at": now})
    out += _after_deletion(commits, events, cursor, attributed, now, new_cursor)
    return out, new_cursor


def _after_cursor(cursor: list[dict[str, Any]], commits: pa.Table) -> tuple[pa.Table, int, np.ndarray]:
    """The cursor's last commit per key as rows at position -1, then the batch's commits, in
    the batch's types (its strings may be dictionaries, which key_ids takes as they are);
    how many rows the cursor gave, and the positions it kept for them (-1: none kept)."""
    prior = [r for r in cursor if r["partition"] >= 0 and r["last_offset"] is not None]
    kept = np.array([-1 if r.get("last_position") is None else r["last_position"] for r in prior], np.int64)
    seed = pa.table({
        "cluster_id": pa.array([r["cluster_id"] for r in prior], pa.string()),
        "group_id": pa.array([r["group_id"] for r in prior], pa.string()),
        "topic": pa.array([r["topic"] for r in prior], pa.string()),
        "partition": pa.array([r["partition"] for r in prior], pa.int32()),
        "committed_offset": pa.array([r["last_offset"] for r in prior], pa.int64()),
        "leader_epoch": pa.array([r["last_leader_epoch"] for r in prior], pa.int32()),
        "is_tombstone": pa.array([False] * len(prior), pa.bool_()),
        "offset": pa.array([-1] * len(prior), pa.int64()),
    })
    body = commits.select(list(seed.column_names))
    body = body.cast(pa.schema([f.with_type(b.type) if pa.types.is_dictionary(b.type) else f
                                for f, b in zip(seed.schema, body.schema, strict=True)]))
    return pa.concat_tables([seed.cast(body.schema), body]), len(prior), kept


def _by_key_and_position(kid: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The row order by (key, position), ties in row order: ``np.lexsort((pos, kid))``.

    The rows come in log order with the cursor's first, so a stable sort by key alone
    (a radix sort while the keys fit 16 bits) usually orders each key's positions already;
    checked, else sorted by both (1M commits: 0.13 -> 0.06 s)."""
    if len(kid) and kid.max() < 1 << 16:
        order = np.argsort(kid.astype(np.uint16), kind="stable")
        k, p = kid[order], pos[order]
        if np.all((k[1:] != k[:-1]) | (p[1:] >= p[:-1])):
            return order
    return np.lexsort((pos, kid))


def _after_deletion(commits: pa.Table, events: list[tuple[str, str, Any]], cursor: list[dict[str, Any]],
                    attributed: LiveAttribution, now: datetime, new_cursor: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """The first commit after a group's deletion with no new group record between.

    A deletion is a group-level tombstone whose group's last offset record before it is a
    tombstone (DeleteGroups and expiry write the offset tombstones first). A lone
    GroupMetadata tombstone is the classic -> consumer conversion, not a deletion (on a
    compacted log the consumer-group records written with it may be gone).
    Per group, the cursor row (topic '', partition -1) keeps whether the last offset record
    was a tombstone and the pending deletion's position; appended to ``new_cursor``.
    """
    before = {(r["cluster_id"], r["group_id"]): r for r in cursor if r["partition"] < 0}
    # group -> (pending deletion's position or None, was its last offset record a tombstone)
    state = {k: (r["group_deleted_at"], bool(r["offsets_deleted"])) for k, r in before.items()}
    # the log-order walk is only needed where a deletion is pending or a group tombstone lands
    # (rare); elsewhere a group record only clears a deletion there is none of
    detailed = {k for k, (at, _) in state.items() if at is not None} | {
        (c, g) for c, g, r in events if r.is_tombstone}
    for c, g, _ in events:
        state.setdefault((c, g), (None, False))
    if commits.num_rows:  # every group: was its last offset record of the batch a tombstone?
        for key, deleted in _last_is_tombstone(commits).items():
            if key not in detailed:
                state[key] = (None, deleted)
    out = _deletion_walk(commits, events, sorted(detailed), state, attributed, now) if detailed else []
    for (cluster_id, group_id), (deleted_at, offsets_deleted) in sorted(state.items()):
        old = before.get((cluster_id, group_id))
        if old is not None and old["group_deleted_at"] == deleted_at \
                and bool(old["offsets_deleted"]) == offsets_deleted:
            continue
        new_cursor.append({"cluster_id": cluster_id, "group_id": group_id, "topic": "", "partition": -1,
                           "last_offset": None, "last_leader_epoch": None, "last_position": None,
                           "group_deleted_at": deleted_at, "offsets_deleted": offsets_deleted,
                           "updated_at": now})
    return out


def _walk_rows(commits: pa.Table, events: list[tuple[str, str, Any]], groups: list[tuple[str, str]]
               ) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the deletion walk: ``groups``' commits (``mine``, their row numbers in
    ``commits``), then their group records; per row its group's index in ``groups``, whether
    it is a commit, whether it is a tombstone, and its (offsets partition, position)."""
    at_group = {k: i for i, k in enumerate(groups)}
    mine, rows = _of_groups(commits, set(groups))
    c_group = np.zeros(0, np.int64)
    if mine.num_rows:  # each commit's group, numbered as in ``groups``
        sorted_ids, commit_ids = key_ids(
            [pa.array([c for c, _ in groups], pa.string()), pa.array([g for _, g in groups], pa.string())],
            [mine.column("cluster_id"), mine.column("group_id")])
        number = np.zeros(int(sorted_ids.max()) + 1, np.int64)
        number[sorted_ids] = np.arange(len(groups))
        c_group = number[commit_ids]
    ev = np.array([(at_group[(c, g)], r.offsets_partition, r.offset, r.is_tombstone)
                   for c, g, r in events if (c, g) in at_group], np.int64).reshape(-1, 4)
    group = np.r_[c_group, ev[:, 0]]
    is_commit = np.r_[np.ones(mine.num_rows, bool), np.zeros(len(ev), bool)]
    tomb = np.r_[pc.fill_null(mine.column("is_tombstone"), False).to_numpy(zero_copy_only=False).astype(bool),
                 ev[:, 3].astype(bool)]
    partition = np.r_[mine.column("offsets_partition").to_numpy().astype(np.int64), ev[:, 1]]
    position = np.r_[mine.column("offset").to_numpy().astype(np.int64), ev[:, 2]]
    return mine, rows, group, is_commit, tomb, partition, position


def _deletion_walk(commits: pa.Table, events: list[tuple[str, str, Any]], groups: list[tuple[str, str]],
                   state: dict[tuple[str, str], tuple[int | None, bool]], attributed: LiveAttribution,
                   now: datetime) -> list[dict[str, Any]]:
    """The log-order walk of ``groups``' commits and group records, as arrays: the anomalies,
    and each group's state after the batch written back into ``state``.

    Per group the walk is a two-variable machine. An offset record sets "offsets deleted"
    (tombstone: yes, commit: no); a group record sets the pending deletion (its position if
    it is a tombstone and the offsets were deleted, else none); a commit clears it, flagged
    if one was pending. So each row's state is that of the last row of the right kind
    before it in its group, found by running maxima of row numbers, and only the flagged
    commits become Python objects (it walked a row at a time in Python: 0.53-0.76 s per 2.8M
    commits of the 10M history, 0.68-0.73 s per 1.2M of the group-heavy one; now 0.11-0.19 s)."""
    mine, rows, group, is_commit, tomb, partition, position = _walk_rows(commits, events, groups)
    order = np.lexsort((position, partition, group))  # stable: a commit before a record at a tie
    n = len(order)
    if not n:
        return []
    group, is_commit, tomb, position = group[order], is_commit[order], tomb[order], position[order]
    start = _run_starts(np.r_[True, group[1:] != group[:-1]])
    known0 = np.array([state[k][0] is not None for k in groups], bool)
    at0 = np.array([state[k][0] or 0 for k in groups], np.int64)
    deleted0 = np.array([state[k][1] for k in groups], bool)

    def before(found: np.ndarray) -> np.ndarray:
        """``found`` of the row before, in the same group (-1 at a group's first row)."""
        out = np.r_[-1, found[:-1]]
        return np.where(out >= start, out, -1)

    offset_rec = _last_in_run(is_commit, start)
    prev_offset_rec = before(offset_rec)
    deleted = np.where(prev_offset_rec >= 0, tomb[np.maximum(prev_offset_rec, 0)], deleted0[group])
    live = is_commit & ~tomb
    pends = ~is_commit & tomb & deleted  # a group record that leaves a deletion pending
    setter = _last_in_run(~is_commit | live, start)
    prev = before(setter)
    pending = np.where(prev >= 0, pends[np.maximum(prev, 0)], known0[group])
    pending_at = np.where(prev >= 0, position[np.maximum(prev, 0)], at0[group])
    out = []
    flagged = np.flatnonzero(live & pending)
    if len(flagged):
        picked = order[flagged]  # rows of ``mine``: commits come first in the concatenation
        who, member = attributed.at(rows[picked])
        for commit, w, mem, at in zip(_rows_at(mine, picked).to_pylist(), who, member,
                                      pending_at[flagged].tolist(), strict=True):
            commit.update(attribution=w, member_id=mem)
            out.append(anomaly_row("commit_after_group_deleted", commit, now, "ingest",
                                   reason=KINDS["commit_after_group_deleted"][1] + f" (tombstone at offset {at})"))
    ends = np.r_[group[1:] != group[:-1], True]
    for i in np.flatnonzero(ends).tolist():
        key, s, o = groups[group[i]], setter[i], offset_rec[i]
        at, was_deleted = state[key]
        if s >= 0:
            at = int(position[s]) if pends[s] else None
        if o >= 0:
            was_deleted = bool(tomb[o])
        state[key] = (at, was_deleted)
    return out


def _run_starts(boundary: np.ndarray) -> np.ndarray:
    """Per row, the row its run starts at (``boundary``: the rows that start one)."""
    return np.maximum.accumulate(np.where(boundary, np.arange(len(boundary)), 0))


def _last_in_run(kind: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per row, the last row of ``kind`` up to and including it within its run (runs start
    at ``start``, see :func:`_run_starts`); -1 where the run has none so far."""
    found = np.maximum.accumulate(np.where(kind, np.arange(len(kind)), -1))
    return np.where(found >= start, found, -1)


def _rows_at(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table``'s rows at ``rows``: a few are sliced out (a take first joins the chunks of
    every column: 0.1 s for 4 of a batch's 7.8M commits), many taken."""
    if len(rows) > 256:
        return table.take(pa.array(rows))
    return pa.concat_tables([table.slice(int(i), 1) for i in rows]) if len(rows) else table.slice(0, 0)


def _last_is_tombstone(commits: pa.Table) -> dict[tuple[str, str], bool]:
    """Per (cluster, group) of the commits, whether its last one in log order is a tombstone.

    Only the groups with a tombstone in the batch (few: offset deletions, DeleteGroups) are
    ordered; the others' last commit is a value (7.8M commits: 0.47 -> 0.12 s)."""
    keys = ["cluster_id", "group_id"]
    out = dict.fromkeys(distinct_keys(commits, keys), False)
    tombstone = pc.fill_null(commits.column("is_tombstone"), False)
    deleting = distinct_keys(commits.filter(tombstone), keys)
    if deleting:
        from pipelines.state.offsets import last_per_key

        rows, _ = _of_groups(commits.select([*keys, "offsets_partition", "offset", "is_tombstone"]), deleting)
        last = last_per_key(rows, keys)
        for c, g, t in zip(*(last.column(n).to_pylist() for n in (*keys, "is_tombstone")), strict=True):
            out[(c, g)] = bool(t)
    return out


def _of_groups(table: pa.Table, groups: set[tuple[str, str]]) -> tuple[pa.Table, np.ndarray]:
    """The rows of ``table`` whose (cluster, group) is in ``groups``, and their row numbers:
    narrowed by group id alone first (one hash of one column), then by both."""
    rows = np.arange(table.num_rows)
    if not table.num_rows:
        return table, rows
    ids = pa.array(sorted({g for _, g in groups}), pa.string())
    narrow = _is_in(table.column("group_id"), ids)
    table, rows = table.filter(narrow), rows[narrow.to_numpy(zero_copy_only=False)]
    keys = pa.array([f"{c}\x1f{g}" for c, g in groups])
    joined = pc.binary_join_element_wise(pc.cast(table.column("cluster_id"), pa.string()),
                                         pc.cast(table.column("group_id"), pa.string()), "\x1f")
    exact = pc.fill_null(pc.is_in(joined, value_set=keys), False)
    return table.filter(exact), rows[exact.to_numpy(zero_copy_only=False)]


def _is_in(column: pa.ChunkedArray, values: pa.Array) -> pa.ChunkedArray:
    """Per row, whether its value is one of ``values`` (null: no). A dictionary column (a
    batch's group ids as read back) is looked up in its dictionary, its rows then take the
    answer: is_in on the rows decoded every one of them (2M rows: 0.127 -> 0.010 s)."""
    if not pa.types.is_dictionary(column.type):
        return pc.fill_null(pc.is_in(column, value_set=values), False)
    return pa.chunked_array([pc.fill_null(pc.is_in(c.dictionary, value_set=values).take(c.indices), False)
                             for c in column.chunks], pa.bool_())


def ownership_anomalies(attribution: pa.Table, now: datetime) -> list[dict[str, Any]]:
    """Zombie commits and commits for partitions the group never assigned."""
    if attribution.num_rows == 0:
        return []
    bad = attribution.filter(_is_in(attribution.column("attribution"), pa.array(["zombie", "unassigned"])))
    out = []
    for c in bad.to_pylist():
        kind = "zombie_commit" if c["attribution"] == "zombie" else "unassigned_partition"
        extra = {}
        if kind == "zombie_commit":
            extra["reason"] = (KINDS[kind][1] + f" (last owner {c['last_owner_member_id']}, client "
                               f"{c['last_owner_client_id']}, lost it at offset {c['last_owner_lost_at_offset']})")
        out.append(anomaly_row(kind, c, now, "ingest", **extra))
    return out


# ---------------------------------------------------------------------------------------------
# Log bounds from snapshots (ingest: snapshots already stored; snapshot: the current offsets)
# ---------------------------------------------------------------------------------------------


def _log_bounds(engine: DeltaEngine, clusters: set[str]) -> pa.Table | None:
    if not clusters or not engine.exists("snapshot_log_end_offsets"):
        return None
    table = engine.read("snapshot_log_end_offsets", None, KeyFilter.of(("cluster_id",), {(c,) for c in clusters}))
    return table if table.num_rows else None


#: the key of a partition's log bounds
_PARTITION = ["cluster_id", "topic", "partition"]


def log_bound_anomalies(engine: DeltaEngine, commits: pa.Table, attribution: pa.Table, now: datetime,
                        source: str) -> list[dict[str, Any]]:
    """This batch's commits against the snapshots the lake already holds."""
    if commits.num_rows == 0:
        return []
    bounds = _log_bounds(engine, {c for c, in distinct_keys(commits, ("cluster_id",))})
    if bounds is None:
        return []
    attributed = LiveAttribution(attribution, commits)
    return bound_anomalies(commits, bounds, commits.column("commit_timestamp"), now, source,
                           lambda _picked, rows: attributed.at(rows))


def bound_anomalies(rows: pa.Table, bounds: pa.Table, at: pa.ChunkedArray | None, now: datetime,
                    source: str, attribution: Callable[[pa.Table, np.ndarray], tuple[list[Any], list[Any]]]
                    ) -> list[dict[str, Any]]:
    """``rows`` (commits: cluster, topic, partition, committed offset, position) past a
    snapshot's log end or below its log start, with the snapshot's bounds as evidence.

    Past the end is certain against a snapshot taken at or after the commit (the log end only
    grows): a row's partition's first snapshot captured at or after ``at`` is checked. Below
    the start against one taken at or before it (the log start only grows): the last captured
    at or before ``at``. ``at`` None: every snapshot counts as after the commit for the first
    check and as before it for the second (the current offsets against a snapshot); a null
    time (no commit timestamp) gets the first check only. ``attribution(flagged, rows)``
    gives the ``attribution`` and ``member_id`` lists of the flagged rows (a table of them,
    and their row numbers in ``rows``).

    Vectorized: a batch of a million commits against every snapshot the lake holds costs a
    few sorted searches (per row in Python, it was 8.8 s for 1M commits and 2 snapshots per
    partition); only flagged rows become Python objects."""
    if rows.num_rows == 0 or bounds.num_rows == 0:
        return []
    n = rows.num_rows
    k_row, k_bound = key_ids([rows.column(c) for c in _PARTITION], [bounds.column(c) for c in _PARTITION])
    captured = micros_of(bounds.column("captured_at")).to_numpy()
    times = distinct_sorted(captured)
    # (partition, rank of the capture time) as one sortable integer per snapshot row
    width = np.int64(len(times) + 1)
    order = np.lexsort((captured, k_bound))  # stable: equal times keep the table's order
    comp = (k_bound * width + np.searchsorted(times, captured))[order]
    if at is None:
        after_rank, before_rank, timed = np.zeros(n, np.int64), np.full(n, len(times), np.int64), np.ones(n, bool)
    else:
        stamps = micros_of(at)
        timed = pc.is_valid(stamps).to_numpy(zero_copy_only=False)
        stamps = pc.fill_null(stamps, 0).to_numpy()
        after_rank = np.where(timed, np.searchsorted(times, stamps, side="left"), 0)
        before_rank = np.searchsorted(times, stamps, side="right")

    def snapshot(rank: np.ndarray, shift: int, usable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, snapshot row) per row: the sorted snapshot at the row's (partition, rank)
        search position plus ``shift``, if it is the row's partition's."""
        j = np.searchsorted(comp, k_row * width + rank, side="left") + shift
        found = usable & (j >= 0) & (j < len(comp))
        found[found] = k_bound[order[j[found]]] == k_row[found]
        return found, order[np.clip(j, 0, len(comp) - 1)]

    after, a = snapshot(after_rank, 0, np.ones(n, bool))  # the first captured at/after
    before, b = snapshot(before_rank, -1, timed)  # the last captured at/before
    committed = pc.is_valid(rows.column("committed_offset")).to_numpy(zero_copy_only=False)
    offset = pc.fill_null(rows.column("committed_offset"), 0).to_numpy()
    end, start = bounds.column("log_end_offset"), bounds.column("log_start_offset")
    end_known, start_known = (pc.is_valid(c).to_numpy(zero_copy_only=False) for c in (end, start))
    end, start = (pc.fill_null(c, 0).to_numpy() for c in (end, start))
    past = committed & after & end_known[a] & (offset > end[a])
    below = committed & before & start_known[b] & (offset < start[b])
    flagged = np.flatnonzero(past | below)
    if not len(flagged):
        return []
    picked = rows.take(pa.array(flagged))
    who, member = attribution(picked, flagged)
    snapshots = bounds.to_pylist()
    out = []
    for i, c, w, m in zip(flagged.tolist(), picked.to_pylist(), who, member, strict=True):
        c.update(attribution=w, member_id=m)
        for kind, hit, s in (("past_log_end", past, a), ("below_log_start", below, b)):
            if hit[i]:
                snap = snapshots[s[i]]
                out.append(anomaly_row(kind, c, now, source, log_end_offset=snap["log_end_offset"],
                                       log_start_offset=snap["log_start_offset"], snapshot_id=snap["snapshot_id"],
                                       snapshot_captured_at=snap["captured_at"]))
    return out


def log_start_recorded(engine: DeltaEngine) -> bool:
    """Whether any snapshot recorded a log start offset (``below_log_start`` needs one)."""
    if not engine.exists("snapshot_log_end_offsets"):
        return False
    try:
        column = engine.read("snapshot_log_end_offsets", ["log_start_offset"]).column(0)
    except Exception:  # an older lake whose snapshots predate the column
        return False
    return column.null_count < len(column)


def anomaly_counts(engine: DeltaEngine, cluster_id: str) -> dict[str, int]:
    """Anomalies by kind for one cluster (every kind listed, zeros included)."""
    counts = dict.fromkeys(KINDS, 0)
    if not engine.exists(ANOMALIES):
        return counts
    table = engine.read(ANOMALIES, ["cluster_id", "kind"], KeyFilter.of(("cluster_id",), {(cluster_id,)}))
    for row in pc.value_counts(table.column("kind")).to_pylist():
        counts[row["values"]] = row["counts"]
    return counts
