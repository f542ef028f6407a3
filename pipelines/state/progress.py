"""How far each ``__consumer_offsets`` partition is ingested: the ``ingest_progress`` table.

Why: reconcile needs each partition's log end (max offset + 1) and the quality gate the
history's first and last record timestamp. Aggregating them from ``offsets_raw`` on every
run costs a scan of the whole history; this table keeps them per (cluster, partition),
updated by each micro-batch from that batch's own rows, so a run's cost follows the new
data. The values are exactly those aggregates (history is append-only: a batch can only
raise a log end or widen the time range), and a lake that predates the table gets it
built from ``offsets_raw`` once, at its first batch.
"""

from __future__ import annotations

import logging
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine, read_batch
from pipelines.lake.keys import KeyFilter
from pipelines.model import OP, StateInput

log = logging.getLogger(__name__)

TABLE = "ingest_progress"
_KEY = ["cluster_id", "offsets_partition"]
_RAW_COLUMNS = ["cluster_id", "offsets_partition", "offset", "timestamp"]


def aggregate(raw: pa.Table, now: datetime) -> pa.Table:
    """``ingest_progress`` rows of some ``offsets_raw`` rows (one per cluster and partition)."""
    spec = contract(TABLE)
    if raw.num_rows == 0:
        return spec.arrow_schema.empty_table()
    # grouped as read (a batch's cluster id may be a dictionary), the few sums cast after
    agg = raw.select(_RAW_COLUMNS).group_by(_KEY, use_threads=False).aggregate(
        [("offset", "max"), ("timestamp", "min"), ("timestamp", "max")])
    return pa.table({
        "cluster_id": agg.column("cluster_id"), "offsets_partition": agg.column("offsets_partition"),
        "log_end": pc.add(agg.column("offset_max"), 1),
        "first_timestamp": agg.column("timestamp_min"), "last_timestamp": agg.column("timestamp_max"),
        "updated_at": pa.array([now] * agg.num_rows, pa.timestamp("us", tz="UTC")),
    }).cast(spec.arrow_schema)


def combine(old: pa.Table, new: pa.Table) -> pa.Table:
    """Per key: the larger log end, the earlier first and the later last timestamp."""
    before = {(r["cluster_id"], r["offsets_partition"]): r for r in old.to_pylist()}
    rows = []
    for r in new.to_pylist():
        prev = before.get((r["cluster_id"], r["offsets_partition"]))
        if prev is not None:
            r["log_end"] = max(r["log_end"], prev["log_end"])
            firsts = [t for t in (r["first_timestamp"], prev["first_timestamp"]) if t is not None]
            lasts = [t for t in (r["last_timestamp"], prev["last_timestamp"]) if t is not None]
            r["first_timestamp"] = min(firsts) if firsts else None
            r["last_timestamp"] = max(lasts) if lasts else None
        rows.append(r)
    return pa.Table.from_pylist(rows, schema=contract(TABLE).arrow_schema)


def record_progress(engine: DeltaEngine, app_id: str, batch_id: int, now: datetime) -> int:
    """Fold batch ``batch_id``'s ``offsets_raw`` rows (committed before) into the table, in
    the batch's transaction; rows written (0 when already done or nothing to add).

    The batch's rows are read from the files this engine committed for it, else found by
    ``ingest_batch_id`` (files skipped on their statistics). Another query's batch of the
    same number adds only positions the table already holds.
    """
    if engine.committed(TABLE, app_id, batch_id):
        return 0
    if not engine.exists(TABLE):
        build_from_history(engine, now)
    batch = read_batch(engine, "offsets_raw", _RAW_COLUMNS, KeyFilter.of(("ingest_batch_id",), {(batch_id,)}),
                       app_id, batch_id, dictionaries=("cluster_id",))
    new = aggregate(batch, now)
    if new.num_rows == 0:
        return 0
    keys = zip(new.column("cluster_id").to_pylist(), new.column("offsets_partition").to_pylist(),
               strict=True)
    rows = combine(engine.read(TABLE, None, KeyFilter.of(_KEY, keys)), new)
    changes = rows.append_column(OP, pa.array(["upsert"] * rows.num_rows, pa.string()))
    return rows.num_rows if engine.merge(contract(TABLE), changes, app_id, batch_id) else 0


def not_yet_applied(engine: DeltaEngine, batch: StateInput, app_id: str, batch_id: int
                    ) -> tuple[StateInput, dict[tuple[str, int], int]]:
    """``batch`` without the records the state tables have taken already: those below their
    partition's log end in this table; and the log end of each partition it cut.

    Why: another query over the same log (a fresh checkpoint: a deliberate full replay,
    or a second copy of a partition's log) hands the state records it holds already, and
    applying them again is not harmless. The ownership replay starts from the open rows
    as the lake holds them now: it closed them at the first old record (before they
    started) and wrote every earlier interval a second time (a generated history replayed
    in 1,000-record batches: 74 intervals ending before they started, 654 twice); and the
    merges set committed offsets back until the replay caught up.

    Exact because every batch's state lands before its row here (:func:`record_progress`
    is a batch's last write): a position below a log end is one whose batch's state
    tables, audit included, are written. The batches of the query that wrote the row lie
    past it (one after the other), so they lose nothing; a batch replayed after a crash
    whose own row landed is left whole (its merges are committed: each skips itself).
    Without the table (a lake that predates it, or its first batch) nothing is cut.
    """
    if not engine.exists(TABLE) or engine.committed(TABLE, app_id, batch_id):
        return batch, {}
    commits, groups = batch.offset_commits, batch.groups
    # the whole table (a row per partition): finding the batch's clusters first cost a pass
    # over its records, and a partition the batch does not hold cuts nothing
    rows = engine.read(TABLE, [*_KEY, "log_end"])
    ends = {(c, p): e for c, p, e in zip(*(rows.column(n).to_pylist() for n in (*_KEY, "log_end")), strict=True)}
    if not ends:
        return batch, {}
    cut: set[tuple[str, int]] = set()
    below = _below_log_ends(commits, ends)
    if below is not None and pc.any(below).as_py():
        cut |= _partitions(commits.filter(below))
        commits = commits.filter(pc.invert(below))
    below = _below_log_ends(groups.table, ends)
    if below is not None and pc.any(below).as_py():
        cut |= _partitions(groups.table.filter(below))
        groups = groups.take(np.flatnonzero(~below.to_numpy(zero_copy_only=False)))
    if not cut:
        return batch, {}
    return StateInput(commits, groups, batch.commit_ranges), {key: ends[key] for key in sorted(cut)}


def _partitions(rows: pa.Table) -> set[tuple[str, int]]:
    """The (cluster, offsets partition) pairs of ``rows``."""
    return set(zip(*(rows.column(n).cast(t).to_pylist()
                     for n, t in (("cluster_id", pa.string()), ("offsets_partition", pa.int64()))), strict=True))


def _below_log_ends(rows: pa.Table, ends: dict[tuple[str, int], int]) -> pa.Array | None:
    """Per row (an offset commit or a group record), whether it lies below its partition's
    log end: each row's end looked up in a (cluster, partition) grid, one pass over the
    rows whatever the number of partitions (a batch's state rows are one per committed
    key: up to millions; its group records, ~500k on a group-heavy log)."""
    if not rows.num_rows:
        return None
    encoded = pc.dictionary_encode(rows.column("cluster_id").cast(pa.string())).combine_chunks()
    code = pc.fill_null(encoded.indices, -1).to_numpy()
    partition = pc.fill_null(rows.column("offsets_partition"), -1).to_numpy().astype(np.int64)
    offset = rows.column("offset").to_numpy().astype(np.int64)
    names = encoded.dictionary.to_pylist()
    width = max(p for _, p in ends) + 1
    grid = np.zeros((len(names) + 1, width + 1), np.int64)  # the last row and column: no end
    for (c, p), end in ends.items():
        if c in names and p >= 0:
            grid[names.index(c), p] = end
    at = np.where(code < 0, len(names), code)
    columns = np.where((partition < 0) | (partition >= width), width, partition)
    return pa.array(offset < grid[at, columns])


def build_from_history(engine: DeltaEngine, now: datetime) -> int:
    """Create the table from the whole ``offsets_raw`` (a lake that predates it), in one
    commit, so a crash leaves either no table or a complete one."""
    raw = engine.read("offsets_raw", _RAW_COLUMNS)
    rows = aggregate(raw, now)
    engine.overwrite(contract(TABLE), rows)
    log.info("built %s from %d offsets_raw rows (%d partitions)", TABLE, raw.num_rows, rows.num_rows)
    return rows.num_rows


def _cluster_rows(engine: DeltaEngine, cluster_id: str) -> pa.Table | None:
    """The cluster's progress rows, or None when the lake has no progress table (a lake no
    batch was ingested into since it was introduced: the answers come from the history)."""
    if not engine.exists(TABLE):
        return None
    return engine.read(TABLE, None, KeyFilter.of(("cluster_id",), {(cluster_id,)}))


def _history_rows(engine: DeltaEngine, cluster_id: str) -> pa.Table:
    if not engine.exists("offsets_raw"):
        return contract(TABLE).arrow_schema.empty_table()
    raw = engine.read("offsets_raw", _RAW_COLUMNS, KeyFilter.of(("cluster_id",), {(cluster_id,)}))
    return aggregate(raw, datetime.now().astimezone())


def log_ends(engine: DeltaEngine, cluster_id: str) -> dict[int, int]:
    """``offsets_partition -> max(offset) + 1`` of the cluster's ingested records."""
    rows = _cluster_rows(engine, cluster_id)
    if rows is None:
        rows = _history_rows(engine, cluster_id)
    return {int(p): int(e) for p, e in zip(rows.column("offsets_partition").to_pylist(),
                                           rows.column("log_end").to_pylist(), strict=True)}


def time_range(engine: DeltaEngine, cluster_id: str) -> tuple[datetime, datetime] | None:
    """Earliest and latest record timestamp of the cluster's history (None without any)."""
    rows = _cluster_rows(engine, cluster_id)
    if rows is None:
        rows = _history_rows(engine, cluster_id)
    firsts = [t for t in rows.column("first_timestamp").to_pylist() if t is not None]
    lasts = [t for t in rows.column("last_timestamp").to_pylist() if t is not None]
    if not firsts:
        return None
    return min(firsts), max(lasts)
