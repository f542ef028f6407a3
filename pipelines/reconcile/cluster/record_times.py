"""Exact time lag: the timestamps of the records at committed offsets, read from the log.

Why: "how far behind in time is this group?" has only one exact answer: the timestamp of the
record at the committed offset (the next record the group will read) against the newest
record's. Lag exporters interpolate log end offsets over time instead, which is wrong after
idle periods and bursts. This module decides, per (group, topic, partition), what must be read
(:func:`plan`), reads it with bounded Fetches (:func:`fetch_record_times`: one Fetch request
per broker per round carrying every partition that broker leads, small per-partition byte
limits, read_committed, concurrent across brokers) and turns the answers into a time lag.

Definitions (also in the snapshot_lag contract):

* the *newest* record is the one at ``last_stable_offset - 1`` (= ``log_end_offset - 1``
  unless a transaction is open): the newest a read_committed consumer can see. Whatever record
  sits at an offset counts, transaction markers included.
* ``time_lag_ms = newest timestamp - committed record's timestamp`` (not below 0: CreateTime
  is set by producers and need not grow with the offset); 0 when the committed offset is the
  log end (caught up); null with a reason otherwise (:data:`REASONS`).

Pure decisions and decoding here know nothing of sockets; the one coroutine takes the I/O as
callables, so :mod:`pipelines.reconcile.cluster.capture` runs it on kafka-python's I/O thread.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import kafka.errors as Errors
from kafka.protocol.consumer import FetchRequest
from kafka.record.memory_records import MemoryRecords

from pipelines.reconcile.cluster.errors import error_name
from pipelines.reconcile.cluster.rows import RATE_WINDOW_S

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_READ_COMMITTED = 1
_OFFSET_OUT_OF_RANGE = 1

#: Per-partition byte limit of the first Fetch: a few KB hold the batch with the record
#: (batches are usually small); a partition answered empty because its batch is larger is
#: asked again with 16x the limit, up to :data:`MAX_PARTITION_BYTES`.
PARTITION_BYTES = 4096
MAX_PARTITION_BYTES = 16 << 20
#: What a Fetch response may hold in all (the broker caps it at its fetch.max.bytes too).
MAX_RESPONSE_BYTES = 32 << 20


def produce_rate(end: int | None, offset_at_window_start: int | None,
                 window_s: float = RATE_WINDOW_S) -> float | None:
    """Offsets per second producers appended in the window: (high watermark - first offset
    whose timestamp is within the window, from ListOffsets by timestamp) / window; 0 when no
    record is that recent (the broker answers -1); None when unknown."""
    if end is None or offset_at_window_start is None:
        return None
    if offset_at_window_start < 0:
        return 0.0
    return max(end - offset_at_window_start, 0) / window_s

CAUGHT_UP = "caught_up"
#: Why time_lag_ms is null (values of snapshot_lag.time_lag_reason).
REASONS = {
    "no_committed_offset": "the broker answered no committed offset (error, -1, unstable)",
    "no_log_end_offset": "the partition's log end offset is unknown",
    "committed_past_end": "the committed offset lies past the log end: no record there",
    "beyond_last_stable_offset": "the committed offset is at or past the last stable offset "
                                 "(an open transaction): no record a read_committed consumer "
                                 "could read yet",
    "committed_before_log_start": "the committed record was deleted by retention (offset "
                                  "below the log start offset)",
    "committed_record_absent": "no record at exactly the committed offset (removed by "
                               "compaction)",
    "newest_record_absent": "no newest record could be read",
    "no_timestamp": "the record carries no timestamp (message format v0, or -1)",
    "fetch_incomplete": "the record's batch did not fit the largest fetch limit",
    "undecodable_batch": "the batch holding the record could not be decoded (corrupt, or a "
                         "codec not installed)",
    "not_captured": "recorded capture: the log was not read",
}


def ms_to_datetime(ms: int) -> datetime:
    """Epoch milliseconds -> UTC datetime, exactly (no float rounding)."""
    return _EPOCH + timedelta(milliseconds=ms)


def plan(committed: int | None, end: int | None, stable: int | None,
         start: int | None) -> str | None:
    """What a (committed offset, partition watermarks) pair needs: ``None`` = read the record
    at the committed offset; :data:`CAUGHT_UP` = time lag 0; otherwise the reason why the time
    lag cannot be determined."""
    if committed is None or committed < 0:
        return "no_committed_offset"
    if end is None:
        return "no_log_end_offset"
    if committed > end:
        return "committed_past_end"
    if committed == end:
        return CAUGHT_UP
    if committed >= (stable if stable is not None else end):
        return "beyond_last_stable_offset"
    if start is not None and committed < start:
        return "committed_before_log_start"
    return None


def newest_offset(end: int | None, stable: int | None, start: int | None) -> int | None:
    """Offset of the newest record a read_committed consumer can see, None if there is none."""
    if end is None:
        return None
    upper = min(end, stable) if stable is not None else end
    if upper <= (start or 0):
        return None
    return upper - 1


@dataclass(frozen=True)
class RecordTime:
    """The record found at (or, for the newest, at or below) an offset, or why not."""

    offset: int | None
    timestamp_ms: int | None
    reason: str | None = None


def time_lag(committed: RecordTime | None, newest: RecordTime | None) -> tuple[int | None, str | None]:
    """(time_lag_ms, reason) from the two records; reason None when the lag is known."""
    if committed is None or committed.timestamp_ms is None:
        return None, (committed.reason if committed is not None else "not_captured")
    if newest is None or newest.timestamp_ms is None:
        reason = (newest.reason if newest is not None else None) or "newest_record_absent"
        if reason not in ("no_timestamp", "not_captured") and not reason.startswith("fetch_"):
            reason = "newest_record_absent"  # e.g. its record compacted away
        return None, reason
    return max(newest.timestamp_ms - committed.timestamp_ms, 0), None


def decode_records(data: bytes | memoryview | None) -> tuple[list[tuple[int, int]], int]:
    """Every (offset, timestamp ms) in a Fetch answer's record bytes, and the last offset the
    returned batches cover (-1 when none). A partial trailing batch (cut by the byte limit) is
    ignored, as consumers do."""
    records: list[tuple[int, int]] = []
    covered = -1
    if not data:
        return records, covered
    batches = MemoryRecords(bytes(data))
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None:
            break
        last_delta = getattr(batch, "last_offset_delta", None)
        if last_delta is not None:
            covered = max(covered, batch.base_offset + last_delta)
        for record in batch:
            ts = record.timestamp if record.timestamp is not None else -1
            records.append((record.offset, ts))
            covered = max(covered, record.offset)
    return records, covered


@dataclass
class RecordTimes:
    """What the Fetches found: per (topic, partition, offset) the committed record, per
    partition the newest one, and how many Fetch requests it took."""

    at: dict[tuple[str, int, int], RecordTime] = field(default_factory=dict)
    newest: dict[tuple[str, int], RecordTime] = field(default_factory=dict)
    fetch_requests: int = 0


SendMany = Callable[[Mapping[int, Any]], Awaitable[dict[int, Any]]]
Leaders = Callable[[Sequence[str]], Awaitable[dict[tuple[str, int], int]]]
TP = tuple[str, int]


def _error_reason(code: int) -> str:
    return f"fetch_error:{error_name(code)}"


async def fetch_record_times(wanted: Mapping[TP, set[int]],
                             newest: Mapping[TP, int],
                             starts: Mapping[TP, int | None],
                             *, leaders: Leaders, send_many: SendMany, max_retries: int,
                             code_of: Callable[[BaseException], int],
                             leader_retry: frozenset[int],
                             sleep: Callable[[int], Awaitable[None]] | None = None
                             ) -> RecordTimes:
    """Read the timestamps of the records at ``wanted`` offsets and at each partition's
    ``newest`` offset.

    Rounds: each round asks every pending partition for one offset (the smallest pending),
    one Fetch per leader broker carrying all of its partitions, sent to all brokers at once
    (``send_many``: node -> request, answers or exceptions by node). Every record a batch
    returns is checked against all offsets wanted for its partition, so a committed record
    and the newest one sharing a batch cost one read. The number of requests is at most
    brokers x (distinct offsets wanted per partition + retries), independent of the number
    of partitions. Leader moves refresh the leaders (``leaders``) and retry, up to
    ``max_retries`` times per partition, after ``sleep(attempt)`` (the caller's backoff).
    """
    reader = _Rounds(wanted, newest, starts, max_retries=max_retries, code_of=code_of,
                     leader_retry=leader_retry)
    guard = 0
    while any(reader.pending.values()):
        guard += 1
        if guard > 10_000:  # cannot happen: every round resolves, escalates or retries
            for tp in reader.pending:
                reader.fail_all(tp, "fetch_incomplete")
            break
        if reader.stale:
            if guard > 1 and sleep is not None:
                await sleep(max(reader.retries.values(), default=1))
            reader.lead = await leaders(sorted({t for t, _ in reader.pending}))
            reader.stale = False
        by_node = reader.route()
        if not by_node:
            continue
        requests = {node: _fetch_request(parts, reader.limits)
                    for node, parts in by_node.items()}
        reader.out.fetch_requests += len(requests)
        answers = await send_many(requests)
        for node, parts in by_node.items():
            reader.absorb(answers.get(node), {(t, p): o for t, p, o in parts})
    return reader.out


class _Rounds:
    """The state of one :func:`fetch_record_times` call between rounds: offsets still
    pending per partition, byte limits, retries and the leaders last looked up."""

    def __init__(self, wanted: Mapping[TP, set[int]], newest: Mapping[TP, int],
                 starts: Mapping[TP, int | None], *, max_retries: int,
                 code_of: Callable[[BaseException], int], leader_retry: frozenset[int]) -> None:
        self.wanted, self.newest, self.starts = wanted, newest, starts
        self.max_retries, self.code_of, self.leader_retry = max_retries, code_of, leader_retry
        self.out = RecordTimes()
        self.pending: dict[TP, list[int]] = {}
        for tp in set(wanted) | set(newest):
            offsets = set(wanted.get(tp, ()))
            if tp in newest:
                offsets.add(newest[tp])
            self.pending[tp] = sorted(offsets)
        self.limits: dict[TP, int] = defaultdict(lambda: PARTITION_BYTES)
        self.retries: dict[TP, int] = defaultdict(int)
        self.lead: dict[TP, int] = {}
        self.stale = True

    def resolve(self, tp: TP, offset: int, found: RecordTime) -> None:
        if offset in self.wanted.get(tp, ()):
            self.out.at[(tp[0], tp[1], offset)] = found
        if self.newest.get(tp) == offset:
            self.out.newest[tp] = found
        if offset in self.pending.get(tp, ()):
            self.pending[tp].remove(offset)

    def fail_all(self, tp: TP, reason: str) -> None:
        for offset in list(self.pending.get(tp, ())):
            self.resolve(tp, offset, RecordTime(None, None, reason))

    def route(self) -> dict[int, list[tuple[str, int, int]]]:
        """This round's (topic, partition, smallest pending offset) per leader; partitions
        without a leader are retried (leaders looked up again) or failed."""
        by_node: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
        for tp, offsets in sorted(self.pending.items()):
            if not offsets:
                continue
            node = self.lead.get(tp)
            if node is None or node < 0:
                self.retries[tp] += 1
                if node is None or self.retries[tp] > self.max_retries:
                    self.fail_all(tp, _error_reason(Errors.UnknownTopicOrPartitionError.errno
                                                    if node is None
                                                    else Errors.LeaderNotAvailableError.errno))
                else:
                    self.stale = True
                continue
            by_node[node].append((tp[0], tp[1], offsets[0]))
        return by_node

    def absorb(self, answer: Any, asked: dict[TP, int]) -> None:
        """One broker's Fetch answer (or the exception its request raised)."""
        if isinstance(answer, BaseException) or answer is None:
            code = self.code_of(answer) if isinstance(answer, BaseException) else -1
            for tp in asked:
                if code in self.leader_retry and self.retries[tp] < self.max_retries:
                    self.retries[tp] += 1
                    self.stale = True
                else:
                    self.resolve(tp, asked[tp], RecordTime(None, None, _error_reason(code)))
            return
        for topic in answer.responses:
            for pd in topic.partitions:
                tp = (topic.topic, pd.partition_index)
                if tp in asked:
                    self.stale |= self.handle(tp, asked.pop(tp), pd)
        for tp, offset in asked.items():  # the broker left a partition out: ask again
            self.retries[tp] += 1
            if self.retries[tp] > self.max_retries:
                self.resolve(tp, offset, RecordTime(None, None, "fetch_incomplete"))

    def handle(self, tp: TP, offset: int, pd: Any) -> bool:
        """One partition's Fetch answer; returns True when the leaders must be looked up
        again."""
        code = pd.error_code
        if code == _OFFSET_OUT_OF_RANGE:
            start = self.starts.get(tp)
            below = (start is not None and offset < start) or (
                pd.log_start_offset is not None and offset < pd.log_start_offset)
            self.resolve(tp, offset, RecordTime(None, None, "committed_before_log_start"
                                                if below else _error_reason(code)))
            return False
        if code in self.leader_retry:
            self.retries[tp] += 1
            if self.retries[tp] > self.max_retries:
                self.fail_all(tp, _error_reason(code))
            return True
        if code != 0:
            self.fail_all(tp, _error_reason(code))
            return False
        try:
            records, covered = decode_records(pd.records)
        except Exception as exc:  # a corrupt or unsupported batch must not abort the snapshot
            log.warning("%s-%d: undecodable Fetch answer at offset %d: %s", tp[0], tp[1],
                        offset, exc)
            self.resolve(tp, offset, RecordTime(None, None, "undecodable_batch"))
            return False
        mine = set(self.pending.get(tp, ()))
        for rec_offset, ts in records:  # skip to the exact offsets inside the returned batches
            if rec_offset in mine:
                self.resolve(tp, rec_offset, RecordTime(rec_offset, ts if ts >= 0 else None,
                                                        None if ts >= 0 else "no_timestamp"))
        if offset in self.pending.get(tp, ()):
            self.resolve_missing(tp, offset, covered, bool(records), pd.last_stable_offset)
        return False

    def resolve_missing(self, tp: TP, offset: int, covered: int, any_records: bool,
                        stable: int | None) -> None:
        """The asked offset was not among the records returned: absent (its batch came
        back without it), past the LSO, or its batch did not fit the limit (ask bigger)."""
        if covered >= offset or any_records:
            self.resolve(tp, offset, RecordTime(None, None, "committed_record_absent"))
        elif stable is not None and stable >= 0 and offset >= stable:
            self.resolve(tp, offset, RecordTime(None, None, "beyond_last_stable_offset"))
        elif self.limits[tp] >= MAX_PARTITION_BYTES:
            self.resolve(tp, offset, RecordTime(None, None, "fetch_incomplete"))
        else:  # the batch is larger than the limit (or the response was full): ask bigger
            self.limits[tp] = min(self.limits[tp] * 16, MAX_PARTITION_BYTES)


def _fetch_request(parts: Sequence[tuple[str, int, int]], limits: Mapping[TP, int]) -> Any:
    T = FetchRequest.FetchTopic
    P = T.FetchPartition
    topics: dict[str, list[Any]] = defaultdict(list)
    for t, p, offset in parts:
        topics[t].append(P(partition=p, current_leader_epoch=-1, fetch_offset=offset,
                           last_fetched_epoch=-1, log_start_offset=-1,
                           partition_max_bytes=limits[(t, p)]))
    total = min(sum(limits[(t, p)] for t, p, _ in parts), MAX_RESPONSE_BYTES)
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=total,
        isolation_level=_READ_COMMITTED, session_id=0, session_epoch=-1,
        topics=[T(topic=t, partitions=ps) for t, ps in sorted(topics.items())],
        forgotten_topics_data=[], rack_id="", min_version=4, max_version=12)


__all__ = [
    "CAUGHT_UP",
    "MAX_PARTITION_BYTES",
    "PARTITION_BYTES",
    "RATE_WINDOW_S",
    "REASONS",
    "RecordTime",
    "RecordTimes",
    "decode_records",
    "fetch_record_times",
    "ms_to_datetime",
    "newest_offset",
    "plan",
    "produce_rate",
    "time_lag",
]
