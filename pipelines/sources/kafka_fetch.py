"""The raw-Fetch read path of the ``offsetlake-kafka`` source.

Why not ``KafkaConsumer``: kafka-python's consumer decodes every record into a Python object
(~10-15k records/s per task) and hides what ``__consumer_offsets`` auditing needs (producer
ids, transactional flags, COMMIT/ABORT markers, batch facts). A Fetch response's ``records``
field holds exactly the bytes of the log's record batches, which the vectorized segment parser
(:func:`~pipelines.sources.record_batches.arrow_reader.bytes_to_arrow`, ~1M records/s) already turns into
RAW_ARROW_SCHEMA rows. So this module talks the protocol itself, through kafka-python's
connection manager (``KafkaNetClient``: bootstrap, TLS/SASL, ApiVersions negotiation,
metadata), and applies read_committed the way the Java consumer does
(``CompletedFetch.nextFetchedRecord``):

* Fetch v4-v12 (topics by name), ``isolation_level=1``: the broker returns batches below the
  last stable offset (LSO) and the aborted transactions ``[(producer_id, first_offset)]``
  overlapping them;
* walking the batches in order, an aborted transaction's producer id becomes "aborted" once a
  batch reaching its ``first_offset`` is seen; that producer's *transactional data* batches
  are dropped (before decompression) until its ABORT marker; control batches are markers;
* records below the fetch offset (the first batch may start earlier) and at or after the
  range end are trimmed; an incomplete last batch (the broker cuts responses at
  ``max_bytes``) is dropped before parsing and fetched again by the next request, so it is
  never reported as corruption.

The next Fetch is sent as soon as a response is framed (its next offset is known) and before
it is parsed, so broker and network time overlap the parsing.

Shared with the driver: :class:`KafkaWire` also answers Metadata and ListOffsets for
:class:`pipelines.sources.kafka_source.KafkaOffsetsClient`, so the source has one client
stack. This module builds on :mod:`pipelines.sources.kafka_source` (options, errors);
``kafka_source`` imports it lazily.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors
from kafka.future import Future
from kafka.net.compat import KafkaNetClient
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

from pipelines.kafka_options import KafkaSecurityError, probe
from pipelines.sources.kafka_source import (
    EARLIEST,
    SOURCE_LABEL,
    KafkaAuthenticationFailed,
    KafkaDataLoss,
    KafkaFetchError,
    KafkaNotAuthorized,
    KafkaReadTimeout,
    KafkaUnreachable,
    SourceOptions,
    redacted,
)
from pipelines.sources.raw import NO_POSITION, RAW_ARROW_SCHEMA
from pipelines.sources.record_batches.arrow_reader import bytes_to_arrow
from pipelines.sources.segments import Problem

log = logging.getLogger(__name__)

__all__ = [
    "FETCH_MAX_VERSION",
    "CommittedBatches",
    "KafkaWire",
    "fetch_partition",
    "select_committed",
]

#: Newest Fetch version used: v13 addresses topics by id only (KIP-516).
FETCH_MAX_VERSION = 12
#: isolation_level needs Fetch v4 / ListOffsets v2.
FETCH_MIN_VERSION = 4
LIST_OFFSETS_MIN_VERSION = 2
READ_COMMITTED = 1

#: Headroom of the response frame over the record bytes (headers, aborted-transaction lists).
_FRAME_HEADROOM = 1 << 20

# ---- record batch framing (Kafka's DefaultRecordBatch / legacy message set)
_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
# baseOffset, batchLength, magic, attributes, lastOffsetDelta, producerId
_V2_HEAD = struct.Struct(">qi4xb4xhi16xq")
_V2_RECORDS_AT = 61  # first record of a v2 batch
_V2_MIN_LENGTH = 49  # batchLength of a v2 batch without records
_LEGACY_MIN_LENGTH = 14  # crc, magic, attributes, key and value lengths of a magic-0 message
_ATTR_CODEC = 0x07
_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ABORT = 0
_COMMIT = 1

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


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos``: (value, position after it)."""
    raw = shift = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _control_type(data: bytes, pos: int, end: int, attributes: int) -> int:
    """Type of the control record opening the v2 control batch at ``pos`` (0 ABORT, 1 COMMIT,
    -1 unreadable). Brokers write markers uncompressed: read inline; else kafka-python's batch
    reader (rare, so its per-record cost does not matter)."""
    try:
        if attributes & _ATTR_CODEC:
            from kafka.record.default_records import DefaultRecordBatch

            for record in DefaultRecordBatch(bytearray(data[pos:end])):
                return int(record.type)
            return -1
        p = _V2_RECORDS_AT + pos
        _, p = _varint(data, p)  # record length
        p += 1  # record attributes
        _, p = _varint(data, p)  # timestamp delta
        _, p = _varint(data, p)  # offset delta
        key_length, p = _varint(data, p)
        if key_length < 4 or p + key_length > end:
            return -1
        return int.from_bytes(data[p + 2:p + 4], "big", signed=True)
    except (IndexError, ValueError, struct.error, kafka_errors.KafkaError):
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

    Works on the framing only (51 header bytes per batch), so aborted batches are never
    decompressed. Raises :class:`KafkaFetchError` on framing no broker sends (negative or too
    short length, unknown magic).
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
    while n - pos >= 12:
        if n - pos >= _V2_HEAD.size:
            base, length, magic, attributes, last_delta, pid = unpack_v2(data, pos)
        else:  # a short legacy message, or a truncated tail
            base, length = _HEAD.unpack_from(data, pos)
            magic = data[pos + 16] if n - pos > 16 else -1
            attributes = last_delta = 0
            pid = -1
        end = pos + 12 + length
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
                if attributes & _ATTR_CONTROL:
                    if _control_type(data, pos, end, attributes) == _ABORT:
                        aborted_pids.discard(pid)
                elif attributes & _ATTR_TRANSACTIONAL and pid in aborted_pids:
                    drop = True
                    dropped_aborted += 1
            if attributes & _ATTR_CONTROL:
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
# The wire client
# --------------------------------------------------------------------------------------------


#: kafka-python 3 raises KafkaTimeoutError("Unable to bootstrap ..."); 2.x raised NoBrokersAvailable.
_BOOTSTRAP_ERRORS: tuple[type[BaseException], ...] = tuple(
    e for e in (getattr(kafka_errors, "NoBrokersAvailable", None), kafka_errors.KafkaTimeoutError)
    if e is not None)
_CONSUMER_DEFAULTS = KafkaConsumer.DEFAULT_CONFIG


class KafkaWire:
    """kafka-python's connection manager with its own IO thread, used directly.

    Why not a KafkaConsumer: it would fetch and decode records itself; here the driver needs
    Metadata and ListOffsets only, and executors need Fetch responses as bytes. Settings are
    the source's kafka-python consumer settings (TLS, SASL, timeouts, fetch sizes).
    Bootstrapping fails with :class:`KafkaUnreachable` after ``connect_timeout_s``.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        config = opts.consumer_config()

        def setting(key: str, default: Any = None) -> Any:
            return config.get(key, _CONSUMER_DEFAULTS.get(key, default))

        self.request_timeout_ms = int(setting("request_timeout_ms"))
        self.retry_backoff_s = float(setting("retry_backoff_ms")) / 1000
        self.fetch_max_bytes = int(setting("fetch_max_bytes"))
        self.fetch_max_wait_ms = int(setting("fetch_max_wait_ms"))
        self.partition_fetch_bytes = int(setting("max_partition_fetch_bytes"))
        self.check_crcs = bool(setting("check_crcs", True))
        # The frame guard must admit a full response (KafkaConsumer raises it the same way).
        config["receive_message_max_bytes"] = max(
            int(setting("receive_message_max_bytes", 0)),
            self.fetch_max_bytes + self.partition_fetch_bytes + _FRAME_HEADROOM)
        log.debug("opening kafka wire client: %s", redacted(config))
        self._client = KafkaNetClient(**config)
        self._manager = self._client._manager
        self._net = self._manager._net
        # kafka-python does not pass this consumer setting to its metadata; the source never
        # creates topics (not even a misspelt ``topic`` option).
        self._manager.cluster.config["allow_auto_create_topics"] = False
        self._closed = False
        self._net.start()
        started = time.monotonic()
        try:
            # a definite TLS/SASL refusal is named at once instead of being retried as a
            # network error until the bootstrap timeout
            probe(self._client, opts.connect_timeout_s, config)
        except KafkaSecurityError as exc:
            self.close()
            raise KafkaAuthenticationFailed(str(exc)) from None
        except BaseException:
            self.close()
            raise
        try:
            self._manager.bootstrap(config["bootstrap_timeout_ms"])
        except _BOOTSTRAP_ERRORS as exc:
            self.close()
            hint = ""
            protocol = str(config.get("security_protocol", "PLAINTEXT")).upper()
            if protocol != "PLAINTEXT":
                hint = f" (security_protocol {protocol}: check the TLS/SASL settings too)"
            log.debug("bootstrap failed after %.1fs: %r", time.monotonic() - started, exc)
            raise KafkaUnreachable(
                f"cannot reach broker(s) {opts.bootstrap_servers} within "
                f"{opts.connect_timeout_s:g}s{hint}") from None
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close connections and stop the IO thread; never raises (it must not mask errors)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._client.close()
        except Exception:
            log.debug("closing the kafka wire client failed", exc_info=True)

    # ---- futures across the IO thread

    async def _await(self, future: Future, timeout_ms: float | None) -> Any:
        return await self._manager.wait_for(future, timeout_ms)

    async def _send_to(self, request: Any, node_id: int) -> Any:
        return await self._manager.send(request, node_id=node_id)

    def wait(self, future: Future, timeout_ms: float | None = None) -> Any:
        """The value of a kafka-python Future; its exception is raised (timeout:
        ``KafkaTimeoutError``)."""
        return self._net.run(self._await, future,
                             self.request_timeout_ms if timeout_ms is None else timeout_ms)

    def send(self, request: Any, node_id: int) -> Future:
        """Send ``request`` to ``node_id`` from the IO thread; a Future of the response."""
        return self._manager.call_soon(self._send_to, request, node_id)

    # ---- metadata

    @property
    def cluster_id(self) -> str | None:
        value = self._manager.cluster.cluster_id
        return value if isinstance(value, str) else None

    def refresh_metadata(self, timeout_ms: float | None = None) -> bool:
        """Send a Metadata request now and wait for it; False when that failed (logged).
        Why not ``cluster.request_update()``: the refresh loop would wait out its backoff
        first (100 ms), paid by every fresh client asking for its topic."""
        try:
            self.wait(self._manager.call_soon(self._manager.cluster.refresh_metadata),
                      timeout_ms)
            return True
        except kafka_errors.KafkaError as exc:
            log.debug("metadata refresh failed: %r", exc)
            return False

    def partitions(self, topic: str) -> list[int] | None:
        """Partition ids of ``topic``, None when the brokers do not know it.
        :class:`KafkaNotAuthorized` when they answered TOPIC_AUTHORIZATION_FAILED."""
        cluster = self._manager.cluster
        found = cluster.partitions_for_topic(topic)
        if found is None:
            cluster.add_topic(topic)  # tracked from now on (the refresh loop keeps it fresh)
            self.refresh_metadata()
            found = cluster.partitions_for_topic(topic)
        if found is None and topic in cluster.unauthorized_topics:
            raise KafkaNotAuthorized(
                f"topic {topic}: not authorized to describe it on {self.opts.bootstrap_servers} "
                "(the principal needs DESCRIBE and READ on the topic)")
        return None if found is None else sorted(found)

    def leader(self, topic: str, partition: int) -> tuple[int | None, int]:
        """(leader node id or None if unknown/unavailable, its leader epoch or -1)."""
        cluster = self._manager.cluster
        tp = TopicPartition(topic, partition)
        if cluster.partitions_for_topic(topic) is None:
            self.partitions(topic)
        node = cluster.leader_for_partition(tp)
        epoch = cluster.leader_epoch_for_partition(tp)
        if node is None or node < 0:
            return None, -1
        return node, -1 if epoch is None else int(epoch)

    # ---- ListOffsets

    def list_offsets(self, topic: str, partitions: Sequence[int], spec: int,
                     timeout_ms: float) -> dict[int, int]:
        """ListOffsets with isolation_level=1 (``LATEST`` answers the last stable offset),
        retrying leader moves and broker restarts until ``timeout_ms``, then
        ``KafkaTimeoutError``."""
        deadline = time.monotonic() + timeout_ms / 1000
        remaining = set(partitions)
        out: dict[int, int] = {}
        T = ListOffsetsRequest.ListOffsetsTopic
        P = T.ListOffsetsPartition
        while True:
            by_node: dict[int, list[tuple[int, int]]] = {}
            for p in sorted(remaining):
                node, epoch = self.leader(topic, p)
                if node is not None:
                    by_node.setdefault(node, []).append((p, epoch))
            calls = {node: self.send(ListOffsetsRequest(
                isolation_level=READ_COMMITTED, min_version=LIST_OFFSETS_MIN_VERSION,
                topics=[T(name=topic, partitions=[
                    P(partition_index=p, current_leader_epoch=epoch, timestamp=spec)
                    for p, epoch in parts])]), node)
                for node, parts in by_node.items()}
            stale = len(by_node) == 0
            for node, future in calls.items():
                left_ms = max(1.0, (deadline - time.monotonic()) * 1000)
                try:
                    response = self.wait(future, left_ms)
                except kafka_errors.KafkaError as exc:
                    if not getattr(exc, "retriable", False):
                        raise
                    log.debug("ListOffsets to node %s failed: %r", node, exc)
                    stale = True
                    continue
                for t in response.topics:
                    for part in t.partitions:
                        error = kafka_errors.for_code(part.error_code)
                        if error is kafka_errors.NoError:
                            out[part.partition_index] = int(part.offset)
                            remaining.discard(part.partition_index)
                        elif error is kafka_errors.TopicAuthorizationFailedError:
                            raise KafkaNotAuthorized(
                                f"topic {topic}: not authorized to list its offsets (needs "
                                "DESCRIBE on the topic)")
                        elif getattr(error, "retriable", False):
                            log.debug("ListOffsets %s-%d: %s", topic, part.partition_index,
                                      error.__name__)
                            stale = True
                        else:
                            raise error(f"ListOffsets {topic}-{part.partition_index}")
            if not remaining:
                return out
            if time.monotonic() >= deadline:
                raise kafka_errors.KafkaTimeoutError(
                    f"ListOffsets({spec}) of {topic} {sorted(remaining)}")
            if stale:
                self.refresh_metadata(max(1.0, (deadline - time.monotonic()) * 1000))
            time.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))

    # ---- Fetch

    def fetch(self, topic: str, partition: int, offset: int, partition_max_bytes: int,
              max_wait_ms: int) -> tuple[Future, int | None]:
        """Send a read_committed Fetch of one partition to its leader: (response Future, node).
        No known leader: a failed Future (LeaderNotAvailableError) and None."""
        node, epoch = self.leader(topic, partition)
        if node is None:
            return Future().failure(kafka_errors.LeaderNotAvailableError(
                f"{topic}-{partition}")), None
        T = FetchRequest.FetchTopic
        request = FetchRequest(
            max_wait_ms=max_wait_ms, min_bytes=1,
            max_bytes=max(self.fetch_max_bytes, partition_max_bytes),
            isolation_level=READ_COMMITTED, session_id=0, session_epoch=-1,  # sessionless
            topics=[T(topic=topic, partitions=[T.FetchPartition(
                partition=partition, current_leader_epoch=epoch, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=partition_max_bytes)])],
            forgotten_topics_data=[], rack_id="",
            min_version=FETCH_MIN_VERSION, max_version=FETCH_MAX_VERSION)
        return self.send(request, node), node


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
                                    cluster_id=self.cluster_id, rows_per_batch=1 << 30,
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
        position = self.start
        out = _Rebatcher(self.opts.arrow_batch_rows)
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
                for batch in self._decode(kept.data, decoded_at):
                    self.stats.rows += batch.num_rows
                    yield from out.add(batch)
                if progressed:  # time spent by our caller between batches is not a stall
                    last_progress = time.monotonic()
            if done:
                break
        yield from out.flush()

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


def fetch_partition(opts: SourceOptions, partition: int, start: int, end: int, *,
                    cluster_id: str | None = None) -> Iterator[pa.RecordBatch]:
    """Records of ``[start, end)`` of one partition as a read_committed consumer sees them
    (plus COMMIT/ABORT markers and batch facts with ``include_batch_metadata``), in
    RAW_ARROW_SCHEMA batches of ``arrow_batch_rows`` rows (the last one fewer).

    Stops when the fetch position reaches ``end``: the offsets before ``end`` may be markers or
    aborted batches that yield no row. No progress for ``read_timeout_s`` raises
    :class:`KafkaReadTimeout`; offsets gone from the log follow ``fail_on_data_loss``."""
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

