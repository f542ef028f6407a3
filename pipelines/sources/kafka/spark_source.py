"""A PySpark Python Data Source that streams ``__consumer_offsets`` read_committed from Kafka.

Why a Python source and not Spark's ``format("kafka")``: the spark-sql-kafka JVM package comes
from Maven, which is unreachable in some environments (PLATFORM.md), and Spark's Kafka source
exposes neither ``isolation.level`` semantics we can rely on by default nor our raw schema. This
source reads with read_committed semantics so that aborted transactional offset commits never
reach the output and reading stops at the last stable offset (LSO); see spec section 2.4: only
under read_committed does "latest record per key" reproduce the coordinator.

How it reads (:mod:`pipelines.sources.kafka.reader`): raw Fetch requests (``isolation_level=1``)
over kafka-python's connection manager; the response's record batches go to the vectorized
segment parser and read_committed is applied to them exactly as the Java consumer does
(aborted transactional batches dropped by producer id, control batches are markers). No Python
object per record, and the batch facts a consumer hides are at hand: against the in-process
fake broker the whole read runs at ~0.5M records/s, ~10x the KafkaConsumer loop it replaced
(``test_throughput_consumer_path_vs_fetch_path`` prints both).

Registered as ``offsetlake-kafka`` (:func:`register`). Streaming (micro-batch, including
``availableNow``) and batch reads. Rows follow :data:`pipelines.sources.raw.RAW_ARROW_SCHEMA`,
``source`` is ``"kafka"`` and ``source_position`` is ``-1``. By default the rows are exactly what
a Java read_committed consumer returns: data records only, the columns a consumer cannot see
(producer id, markers, codec, ...) null, ``is_control`` False. With
``include_batch_metadata=true`` the COMMIT/ABORT control records are emitted too (flagged
``is_control``, with ``control_type``, as ``offsetlake-segments`` does, for the audit trail) and
every row carries its batch's producer id/epoch, transactional flag, magic, codec, base offset
and CRC verdict.

Offsets kept in Spark's checkpoint: ``{"<partition>": <next offset to read>, ...}`` (string keys:
the offset travels as JSON). Offsets have gaps under read_committed (markers, aborted batches,
compaction), so a range ``[start, end)`` is read until the fetch *position* reaches ``end`` -
the last offsets before ``end`` may be markers or aborted batches that yield no data row.

Options (all strings, as Spark passes them; parsed by :mod:`pipelines.sources.kafka.options`):

=============================  ==============================================================
``bootstrap_servers``          required (alias ``kafka.bootstrap.servers``)
``topic``                      default ``__consumer_offsets`` (override for tests)
``cluster_id``                 value of the ``cluster_id`` column; default: the cluster id the
                               brokers report in Metadata (null on very old brokers)
``starting_offsets``           ``earliest`` (default), ``latest``, or JSON ``{"0": 42, ...}``
                               (``-2`` earliest, ``-1`` latest; unlisted partitions: earliest)
``max_records_per_batch``      default 1000000; ``0`` = unlimited. At most this many records
                               (rows) per micro-batch, spread fairly over partitions. Offsets
                               have holes (compaction, markers, aborted data), so when the
                               offsets to read exceed the budget the driver counts the records
                               by fetching ahead (:mod:`pipelines.sources.kafka.counting`)
``fail_on_data_loss``          default ``true``: raise when a checkpointed offset is no longer in
                               the log (or the log went backwards); ``false`` resumes at the
                               earliest offset and logs a warning
``connect_timeout_s``          default 10: how long to try the bootstrap servers
``read_timeout_s``             default 120: a partition read that makes no progress this long
                               raises instead of hanging
``arrow_batch_rows``           default 10000: rows per Arrow batch handed to Spark
``client_id``                  kafka-python ``client_id`` (default ``offsetlake-kafka-source``)
``request_timeout_ms``         kafka-python ``request_timeout_ms``
``include_batch_metadata``     default ``false``; ``true`` also emits COMMIT/ABORT control
                               records and fills the batch columns (see above)
``packed``                     default ``false``; ``true`` emits PACKED_ARROW_SCHEMA rows (one
                               per Arrow batch) instead of one row per record: what the
                               ingest job reads, several times cheaper to move through Spark
``kafka.<a.b.c>``              any kafka-python consumer setting ``a_b_c``, e.g.
                               ``kafka.security.protocol``, ``kafka.sasl.mechanism``,
                               ``kafka.sasl.plain.username``, ``kafka.ssl.cafile``; values are
                               coerced to the type of kafka-python's default. The Fetch path
                               honours ``fetch.max.bytes``, ``max.partition.fetch.bytes``,
                               ``fetch.max.wait.ms``, ``retry.backoff.ms`` and ``check.crcs``
=============================  ==============================================================

The source always sets ``isolation_level=read_committed``, ``enable_auto_commit=False``,
``group_id=None`` (it never joins a group or commits offsets) and ``allow_auto_create_topics=False``;
options that contradict these are rejected, as is ``kafka.api_version`` (skipping the bootstrap
version probe would let an unreachable cluster hang the driver instead of failing fast).

Errors the CLI can print as one line (:mod:`pipelines.sources.kafka.errors`;
:func:`~pipelines.sources.kafka.errors.explain_failure` digs them out of Spark's
``StreamingQueryException``): :class:`KafkaUnreachable`, :class:`KafkaTopicNotFound`,
:class:`KafkaReadTimeout`, :class:`KafkaDataLoss`, :class:`KafkaFetchError`,
:class:`KafkaSourceConfigError`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMinRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pipelines.sources.batching import (
    default_read_limit,
    fill_budget,
    record_budget,
    spread_budget,
)
from pipelines.sources.kafka.errors import KafkaDataLoss, KafkaSourceConfigError
from pipelines.sources.kafka.options import EARLIEST, LATEST, SOURCE_NAME, SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from pipelines.sources.kafka.counting import PartitionCounter
    from pipelines.sources.kafka.wire import KafkaOffsetsClient, Offsets

log = logging.getLogger(__name__)

# The Kafka client, the record reader and pyarrow are imported where they are used, not here:
# Spark starts a Python process to create this data source and one to plan each read, one
# after the other before any record is read, and both import this module (~0.27 s -> ~0.05 s).


@functools.cache
def spark_schema(packed: bool = False) -> StructType:
    """The DataFrame schema of this source: raw record rows, or packed cells."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from pipelines.sources.raw import PACKED_ARROW_SCHEMA, RAW_ARROW_SCHEMA

    return from_arrow_schema(PACKED_ARROW_SCHEMA if packed else RAW_ARROW_SCHEMA)


# --------------------------------------------------------------------------------------------
# Planning (pure)
# --------------------------------------------------------------------------------------------


def plan_end_offsets(start: Mapping[str, int], available: Mapping[str, int],
                     limit: ReadLimit | None, *, fail_on_data_loss: bool = True) -> Offsets:
    """End offsets of the next micro-batch: ``available`` (LSOs) capped by ``limit``.

    ``start`` must name every partition of ``available``. Partitions missing from
    ``available`` keep their start. An LSO below the start means the log went backwards
    (truncation): :class:`KafkaDataLoss`, or keep the start when ``fail_on_data_loss`` is off.
    """
    end: Offsets = {}
    backlog: dict[str, int] = {}
    for p, s in start.items():
        e = available.get(p, s)
        if e < s:
            message = (f"partition {p}: last stable offset {e} is below the checkpointed "
                       f"offset {s} (log truncated?)")
            if fail_on_data_loss:
                raise KafkaDataLoss(message + "; set fail_on_data_loss=false to wait for it")
            log.warning("%s; waiting until it passes %d", message, s)
            e = s
        end[p] = e
        backlog[p] = e - s
    if isinstance(limit, ReadMinRows) and sum(backlog.values()) < limit.min_rows:
        return dict(start)
    budget = record_budget(limit)
    if budget is not None:
        grants = spread_budget(backlog, budget)
        end = {p: start[p] + grants[p] for p in start}
    return end




@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Kafka partition's offset range ``[start, end)`` for one Spark task."""

    partition: int
    start: int
    end: int
    cluster_id: str | None = None


def _spark_batches(opts: SourceOptions, split: InputPartition) -> Iterator[pa.RecordBatch]:
    """``read_partition`` cast to the Arrow types Spark validates against (packed if asked)."""
    from pipelines.arrow_memory import use_offsetlake_pool
    from pipelines.sources.kafka.reader import read_partition
    from pipelines.sources.raw import SPARK_RAW_SCHEMA, pack

    if not isinstance(split, KafkaInputPartition):
        raise TypeError(f"unexpected input partition {split!r}")
    use_offsetlake_pool()
    batches = (batch.cast(SPARK_RAW_SCHEMA) for batch in
               read_partition(opts, split.partition, split.start, split.end,
                              cluster_id=split.cluster_id))
    yield from pack(batches) if opts.packed else batches


def _input_partitions(start: Mapping[str, int], end: Mapping[str, int],
                      cluster_id: str | None) -> list[KafkaInputPartition]:
    return [KafkaInputPartition(int(p), start[p], end[p], cluster_id)
            for p in sorted(end, key=int) if p in start and start[p] < end[p]]


# --------------------------------------------------------------------------------------------
# Readers and the data source
# --------------------------------------------------------------------------------------------


class _DriverMixin:
    """Lazily opened metadata client (created on the driver only; never pickled)."""

    opts: SourceOptions
    _client: KafkaOffsetsClient | None

    def _driver(self) -> KafkaOffsetsClient:
        if self._client is None:
            from pipelines.sources.kafka.wire import KafkaOffsetsClient

            self._client = KafkaOffsetsClient(self.opts)
        return self._client

    def _cluster_id(self) -> str | None:
        return self.opts.cluster_id or self._driver().cluster_id

    def _close_driver(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        if "_counters" in state:
            state["_counters"] = {}  # they hold the driver's connection
        return state

    def _starting(self, partitions: Sequence[int]) -> Offsets:
        """Offsets named by ``starting_offsets`` for ``partitions``."""
        client = self._driver()
        spec = self.opts.starting_offsets
        if spec == "latest":
            return client.stable_end(partitions)
        earliest = client.earliest(partitions)
        if spec == "earliest":
            return earliest
        assert isinstance(spec, dict)
        latest = client.stable_end(partitions) if LATEST in spec.values() else {}
        out: Offsets = {}
        for p in partitions:
            wanted = spec.get(p, EARLIEST)
            key = str(p)
            out[key] = (earliest[key] if wanted == EARLIEST else latest[key]
                        if wanted == LATEST else wanted)
        return out


class KafkaStreamReader(_DriverMixin, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: offsets ``{"partition": next offset}`` in Spark's checkpoint."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client = None
        self._target: Offsets | None = None
        self._latest_seen: Offsets | None = None
        self._counters: dict[str, PartitionCounter] = {}

    def initialOffset(self) -> Offsets:
        client = self._driver()
        offsets = self._starting(client.partitions())
        log.info("%s initial offsets (%s): %s", self.opts.topic,
                 self.opts.starting_offsets, offsets)
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.opts.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the LSOs now: an availableNow run reads up to them and no further."""
        self._target = self._driver().stable_end()
        log.info("%s availableNow target offsets: %s", self.opts.topic, self._target)

    def _complete(self, start: Mapping[str, int], partitions: Sequence[str]) -> Offsets:
        """``start`` plus partitions it lacks (new ones) at their earliest offset."""
        full = {str(p): int(o) for p, o in start.items()}
        missing = [int(p) for p in partitions if p not in full]
        if missing:
            added = self._driver().earliest(missing)
            log.info("%s: new partitions %s start at %s", self.opts.topic, missing, added)
            full.update(added)
        return full

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> Offsets:
        if self._target is not None:
            available = dict(self._target)
        else:
            available = self._driver().stable_end()
            self._latest_seen = available
        if start is None:  # Spark 4.0/4.1 call this without arguments
            return available
        full = self._complete(start, list(available))
        self._check_log_start(full)
        gone = sorted(set(full) - set(available), key=int)
        if gone and self._target is None:
            message = f"{self.opts.topic}: partitions {gone} disappeared"
            if self.opts.fail_on_data_loss:
                raise KafkaDataLoss(message + "; set fail_on_data_loss=false to drop them")
            log.warning("%s; dropping them", message)
            full = {p: o for p, o in full.items() if p not in gone}
        budget = record_budget(limit)
        end = plan_end_offsets(full, available, None if budget is not None else limit,
                               fail_on_data_loss=self.opts.fail_on_data_loss)
        if budget is not None:
            end = self._count_records(full, end, budget)
        log.info("%s micro-batch end offsets (%s): %s", self.opts.topic, limit, end)
        return end

    def _count_records(self, start: Mapping[str, int], ceiling: Offsets, budget: int) -> Offsets:
        """End offsets holding at most ``budget`` records: ``ceiling`` when its offsets are
        within the budget (records never outnumber offsets), else counted by fetching ahead."""
        backlog = {p: ceiling[p] - start[p] for p in ceiling if ceiling[p] > start[p]}
        if sum(backlog.values()) <= budget:
            return ceiling
        from pipelines.sources.kafka.counting import PartitionCounter

        wire = self._driver().wire
        counters = {p: self._counters.setdefault(p, PartitionCounter(wire, self.opts, int(p)))
                    for p in backlog}
        for p, counter in counters.items():
            counter.plan(start[p], ceiling[p])
        try:
            taken = fill_budget(counters, budget)
        finally:
            for counter in counters.values():
                counter.close()
        log.info("%s: %d records counted ahead for a budget of %d", self.opts.topic, taken,
                 budget)
        return {p: counters[p].end if p in counters else ceiling[p] for p in ceiling}

    def _check_log_start(self, start: Mapping[str, int]) -> None:
        """A log start past the checkpoint: records lost to retention or a recreated topic.

        Fails (:class:`KafkaDataLoss`) unless ``fail_on_data_loss`` is off (``--allow-data-loss``),
        in which case reading resumes at the log start with a warning.
        """
        if not start:
            return
        earliest = self._driver().earliest([int(p) for p in start])
        lost = {p: (s, earliest[p]) for p, s in sorted(start.items(), key=lambda i: int(i[0]))
                if p in earliest and s < earliest[p]}
        if not lost:
            return
        where = ", ".join(f"partition {p}: checkpoint at {s}, log starts at {e}"
                          for p, (s, e) in lost.items())
        message = (f"{self.opts.topic}: records lost before they were ingested ({where}; "
                   "retention or a recreated topic)")
        if self.opts.fail_on_data_loss:
            raise KafkaDataLoss(message + "; rerun with --allow-data-loss (option "
                                "fail_on_data_loss=false) to continue from the log start")
        log.warning("%s; continuing from the log start", message)

    def reportLatestOffset(self) -> Offsets | None:
        return self._target or self._latest_seen

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        full = self._complete(start, list(end))
        return _input_partitions(full, end, self._cluster_id())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _spark_batches(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Advisory only (PLATFORM.md): positions live in Spark's checkpoint, not here."""
        log.debug("%s committed through %s", self.opts.topic, end)

    def stop(self) -> None:
        self._counters = {}
        self._close_driver()


class KafkaBatchReader(_DriverMixin, DataSourceReader):
    """Batch read: ``starting_offsets`` (default earliest) up to the current LSOs."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client = None

    def partitions(self) -> Sequence[InputPartition]:
        try:
            client = self._driver()
            parts = client.partitions()
            start = self._starting(parts)
            end = client.stable_end(parts)
            cluster_id = self._cluster_id()
        finally:
            self._close_driver()
        log.info("%s batch read: %s -> %s", self.opts.topic, start, end)
        return _input_partitions(start, end, cluster_id)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _spark_batches(self.opts, partition)


class KafkaConsumerOffsetsDataSource(DataSource):
    """``spark.readStream.format("offsetlake-kafka")``: ``__consumer_offsets`` read_committed."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _packed(self) -> bool:
        return str(self.options.get("packed", "false")).lower() == "true"

    def schema(self) -> StructType:
        return spark_schema(self._packed())

    def _options(self, schema: StructType) -> SourceOptions:
        if schema != self.schema():
            raise KafkaSourceConfigError(
                f"{SOURCE_NAME} has a fixed schema (RAW_ARROW_SCHEMA); do not pass .schema()")
        return SourceOptions.from_options(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self._options(schema))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self._options(schema))


def register(spark: Any) -> None:
    """Make ``format("offsetlake-kafka")`` available in ``spark``."""
    spark.dataSource.register(KafkaConsumerOffsetsDataSource)
