"""Who committed what: ``commit_attribution`` rows, each offset commit tied to the member
whose generation (classic) or member-epoch assignment (KIP-848) held the partition at the
commit's log position, from ``group_generations``; commits that no member held get a reason
instead. Vectorized: keys become integers, (key, position) one sortable int64."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine
from pipelines.lake.keys import KeyFilter, distinct_keys
from pipelines.model import OP, distinct_sorted
from pipelines.state import last_ended, topics
from pipelines.state.key_ids import key_ids

ATTRIBUTION = "commit_attribution"
TS = pa.timestamp("us", tz="UTC")

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


_TOPIC_ID = r"^[A-Za-z0-9_-]{22}$"  # a Kafka topic id as the decoder writes it (base64url)


#: the ownership columns attribute() reads
GENERATION_COLUMNS = ["cluster_id", "group_id", "group_type", "generation", "member_id", "group_instance_id",
                      "client_id", "client_host", "topic", "partition", "valid_from_offset", "valid_to_offset"]


def generation_rows(engine: DeltaEngine, commits: pa.Table) -> pa.Table:
    """Ownership rows of the committing groups, topic ids resolved to names where known:
    every row, so commits at any position are attributed (a backfill, a revisit)."""
    groups = distinct_keys(commits, ("cluster_id", "group_id"))
    if not groups:
        return contract("group_generations").arrow_schema.empty_table().select(GENERATION_COLUMNS)
    gens = engine.read("group_generations", GENERATION_COLUMNS, KeyFilter.of(("cluster_id", "group_id"), groups))
    return _named(engine, gens, groups)


def batch_generation_rows(engine: DeltaEngine, commits: pa.Table, replayed: pa.Table) -> pa.Table:
    """What :func:`generation_rows` gives :func:`attribute` for the commits of the batch the
    state step just replayed (``replayed``: its ``group_generations`` change set), without
    reading an ended row: per key the ended interval that started last before the batch
    (``ownership_last_ended``), the open rows and the rows the batch changed. Every interval
    alive at a position of the batch is open or ended by it, and any other that a commit's
    attribution or reason depends on is its key's last ended one, so the result is the same.
    The batch's own rows come last: where two rows hold one interval (an ended one whose
    metadata this batch filled in), ``attribute`` takes the later."""
    groups = distinct_keys(commits, ("cluster_id", "group_id"))
    if not groups:
        return contract("group_generations").arrow_schema.empty_table().select(GENERATION_COLUMNS)
    schema = pa.schema([contract("group_generations").arrow_schema.field(c) for c in GENERATION_COLUMNS])
    where = KeyFilter.of(("cluster_id", "group_id"), groups)
    ended = last_ended.rows(engine, groups)
    opened = engine.read("group_generations", GENERATION_COLUMNS,
                         KeyFilter.of(("cluster_id", "group_id"), groups, true_columns=("is_open",)))
    changed = replayed.filter((pc.field(OP) == "upsert") & where.to_arrow())
    parts = [t.select(GENERATION_COLUMNS).cast(schema) for t in (ended, opened, changed)]
    return _named(engine, pa.concat_tables(parts), groups)


def _named(engine: DeltaEngine, gens: pa.Table, groups: set[tuple[str, str]]) -> pa.Table:
    """``gens`` with topic ids resolved to the names known for them."""
    names = topics.known_names(engine, {c for c, _ in groups})
    if names and gens.num_rows:
        keys = pa.array([f"{c}\x1f{i}" for c, i in names])
        joined = pc.binary_join_element_wise(pc.cast(gens.column("cluster_id"), pa.string()),
                                             pc.cast(gens.column("topic"), pa.string()), "\x1f")
        found = pa.array(list(names.values()), pa.string()).take(pc.index_in(joined, value_set=keys))
        fixed = pc.coalesce(found, pc.cast(gens.column("topic"), pa.string()))
        gens = gens.set_column(gens.column_names.index("topic"), "topic", fixed)
    return gens


POSITION_SHIFT = np.int64(1) << np.int64(40)  # positions in one offsets partition stay below 2**40


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
    c_grp, g_grp = key_ids([commits.column(c) for c in tp_cols[:2]], [gens.column(c) for c in tp_cols[:2]])
    # a partition's id folds topic and partition into its group's (no second pass over the strings)
    c_tp, g_tp = key_ids([pa.array(c_grp), commits.column("topic"), commits.column("partition")],
                         [pa.array(g_grp), gens.column("topic"), gens.column("partition")])
    x = commits.column("offset").to_numpy().astype(np.int64)
    start = gens.column("valid_from_offset").to_numpy().astype(np.int64)
    end_arr = gens.column("valid_to_offset")
    closed = pc.is_valid(end_arr).to_numpy(zero_copy_only=False)
    end = pc.fill_null(end_arr, 0).to_numpy().astype(np.int64)

    # the row of the commit's partition that started last at or before x (of rows that
    # started together, the later in ``gens``: lexsort is stable)
    order = np.lexsort((start, g_tp))
    comp = g_tp[order] * POSITION_SHIFT + start[order]
    j = np.searchsorted(comp, c_tp * POSITION_SHIFT + x, side="right") - 1
    found = j >= 0
    found[found] = g_tp[order][j[found]] == c_tp[found]
    row = np.where(found, order[np.maximum(j, 0)], -1) if len(order) else np.full(n, -1)
    has_row = row >= 0
    r_ = np.maximum(row, 0)
    owner = has_row & (~closed[r_] | (end[r_] > x)) if len(start) else np.zeros(n, bool)

    codes = np.zeros(n, np.int8)
    rest = np.flatnonzero(~owner)  # the commits without an owner (few, usually)
    if len(rest):
        codes[rest] = _reasons(gens, c_grp[rest], g_grp, x[rest], has_row[rest], start, end, closed)
    names = ["owner", "zombie", "unassigned", "group_empty", "no_membership", "topic_unresolved"]
    status = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(names))
    reason = pa.DictionaryArray.from_arrays(
        pa.array(codes, mask=codes == 0), pa.array([""] + [REASONS[k] for k in names[1:]]))

    owner_cols = ["group_type", "generation", "member_id", "group_instance_id", "client_id",
                  "client_host", "valid_from_offset"]
    last_cols = ["member_id", "client_id", "client_host", "valid_to_offset"]
    last = has_row & ~owner
    if len(start):
        owners = _Picked(r_, owner).columns(gens, owner_cols)
        lasts = _Picked(r_, last).columns(gens, last_cols)
    else:
        owners = {c: pa.nulls(n, gens.schema.field(c).type) for c in owner_cols}
        lasts = {c: pa.nulls(n, gens.schema.field(c).type) for c in last_cols}
    table = pa.table({
        **{c: commits.column(c) for c in ("cluster_id", "group_id", "topic", "partition", "committed_offset",
                                          "leader_epoch", "commit_timestamp", "offsets_partition", "offset",
                                          "record_timestamp")},
        "attribution": status, "reason": reason,
        **{c: owners[c] for c in owner_cols[:-1]},
        "owner_valid_from_offset": owners["valid_from_offset"],
        "last_owner_member_id": lasts["member_id"], "last_owner_client_id": lasts["client_id"],
        "last_owner_client_host": lasts["client_host"],
        "last_owner_lost_at_offset": lasts["valid_to_offset"],
        "updated_at": pa.array(np.full(n, np.datetime64(now.replace(tzinfo=None), "us")), TS),
    })
    return spec.conform(table, keep_dictionaries=True)


def _reasons(gens: pa.Table, c_grp: np.ndarray, g_grp: np.ndarray, x: np.ndarray, has_row: np.ndarray,
             start: np.ndarray, end: np.ndarray, closed: np.ndarray) -> np.ndarray:
    """Why commits of groups ``c_grp`` at positions ``x`` have no owner (codes 1-5 of
    :func:`attribute`): members active in the group at x are the ownership rows started at
    or before x minus the rows ended by then."""
    starts = np.sort(g_grp * POSITION_SHIFT + start)
    ends = np.sort((g_grp * POSITION_SHIFT + end)[closed])
    base = c_grp * POSITION_SHIFT
    started = np.searchsorted(starts, base + x, side="right") - np.searchsorted(starts, base, side="left")
    ended = np.searchsorted(ends, base + x, side="right") - np.searchsorted(ends, base, side="left")
    active = (started - ended) > 0
    why = np.where(active, np.where(has_row, 1, 2), np.where(started > 0, 3, 4))
    # an id-named KIP-848 row may be this very partition: not "unassigned" until the name is known
    id_named = pc.fill_null(pc.and_(pc.not_equal(gens.column("group_type"), "classic"),
                                    pc.match_substring_regex(gens.column("topic"), _TOPIC_ID)), False)
    unresolved = distinct_sorted(g_grp[id_named.to_numpy()]) if len(g_grp) else g_grp
    if len(unresolved):
        why = np.where((why == 2) & np.isin(c_grp, unresolved), 5, why)
    return why


class _Picked:
    """The ownership rows ``rows[i]`` where ``where[i]`` holds (else null), column by column.
    Strings as dictionary arrays of the distinct values of the rows picked at least once: a
    batch's million commits are owned by a few hundred members, and copying their ids,
    clients and hosts into every row cost a third of the attribution (the writer stores
    dictionaries as they are; readers see plain strings). Only the picked rows are taken
    from the ownership table, which on a group-heavy history holds every member epoch of the
    committing groups."""

    def __init__(self, rows: np.ndarray, where: np.ndarray) -> None:
        picked = pa.array(rows[where])
        self.used = pc.unique(picked)
        # per row, its picked row's place in ``used``, or one past the end (a null) where
        # ``where`` does not hold: each column is then one take of its few picked values
        # plus a null, with no per-row mask built per column (7.8M commits, 11 columns:
        # 0.97 -> 0.54 s)
        slot = np.full(len(rows), len(self.used), np.int32)
        slot[where] = pc.index_in(picked, value_set=self.used).to_numpy()
        self.slot = pa.array(slot)

    def columns(self, table: pa.Table, names: list[str]) -> dict[str, pa.Array]:
        return {name: self._column(table.column(name)) for name in names}

    def _column(self, column: pa.ChunkedArray) -> pa.Array:
        values = column.take(self.used).combine_chunks()
        if not pa.types.is_string(values.type):
            return pa.concat_arrays([values, pa.nulls(1, values.type)]).take(self.slot)
        # each distinct string once in the dictionary (no null among its values): an owner's
        # id recurs in every ownership row it holds, and Parquet writes an Arrow dictionary
        # as it is (1.7M commits, member_id: 0.082 -> 0.029 s to write, 247 -> 50 kB)
        encoded = pc.dictionary_encode(values)
        codes = pa.concat_arrays([encoded.indices, pa.nulls(1, encoded.indices.type)])
        return pa.DictionaryArray.from_arrays(codes.take(self.slot), encoded.dictionary)


def attribution_at(attribution: pa.Table, rows: pa.Table) -> tuple[pa.Array, pa.Array]:
    """(attribution, member_id) of ``attribution`` at the positions of ``rows``."""
    if rows.num_rows == 0 or attribution.num_rows == 0:
        return pa.nulls(rows.num_rows, pa.string()), pa.nulls(rows.num_rows, pa.string())
    cols = ["cluster_id", "offsets_partition"]
    a_id, r_id = key_ids([attribution.column(c) for c in cols], [rows.column(c) for c in cols])
    a_comp = a_id * POSITION_SHIFT + attribution.column("offset").to_numpy().astype(np.int64)
    r_comp = r_id * POSITION_SHIFT + rows.column("offset").to_numpy().astype(np.int64)
    order = np.argsort(a_comp, kind="stable")
    j = np.minimum(np.searchsorted(a_comp[order], r_comp), len(order) - 1)
    hit = pa.array(a_comp[order][j] == r_comp)
    idx = pa.array(order[j])
    null = pa.scalar(None, pa.string())
    return (pc.if_else(hit, attribution.column("attribution").take(idx), null),
            pc.if_else(hit, attribution.column("member_id").take(idx), null))
