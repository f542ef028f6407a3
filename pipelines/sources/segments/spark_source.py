"""``offsetlake-segments``: a PySpark Python Data Source over a tree of segment files.

Streaming (with ``availableNow`` and bounded micro-batches) or batch. Offsets are, per
partition directory, the next log offset to read, so Spark's checkpoint makes reruns
resume exactly where they stopped. What a read emits, where it stops and how it is cut into
tasks is :mod:`.index`; this module only adapts that to Spark's DataSource API, and imports
no Spark until :func:`register` is called.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pipelines.sources.batching import default_read_limit, record_budget
from pipelines.sources.segments.files import PartitionLog, find_segments
from pipelines.without_pandas import SPARK_STREAMING_SOURCE_RUNNER, block_pandas, running_as

if TYPE_CHECKING:
    import pyarrow as pa

    from pipelines.sources.segments.index import PartitionIndex

log = logging.getLogger(__name__)

NAME = "offsetlake-segments"

__all__ = ["MIN_TASK_RECORDS", "NAME", "SegmentPlanner", "register", "task_count"]


#: Records a task must have before a micro-batch is cut into one more task. A task's fixed
#: cost (scheduling, and the read and decode Python workers' first use) is worth paying only
#: for about this much work: measured on 2 cores, the 20-file real workload (138k records)
#: ran 8.17 s in 1 task, 8.49 s in 2, 8.86-8.98 s in 8; a generated 2M-record history
#: (500k-record batches) 15.5-16.2 s in 2 tasks per batch, 16.6-17.3 s in 8, 16.7 s in 1.
MIN_TASK_RECORDS = 200_000


def task_count(records: int, max_tasks: int, min_task_records: int = MIN_TASK_RECORDS) -> int:
    """Tasks for a micro-batch of ``records``: one per ``min_task_records`` started, at least
    one, at most ``max_tasks`` (the session's cores, see ``pipelines.ingest.open_stream``)."""
    return max(1, min(max_tasks, -(-records // max(1, min_task_records))))


def _index() -> ModuleType:
    """The segment index module (pyarrow, numpy, the record-batch reader), imported on first
    use. Why: Spark starts a Python process to create this data source and one to plan each
    read before any record is read; this module (the classes they unpickle) then imports
    in ~0.02 s instead of ~0.2 s, on the path of every run's start."""
    from pipelines.sources.segments import index

    return index


def _schema(options: dict[str, str]) -> Any:
    """The Spark schema a read emits (deferred reads, packed cells, or the raw record columns)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from pipelines.sources.raw import DEFERRED_ARROW_SCHEMA, PACKED_ARROW_SCHEMA, SPARK_RAW_SCHEMA

    if _flag(options, "defer_read"):
        return from_arrow_schema(DEFERRED_ARROW_SCHEMA)
    return from_arrow_schema(PACKED_ARROW_SCHEMA if _flag(options, "packed") else SPARK_RAW_SCHEMA)


def _flag(options: dict[str, str], name: str) -> bool:
    return options.get(name, "false").lower() == "true"


def read_ranges(ranges: list[tuple] | tuple, rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """The raw records of a task's ranges (see :class:`SegmentPlanner`), in Arrow batches of at
    most ``rows_per_batch``; a range whose files changed since planning is read in full."""
    ix = _index()
    for directory, regions, begin, stop, aborted, rows, cluster in ranges:
        plog = find_segments(directory)[0]
        batches = list(ix.read_regions(plog.offsets_partition, regions, begin, stop, aborted, cluster,
                                       rows_per_batch))
        if sum(b.num_rows for b in batches) != rows:  # the files changed since planning
            log.warning("%s changed while being read; reading [%d, %d) in full", directory, begin, stop)
            batches = ix.read_range(plog, begin, stop, cluster, rows_per_batch, [])
        yield from batches


@dataclass(frozen=True)
class SegmentRead:
    """A task's read, deferred to where its row is consumed: ``pipelines.sources.raw.unpacked``
    calls :meth:`read` in the decoding task, which reads the segment files itself."""

    ranges: tuple
    rows_per_batch: int

    def read(self) -> Iterator[pa.RecordBatch]:
        return read_ranges(self.ranges, self.rows_per_batch)


class SegmentPlanner:
    """What the batch and the streaming reader share, without Spark: the options, the driver's
    index of every partition directory, planning a micro-batch into tasks, and a task's read.

    Each range of a task is (directory, byte regions, first offset, end offset, aborted
    offsets, rows, cluster id).
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.root = Path(options["path"])
        self.cluster_option = options.get("cluster_id", "default")
        self.rows_per_batch = int(options.get("rows_per_arrow_batch", 65536))
        self.max_rows = int(options.get("max_records_per_batch", 0)) or None
        self.max_tasks = int(options.get("max_tasks", 8))
        self.min_task_records = int(options.get("min_task_records", MIN_TASK_RECORDS))
        self.packed = _flag(options, "packed")
        self.defer_read = _flag(options, "defer_read")
        self._cache_dir = options.get("index_cache_dir")
        self._cache = None  # the index cache, opened by the first refresh
        self._indexes: dict[str, PartitionIndex] = {}
        self._logs: dict[str, PartitionLog] = {}

    def __getstate__(self) -> dict:
        """What a task needs to read: the options, not the driver's index of every offset
        (megabytes per million records, shipped to every task otherwise)."""
        state = dict(self.__dict__)
        state.update(_indexes={}, _logs={}, _target=None, _cache=None, _cache_dir=None)
        return state

    def _refresh(self) -> dict[str, PartitionIndex]:
        ix = _index()
        if self._cache is None and self._cache_dir:
            self._cache = ix.SegmentIndexCache(self._cache_dir)
        plogs = find_segments(self.root)
        keys = [ix.log_key(self.root, plog) for plog in plogs]
        indexes = ix.index_partitions(plogs, self._cache, [self._indexes.get(key) for key in keys])
        for key, plog, index in zip(keys, plogs, indexes, strict=True):
            self._logs[key], self._indexes[key] = plog, index
            if self._cache:
                self._cache.keep(plog)
        if self._cache:
            self._cache.prune()
        return self._indexes

    def _task_ranges(self, start: dict, end: dict) -> list[list[tuple]]:
        """The ranges of each task reading ``[start, end)`` (no empty task)."""
        if any(key not in self._indexes for key in end):  # a fresh reader replaying a batch
            self._refresh()
        ix, pieces = _index(), []
        for rows, key, lo, hi in ix.split_ranges(self._indexes, start, end, self.max_tasks):
            idx, plog = self._indexes[key], self._logs[key]
            # rows outside [first emitted, last emitted] of a piece are never emitted
            first, stop = int(idx.offsets[lo]), int(idx.offsets[hi - 1]) + 1
            aborted = idx.aborted[(idx.aborted >= first) & (idx.aborted < stop)].tolist()
            pieces.append((rows, (str(plog.directory), idx.regions(lo, hi), first, stop, aborted, rows,
                                  ix.cluster_of(plog, self.cluster_option))))
        tasks = task_count(sum(rows for rows, _ in pieces), self.max_tasks, self.min_task_records)
        return [r for r in ix.pack_ranges(pieces, tasks) if r]

    def _read_ranges(self, ranges: list[tuple]) -> Iterator[pa.RecordBatch]:
        from pipelines.sources.raw import deferred, pack

        if self.defer_read:
            return iter([deferred(SegmentRead(tuple(ranges), self.rows_per_batch))])
        batches = self.read_raw(ranges)
        return pack(batches) if self.packed else batches

    def read_raw(self, ranges: list[tuple]) -> Iterator[pa.RecordBatch]:
        """The raw records of a task's ranges."""
        return read_ranges(ranges, self.rows_per_batch)

    def _latest(self, start: dict | None, max_rows: int | None, target: dict[str, int] | None) -> dict:
        """End offsets of the next micro-batch from ``start``: at most ``max_rows`` records,
        never past ``target`` (what existed when an availableNow run started)."""
        start, ix = dict(start or {}), _index()
        indexes = self._refresh()
        if target is not None:
            indexes = {k: v.before(target.get(k, 0)) for k, v in indexes.items()}
        return ix.plan_end_offsets(indexes, start, max_rows)


def _spark_classes() -> Any:
    """Build the Data Source classes lazily so importing this module needs no Spark."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

    class SegmentRanges(InputPartition):
        """One Spark task: offset ranges of one or more partition directories."""

        def __init__(self, ranges: list[tuple]) -> None:
            super().__init__(tuple(ranges))
            self.ranges = ranges  # see SegmentPlanner

    class SegmentStreamReader(SegmentPlanner, DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]) -> None:
            super().__init__(options)
            self._target: dict[str, int] | None = None
            if running_as(SPARK_STREAMING_SOURCE_RUNNER):  # a process for this reader alone
                block_pandas()

        def initialOffset(self) -> dict:
            return {}

        def getDefaultReadLimit(self) -> ReadLimit:
            return default_read_limit(self.max_rows)

        def prepareForTriggerAvailableNow(self) -> None:
            self._target = _index().plan_end_offsets(self._refresh(), {}, None)
            log.info("availableNow target: %d partition directories", len(self._target))

        def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
            return self._latest(start, record_budget(limit), self._target)

        def partitions(self, start: dict, end: dict) -> list:
            return [SegmentRanges(r) for r in self._task_ranges(start, end)]

        def read(self, partition: SegmentRanges) -> Iterator[pa.RecordBatch]:
            return self._read_ranges(partition.ranges)

        def commit(self, end: dict) -> None:
            """Advisory only: positions live in Spark's checkpoint (PLATFORM.md)."""

    class SegmentBatchReader(SegmentPlanner, DataSourceReader):
        def partitions(self) -> list:
            end = _index().plan_end_offsets(self._refresh(), {}, None)
            return [SegmentRanges(r) for r in self._task_ranges({}, end)]

        def read(self, partition: SegmentRanges) -> Iterator[pa.RecordBatch]:
            return self._read_ranges(partition.ranges)

    class SegmentDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return NAME

        def schema(self):
            return _schema(self.options)

        def reader(self, schema):
            return SegmentBatchReader(self.options)

        def streamReader(self, schema):
            return SegmentStreamReader(self.options)

    return SegmentDataSource


def register(spark) -> None:
    """Make ``spark.read(Stream).format("offsetlake-segments")`` available in ``spark``."""
    spark.dataSource.register(_spark_classes())
