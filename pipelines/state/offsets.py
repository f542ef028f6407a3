"""Committed offsets: the last record per (group, topic, partition) wins; tombstones delete.

Under read_committed input (or segment reads with transaction markers applied) this
fold is exactly the coordinator's replay, transactional commits included (spec 2.4).
Key types 0 and 1 are one logical key, so the fold ignores the record type.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.model import OFFSET_KEY, OP, log_order


def last_per_key(table: pa.Table, key: list[str]) -> pa.Table:
    """The row with the greatest log position per key, winners in log order."""
    if table.num_rows == 0:
        return table
    order = log_order(table)
    ordered = table if order is None else table.take(order)
    ranked = ordered.append_column("_rank", pa.array(np.arange(ordered.num_rows, dtype=np.int64)))
    winners = ranked.group_by(key, use_threads=False).aggregate([("_rank", "max")])
    return ordered.take(np.sort(winners.column("_rank_max").to_numpy()))


def offset_changes(offset_commits: pa.Table, updated_at: datetime) -> pa.Table:
    """Change set for ``committed_offsets``: upserts for values, deletes for tombstones."""
    latest = last_per_key(offset_commits, OFFSET_KEY)
    ops = pc.if_else(latest.column("is_tombstone"), "delete", "upsert")
    latest = latest.append_column("updated_at", pa.array([updated_at] * latest.num_rows,
                                                         pa.timestamp("us", tz="UTC")))
    return latest.append_column(OP, ops)
