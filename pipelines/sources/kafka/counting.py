"""Counting, on the driver, the records a read of a partition would emit: micro-batches by records.

Why: ``__consumer_offsets`` is always compacted, so most of its offsets are holes. A budget of
``max_records_per_batch`` spent on offset ranges gives mostly empty micro-batches (a real
Kafka 4.2 broker at 500 records per batch: 481 micro-batches, 57 with data). The broker
cannot say where the records are without a Fetch, so the driver fetches ahead of the
micro-batch it plans: it walks the read_committed batches a read from the start offset gets
(:func:`pipelines.sources.kafka.reader.committed_responses`, the readers' own Fetch loop) on
their headers only (a v2 batch header carries its record count, so nothing is decompressed)
and ends the micro-batch right after the record that uses up the partition's share. Only a
batch the end falls into (or a legacy message set, whose header has no count) is decoded to
find its record offsets.

The end offsets it plans are an ordinary ``[start, end)`` per partition, written to Spark's
offset log before the batch runs, so exactly-once and the replay of a batch are untouched;
the count decides only where a batch ends. Batches fetched past the planned end are kept for
the next plan, so the log is fetched about once by the driver and once by the tasks.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass

import numpy as np

from pipelines.sources.kafka.options import SourceOptions
from pipelines.sources.kafka.reader import CommittedBatches, committed_responses
from pipelines.sources.kafka.wire import KafkaWire
from pipelines.sources.record_batches.arrow_reader import bytes_to_arrow
from pipelines.sources.record_batches.framing import LOG_OVERHEAD, V2_HEADER_SIZE

log = logging.getLogger(__name__)

__all__ = ["PartitionCounter", "batch_spans"]

# baseOffset, batchLength, magic (offset 16), lastOffsetDelta (offset 23), recordsCount (57)
_BASE_LENGTH = struct.Struct(">qi")
_MAGIC_AT = 16
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23
_COUNT = struct.Struct(">i")
_COUNT_AT = 57


@dataclass(frozen=True, slots=True)
class BatchSpan:
    """One whole batch of a Fetch response: its offsets, its record count (-1: unknown, a
    legacy message set) and its bytes (decoded only when a micro-batch ends inside it)."""

    first: int
    last: int
    records: int
    data: bytes


def batch_spans(data: bytes) -> Iterator[BatchSpan]:
    """The batches of ``data`` (whole batches, as :class:`CommittedBatches` keeps them)."""
    pos, n = 0, len(data)
    while n - pos >= LOG_OVERHEAD:
        base, length = _BASE_LENGTH.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + length
        if length <= 0 or end > n:
            return
        if data[pos + _MAGIC_AT] >= 2 and length + LOG_OVERHEAD >= V2_HEADER_SIZE:
            last = base + _LAST_DELTA.unpack_from(data, pos + _LAST_DELTA_AT)[0]
            records = _COUNT.unpack_from(data, pos + _COUNT_AT)[0]
        else:  # a legacy wrapper carries the offset of its last inner message
            last, records = base, -1
        yield BatchSpan(base, last, records, data[pos:end])
        pos = end


def record_offsets(span: BatchSpan, partition: int) -> np.ndarray:
    """The offsets of the records the reader emits from one batch (decoded in full)."""
    chunks = [b.column("offset").to_numpy(zero_copy_only=False)
              for b in bytes_to_arrow(span.data, path=f"count-{partition}",
                                      offsets_partition=partition, problems=[])]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


class PartitionCounter:
    """One partition's planning cursor on the driver.

    ``end`` is where the records counted so far end (exclusive); :meth:`plan` starts a
    micro-batch's count at ``start`` bounded by ``limit`` (the last stable offset, or an
    availableNow target); :meth:`take` counts up to ``n`` more records and returns how many
    it found, fewer only when the count reached ``limit``.
    """

    def __init__(self, wire: KafkaWire, opts: SourceOptions, partition: int) -> None:
        self.wire = wire
        self.opts = opts
        self.partition = partition
        self.end = -1
        self.limit = -1
        self._fetched = -1  # next offset to fetch; batches below it are in _pending
        self._pending: deque[BatchSpan] = deque()
        self._responses: Generator[tuple[CommittedBatches, int], None, None] | None = None

    @property
    def done(self) -> bool:
        return self.end >= self.limit

    def plan(self, start: int, limit: int) -> None:
        """Count from ``start`` up to ``limit``; what was fetched ahead is kept when ``start``
        is where the last plan ended (the usual case: the batch it planned has run)."""
        self.close()
        if start != self.end:
            self._pending.clear()
            self._fetched = start
        self.end, self.limit = start, limit

    def close(self) -> None:
        """Stop the current Fetch loop (its connection stays with the wire)."""
        if self._responses is not None:
            self._responses.close()
            self._responses = None

    def _fetch(self) -> bool:
        """One more response into ``_pending``; False when the log is read up to ``limit``."""
        if self._fetched >= self.limit:
            return False
        if self._responses is None:
            self._responses = committed_responses(self.wire, self.opts, self.partition,
                                                  self._fetched, self.limit)
        for kept, _ in self._responses:
            self._pending.extend(batch_spans(kept.data))
            self._fetched = max(self._fetched, kept.next_offset)
            return True
        self._fetched = max(self._fetched, self.limit)
        return False

    def take(self, n: int) -> int:
        taken = 0
        while taken < n and self.end < self.limit:
            if not self._pending:
                if not self._fetch():
                    self.end = self.limit  # the rest up to the limit holds no record
                continue
            span = self._pending[0]
            if span.first >= self.limit:
                self.end = self.limit
                break
            whole = span.records >= 0 and span.first >= self.end and span.last < self.limit
            offsets = None if whole else self._offsets(span)
            available = span.records if offsets is None else len(offsets)
            if taken + available <= n:
                taken += available
                self.end = min(span.last + 1, self.limit)
                self._pending.popleft()
                continue
            if offsets is None:
                offsets = self._offsets(span)
            self.end = int(offsets[n - taken - 1]) + 1
            taken = n
        return taken

    def _offsets(self, span: BatchSpan) -> np.ndarray:
        offsets = record_offsets(span, self.partition)
        return offsets[(offsets >= self.end) & (offsets < self.limit)]
