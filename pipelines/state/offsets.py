"""Committed offsets: the last record per (group, topic, partition) wins; tombstones delete.

Under read_committed input (or segment reads with transaction markers applied) this
fold is exactly the coordinator's replay, transactional commits included (spec 2.4).
Key types 0 and 1 are one logical key, so the fold ignores the record type.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.engines import OP

OFFSET_KEY = ["cluster_id", "group_id", "topic", "partition"]


def last_per_key(table: pa.Table, key: list[str]) -> pa.Table:
    """The row with the greatest log position per key (rows arrive in log order per partition)."""
    if table.num_rows == 0:
        return table
    ordered = table.sort_by([("offsets_partition", "ascending"), ("offset", "ascending")])
    ordered = ordered.append_column("_rank", pa.array(range(ordered.num_rows), pa.int64()))
    winners = ordered.group_by(key, use_threads=False).aggregate([("_rank", "max")])
    ranks = winners.column("_rank_max").combine_chunks()
    return ordered.take(ranks.take(pc.sort_indices(ranks))).drop_columns(["_rank"])


def offset_changes(offset_commits: pa.Table, updated_at: datetime) -> pa.Table:
    """Change set for ``committed_offsets``: upserts for values, deletes for tombstones."""
    latest = last_per_key(offset_commits, OFFSET_KEY)
    ops = pc.if_else(latest.column("is_tombstone"), "delete", "upsert")
    latest = latest.append_column("updated_at", pa.array([updated_at] * latest.num_rows,
                                                         pa.timestamp("us", tz="UTC")))
    return latest.append_column(OP, ops)
