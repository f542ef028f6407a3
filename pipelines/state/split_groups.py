"""Group ids of one cluster id found in more than one ``__consumer_offsets`` partition.

A coordinator keeps every record of a group in the one partition its id hashes to, so one
group id in two partitions under one cluster id means the logs of two clusters were
ingested as one (a segment root holding several clusters' data dirs, one ``--cluster-id``
for both), or the topic's partition count was changed. The state tables then merge two
unrelated groups by log position across partitions, and what they and the commit audit
hold depends on where micro-batches are cut: never silent, the ingest reports each such
group (a warning; exit 3 with ``--strict``).

Found per batch from the rows the driver holds (every group record, and per task the last
commit of each group in each offsets partition: :func:`pipelines.model.state_rows`) and
the partitions ``group_records_latest`` holds for the group before the batch. That table,
not ``consumer_groups``: it keeps a deleted group's rows (its tombstones, its last commit),
so a group deleted before the other cluster's records of its name arrive is found too.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.engines import DeltaEngine
from pipelines.lake.keys import KeyFilter, distinct_keys
from pipelines.model import StateInput

_COLUMNS = ["cluster_id", "group_id", "offsets_partition"]
_GROUP = ["cluster_id", "group_id"]


def split_groups(engine: DeltaEngine, batch: StateInput) -> dict[tuple[str, str], tuple[int, ...]]:
    """(cluster, group) -> its offsets partitions, for each group of the batch seen in more
    than one (in the batch, or in the batch and where the lake held it before)."""
    seen = _distinct([t.select(_COLUMNS) for t in (batch.offset_commits, batch.groups.table) if t.num_rows])
    if seen.num_rows == 0:
        return {}
    if engine.exists("group_records_latest"):
        stored = engine.read("group_records_latest", _COLUMNS, KeyFilter.of(_GROUP, distinct_keys(seen, _GROUP)))
        seen = _distinct([seen, stored])
    per_group = seen.group_by(_GROUP, use_threads=False).aggregate([("offsets_partition", "list")])
    several = per_group.filter(pc.greater(pc.list_value_length(per_group.column("offsets_partition_list")), 1))
    return {(c, g): tuple(sorted(p)) for c, g, p in zip(
        *(several.column(n).to_pylist() for n in (*_GROUP, "offsets_partition_list")), strict=True)}


def described(groups: dict[tuple[str, str], set[int] | tuple[int, ...]]) -> str:
    """How many of ``groups`` there are, and the first (by cluster, group) with its partitions:
    what the batch that finds them logs and what the run's end says."""
    (cluster_id, group_id), parts = min(groups.items())
    return (f"{len(groups)} group id(s) with records in more than one __consumer_offsets partition of one "
            f"cluster id (e.g. {group_id!r} of {cluster_id!r}: partitions {', '.join(map(str, sorted(parts)))})")


def _distinct(tables: list[pa.Table]) -> pa.Table:
    """The distinct (cluster, group, offsets partition) rows of ``tables`` as plain columns."""
    schema = pa.schema([("cluster_id", pa.string()), ("group_id", pa.string()), ("offsets_partition", pa.int32())])
    if not tables:
        return schema.empty_table()
    plain = [pa.table([pc.cast(t.column(n), schema.field(n).type) for n in _COLUMNS], schema=schema)
             for t in tables]
    return pa.concat_tables(plain).group_by(_COLUMNS, use_threads=False).aggregate([])
