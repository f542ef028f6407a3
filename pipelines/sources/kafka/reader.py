"""The raw-Fetch read path of the ``offsetlake-kafka`` source.

Why not ``KafkaConsumer``: kafka-python's consumer decodes every record into a Python object
(~10-15k records/s per task) and hides what ``__consumer_offsets`` auditing needs (producer
ids, transactional flags, COMMIT/ABORT markers, batch facts). A Fetch response's ``records``
field holds exactly the bytes of the log's record batches, which the one vectorized reader
(:func:`~pipelines.sources.record_batches.arrow_reader.bytes_to_arrow`, ~1M records/s, the
segment files' reader too) turns into RAW_ARROW_SCHEMA rows. So this module talks the
protocol itself, through kafka-python's connection manager (``KafkaNetClient``: bootstrap,
TLS/SASL, ApiVersions negotiation, metadata), and applies read_committed the way the Java
consumer does (``CompletedFetch.nextFetchedRecord``):

* Fetch v4-v12 (topics by name), ``isolation_level=1``: the broker returns batches below the
  last stable offset (LSO) and the aborted transactions ``[(producer_id, first_offset)]``
  overlapping them;
* walking the batches in order, an aborted transaction's producer id becomes "aborted" once a
  batch reaching its ``first_offset`` is seen; that producer's *transactional data* batches
  are dropped (before decompression) until its ABORT marker; control batches are markers;
  this follows the broker's aborted-transaction index, not the markers, because a
  read_committed Fetch need not hold the marker (it may lie past the last stable offset or
  past the range end): the log-replay fold the segment source uses
  (:func:`~pipelines.sources.record_batches.transactions.fold_arrow`) could not decide there;
* records below the fetch offset (the first batch may start earlier) and at or after the
  range end are trimmed; an incomplete last batch (the broker cuts responses at
  ``max_bytes``) is dropped before parsing and fetched again by the next request, so it is
  never reported as corruption.

The next Fetch is sent as soon as a response is framed (its next offset is known) and before
it is parsed, so broker and network time overlap the parsing.

The wire client is :class:`pipelines.sources.kafka.wire.KafkaWire`; the Spark data source
(:mod:`pipelines.sources.kafka.spark_source`) calls :func:`read_partition` on the executors.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from kafka import errors as kafka_errors
from kafka.future import Future

from pipelines.sources.kafka.errors import (
    KafkaDataLoss,
    KafkaFetchError,
    KafkaNotAuthorized,
    KafkaReadTimeout,
    KafkaUnreachable,
)
from pipelines.sources.kafka.options import EARLIEST, SOURCE_LABEL, SourceOptions
from pipelines.sources.kafka.wire import KafkaWire
from pipelines.sources.raw import NO_POSITION, RAW_ARROW_SCHEMA
from pipelines.sources.record_batches.arrow_reader import bytes_to_arrow
from pipelines.sources.record_batches.framing import (
    ATTR_CODEC,
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    CONTROL_TYPE_IDS,
    LOG_OVERHEAD,
    MIN_LENGTH,
    V2_HEADER_SIZE,
    decompress,
    read_varint,
)
from pipelines.sources.record_batches.problems import Problem

log = logging.getLogger(__name__)

__all__ = ["CommittedBatches", "committed_responses", "read_partition", "select_committed"]

# The header fields select_committed needs, in one unpack (layout: framing.V2_HEADER):
# baseOffset, batchLength, magic, attributes, lastOffsetDelta, producerId
_V2_HEAD = struct.Struct(">qi4xb4xhi16xq")
_HEAD = struct.Struct(">qi")  # baseOffset, batchLength: all a legacy message needs here
_V2_MIN_LENGTH = MIN_LENGTH[2]
_LEGACY_MIN_LENGTH = MIN_LENGTH[0]
_ABORT = CONTROL_TYPE_IDS["ABORT"]

#: Columns only the raw-batch view fills; a consumer cannot see them (``include_batch_metadata``
#: off keeps them null, the contract of the KafkaConsumer-based reader this path replaced).
_BATCH_ONLY_COLUMNS = ("producer_id", "producer_epoch", "is_transactional", "control_type",
                       "magic", "compression", "batch_base_offset", "crc_valid")


# --------------------------------------------------------------------------------------------
# read_committed on framed batches (pure)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommittedBatches:
    """What one Fetch response holds for a read_committed reader.

    ``data`` is the response's record bytes minus aborted transactional batches, minus control
    batches unless kept, and minus an incomplete last batch; ``next_offset`` is where the next
    Fetch starts (last offset + 1 of the last whole batch, the fetch offset if there was none).
    """

    data: bytes
    next_offset: int
    batches: int
    aborted_batches: int
    control_batches: int
    partial_tail_bytes: int


def _control_type(data: bytes, pos: int, end: int, attributes: int) -> int:
    """Type of the control record opening the v2 control batch at ``pos`` (0 ABORT, 1 COMMIT,
    -1 unreadable). Brokers write markers uncompressed: read in place; a compressed one is
    decompressed first (rare, so the copy does not matter)."""
    try:
        p = pos + V2_HEADER_SIZE  # the first record
        if attributes & ATTR_CODEC:
            data = decompress(attributes & ATTR_CODEC, data[p:end], 2)
            p, end = 0, len(data)
        _, p = read_varint(data, p)  # record length
        p += 1  # record attributes
        _, p = read_varint(data, p)  # timestamp delta
        _, p = read_varint(data, p)  # offset delta
        key_length, p = read_varint(data, p)
        if key_length < 4 or p + key_length > end:
            return -1
        return int.from_bytes(data[p + 2:p + 4], "big", signed=True)
    except Exception:  # an unreadable marker (any codec or varint failure) is not an ABORT
        return -1


def select_committed(records: bytes, fetch_offset: int,
                     aborted_transactions: Sequence[tuple[int, int]], *,
                     keep_control: bool) -> CommittedBatches:
    """Apply read_committed to one Fetch response's ``records``, batch by batch, exactly as the
    Java consumer does: an aborted transaction ``(producer_id, first_offset)`` starts applying
    at the first batch whose last offset reaches ``first_offset``; from then on that producer's
    transactional data batches are dropped until a control batch of that producer opens with
    an ABORT marker. Control batches are dropped unless ``keep_control``. Batches without a
    producer id (and legacy magic 0/1 messages) are always kept.

    Works on the framing only (one header unpack per batch), so aborted batches are never
    decompressed nor parsed. Raises :class:`KafkaFetchError` on framing no broker sends
    (negative or too short length, unknown magic).
    """
    data = records if isinstance(records, bytes) else bytes(records)
    n = len(data)
    mv = memoryview(data)
    queue = sorted(aborted_transactions, key=lambda t: t[1])
    qi = 0
    aborted_pids: set[int] = set()
    pieces: list[memoryview] = []
    keep_from = 0
    cut = False
    next_offset = fetch_offset
    batches = dropped_aborted = controls = 0
    unpack_v2 = _V2_HEAD.unpack_from
    pos = 0
    while n - pos >= LOG_OVERHEAD:
        if n - pos >= _V2_HEAD.size:
            base, length, magic, attributes, last_delta, pid = unpack_v2(data, pos)
        else:  # a short legacy message, or a truncated tail
            base, length = _HEAD.unpack_from(data, pos)
            magic = data[pos + 16] if n - pos > 16 else -1
            attributes = last_delta = 0
            pid = -1
        end = pos + LOG_OVERHEAD + length
        if length < 0:
            raise KafkaFetchError(f"corrupt fetch response: batch at offset {base} declares "
                                  f"length {length}")
        if end > n:
            break  # incomplete last batch: the broker cut the response at max_bytes
        drop = False
        if magic == 2 and length >= _V2_MIN_LENGTH:
            last = base + last_delta
            if pid >= 0:  # Java: batch.hasProducerId()
                while qi < len(queue) and queue[qi][1] <= last:
                    aborted_pids.add(queue[qi][0])
                    qi += 1
                if attributes & ATTR_CONTROL:
                    if _control_type(data, pos, end, attributes) == _ABORT:
                        aborted_pids.discard(pid)
                elif attributes & ATTR_TRANSACTIONAL and pid in aborted_pids:
                    drop = True
                    dropped_aborted += 1
            if attributes & ATTR_CONTROL:
                controls += 1
                drop = drop or not keep_control
        elif magic in (0, 1) and length >= _LEGACY_MIN_LENGTH:
            last = base  # a legacy wrapper carries the offset of its last inner message
        else:
            raise KafkaFetchError(
                f"corrupt fetch response: batch at offset {base} has magic {magic} and length "
                f"{length}")
        if drop:
            if keep_from < pos:
                pieces.append(mv[keep_from:pos])
            keep_from = end
            cut = True
        batches += 1
        if last + 1 > next_offset:
            next_offset = last + 1
        pos = end
    if not cut and pos == n:
        kept = data
    else:
        if keep_from < pos:
            pieces.append(mv[keep_from:pos])
        kept = b"".join(pieces)
    return CommittedBatches(kept, next_offset, batches, dropped_aborted, controls, n - pos)


# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------


def _numeric(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    """Zero-copy Arrow array of a numpy array. Why not ``pa.array``/``pa.scalar``: their first
    call imports pandas (~0.5 s), a cost every fresh Spark Python worker would pay."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(typ, values.size, [None, pa.py_buffer(values)])


def _values(array: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """The value buffer of a fixed-width Arrow array as numpy, zero-copy (``to_numpy`` would
    import pandas, see _numeric)."""
    if len(array) == 0:
        return np.zeros(0, dtype=dtype)
    width = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                         offset=array.offset * width)


def _nulls(array: pa.Array) -> np.ndarray:
    """Null mask of an Arrow array as numpy bools."""
    validity = array.buffers()[0]
    if validity is None or array.null_count == 0:
        return np.zeros(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return ~bits[array.offset:array.offset + len(array)].astype(bool)


def _constant_string(value: str, n: int) -> pa.Array:
    """``value`` repeated ``n`` times as a string array (built from buffers, see _numeric)."""
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)])


def _shape(batch: pa.RecordBatch, low: int, high: int, *,
           batch_metadata: bool) -> pa.RecordBatch:
    """Parser rows -> the source's rows: offsets in ``[low, high)``; ``source`` "kafka" and
    no byte position (they would be positions in a response, not in a file); without
    ``batch_metadata`` the consumer's view (batch facts null, ``timestamp_type`` -1 without a
    timestamp, as kafka-python reported it)."""
    offsets = _values(batch.column("offset"), np.int64)
    if offsets.size and (offsets[0] < low or offsets[-1] >= high):
        if offsets.size < 2 or bool(np.all(offsets[1:] > offsets[:-1])):  # log order: slice
            first = int(np.searchsorted(offsets, low, "left"))
            batch = batch.slice(first, int(np.searchsorted(offsets, high, "left")) - first)
        else:  # only a damaged log could get here
            keep = (offsets >= low) & (offsets < high)
            batch = batch.take(_numeric(np.flatnonzero(keep).astype(np.int64), pa.int64()))
    n = batch.num_rows
    replace: dict[str, pa.Array] = {
        "source": _constant_string(SOURCE_LABEL, n),
        "source_position": _numeric(np.full(n, NO_POSITION, dtype=np.int64), pa.int64()),
    }
    if not batch_metadata:
        for name in _BATCH_ONLY_COLUMNS:
            replace[name] = pa.nulls(n, RAW_ARROW_SCHEMA.field(name).type)
        no_ts = _nulls(batch.column("timestamp"))
        if no_ts.any():
            ts_type = _values(batch.column("timestamp_type"), np.int8)
            replace["timestamp_type"] = _numeric(np.where(no_ts, -1, ts_type).astype(np.int8),
                                                 pa.int8())
    arrays = [replace.get(f.name, batch.column(i)) for i, f in enumerate(RAW_ARROW_SCHEMA)]
    return pa.RecordBatch.from_arrays(arrays, schema=RAW_ARROW_SCHEMA)


class _Rebatcher:
    """Re-cuts rows of many responses into batches of exactly ``rows`` (the last: fewer)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.pending: list[pa.RecordBatch] = []
        self.count = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        if batch.num_rows == 0:
            return
        self.pending.append(batch)
        self.count += batch.num_rows
        if self.count < self.rows:
            return
        merged = self.pending[0] if len(self.pending) == 1 else pa.concat_batches(self.pending)
        start = 0
        while merged.num_rows - start >= self.rows:
            yield merged.slice(start, self.rows)
            start += self.rows
        rest = merged.num_rows - start
        self.pending = [merged.slice(start)] if rest else []
        self.count = rest

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self.pending:
            yield self.pending[0] if len(self.pending) == 1 else pa.concat_batches(self.pending)
        self.pending, self.count = [], 0


# --------------------------------------------------------------------------------------------
# Reading a range
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Stats:
    fetches: int = 0
    bytes: int = 0
    rows: int = 0
    aborted_batches: int = 0
    control_batches: int = 0
    partial_tails: int = 0
    retries: int = 0
    problems: int = 0


class _RangeReader:
    """One partition's ``[start, end)`` over Fetch, the next request always in flight."""

    def __init__(self, wire: KafkaWire, opts: SourceOptions, partition: int, start: int,
                 end: int, cluster_id: str | None) -> None:
        self.wire = wire
        self.opts = opts
        self.topic = opts.topic
        self.partition = partition
        self.start = start
        self.end = end
        self.cluster_id = cluster_id
        self.batch_metadata = opts.include_batch_metadata
        self.max_bytes = wire.partition_fetch_bytes
        self.max_wait_ms = max(1, min(wire.fetch_max_wait_ms, int(opts.read_timeout_s * 1000)))
        self.stats = _Stats()

    def _send(self, offset: int) -> tuple[Future, int, int | None]:
        future, node = self.wire.fetch(self.topic, self.partition, offset, self.max_bytes,
                                       self.max_wait_ms)
        return future, offset, node

    def _receive(self, future: Future, node: int | None, patience_s: float) -> Any | None:
        """The partition's data from a Fetch response, or None after a retriable failure
        (connection lost, request timeout, no leader: metadata refreshed). Waits at most
        ``patience_s`` (what is left of ``read_timeout_s``), so a broker that accepts but never
        answers fails the read as promptly as a dead one."""
        timeout_ms = min(self.wire.request_timeout_ms + self.max_wait_ms + 1000,
                         max(patience_s, 0.0) * 1000 + 100)
        try:
            response = self.wire.wait(future, timeout_ms)
        except kafka_errors.KafkaError as exc:
            if not getattr(exc, "retriable", False) and not isinstance(
                    exc, kafka_errors.UnknownBrokerIdError):
                raise
            self._retry(f"fetch from node {node} failed: {exc!r}")
            return None
        if getattr(response, "error_code", 0):
            error = kafka_errors.for_code(response.error_code)
            if not error.retriable:
                raise KafkaFetchError(f"{self.topic}-{self.partition}: fetch failed with "
                                      f"{error.__name__}")
            self._retry(f"fetch response error {error.__name__}")
            return None
        for t in response.responses:
            if t.topic != self.topic:
                continue
            for part in t.partitions:
                if part.partition_index == self.partition:
                    return part
        self._retry("fetch response without the partition")
        return None

    def _retry(self, why: str) -> None:
        """Before resending: fresh metadata (the leader may have moved) and a short backoff."""
        self.stats.retries += 1
        log.info("%s-%d: %s; refreshing metadata and retrying", self.topic, self.partition, why)
        self.wire.refresh_metadata(min(self.wire.request_timeout_ms,
                                       self.opts.read_timeout_s * 1000))
        time.sleep(self.wire.retry_backoff_s)

    def _out_of_range(self, position: int) -> int | None:
        """OFFSET_OUT_OF_RANGE at ``position``: :class:`KafkaDataLoss`, or with
        ``fail_on_data_loss`` off where to go on (the earliest offset; None = give up the
        range, the log no longer reaches it)."""
        gone = (f"partition {self.partition}: offset {position} is no longer in the log of "
                f"{self.topic} (retention or DeleteRecords removed it)")
        try:
            earliest = self.wire.list_offsets(self.topic, [self.partition], EARLIEST,
                                              self.wire.request_timeout_ms)[self.partition]
        except kafka_errors.KafkaError as exc:
            if self.opts.fail_on_data_loss:
                raise KafkaDataLoss(gone + "; set fail_on_data_loss=false to continue from the "
                                    "earliest offset") from None
            raise KafkaUnreachable(f"{self.topic}-{self.partition}: cannot list the earliest "
                                   f"offset after OFFSET_OUT_OF_RANGE ({exc!r})") from None
        if earliest > position:
            if self.opts.fail_on_data_loss:
                raise KafkaDataLoss(gone + "; set fail_on_data_loss=false to continue from the "
                                    "earliest offset")
            log.warning("%s; continuing at the earliest offset %d", gone, earliest)
            return earliest
        beyond = (f"partition {self.partition}: offset {position} is beyond the end of the log "
                  f"of {self.topic} (log truncated?)")
        if self.opts.fail_on_data_loss:
            raise KafkaDataLoss(beyond + "; set fail_on_data_loss=false to skip it")
        log.warning("%s; skipping the rest of [%d, %d)", beyond, position, self.end)
        return None

    def _decode(self, data: bytes, fetch_offset: int) -> Iterator[pa.RecordBatch]:
        """Parser rows of the kept batches, trimmed to ``[fetch_offset, end)``."""
        if not data:
            return
        problems: list[Problem] = []
        for batch in bytes_to_arrow(data, path=f"{self.topic}-{self.partition}@{fetch_offset}",
                                    offsets_partition=self.partition, base_offset=0,
                                    cluster_id=self.cluster_id, rows_per_batch=None,
                                    problems=problems):
            yield _shape(batch, fetch_offset, self.end, batch_metadata=self.batch_metadata)
        if problems:
            self.stats.problems += len(problems)
            if self.wire.check_crcs and not self.batch_metadata:
                first = problems[0]
                raise KafkaFetchError(
                    f"{self.topic}-{self.partition}: corrupt record batch in the fetch at "
                    f"offset {fetch_offset}: {first.reason} ({len(problems)} problem(s); "
                    "kafka.check.crcs=false or include_batch_metadata=true keeps such rows, "
                    "flagged crc_valid=false)")

    def batches(self) -> Iterator[pa.RecordBatch]:
        out = _Rebatcher(self.opts.arrow_batch_rows)
        for kept, fetch_offset in self.responses():
            for batch in self._decode(kept.data, fetch_offset):
                self.stats.rows += batch.num_rows
                yield from out.add(batch)
        yield from out.flush()

    def responses(self) -> Generator[tuple[CommittedBatches, int], None, None]:
        """Each Fetch response's committed batches with the offset it was fetched at, until
        the position reaches ``end`` (retries, data loss and stalls handled here)."""
        position = self.start
        future, fetch_offset, node = self._send(position)
        last_progress = time.monotonic()
        while True:
            patience = self.opts.read_timeout_s - (time.monotonic() - last_progress)
            part = self._receive(future, node, patience)
            progressed = False
            kept: CommittedBatches | None = None
            if part is not None:
                error = kafka_errors.for_code(part.error_code)
                if error is kafka_errors.NoError:
                    records = part.records
                    kept = select_committed(
                        b"" if records is None else records, fetch_offset,
                        [(t.producer_id, t.first_offset)
                         for t in part.aborted_transactions or ()],
                        keep_control=self.batch_metadata)
                    self._count(kept)
                    if kept.batches == 0 and kept.partial_tail_bytes:
                        self._grow(fetch_offset, kept.partial_tail_bytes)
                    if kept.next_offset > position:
                        position, progressed = kept.next_offset, True
                elif error is kafka_errors.OffsetOutOfRangeError:
                    moved = self._out_of_range(position)
                    if moved is None:
                        break
                    if moved > position:
                        position, progressed = moved, True
                elif error is kafka_errors.TopicAuthorizationFailedError:
                    raise KafkaNotAuthorized(
                        f"topic {self.topic}: not authorized to read partition {self.partition} "
                        "(needs READ on the topic)")
                elif error.retriable:  # NOT_LEADER, UNKNOWN_LEADER_EPOCH, FENCED, storage ...
                    self._retry(f"{error.__name__} from node {node}")
                else:
                    raise KafkaFetchError(f"{self.topic}-{self.partition}: fetch at offset "
                                          f"{position} failed with {error.__name__}")
            now = time.monotonic()
            if progressed:
                last_progress = now
            elif now - last_progress > self.opts.read_timeout_s:
                raise KafkaReadTimeout(
                    f"partition {self.partition} of {self.topic}: no progress at offset "
                    f"{position} for {self.opts.read_timeout_s:g}s (target {self.end}); broker "
                    "down, or the last stable offset moved backwards?")
            decoded_at = fetch_offset
            done = position >= self.end
            if not done:  # pipelined: the next request is on its way while this one is parsed
                future, fetch_offset, node = self._send(position)
            if kept is not None:
                yield kept, decoded_at
                if progressed:  # time spent by our caller between batches is not a stall
                    last_progress = time.monotonic()
            if done:
                break

    def _count(self, kept: CommittedBatches) -> None:
        s = self.stats
        s.fetches += 1
        s.bytes += len(kept.data) + kept.partial_tail_bytes
        s.aborted_batches += kept.aborted_batches
        s.control_batches += kept.control_batches
        s.partial_tails += 1 if kept.partial_tail_bytes else 0

    def _grow(self, offset: int, have: int) -> None:
        """Only part of one batch came back (brokers before KIP-74): ask for more next time."""
        limit = max(self.wire.fetch_max_bytes, self.max_bytes)
        if self.max_bytes >= limit:
            raise KafkaFetchError(
                f"{self.topic}-{self.partition}: the batch at offset {offset} is larger than "
                f"fetch_max_bytes={limit} (got {have} bytes of it)")
        self.max_bytes = min(limit, self.max_bytes * 2)
        log.info("%s-%d: batch at offset %d exceeds the fetch size; asking for %d bytes",
                 self.topic, self.partition, offset, self.max_bytes)


def read_partition(opts: SourceOptions, partition: int, start: int, end: int, *,
                   cluster_id: str | None = None) -> Iterator[pa.RecordBatch]:
    """Records of ``[start, end)`` of one partition as a read_committed consumer sees them
    (plus COMMIT/ABORT markers and batch facts with ``include_batch_metadata``), in
    RAW_ARROW_SCHEMA batches of ``arrow_batch_rows`` rows (the last one fewer).

    Stops when the fetch *position* reaches ``end``, not when a record with offset ``end - 1``
    arrives: that offset may be a marker or part of an aborted batch. Records at or past
    ``end`` (the fetch returns whole batches) are dropped: they belong to the next
    micro-batch. No progress for ``read_timeout_s`` raises :class:`KafkaReadTimeout`; offsets
    gone from the log follow ``fail_on_data_loss``."""
    if end <= start:
        return
    started = time.monotonic()
    with KafkaWire(opts) as wire:
        reader = _RangeReader(wire, opts, partition, start, end, cluster_id)
        yield from reader.batches()
    s = reader.stats
    elapsed = time.monotonic() - started
    log.info("%s partition %d [%d, %d): %d rows in %.2fs (%.0f rows/s; %d fetches, %d bytes, "
             "%d aborted batches skipped, %d control batches, %d partial tails, %d retries, "
             "%d problems)", opts.topic, partition, start, end, s.rows, elapsed,
             s.rows / elapsed if elapsed > 0 else 0.0, s.fetches, s.bytes, s.aborted_batches,
             s.control_batches, s.partial_tails, s.retries, s.problems)



def committed_responses(wire: KafkaWire, opts: SourceOptions, partition: int, start: int,
                        end: int) -> Generator[tuple[CommittedBatches, int], None, None]:
    """What :func:`read_partition` fetches for ``[start, end)``, undecoded: each response's
    read_committed batches with its fetch offset. The driver counts records on these
    (:mod:`pipelines.sources.kafka.counting`) to cut micro-batches by records."""
    if end > start:
        yield from _RangeReader(wire, opts, partition, start, end, None).responses()
