"""``ownership_last_ended``: per (group, topic, partition, group type) the ended ownership
interval that started last, so that the commit audit need not read every ended interval.

Why: a commit at log position x is attributed to the interval of its partition that started
last at or before x (:func:`pipelines.state.attribution.attribute`). For the commits of one
micro-batch, that interval is either alive during the batch (open now, or ended by this
batch) or, if it ended before the batch, its key's ended interval that started last. The
same rows give every reason the audit names (members active at x, whether the group ever
had one, topics still named by id). Reading them instead of every ended row of
``group_generations`` keeps a batch's audit as costly as the state, where it grew with the
history.

The audit of a batch reads the table as the batches before left it, so the table takes a
batch's ended intervals after that batch's audit (:func:`update`, from the batch's
``group_generations`` change set). Its rows depend on the history alone, not on how it was
cut into batches. Where no change set is at hand (a replay after a crash that had merged
``group_generations``), or the table does not exist yet (a lake from before it), it is
computed again from every ended row; until it exists, the audit reads every row itself.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine
from pipelines.lake.keys import KeyFilter, distinct_keys
from pipelines.model import OP

TABLE = "ownership_last_ended"
KEY = ("cluster_id", "group_id", "topic", "partition", "group_type")
#: an interval's columns besides the key
INTERVAL = ("generation", "member_id", "group_instance_id", "client_id", "client_host",
            "valid_from_offset", "valid_to_offset", "offsets_partition")
TS = pa.timestamp("us", tz="UTC")


def ready(engine: DeltaEngine) -> bool:
    """Whether the table holds every batch before the one being committed (it is updated
    after every batch from its first write on)."""
    return engine.exists(TABLE)


def rows(engine: DeltaEngine, groups: set[tuple[str, str]]) -> pa.Table:
    """The groups' last ended interval per key."""
    return engine.read(TABLE, None, KeyFilter.of(("cluster_id", "group_id"), groups))


def _ended_last(gens: pa.Table) -> pa.Table:
    """Of ``group_generations`` rows, the ended ones, the one that started last per key
    (among equal starts, the later row: the sort is stable), in the order of their starts.

    Ranked and grouped where the rows lie, an open row ranked below every ended one: no
    column is copied but the winners' (a group-heavy batch's change set: ~300k rows)."""
    if gens.num_rows == 0:
        return gens
    order = pc.sort_indices(gens.column("valid_from_offset")).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    rank[~gens.column("valid_to_offset").is_valid().to_numpy(zero_copy_only=False)] = -1
    ranked = gens.select(list(KEY)).append_column("_rank", pa.array(rank))
    best = ranked.group_by(list(KEY), use_threads=False).aggregate([("_rank", "max")])
    best = np.sort(best.column("_rank_max").to_numpy())
    return gens.take(order[best[best >= 0]])


def _change_set(table: pa.Table, now: datetime, op: str = "upsert") -> pa.Table:
    schema = contract(TABLE).arrow_schema
    n = table.num_rows
    columns = {c: table.column(c) for c in (*KEY, *INTERVAL)} | {"updated_at": pa.array([now] * n, TS)}
    table = pa.table({f.name: columns[f.name].cast(f.type) for f in schema}, schema=schema)
    return table.append_column(OP, pa.array([op] * n, pa.string()))


def update(engine: DeltaEngine, generations: pa.Table | None, app_id: str, version: int,
           now: datetime) -> int:
    """Take the ended intervals of a ``group_generations`` change set (a batch's, after its
    audit; a snapshot's renamed topics) under the write id ``(app_id, version)``; with no
    change set, or before the table exists, take every ended row. Rows written."""
    if engine.committed(TABLE, app_id, version):
        return 0
    if generations is None or not ready(engine):
        every = engine.read("group_generations", [*KEY, *INTERVAL])
        if generations is not None:  # a snapshot's renames are merged after this: as if they were
            every = _applied(every, generations)
        changes = _change_set(_ended_last(every), now)
    else:
        changes = _changes(engine, generations, now)
    if changes.num_rows:
        engine.merge(contract(TABLE), changes, app_id, version)
    elif not ready(engine):  # a lake with no ended interval yet: the table exists from now on
        engine.append(contract(TABLE), contract(TABLE).arrow_schema.empty_table(), app_id, version)
    return changes.num_rows


def _applied(rows: pa.Table, generations: pa.Table) -> pa.Table:
    """``group_generations`` rows with a change set applied: its deleted rows gone, its
    upserted ones after the rest (so they win an equal start)."""
    row_key = [*contract("group_generations").key]
    ops = generations.column(OP)
    deleted = generations.filter(pc.equal(ops, "delete"))
    if deleted.num_rows:
        rows = rows.filter(pc.invert(pc.is_in(_joined(rows, row_key), value_set=_joined(deleted, row_key))))
    upserts = generations.filter(pc.equal(ops, "upsert")).select(rows.column_names)
    return pa.concat_tables([rows, upserts.cast(rows.schema)])


def _changes(engine: DeltaEngine, generations: pa.Table, now: datetime) -> pa.Table:
    """The keys whose last ended interval ``generations`` changes: the later start wins, the
    change set's row an equal one (its metadata filled in). A key whose rows the change set
    deletes (a topic id renamed: every row of the id goes) keeps only what it upserts."""
    ops = generations.column(OP)
    new = _ended_last(generations.filter(pc.equal(ops, "upsert")).select([*KEY, *INTERVAL]))
    gone = generations.filter(pc.equal(ops, "delete")).select(list(KEY))
    if new.num_rows == 0 and gone.num_rows == 0:
        return _change_set(new, now)
    groups = distinct_keys(new, ("cluster_id", "group_id")) | distinct_keys(gone, ("cluster_id", "group_id"))
    stored = rows(engine, groups).select([*KEY, *INTERVAL])
    stored = stored.cast(pa.schema([contract(TABLE).arrow_schema.field(c) for c in stored.column_names]))
    if gone.num_rows:
        renamed = pc.is_in(_joined(stored), value_set=_joined(gone))
        deleted, stored = stored.filter(renamed), stored.filter(pc.invert(renamed))
    # an interval that started before the stored one does not displace it (they overlap: a
    # partition two members held at once)
    best = _ended_last(pa.concat_tables([stored, new.cast(stored.schema)]))
    upserts = _change_set(best.filter(pc.is_in(_joined(best), value_set=_joined(new))), now)
    if not gone.num_rows:
        return upserts
    deleted = deleted.filter(pc.invert(pc.is_in(_joined(deleted), value_set=_joined(new))))
    return pa.concat_tables([upserts, _change_set(deleted, now, "delete")]) if deleted.num_rows else upserts


def _joined(table: pa.Table, key: list[str] | tuple[str, ...] = KEY) -> pa.Array:
    """Each row's key as one string (for set membership)."""
    parts = [pc.cast(table.column(c), pa.string()) for c in key]
    return pc.binary_join_element_wise(*parts, "\x1f").combine_chunks() if table.num_rows else pa.array([], pa.string())
