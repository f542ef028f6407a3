"""The one production read_committed fold, on Arrow rows: what a ``read_committed`` consumer
would hand on from one partition's raw rows, and each offset once.

Why one module: the segment-file source and the Kafka source both land RAW_ARROW_SCHEMA rows
and must drop aborted data, hold back open transactions and stop at the last stable offset
exactly as the broker does; one vectorized fold (numpy over all rows, no record objects) is
the single place that rule lives. The exact per-record ``fold_transactions`` next to the
exact reader is its test oracle, not a second production path.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrow_columns import numpy_to_arrow

__all__ = ["fold_arrow", "unique_offsets"]


def _bools(arr: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A boolean column as numpy, null = False."""
    return arr.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)


def fold_arrow(
    table: pa.Table | pa.RecordBatch,
    *,
    stop_at_lso: bool = False,
    log_end_offset: int | None = None,
) -> tuple[pa.Table, int]:
    """``fold_transactions`` (the exact reader's oracle) on RAW_ARROW_SCHEMA rows of ONE
    partition in log order: (rows kept, last stable offset).

    Kept, in log order: non-transactional data, committed transactional data, and every
    control row (the markers, which ``FoldResult`` returns separately). Dropped: data of
    aborted transactions and held-back data of transactions with no marker yet (always at or
    after the LSO); with ``stop_at_lso`` also the other data rows at or after the LSO
    (control rows stay, as in ``fold_transactions``). A data row is decided by the first
    COMMIT/ABORT control row of the same producer id after it.

    The LSO is the first offset of the earliest open transaction, else the log end offset:
    ``log_end_offset`` if given, else max(offset) + 1. ``fold_transactions`` uses the last
    offset of the last *batch* there, which Arrow rows do not carry (it differs when the
    cleaner emptied the tail of that batch); pass ``log_end_offset`` to match it exactly.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    offset = table.column("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    end = int(offset.max()) + 1 if n else 0
    if log_end_offset is not None:
        end = log_end_offset
    is_control = _bools(table.column("is_control"))
    data_txn = ~is_control & _bools(table.column("is_transactional"))
    ctype = table.column("control_type")
    is_abort = _bools(pc.equal(ctype, "ABORT"))
    decisive = is_control & (is_abort | _bools(pc.equal(ctype, "COMMIT")))
    producer = table.column("producer_id").fill_null(-1).to_numpy(zero_copy_only=False)

    drop = np.zeros(n, dtype=bool)
    lso = end
    cand = np.flatnonzero(data_txn | decisive)
    if cand.size:
        order = cand[np.argsort(producer[cand], kind="stable")]  # by producer, then log order
        marker = decisive[order]
        m = order.size
        nxt = np.where(marker, np.arange(m), m)
        nxt = np.minimum.accumulate(nxt[::-1])[::-1]  # next marker at or after, in order
        data = ~marker
        rows = order[data]
        nm = nxt[data]
        decided = nm < m
        decided[decided] = producer[order[nm[decided]]] == producer[rows[decided]]
        aborted = decided.copy()
        aborted[decided] = is_abort[order[nm[decided]]]
        drop[rows[aborted]] = True
        held = rows[~decided]  # grouped by producer, log order within
        if held.size:
            drop[held] = True
            hp = producer[held]
            first = np.ones(held.size, dtype=bool)
            first[1:] = hp[1:] != hp[:-1]
            lso = int(offset[held[first]].min())
    if stop_at_lso:
        drop |= ~is_control & (offset >= lso)
    if not drop.any():  # the common case: no aborted or open transaction, no copy
        return table, lso
    return table.filter(numpy_to_arrow(~drop)), lso


def unique_offsets(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """One partition's rows in offset order, each offset once, the first copy winning, for
    partition directories holding overlapping files (``.swap``/``.cleaned`` leftovers, copies
    of a segment taken at different times). Rows already strictly increasing are returned as
    they are."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    offset = table.column("offset").to_numpy(zero_copy_only=False)
    if offset.size < 2 or bool((offset[1:] > offset[:-1]).all()):
        return table
    order = np.argsort(offset, kind="stable")
    ordered = offset[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return table.take(numpy_to_arrow(order[first]))
