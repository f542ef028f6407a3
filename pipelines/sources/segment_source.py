"""``offsetlake-segments``: a PySpark Python Data Source over a tree of segment files.

Streaming (with ``availableNow`` and bounded micro-batches) or batch. Offsets are, per
partition directory, the next log offset to read, so Spark's checkpoint makes reruns
resume exactly where they stopped. Transaction markers are applied as the coordinator
does (aborted data dropped, committed kept in place) and reading stops at each
partition's last stable offset, as a ``read_committed`` consumer would; control records
themselves are kept (flagged) for the audit trail.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipelines.sources.batching import spread_budget
from pipelines.sources.fastread import fold_arrow, read_segments_arrow, unique_offsets
from pipelines.sources.raw import RAW_ARROW_SCHEMA
from pipelines.sources.segments import PartitionLog, find_segments

log = logging.getLogger(__name__)

NAME = "offsetlake-segments"

# Spark exchanges timestamps as microseconds; the raw schema with Spark's timestamp unit.
SPARK_RAW_SCHEMA = pa.schema([
    f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
    for f in RAW_ARROW_SCHEMA
])


# ----------------------------------------------------------------------------- pure helpers


def log_key(root: Path, plog: PartitionLog) -> str:
    """Stable id of a partition directory relative to the root (the checkpoint's offset key)."""
    try:
        return str(plog.directory.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(plog.directory.resolve())


def cluster_of(plog: PartitionLog, option: str) -> str:
    """``auto``: the data dir's ``meta.properties`` cluster.id, else the data dir's path."""
    if option != "auto":
        return option
    meta = plog.directory.parent / "meta.properties"
    if meta.exists():
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    return str(plog.directory.parent)


@dataclass
class PartitionIndex:
    """Offsets a reader will emit for one partition directory, and where it must stop."""

    offsets: np.ndarray  # sorted log offsets of emitted records
    last_stable_offset: int
    signature: tuple


def _signature(plog: PartitionLog) -> tuple:
    stats = []
    for seg in plog.segments:
        st = os.stat(seg.path)
        stats.append((str(seg.path), st.st_size, st.st_mtime_ns))
    return tuple(stats)


def emitted_table(segments: list, cluster_id: str | None) -> pa.Table:
    """What a read_committed reader hands on from these segment files, in offset order.

    Files can overlap (Kafka's ``.swap``/``.cleaned``/``.deleted`` leftovers, or copies of
    one segment taken at different times); an offset always holds the same record
    (compaction only removes), so their union by offset is the log. Aborted data is
    dropped, markers are kept, and nothing at or after the last stable offset is emitted.
    """
    batches = list(read_segments_arrow(segments, cluster_id=cluster_id))
    table = pa.Table.from_batches(batches, schema=RAW_ARROW_SCHEMA)
    kept, lso = fold_arrow(unique_offsets(table))
    return _offsets_between(kept, 0, lso)


def _offsets_between(table: pa.Table, start: int, end: int) -> pa.Table:
    """Rows with ``start <= offset < end`` (rows are in offset order; no copy when all are)."""
    offsets = table.column("offset").to_numpy()
    lo, hi = np.searchsorted(offsets, [start, end], side="left")
    return table if (lo, hi) == (0, len(offsets)) else table.slice(lo, hi - lo)


def index_partition(plog: PartitionLog, cached: PartitionIndex | None = None) -> PartitionIndex:
    sig = _signature(plog)
    if cached is not None and cached.signature == sig:
        return cached
    offsets = emitted_table(plog.segments, None).column("offset").to_numpy()
    last_stable = int(offsets[-1]) + 1 if len(offsets) else 0
    return PartitionIndex(offsets, last_stable, sig)


def plan_end_offsets(
    indexes: dict[str, PartitionIndex], start: dict[str, int], max_rows: int | None
) -> dict[str, int]:
    """End offsets (exclusive) per partition, taking at most ``max_rows`` records in total."""
    end = dict(start)
    first = {key: int(np.searchsorted(idx.offsets, start.get(key, 0), side="left"))
             for key, idx in indexes.items()}
    backlog = {key: len(idx.offsets) - first[key] for key, idx in indexes.items()}
    grants = backlog if max_rows is None else spread_budget(backlog, max_rows)
    for key, take in grants.items():
        if take <= 0:
            continue
        offsets, stop = indexes[key].offsets, first[key] + take
        end[key] = int(offsets[stop]) if stop < len(offsets) else max(int(offsets[-1]) + 1, start.get(key, 0))
    return end


def read_range(
    plog: PartitionLog, start: int, end: int, cluster_id: str, rows_per_batch: int = 65536
) -> Iterator[pa.RecordBatch]:
    """Emitted records with ``start <= offset < end``, as Spark-ready raw-schema batches.

    Reading starts at the segment holding ``start``: a transaction decided later is still
    resolved by its marker, which lies further on in the log.
    """
    segs = plog.segments
    first_base = max((seg.base_offset for seg in segs if seg.base_offset <= start), default=0)
    table = emitted_table([seg for seg in segs if seg.base_offset >= first_base], cluster_id)
    table = _offsets_between(table, start, end)
    for batch in table.to_batches(max_chunksize=rows_per_batch):
        yield batch.cast(SPARK_RAW_SCHEMA)


def pack_ranges(sized: list[tuple[int, tuple]], tasks: int) -> list[list[tuple]]:
    """Spread ranges over at most ``tasks`` Spark tasks, largest first onto the lightest.

    Hundreds of small partition directories (typical of a broker's 50 partitions, and of
    backups) would otherwise pay a task's fixed cost each.
    """
    bins: list[list[tuple]] = [[] for _ in range(max(1, min(tasks, len(sized))))]
    load = [0] * len(bins)
    for size, item in sorted(sized, key=lambda s: -s[0]):
        lightest = load.index(min(load))
        bins[lightest].append(item)
        load[lightest] += max(size, 1)
    return bins


# ----------------------------------------------------------------------------- Spark


def _spark_classes():
    """Build the Data Source classes lazily so importing this module needs no Spark."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    class SegmentRanges(InputPartition):
        """One Spark task: offset ranges of one or more partition directories."""

        def __init__(self, ranges: list[tuple[str, int, int, str]]) -> None:
            super().__init__(tuple(ranges))
            self.ranges = ranges  # (directory, start, end, cluster id)

    class _Common:
        def __init__(self, options: dict[str, str]) -> None:
            self.root = Path(options["path"])
            self.cluster_option = options.get("cluster_id", "default")
            self.rows_per_batch = int(options.get("rows_per_arrow_batch", 65536))
            self.max_rows = int(options.get("max_records_per_batch", 0)) or None
            self.max_tasks = int(options.get("max_tasks", 8))
            self._indexes: dict[str, PartitionIndex] = {}
            self._logs: dict[str, PartitionLog] = {}

        def _refresh(self) -> dict[str, PartitionIndex]:
            for plog in find_segments(self.root):
                key = log_key(self.root, plog)
                self._logs[key] = plog
                self._indexes[key] = index_partition(plog, self._indexes.get(key))
            return self._indexes

        def _partitions(self, start: dict, end: dict) -> list:
            ranges = []
            for key, stop in sorted(end.items()):
                begin = start.get(key, 0)
                if stop > begin:
                    plog = self._logs[key]
                    offsets = self._indexes[key].offsets
                    size = int(np.searchsorted(offsets, stop) - np.searchsorted(offsets, begin))
                    ranges.append((size, (str(plog.directory), begin, stop,
                                          cluster_of(plog, self.cluster_option))))
            return [SegmentRanges(r) for r in pack_ranges(ranges, self.max_tasks) if r]

        def read(self, partition: SegmentRanges) -> Iterator[pa.RecordBatch]:
            for directory, begin, stop, cluster in partition.ranges:
                plog = find_segments(directory)[0]
                yield from read_range(plog, begin, stop, cluster, self.rows_per_batch)

    class SegmentStreamReader(_Common, DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]) -> None:
            super().__init__(options)
            self._target: dict[str, int] | None = None

        def initialOffset(self) -> dict:
            return {}

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

        def prepareForTriggerAvailableNow(self) -> None:
            self._target = plan_end_offsets(self._refresh(), {}, None)
            log.info("availableNow target: %d partition directories", len(self._target))

        def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
            start = dict(start or {})
            indexes = self._refresh()
            if self._target is not None:  # never read past what existed when the run started
                indexes = {
                    k: PartitionIndex(
                        v.offsets[v.offsets < self._target.get(k, 0)],
                        v.last_stable_offset,
                        v.signature,
                    )
                    for k, v in indexes.items()
                }
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            return plan_end_offsets(indexes, start, max_rows)

        def partitions(self, start: dict, end: dict) -> list:
            return self._partitions(start, end)

        def commit(self, end: dict) -> None:
            """Advisory only: positions live in Spark's checkpoint (PLATFORM.md)."""

    class SegmentBatchReader(_Common, DataSourceReader):
        def partitions(self) -> list:
            return self._partitions({}, plan_end_offsets(self._refresh(), {}, None))

    class SegmentDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return NAME

        def schema(self):
            return from_arrow_schema(SPARK_RAW_SCHEMA)

        def reader(self, schema):
            return SegmentBatchReader(self.options)

        def streamReader(self, schema):
            return SegmentStreamReader(self.options)

    return SegmentDataSource


def register(spark) -> None:
    spark.dataSource.register(_spark_classes())
