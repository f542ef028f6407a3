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

from pipelines.lake.engines import OP

OFFSET_KEY = ["cluster_id", "group_id", "topic", "partition"]


def last_per_key(table: pa.Table, key: list[str]) -> pa.Table:
    """The row with the greatest log position per key, winners in log order."""
    if table.num_rows == 0:
        return table
    order = _log_order(table)
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
    order = _log_order(offset_commits)
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
    ranks = np.unique(np.concatenate([w.drop_null().to_numpy() for w in winners]))
    return offset_commits.take(ranks if order is None else order[ranks])


def _log_order(table: pa.Table) -> np.ndarray | None:
    """Row indices in log position order, or None when the rows are in that order already."""
    part = table.column("offsets_partition").to_numpy()
    offset = table.column("offset").to_numpy()
    dp, do = np.diff(part), np.diff(offset)
    if np.all((dp > 0) | ((dp == 0) & (do > 0))):
        return None
    return np.lexsort((offset, part))
