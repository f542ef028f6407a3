"""One live capture's I/O: the group questions, asked in the order the snapshot needs.

Why: the snapshot point (the ``__consumer_offsets`` watermarks) must be read before any group
answer, then ListGroups on every broker, the describes, OffsetFetch, what the lake knows but
the answers hid (asked by name), the log end offsets, and the records the time lag needs.
Per-group errors are isolated and retried (spec 3.2); only an unreachable cluster raises.
Runs as a coroutine on kafka-python's I/O thread; rows are built later
(:mod:`~pipelines.reconcile.cluster.assemble`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import OffsetFetchRequest
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest

from pipelines.reconcile.cluster.errors import (
    LEADER_RETRY,
    NETWORK_EXCEPTION,
    NONE,
    REDISCOVER,
    RETRY_SAME,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_VERSION,
    code_of,
    error_name,
)
from pipelines.reconcile.cluster.messages import (
    ConsumerGroupDescribeRequest,
    ShareGroupDescribeRequest,
    StreamsGroupDescribeRequest,
)
from pipelines.reconcile.cluster.raw import Listing, RawAnswers
from pipelines.reconcile.cluster.record_times import (
    RATE_WINDOW_S,
    RecordTimes,
    fetch_record_times,
    newest_offset,
    plan,
)
from pipelines.reconcile.cluster.rows import LogEndOffsetRow, PointRow, group_type
from pipelines.reconcile.cluster.wire import EARLIEST, READ_UNCOMMITTED, AdminWire
from pipelines.sources.kafka.options import OFFSETS_TOPIC

log = logging.getLogger(__name__)


_API_OFFSET_FETCH = 9
_API_FIND_COORDINATOR = 10
_API_CONSUMER_GROUP_DESCRIBE = 69
_API_SHARE_GROUP_DESCRIBE = 77  # KIP-932
_API_STREAMS_GROUP_DESCRIBE = 89  # KIP-1071
_MAX_GROUPS_PER_REQUEST = 10_000


class Capture(AdminWire):
    """One capture's I/O, run as a coroutine on kafka-python's I/O thread."""

    def __init__(self, admin: KafkaAdminClient, *, require_stable: bool, max_retries: int,
                 retry_backoff_ms: int, max_backoff_ms: int, request_timeout_ms: int,
                 max_in_flight: int,
                 expected: Mapping[str, Iterable[tuple[str, int]]] | None = None) -> None:
        super().__init__(admin, raw=RawAnswers(), max_retries=max_retries,
                         retry_backoff_ms=retry_backoff_ms, max_backoff_ms=max_backoff_ms,
                         request_timeout_ms=request_timeout_ms, max_in_flight=max_in_flight)
        # (group -> partitions) the lake holds: what ListGroups / OffsetFetch(null) may hide
        self.expected = {g: set(tps) for g, tps in (expected or {}).items()}
        self.missing: dict[str, dict[str, list[int]]] = {}
        self.require_stable = require_stable

    async def _list_groups(self) -> None:
        """ListGroups on every broker (each lists the groups it coordinates), combined."""
        for broker in sorted(self.manager.cluster.brokers(), key=lambda b: b.node_id):
            node = broker.node_id
            for attempt in range(self.max_retries + 1):
                if attempt:
                    await self.sleep(attempt)
                try:
                    response = await self.send(node, ListGroupsRequest(min_version=0))
                except Exception as exc:
                    code = code_of(exc)
                else:
                    code = response.error_code
                if code == NONE:
                    break
                if code not in RETRY_SAME | REDISCOVER:
                    break
            if code != NONE:
                msg = f"ListGroups on broker {node} failed: {error_name(code)}; its groups are missing"
                log.warning(msg)
                self.raw.errors.append(msg)
                continue
            version = response.API_VERSION
            for g in response.groups:
                if g.group_id in self.raw.listings:
                    log.info("group %s listed by brokers %s and %s (coordinator moving)",
                             g.group_id, self.raw.listings[g.group_id].listed_by, node)
                    continue
                self.raw.listings[g.group_id] = Listing(
                    g.group_id, g.protocol_type,
                    g.group_state if version >= 4 else None,
                    g.group_type if version >= 5 else None, node)

    async def _find_coordinators(self, group_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """FindCoordinator: batched keys (v4+, KIP-699) or one request per key."""
        node = self.manager.least_loaded_node()
        if node is None:
            return {g: (NETWORK_EXCEPTION, -1) for g in group_ids}
        try:
            batched = await self.max_version(node, _API_FIND_COORDINATOR) >= 4
        except Exception as exc:
            return {g: (code_of(exc), -1) for g in group_ids}
        answers: list[tuple[str, Any]] = []
        if batched:
            try:
                response = await self.send(node, FindCoordinatorRequest(
                    key_type=0, coordinator_keys=list(group_ids), min_version=4))
            except Exception as exc:
                return {g: (code_of(exc), -1) for g in group_ids}
            answers = [(c.key, c) for c in response.coordinators]
        else:
            requests = [FindCoordinatorRequest(key=g, key_type=0, max_version=3)
                        for g in group_ids]
            answers = list(zip(group_ids, await self.send_all(node, requests), strict=True))
        out: dict[str, tuple[int, int]] = {}
        for key, answer in answers:
            if isinstance(answer, BaseException):
                out[key] = (code_of(answer), -1)
            elif answer.error_code != NONE:
                out[key] = (answer.error_code, -1)
            else:
                self.manager.cluster.add_coordinator(answer, CoordinatorType.GROUP, key,
                                                     synthesize_node_id=False)
                out[key] = (NONE, answer.node_id)
        return out

    async def _group_phase(self, group_ids: Sequence[str], phase: str,
                           call: Callable[[int, list[str]], Awaitable[dict[str, tuple[int, Any]]]]
                           ) -> dict[str, tuple[int, Any]]:
        """Run ``call(coordinator, groups)`` per coordinator with per-group error isolation.

        NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / network errors: look the coordinator up
        again and retry; COORDINATOR_LOAD_IN_PROGRESS: retry with backoff; anything else is
        final for that group only. Retries are bounded by ``max_retries``.
        """
        results: dict[str, tuple[int, Any]] = {}
        last_error: dict[str, int] = {}
        pending = list(dict.fromkeys(group_ids))
        for attempt in range(self.max_retries + 1):
            if not pending:
                break
            if attempt:
                log.info("%s: retrying %d group(s), attempt %d", phase, len(pending), attempt + 1)
                await self.sleep(attempt)
            unknown = [g for g in pending if g not in self.raw.coordinators]
            if unknown:
                for g, (code, node) in (await self._find_coordinators(unknown)).items():
                    if code == NONE:
                        self.raw.coordinators[g] = node
                        self.raw.coordinator_errors.pop(g, None)
                    else:
                        last_error[g] = code
                        self.raw.coordinator_errors[g] = code
                        if code not in RETRY_SAME | REDISCOVER:
                            results[g] = (code, None)
            buckets: dict[int, list[str]] = defaultdict(list)
            retry: list[str] = []
            for g in pending:
                if g in results:
                    continue
                if g in self.raw.coordinators:
                    buckets[self.raw.coordinators[g]].append(g)
                else:
                    retry.append(g)
            for node, gids in buckets.items():
                for i in range(0, len(gids), _MAX_GROUPS_PER_REQUEST):
                    chunk = gids[i:i + _MAX_GROUPS_PER_REQUEST]
                    try:
                        answers = await call(node, chunk)
                    except Exception as exc:
                        code = code_of(exc)
                        log.warning("%s on coordinator %s failed: %s", phase, node, exc)
                        answers = {g: (code, None) for g in chunk}
                    for g in chunk:
                        code, payload = answers.get(g, (UNKNOWN_SERVER_ERROR, None))
                        if code in REDISCOVER:
                            self.raw.coordinators.pop(g, None)
                            last_error[g] = code
                            retry.append(g)
                        elif code in RETRY_SAME:
                            last_error[g] = code
                            retry.append(g)
                        else:
                            results[g] = (code, payload)
            pending = retry
        for g in pending:
            code = last_error.get(g, UNKNOWN_SERVER_ERROR)
            log.warning("%s: group %s still failing after %d attempts: %s", phase, g,
                        self.max_retries + 1, error_name(code))
            results[g] = (code, None)
        return results

    async def _describe_classic(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        response = await self.send(node, DescribeGroupsRequest(
            groups=gids, include_authorized_operations=False))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _describe_consumer(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        if await self.max_version(node, _API_CONSUMER_GROUP_DESCRIBE) < 0:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        response = await self.send(node, ConsumerGroupDescribeRequest(
            group_ids=gids, include_authorized_operations=False))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _describe_share(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        """ShareGroupDescribe v1 (KIP-932) where the coordinator offers it (v0 was 4.0's
        early access, never spoken); otherwise UNSUPPORTED_VERSION: not described."""
        if await self.max_version(node, _API_SHARE_GROUP_DESCRIBE) < 1:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        response = await self.send(node, ShareGroupDescribeRequest(
            group_ids=gids, include_authorized_operations=False, min_version=1, max_version=1))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _describe_streams(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        """StreamsGroupDescribe v0 (KIP-1071) where the coordinator offers it; otherwise
        UNSUPPORTED_VERSION: not described."""
        if await self.max_version(node, _API_STREAMS_GROUP_DESCRIBE) < 0:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        response = await self.send(node, StreamsGroupDescribeRequest(
            group_ids=gids, include_authorized_operations=False, max_version=0))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _offset_fetch(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        """All offsets of each group (topics=null, KIP-88): many groups per request on
        OffsetFetch v8+ (KIP-709), otherwise one request per group."""
        max_v = await self.max_version(node, _API_OFFSET_FETCH)
        if self.require_stable and max_v < 7:
            self.raw.errors.append(
                f"broker {node} has OffsetFetch v{max_v} < 7: require_stable not applied")
        if max_v >= 8:
            G = OffsetFetchRequest.OffsetFetchRequestGroup
            response = await self.send(node, OffsetFetchRequest(
                groups=[G(group_id=g, topics=None) for g in gids],
                require_stable=self.require_stable, min_version=8, max_version=8))
            return {g.group_id: (g.error_code, g.topics) for g in response.groups}
        if max_v < 2:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        requests = [OffsetFetchRequest(group_id=g, topics=None, require_stable=self.require_stable,
                                       min_version=2, max_version=7) for g in gids]
        out: dict[str, tuple[int, Any]] = {}
        for g, answer in zip(gids, await self.send_all(node, requests), strict=True):
            if isinstance(answer, BaseException):
                out[g] = (code_of(answer), None)
            else:
                out[g] = (answer.error_code, answer.topics)
        return out

    async def _offset_fetch_topics(self, node: int, gids: list[str]
                                   ) -> dict[str, tuple[int, Any]]:
        """OffsetFetch naming the partitions (``self.missing``): unlike topics=null, which
        silently leaves out topics the principal may not describe, named topics are answered
        TOPIC_AUTHORIZATION_FAILED."""
        max_v = await self.max_version(node, _API_OFFSET_FETCH)
        if max_v >= 8:
            G = OffsetFetchRequest.OffsetFetchRequestGroup
            T = G.OffsetFetchRequestTopics
            response = await self.send(node, OffsetFetchRequest(
                groups=[G(group_id=g, topics=[T(name=t, partition_indexes=ps)
                                              for t, ps in sorted(self.missing[g].items())])
                        for g in gids],
                require_stable=self.require_stable, min_version=8, max_version=8))
            return {g.group_id: (g.error_code, g.topics) for g in response.groups}
        T1 = OffsetFetchRequest.OffsetFetchRequestTopic
        requests = [OffsetFetchRequest(
            group_id=g, topics=[T1(name=t, partition_indexes=ps)
                                for t, ps in sorted(self.missing[g].items())],
            require_stable=self.require_stable, max_version=min(max_v, 7)) for g in gids]
        out: dict[str, tuple[int, Any]] = {}
        for g, answer in zip(gids, await self.send_all(node, requests), strict=True):
            out[g] = ((code_of(answer), None) if isinstance(answer, BaseException)
                      else (answer.error_code, answer.topics))
        return out

    async def _completeness(self) -> None:
        """Ask by name what the lake knows and the broad answers did not show: ListGroups and
        OffsetFetch(topics=null) silently drop what a principal may not describe, while a
        group or topic asked by name is answered GROUP/TOPIC_AUTHORIZATION_FAILED."""
        raw = self.raw
        unlisted = sorted(g for g in self.expected if g not in raw.listings)
        if unlisted:
            raw.unlisted = await self._group_phase(unlisted, "OffsetFetch(unlisted groups)",
                                                   self._offset_fetch)
        for gid, wanted in sorted(self.expected.items()):
            code, topics = raw.fetched.get(gid) or raw.unlisted.get(gid) or (NONE, None)
            if code != NONE:
                continue
            seen = {(t.name, p.partition_index) for t in topics or [] for p in t.partitions}
            absent = sorted(wanted - seen)
            if absent:
                by_topic: dict[str, list[int]] = defaultdict(list)
                for t, p in absent:
                    by_topic[t].append(p)
                self.missing[gid] = dict(by_topic)
        if self.missing:
            raw.refetched = await self._group_phase(sorted(self.missing),
                                                    "OffsetFetch(named topics)",
                                                    self._offset_fetch_topics)

    # ------------------------------------------------------------------ the capture
    async def run(self) -> RawAnswers:
        raw = self.raw
        # 1. the snapshot point: __consumer_offsets watermarks before any group answer
        raw.captured_at = datetime.now(timezone.utc)
        leaders = await self.leaders([OFFSETS_TOPIC])
        co_tps = sorted(tp for tp in leaders if tp[0] == OFFSETS_TOPIC)
        if not co_tps:
            raw.errors.append(f"{OFFSETS_TOPIC} not in metadata (absent or not authorized): "
                              "no snapshot point")
        ends = await self.end_offsets(co_tps)
        raw.points = [PointRow(p, *ends[(t, p)]) for t, p in co_tps]
        # 2. every broker's ListGroups
        await self._list_groups()
        listings = raw.listings
        # 3. describe: DescribeGroups for classic (and untyped) groups, ConsumerGroupDescribe
        #    for KIP-848 groups, ShareGroupDescribe / StreamsGroupDescribe for share / streams
        #    groups where their coordinator offers the API
        phases = ((("classic", "unknown"), "described", "DescribeGroups", self._describe_classic),
                  (("consumer",), "consumer_described", "ConsumerGroupDescribe",
                   self._describe_consumer),
                  (("share",), "share_described", "ShareGroupDescribe", self._describe_share),
                  (("streams",), "streams_described", "StreamsGroupDescribe",
                   self._describe_streams))
        for types, answers, phase, call in phases:
            gids = [g for g, li in sorted(listings.items()) if group_type(li.group_type) in types]
            if gids:
                setattr(raw, answers, await self._group_phase(gids, phase, call))
        # 4. committed offsets of every listed group
        if listings:
            raw.fetched = await self._group_phase(sorted(listings), "OffsetFetch",
                                                  self._offset_fetch)
        # 4b. what the lake knows that the answers did not show, asked by name
        if self.expected:
            await self._completeness()
        # 5. log end offsets of every partition some group holds an offset for
        held = sorted({(t.name, p.partition_index)
                       for code, topics in raw.fetched.values() if code == NONE and topics
                       for t in topics for p in t.partitions})
        if held:
            leo = await self.end_offsets(held)
            starts = await self.list_offsets(held, READ_UNCOMMITTED, EARLIEST)
            raw.starts = {tp: starts.get(tp, (UNKNOWN_SERVER_ERROR, None))[1] for tp in held}
            raw.ends = [LogEndOffsetRow(t, p, *leo[(t, p)], raw.starts[(t, p)])
                        for t, p in held]
            # the producers' recent pace, for the catch-up estimate (ListOffsets by timestamp)
            since_ms = int(raw.captured_at.timestamp() * 1000) - RATE_WINDOW_S * 1000
            found = await self.list_offsets(held, READ_UNCOMMITTED, since_ms)
            raw.window_starts = {tp: found[tp][1] if found.get(tp, (-1, None))[0] == NONE
                                 else None for tp in held}
            # 6. the records at the committed offsets and the newest ones: exact time lag
            raw.times = await self.read_record_times(held)
        return raw

    async def read_record_times(self, held: Sequence[tuple[str, int]]) -> RecordTimes:
        """Bounded Fetches (one per broker per round) for the records whose timestamps the
        time lag needs (:mod:`pipelines.reconcile.cluster.record_times`)."""
        raw = self.raw
        marks = {(e.topic, e.partition): e for e in raw.ends}
        wanted: dict[tuple[str, int], set[int]] = defaultdict(set)
        newest: dict[tuple[str, int], int] = {}
        for code, topics in [*raw.fetched.values(), *raw.unlisted.values(),
                             *raw.refetched.values()]:
            if code != NONE:
                continue
            for t in topics or []:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    e = marks.get(tp)
                    if e is None or p.error_code != NONE:
                        continue
                    if plan(p.committed_offset, e.log_end_offset, e.last_stable_offset,
                            e.log_start_offset) is None:
                        wanted[tp].add(p.committed_offset)
        for tp, e in marks.items():  # newest record of every partition a group holds
            n = newest_offset(e.log_end_offset, e.last_stable_offset, e.log_start_offset)
            if n is not None:
                newest[tp] = n
        times = await fetch_record_times(
            wanted, newest, raw.starts, leaders=self.leaders, send_many=self.send_many,
            max_retries=self.max_retries, code_of=code_of, leader_retry=LEADER_RETRY,
            sleep=self.sleep)
        log.debug("time lag: %d records read with %d Fetch requests",
                  len(times.at) + len(times.newest), times.fetch_requests)
        return times
