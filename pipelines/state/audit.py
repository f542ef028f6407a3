"""Who committed what, and which commits look wrong: ``commit_attribution`` and ``offset_anomalies``.

Why: a commit record carries no member id; the group records do. Each offset commit is
tied to the member whose generation (classic) or member-epoch assignment (KIP-848) held
the partition at the commit's log position, from ``group_generations``; commits that no
member held are given a reason instead. The same pass flags commits an auditor asks
about (rewinds, leader-epoch regressions, a commit resurrecting a deleted group, commits
by a member that had lost the partition or for partitions the group never assigned);
the snapshot adds those that need the log's own bounds (past the log end, below the log
start).

Batch independence: a commit's owner is always decided by group records at earlier log
positions of the same ``__consumer_offsets`` partition, so they were applied in this or an
earlier batch; the per-key "previous commit" and "group deleted at" facts carry over
batches in the small ``offset_audit_cursor`` table. Exactly once: the cursor is written
last, each table with the batch's transaction id; a replay recomputes from the cursor as
it was before the batch (unchanged until the cursor commits) and skips what landed.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine
from pipelines.lake.keys import KeyFilter, quote_identifier, sql_literal
from pipelines.model import OP, GroupRecord, LatestRecord, StateInput
from pipelines.state import topics

log = logging.getLogger(__name__)

ATTRIBUTION = "commit_attribution"
ANOMALIES = "offset_anomalies"
CURSOR = "offset_audit_cursor"
TABLES = (ATTRIBUTION, ANOMALIES, CURSOR)
TS = pa.timestamp("us", tz="UTC")
#: group-level metadata records whose tombstone deletes the group (classic, consumer, share, streams)
GROUP_RECORD_TYPES = (2, 3, 11, 17)

#: attribution -> why the commit has no (current) owner
REASONS = {
    "zombie": "no member held the partition at this position; its last owner lost it in a "
              "rebalance earlier (a zombie commit by a member that had lost the partition)",
    "unassigned": "the group had an active assignment at this position, but no member was "
                  "ever assigned this partition in the recorded history (or the log lacks the "
                  "record that assigned it: compacted away, or a generation that wrote none)",
    "group_empty": "the group had no member at this position (generation without members "
                   "or all members gone): an admin --reset-offsets, or a tool committing "
                   "for the empty group",
    "no_membership": "no classic generation, KIP-848 assignment or streams task assignment of "
                     "the group covers this position and none did before: a simple group "
                     "(assign() client) or an admin tool (or the log lost the group's records "
                     "to compaction)",
    "topic_unresolved": "the group's KIP-848 assignment names topics by id and no name is known "
                        "for one of them yet; attributed again when the name is learned (a "
                        "snapshot, or a 4.1+ commit carrying the topic id)",
}
_TOPIC_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")  # a Kafka topic id as the decoder writes it
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
        return cls(("cluster_id", "offsets_partition"), frozenset((c, p) for c, p, _, _ in rows), (), rows)

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


def batch_commits(engine: DeltaEngine, batch: StateInput) -> pa.Table:
    """Every offset-commit row of this batch, read back from the ``offset_commits`` history
    (the driver holds only the batch's state rows), in log order, one row per position."""
    ranges = batch.commit_ranges
    if ranges is None or ranges.num_rows == 0:
        return contract("offset_commits").arrow_schema.empty_table().select(_COMMIT_COLUMNS)
    table = engine.read("offset_commits", _COMMIT_COLUMNS, PositionRanges.of_ranges(ranges))
    return _dedupe_positions(table)


def _dedupe_positions(table: pa.Table) -> pa.Table:
    if table.num_rows == 0:
        return table
    cluster = pc.dictionary_encode(table.column("cluster_id")).combine_chunks()
    order = np.lexsort((table.column("offset").to_numpy(), table.column("offsets_partition").to_numpy(),
                        cluster.indices.to_numpy()))
    table = table.take(order)
    c = cluster.indices.to_numpy()[order]
    p = table.column("offsets_partition").to_numpy()
    o = table.column("offset").to_numpy()
    keep = np.ones(len(o), bool)
    keep[1:] = (c[1:] != c[:-1]) | (p[1:] != p[:-1]) | (o[1:] != o[:-1])
    return table if keep.all() else table.filter(pa.array(keep))


def audit_batch(engine: DeltaEngine, batch: StateInput, app_id: str, batch_id: int,
                now: datetime) -> dict[str, int]:
    """Attribute and check this batch's commits (after the state tables took the batch);
    rows written per table."""
    if batch.commit_ranges is None or engine.committed(CURSOR, app_id, batch_id):
        return {}
    ensure_tables(engine)
    commits = batch_commits(engine, batch)
    events = [(g.cluster_id, g.group_id, g.record) for g in batch.group_records
              if g.record.record_type in GROUP_RECORD_TYPES]
    groups = {(c, g) for c, g in zip(commits.column("cluster_id").to_pylist(),
                                     commits.column("group_id").to_pylist(), strict=True)}
    groups |= {(c, g) for c, g, _ in events}
    if not groups:
        return {}
    cursor = engine.read(CURSOR, None, KeyFilter.of(("cluster_id", "group_id"), groups)).to_pylist()
    commits, events = _not_yet_audited(commits, events, cursor)
    if commits.num_rows == 0 and not events:
        return {}
    written: dict[str, int] = {}
    clusters = {c for c, _ in groups}
    if _names_learned(engine, clusters, now):  # earlier commits may now find their owner
        written.update(revisit_unresolved(engine, clusters, f"{app_id}#names", batch_id, now))
    live = commits.filter(pc.invert(commits.column("is_tombstone")))
    attribution = attribute(live, _generation_rows(engine, live), now)
    anomalies, new_cursor = sequence_anomalies(commits, events, cursor, attribution, now)
    anomalies += ownership_anomalies(attribution, now)
    anomalies += log_bound_anomalies(engine, live, attribution, now, "ingest")
    # new positions only: an append (no scan of the table), idempotent by the transaction id
    if attribution.num_rows and engine.append(contract(ATTRIBUTION), attribution, app_id, batch_id):
        written[ATTRIBUTION] = attribution.num_rows
    if anomalies and engine.merge(contract(ANOMALIES), _rows(anomalies, ANOMALIES), app_id, batch_id):
        written[ANOMALIES] = len(anomalies)
    if engine.merge(contract(CURSOR), _rows(new_cursor, CURSOR), app_id, batch_id):
        written[CURSOR] = len(new_cursor)
    return written


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
    cols = [commits.column(n).to_pylist() for n in ("cluster_id", "group_id", "topic", "partition", "offset")]
    keep = [o > last.get((c, g, t, p), -1) for c, g, t, p, o in zip(*cols, strict=True)]
    return commits.filter(pa.array(keep, pa.bool_())), events


def _rows(rows: list[dict[str, Any]], table: str) -> pa.Table:
    schema = contract(table).arrow_schema
    data = pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
    return data.append_column(OP, pa.array(["upsert"] * data.num_rows, pa.string()))


def _generation_rows(engine: DeltaEngine, commits: pa.Table) -> pa.Table:
    """Ownership rows of the committing groups, topic ids resolved to names where known."""
    cols = ["cluster_id", "group_id", "group_type", "generation", "member_id", "group_instance_id",
            "client_id", "client_host", "topic", "partition", "valid_from_offset", "valid_to_offset"]
    groups = set(zip(commits.column("cluster_id").to_pylist(), commits.column("group_id").to_pylist(),
                     strict=True))
    if not groups:
        return contract("group_generations").arrow_schema.empty_table().select(cols)
    gens = engine.read("group_generations", cols, KeyFilter.of(("cluster_id", "group_id"), groups))
    names = topics.known_names(engine, {c for c, _ in groups})
    if names and gens.num_rows:
        keys = pa.array([f"{c}\x1f{i}" for c, i in names])
        joined = pc.binary_join_element_wise(pc.cast(gens.column("cluster_id"), pa.string()),
                                             pc.cast(gens.column("topic"), pa.string()), "\x1f")
        found = pa.array(list(names.values()), pa.string()).take(pc.index_in(joined, value_set=keys))
        fixed = pc.coalesce(found, pc.cast(gens.column("topic"), pa.string()))
        gens = gens.set_column(gens.column_names.index("topic"), "topic", fixed)
    return gens


_SHIFT = np.int64(1) << np.int64(40)  # positions in one offsets partition stay below 2**40


def _key_ids(*columns: list[pa.ChunkedArray]) -> list[np.ndarray]:
    """One integer id per distinct key across tables: ``columns`` is, per table, its key
    columns; equal keys get equal ids in every table."""
    sizes = [len(cols[0]) for cols in columns]
    parts = [pa.chunked_array([pc.cast(cols[i], pa.string()).combine_chunks() for cols in columns],
                              pa.string()) for i in range(len(columns[0]))]
    joined = pc.binary_join_element_wise(*parts, "\x1f")
    ids = pc.dictionary_encode(joined.combine_chunks()).indices.to_numpy().astype(np.int64)
    return list(np.split(ids, np.cumsum(sizes)[:-1]))


def attribute(commits: pa.Table, gens: pa.Table, now: datetime) -> pa.Table:
    """``commit_attribution`` rows for ``commits`` (non-tombstones) from ownership rows ``gens``.

    Per commit at log position x: the ownership row of its (group, topic, partition) that
    started last at or before x; if it is still open at x, its member is the owner. Else the
    group's state at x names the reason: some member active (zombie: the partition's last
    owner lost it; unassigned: never owned), no member (group_empty), never any (no_membership).
    Vectorized: keys become integers, (key, position) one sortable int64, lookups searchsorted.
    """
    n = commits.num_rows
    spec = contract(ATTRIBUTION)
    if n == 0:
        return spec.arrow_schema.empty_table()
    tp_cols = ["cluster_id", "group_id", "topic", "partition"]
    c_tp, g_tp = _key_ids([commits.column(c) for c in tp_cols], [gens.column(c) for c in tp_cols])
    c_grp, g_grp = _key_ids([commits.column(c) for c in tp_cols[:2]], [gens.column(c) for c in tp_cols[:2]])
    x = commits.column("offset").to_numpy().astype(np.int64)
    start = gens.column("valid_from_offset").to_numpy().astype(np.int64)
    end_arr = gens.column("valid_to_offset")
    closed = pc.is_valid(end_arr).to_numpy(zero_copy_only=False)
    end = pc.fill_null(end_arr, 0).to_numpy().astype(np.int64)

    # the row of the commit's partition that started last at or before x
    order = np.lexsort((start, g_tp))
    comp = g_tp[order] * _SHIFT + start[order]
    j = np.searchsorted(comp, c_tp * _SHIFT + x, side="right") - 1
    found = j >= 0
    found[found] = g_tp[order][j[found]] == c_tp[found]
    row = np.where(found, order[np.maximum(j, 0)], -1) if len(order) else np.full(n, -1)
    has_row = row >= 0
    r_ = np.maximum(row, 0)
    owner = has_row & (~closed[r_] | (end[r_] > x)) if len(start) else np.zeros(n, bool)

    # members active in the group at x: rows started at or before x minus rows ended by then
    starts = np.sort(g_grp * _SHIFT + start)
    ends = np.sort((g_grp * _SHIFT + end)[closed])
    base = c_grp * _SHIFT
    started = np.searchsorted(starts, base + x, side="right") - np.searchsorted(starts, base, side="left")
    ended = np.searchsorted(ends, base + x, side="right") - np.searchsorted(ends, base, side="left")
    active = (started - ended) > 0
    codes = np.where(owner, 0, np.where(active, np.where(has_row, 1, 2), np.where(started > 0, 3, 4)))
    # an id-named KIP-848 row may be this very partition: not "unassigned" until the name is known
    unresolved = {g for g, t, k in zip(g_grp.tolist(), gens.column("topic").to_pylist(),
                                       gens.column("group_type").to_pylist(), strict=True)
                  if k != "classic" and _TOPIC_ID.match(t or "")}
    if unresolved:
        codes = np.where((codes == 2) & np.isin(c_grp, np.fromiter(unresolved, np.int64)), 5, codes)
    names = ["owner", "zombie", "unassigned", "group_empty", "no_membership", "topic_unresolved"]
    status = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int8)), pa.array(names)).cast(pa.string())
    reason = pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int8), mask=codes == 0),
        pa.array([""] + [REASONS[k] for k in names[1:]])).cast(pa.string())

    owner_cols = ["group_type", "generation", "member_id", "group_instance_id", "client_id",
                  "client_host", "valid_from_offset"]
    last_cols = ["member_id", "client_id", "client_host", "valid_to_offset"]
    last = has_row & ~owner
    if len(start):  # a null index takes a null row
        owners = gens.select(owner_cols).take(pa.array(r_, mask=~owner))
        lasts = gens.select(last_cols).take(pa.array(r_, mask=~last))
    else:
        owners = gens.select(owner_cols).schema.empty_table()
        owners = pa.table({c: pa.nulls(n, owners.schema.field(c).type) for c in owner_cols})
        lasts = pa.table({c: pa.nulls(n, gens.schema.field(c).type) for c in last_cols})
    table = pa.table({
        **{c: commits.column(c) for c in ("cluster_id", "group_id", "topic", "partition", "committed_offset",
                                          "leader_epoch", "commit_timestamp", "offsets_partition", "offset",
                                          "record_timestamp")},
        "attribution": status, "reason": reason,
        **{c: owners.column(c) for c in owner_cols[:-1]},
        "owner_valid_from_offset": owners.column("valid_from_offset"),
        "last_owner_member_id": lasts.column("member_id"), "last_owner_client_id": lasts.column("client_id"),
        "last_owner_client_host": lasts.column("client_host"),
        "last_owner_lost_at_offset": lasts.column("valid_to_offset"),
        "updated_at": pa.array(np.full(n, np.datetime64(now.replace(tzinfo=None), "us")), TS),
    })
    return spec.conform(table)


def _anomaly(kind: str, c: dict[str, Any], now: datetime, source: str, **evidence: Any) -> dict[str, Any]:
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


def _lookup(attribution: pa.Table, rows: pa.Table) -> tuple[pa.Array, pa.Array]:
    """(attribution, member_id) of ``attribution`` at the positions of ``rows``."""
    if rows.num_rows == 0 or attribution.num_rows == 0:
        return pa.nulls(rows.num_rows, pa.string()), pa.nulls(rows.num_rows, pa.string())
    cols = ["cluster_id", "offsets_partition"]
    a_id, r_id = _key_ids([attribution.column(c) for c in cols], [rows.column(c) for c in cols])
    a_comp = a_id * _SHIFT + attribution.column("offset").to_numpy().astype(np.int64)
    r_comp = r_id * _SHIFT + rows.column("offset").to_numpy().astype(np.int64)
    order = np.argsort(a_comp, kind="stable")
    j = np.minimum(np.searchsorted(a_comp[order], r_comp), len(order) - 1)
    hit = pa.array(a_comp[order][j] == r_comp)
    idx = pa.array(order[j])
    null = pa.scalar(None, pa.string())
    return (pc.if_else(hit, attribution.column("attribution").take(idx), null),
            pc.if_else(hit, attribution.column("member_id").take(idx), null))


def sequence_anomalies(commits: pa.Table, events: list[tuple[str, str, Any]],
                       cursor: list[dict[str, Any]], attribution: pa.Table, now: datetime
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rewinds, leader-epoch regressions and commits after a group tombstone, in log order
    from the cursor (the facts before this batch); returns anomalies and the new cursor rows.

    Vectorized over the batch: the cursor's last commit per key is prepended as a row at
    position -1, rows are sorted by (key, position) and each compared with the row before
    it; an offset tombstone forgets the key's previous offset and epoch.
    """
    key_cols = ["cluster_id", "group_id", "topic", "partition"]
    prior = [r for r in cursor if r["partition"] >= 0 and r["last_offset"] is not None]
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
    body = commits.select(list(seed.column_names)).cast(seed.schema)
    rows = pa.concat_tables([seed, body])
    real = np.r_[np.zeros(len(prior), bool), np.ones(commits.num_rows, bool)]
    out: list[dict[str, Any]] = []
    new_cursor: list[dict[str, Any]] = []
    if commits.num_rows:
        kid = _key_ids([rows.column(c) for c in key_cols])[0]
        pos = rows.column("offset").to_numpy().astype(np.int64)
        order = np.lexsort((pos, kid))
        k, pos, real_o = kid[order], pos[order], real[order]
        off = pc.fill_null(rows.column("committed_offset"), -1).to_numpy().astype(np.int64)[order]
        tomb = rows.column("is_tombstone").to_numpy(zero_copy_only=False)[order]
        epoch = pc.fill_null(rows.column("leader_epoch"), -1).to_numpy().astype(np.int64)[order]
        first = np.r_[True, k[1:] != k[:-1]]
        after_tomb = np.r_[False, tomb[:-1]]
        has_prev = ~first & ~after_tomb
        prev = np.r_[-1, off[:-1]]
        # the last epoch >= 0 before each row, not crossing a tombstone or a key change
        seg = np.cumsum(first | after_tomb)
        known = np.where((epoch >= 0) & ~tomb, epoch, -1).astype(float)
        known[known < 0] = np.nan
        import pandas as pd

        filled = pd.Series(known).groupby(seg).ffill().to_numpy()
        prev_epoch = np.r_[np.nan, filled[:-1]]
        prev_epoch[first | after_tomb] = np.nan
        live = real_o & ~tomb
        rewind = live & has_prev & (off < prev)
        regress = live & (epoch >= 0) & ~np.isnan(prev_epoch) & (epoch < np.nan_to_num(prev_epoch, nan=-1))
        flagged = rewind | regress
        if flagged.any():
            idx = order[flagged]
            full = commits.take(pa.array(idx - len(prior)))
            who, member = _lookup(attribution, full)
            for i, c in enumerate(full.to_pylist()):
                c.update(attribution=who[i].as_py(), member_id=member[i].as_py())
                at = np.flatnonzero(flagged)[i]
                ev = {"previous_offset": int(prev[at]) if has_prev[at] else None,
                      "previous_leader_epoch": None if np.isnan(prev_epoch[at]) else int(prev_epoch[at]),
                      "previous_position": int(pos[at - 1]) if has_prev[at] and pos[at - 1] >= 0 else None}
                if rewind[at]:
                    out.append(_anomaly("offset_rewind", c, now, "ingest", **ev))
                if regress[at]:
                    out.append(_anomaly("leader_epoch_regression", c, now, "ingest", **ev))
        last = np.r_[k[1:] != k[:-1], True] & real_o
        lk = rows.select(key_cols).take(pa.array(order[last])).to_pylist()
        for i, r in zip(np.flatnonzero(last), lk, strict=True):
            t = bool(tomb[i])
            new_cursor.append({**r, "last_offset": None if t else int(off[i]),
                               "last_leader_epoch": None if t or np.isnan(filled[i]) else int(filled[i]),
                               "last_position": int(pos[i]), "group_deleted_at": None,
                               "offsets_deleted": None, "updated_at": now})
    out += _after_deletion(commits, events, cursor, attribution, now, new_cursor)
    return out, new_cursor


def _after_deletion(commits: pa.Table, events: list[tuple[str, str, Any]], cursor: list[dict[str, Any]],
                    attribution: pa.Table, now: datetime, new_cursor: list[dict[str, Any]]
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
    state = {k: {"deleted_at": r["group_deleted_at"], "offsets_deleted": bool(r["offsets_deleted"])}
             for k, r in before.items()}
    # the log-order walk is only needed where a deletion is pending or a group tombstone lands
    # (rare); elsewhere a group record only clears a deletion there is none of
    detailed = {k for k, v in state.items() if v["deleted_at"] is not None} | {
        (c, g) for c, g, r in events if r.is_tombstone}
    for c, g, _ in events:
        state.setdefault((c, g), {"deleted_at": None, "offsets_deleted": False})
    out = []
    if commits.num_rows:  # every group: was its last offset record of the batch a tombstone?
        from pipelines.state.offsets import last_per_key

        last = last_per_key(commits.select(["cluster_id", "group_id", "offsets_partition", "offset",
                                            "is_tombstone"]), ["cluster_id", "group_id"])
        for c, g, t in zip(last.column("cluster_id").to_pylist(), last.column("group_id").to_pylist(),
                           last.column("is_tombstone").to_pylist(), strict=True):
            if (c, g) not in detailed:
                state[(c, g)] = {"deleted_at": None, "offsets_deleted": bool(t)}
    if detailed:
        mine = commits
        if mine.num_rows:
            keys = pa.array([f"{c}\x1f{g}" for c, g in detailed])
            joined = pc.binary_join_element_wise(pc.cast(mine.column("cluster_id"), pa.string()),
                                                 pc.cast(mine.column("group_id"), pa.string()), "\x1f")
            mine = mine.filter(pc.is_in(joined, value_set=keys))
        items: list[tuple] = [(c["cluster_id"], c["group_id"], c["offsets_partition"], c["offset"], 1, c)
                              for c in mine.to_pylist()]
        items += [(c, g, r.offsets_partition, r.offset, 0, r.is_tombstone) for c, g, r in events]
        items.sort(key=lambda t: t[:4])
        for cluster_id, group_id, _p, position, is_commit, what in items:
            st = state.setdefault((cluster_id, group_id), {"deleted_at": None, "offsets_deleted": False})
            if not is_commit:
                st["deleted_at"] = position if what and st["offsets_deleted"] else None
            elif what["is_tombstone"]:
                st["offsets_deleted"] = True
            else:
                st["offsets_deleted"] = False
                if st["deleted_at"] is not None:
                    who, member = _lookup(attribution, pa.Table.from_pylist([what]).select(
                        ["cluster_id", "offsets_partition", "offset"]))
                    what.update(attribution=who[0].as_py(), member_id=member[0].as_py())
                    out.append(_anomaly("commit_after_group_deleted", what, now, "ingest",
                                        reason=KINDS["commit_after_group_deleted"][1]
                                        + f" (tombstone at offset {st['deleted_at']})"))
                    st["deleted_at"] = None
    for (cluster_id, group_id), st in sorted(state.items()):
        old = before.get((cluster_id, group_id))
        if old is not None and old["group_deleted_at"] == st["deleted_at"] \
                and bool(old["offsets_deleted"]) == st["offsets_deleted"]:
            continue
        new_cursor.append({"cluster_id": cluster_id, "group_id": group_id, "topic": "", "partition": -1,
                           "last_offset": None, "last_leader_epoch": None, "last_position": None,
                           "group_deleted_at": st["deleted_at"], "offsets_deleted": st["offsets_deleted"],
                           "updated_at": now})
    return out


def ownership_anomalies(attribution: pa.Table, now: datetime) -> list[dict[str, Any]]:
    """Zombie commits and commits for partitions the group never assigned."""
    if attribution.num_rows == 0:
        return []
    bad = attribution.filter(pc.is_in(attribution.column("attribution"),
                                      pa.array(["zombie", "unassigned"])))
    out = []
    for c in bad.to_pylist():
        kind = "zombie_commit" if c["attribution"] == "zombie" else "unassigned_partition"
        extra = {}
        if kind == "zombie_commit":
            extra["reason"] = (KINDS[kind][1] + f" (last owner {c['last_owner_member_id']}, client "
                               f"{c['last_owner_client_id']}, lost it at offset {c['last_owner_lost_at_offset']})")
        out.append(_anomaly(kind, c, now, "ingest", **extra))
    return out


def revisit_unresolved(engine: DeltaEngine, clusters: set[str], app_id: str, version: int,
                       now: datetime) -> dict[str, int]:
    """Attribute again the commits left ``topic_unresolved`` (after new topic names were
    stored); ownership anomalies found now are added. Rows written per table."""
    if not clusters or not engine.exists(ATTRIBUTION) or engine.committed(ATTRIBUTION, app_id, version):
        return {}
    cols = ["cluster_id", "group_id", "topic", "partition", "committed_offset", "leader_epoch",
            "commit_timestamp", "offsets_partition", "offset", "record_timestamp"]
    pending = engine.read(ATTRIBUTION, None, KeyFilter.of(("cluster_id", "attribution"),
                                                          {(c, "topic_unresolved") for c in clusters}))
    pending = pending.filter(pc.equal(pending.column("attribution"), "topic_unresolved")).select(cols)
    if pending.num_rows == 0:
        return {}
    again = attribute(pending, _generation_rows(engine, pending), now)
    changed = again.filter(pc.not_equal(again.column("attribution"), "topic_unresolved"))
    written: dict[str, int] = {}
    if changed.num_rows and engine.merge(contract(ATTRIBUTION), changed.append_column(
            OP, pa.array(["upsert"] * changed.num_rows)), app_id, version):
        written[ATTRIBUTION] = changed.num_rows
    found = ownership_anomalies(changed, now)
    if found and engine.merge(contract(ANOMALIES), _rows(found, ANOMALIES), app_id, version):
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
# Log bounds from snapshots (ingest: snapshots already stored; snapshot: the current offsets)
# ---------------------------------------------------------------------------------------------


def _log_bounds(engine: DeltaEngine, clusters: set[str]) -> pa.Table | None:
    if not clusters or not engine.exists("snapshot_log_end_offsets"):
        return None
    table = engine.read("snapshot_log_end_offsets", None, KeyFilter.of(("cluster_id",), {(c,) for c in clusters}))
    return table if table.num_rows else None


def _bound_checks(c: dict[str, Any], snaps: list[dict[str, Any]], now: datetime, source: str,
                  ts: datetime | None) -> list[dict[str, Any]]:
    """``snaps``: this partition's snapshot rows sorted by captured_at. Past the end is
    certain against a snapshot taken at/after the commit (the log end only grows); below
    the start against one taken at/before it (the log start only grows)."""
    out = []
    after = [s for s in snaps if ts is None or s["captured_at"] >= ts]
    before = [s for s in snaps if ts is not None and s["captured_at"] <= ts]
    if after and after[0]["log_end_offset"] is not None and c["committed_offset"] > after[0]["log_end_offset"]:
        s = after[0]
        out.append(_anomaly("past_log_end", c, now, source, log_end_offset=s["log_end_offset"],
                            log_start_offset=s.get("log_start_offset"), snapshot_id=s["snapshot_id"],
                            snapshot_captured_at=s["captured_at"]))
    if before and before[-1].get("log_start_offset") is not None \
            and c["committed_offset"] < before[-1]["log_start_offset"]:
        s = before[-1]
        out.append(_anomaly("below_log_start", c, now, source, log_end_offset=s["log_end_offset"],
                            log_start_offset=s["log_start_offset"], snapshot_id=s["snapshot_id"],
                            snapshot_captured_at=s["captured_at"]))
    return out


def log_bound_anomalies(engine: DeltaEngine, commits: pa.Table, attribution: pa.Table, now: datetime,
                        source: str) -> list[dict[str, Any]]:
    """This batch's commits against snapshots the lake already holds (a replayed history)."""
    if commits.num_rows == 0:
        return []
    bounds = _log_bounds(engine, set(commits.column("cluster_id").to_pylist()))
    if bounds is None:
        return []
    snaps = _by_partition(bounds)
    who = {(r["cluster_id"], r["offsets_partition"], r["offset"]): r
           for r in attribution.select(["cluster_id", "offsets_partition", "offset", "attribution",
                                        "member_id"]).to_pylist()}
    out = []
    for c in commits.to_pylist():
        mine = snaps.get((c["cluster_id"], c["topic"], c["partition"]))
        if mine:
            c.update({k: v for k, v in who.get((c["cluster_id"], c["offsets_partition"], c["offset"]), {}).items()
                      if k in ("attribution", "member_id")})
            out += _bound_checks(c, mine, now, source, c["commit_timestamp"])
    return out


def _by_partition(bounds: pa.Table) -> dict[tuple, list[dict[str, Any]]]:
    snaps: dict[tuple, list[dict[str, Any]]] = {}
    for s in bounds.to_pylist():
        snaps.setdefault((s["cluster_id"], s["topic"], s["partition"]), []).append(s)
    for rows in snaps.values():
        rows.sort(key=lambda s: s["captured_at"])
    return snaps


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
    snaps = _by_partition(bounds)
    current = engine.read("committed_offsets", None, KeyFilter.of(("cluster_id",), {(cluster_id,)}))
    who: dict[tuple, dict] = {}
    if engine.exists(ATTRIBUTION):
        attr = engine.read(ATTRIBUTION, ["cluster_id", "offsets_partition", "offset", "attribution",
                                         "member_id"], KeyFilter.of(("cluster_id",), {(cluster_id,)}))
        who = {(r["cluster_id"], r["offsets_partition"], r["offset"]): r for r in attr.to_pylist()}
    out = []
    for c in current.to_pylist():
        mine = snaps.get((c["cluster_id"], c["topic"], c["partition"]))
        if not mine:
            continue
        a = who.get((c["cluster_id"], c["offsets_partition"], c["offset"]), {})
        c.update(attribution=a.get("attribution"), member_id=a.get("member_id"))
        # the current offset was committed before this snapshot: both checks apply to it
        out += [x for x in _bound_checks(c, mine, now, "snapshot", None)]
        s = mine[-1]
        if s.get("log_start_offset") is not None and c["committed_offset"] < s["log_start_offset"]:
            out.append(_anomaly("below_log_start", c, now, "snapshot", log_end_offset=s["log_end_offset"],
                                log_start_offset=s["log_start_offset"], snapshot_id=s["snapshot_id"],
                                snapshot_captured_at=s["captured_at"]))
    if not out:
        return 0
    ensure_tables(engine)
    app_id = f"offsetlake-anomalies-{cluster_id}-{snapshot_id}"
    return len(out) if engine.merge(contract(ANOMALIES), _rows(out, ANOMALIES), app_id, 0) else 0


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
    offsets = np.unique(engine.read("offset_commits", ["offset"], where).column(0).to_numpy())
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
        yield StateInput(contract("offset_commits").arrow_schema.empty_table(), mine, ranges), n


def rebuild(engine: DeltaEngine, clusters: list[str] | None = None) -> int:
    """``maintain --rebuild-audit``: empty the three audit tables and audit the whole history
    again (a fresh app id: a crash leaves them partial, and a rerun rebuilds them again);
    offset commits covered."""
    clusters = _history_clusters(engine) if clusters is None else clusters
    for name in TABLES:
        engine.overwrite(contract(name), contract(name).arrow_schema.empty_table())
    return backfill(engine, clusters, f"offsetlake-audit-rebuild-{uuid.uuid4()}")
