"""The stored ``group_generations`` rows the ownership replay starts from
(:mod:`pipelines.state.ownership_runs`), and where two rows it changes may be one interval.

Why apart: what the lake holds before a batch (its open rows, its rows waiting for their
member's metadata, where each interval is stored) is read once per batch and asked the
same few questions; the replay's runs over the batch's records are another job.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipelines.lake.contracts import contract


class Stored:
    """The stored rows the replay reads: the open ones (first), then those still waiting for
    their member's metadata that are not open; where each stored interval is; the log
    positions (offsets partition, offset) that start one (``starts``) and each group's
    offsets partition (``partition_of``; ``twice`` if a group's rows name two)."""

    def __init__(self, table: pa.Table, opened: int, at: dict[tuple, bool], twice: bool,
                 places: list[tuple[str, int, int]]) -> None:
        self.table, self.opened, self.at = table, opened, at
        self.starts = {(partition, offset) for _, partition, offset in places}
        self.partition_of: dict[str, int] = {}
        for group_id, partition, _ in places:
            twice = twice or self.partition_of.setdefault(group_id, partition) != partition
        self.twice = twice
        self.columns = {c: table.column(c).to_pylist() for c in
                        ("group_id", "group_type", "generation", "member_id", "topic", "partition", "client_id")}

    @classmethod
    def of(cls, open_rows: pa.Table | None, unfilled_rows: pa.Table | None) -> Stored:
        schema = contract("group_generations").arrow_schema
        tables = [schema.empty_table() if t is None else t.select(schema.names).cast(schema)
                  for t in (open_rows, unfilled_rows)]
        opened, waiting = intervals(tables[0]), intervals(tables[1])
        # the partition each stored interval is in (an open row's, if one is)
        at = dict(zip(waiting, tables[1].column("is_open").to_pylist(), strict=True)) | \
            dict(zip(opened, tables[0].column("is_open").to_pylist(), strict=True))
        known = set(opened)
        keep = [i for i, interval in enumerate(waiting) if interval not in known]
        twice = len(known) < len(opened) or len({waiting[i] for i in keep}) < len(keep)
        table = pa.concat_tables([tables[0], tables[1].take(pa.array(keep, pa.int64()))])
        every = pa.concat_tables(tables)
        places = list(zip(*(every.column(c).to_pylist() for c in ("group_id", "offsets_partition", "valid_from_offset")),
                          strict=True))
        return cls(table, len(opened), at, twice, places)


#: a row's identity in the table: its key and where it started
INTERVAL = ("group_id", "generation", "member_id", "topic", "partition", "group_type", "valid_from_offset")


def intervals(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(c).to_pylist() for c in INTERVAL), strict=True)) if table.num_rows else []


def meets_stored(stored: Stored, group: np.ndarray, names: list[str], events: pa.Table) -> bool:
    """Whether two changed rows may be one interval: a record at a stored row's own log
    position (replayed again), or a group's records or stored rows in two offsets
    partitions (their offsets may meet). By position, not offset alone: an offset of one
    partition starting a stored row of another made every batch after the first look
    replayed (~0.4 s of a group-heavy batch's replay for nothing)."""
    partition = events.column("offsets_partition").to_numpy().astype(np.int64)
    offset = events.column("offset").to_numpy().astype(np.int64)
    if stored.starts:
        maybe = np.flatnonzero(np.isin(offset, np.array(sorted({o for _, o in stored.starts}), np.int64)))
        if any((int(partition[i]), int(offset[i])) in stored.starts for i in maybe.tolist()):
            return True
    lowest = np.full(len(names), np.iinfo(np.int64).max, np.int64)
    highest = np.full(len(names), -1, np.int64)
    np.minimum.at(lowest, group, partition)
    np.maximum.at(highest, group, partition)
    if np.any(lowest != highest):
        return True
    return any(stored.partition_of.get(g, p) != p for g, p in zip(names, lowest.tolist(), strict=True))


def last_per_interval(table: pa.Table, last: np.ndarray, listed: np.ndarray) -> pa.Table:
    """Of the rows of each interval, the one changed ``last`` (of two changed at one event, the
    one ``listed`` later), in table order."""
    rank = np.lexsort((listed, last))
    ranked = table.select(list(INTERVAL)).append_column("_rank", pa.array(np.argsort(rank)))
    best = ranked.group_by(list(INTERVAL), use_threads=False).aggregate([("_rank", "max")])
    return table.take(pa.array(np.sort(rank[best.column("_rank_max").to_numpy()])))
