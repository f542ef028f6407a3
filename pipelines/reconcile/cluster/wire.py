"""Admin requests over kafka-python's connection manager: sending, metadata, list offsets.

Why: every step of a capture needs the same plumbing (send to one node, to several at once,
pipelined to one node, bounded retries with doubling backoff) and the same two partition
questions (who leads it, what are its offsets). This is that layer; the group questions and
the capture's order are in :mod:`~pipelines.reconcile.cluster.capture`. It runs as coroutines
on kafka-python's I/O thread.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import kafka.errors as Errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest

from pipelines.reconcile.cluster.errors import (
    LEADER_NOT_AVAILABLE,
    LEADER_RETRY,
    NONE,
    UNKNOWN_SERVER_ERROR,
    ClusterUnreachable,
    code_of,
    error_name,
)
from pipelines.reconcile.cluster.raw import RawAnswers
from pipelines.reconcile.cluster.rows import kafka_uuid

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class AdminWire:
    """Requests to the cluster's brokers; what they answer about topics lands in ``raw``."""

    def __init__(self, admin: KafkaAdminClient, *, raw: RawAnswers, max_retries: int,
                 retry_backoff_ms: int, max_backoff_ms: int, request_timeout_ms: int,
                 max_in_flight: int) -> None:
        self.admin = admin
        self.manager = admin._manager  # kafka-python's connection manager (3.x)
        self.raw = raw
        self.max_retries = max_retries
        self.retry_backoff_ms = retry_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.window = max(1, max_in_flight - 1)

    async def sleep(self, attempt: int) -> None:
        delay_ms = min(self.retry_backoff_ms * (2 ** max(attempt - 1, 0)), self.max_backoff_ms)
        await self.admin._net.sleep(delay_ms / 1000)

    async def send(self, node_id: int | None, request: Any) -> Any:
        return await self.manager.send(request, node_id=node_id,
                                       request_timeout_ms=self.request_timeout_ms)

    async def send_many(self, requests: Mapping[int, Any]) -> dict[int, Any]:
        """One request to each of several nodes, all sent before any answer is awaited
        (concurrent across brokers); answers or exceptions by node."""
        futures = {node: self.manager.send(r, node_id=node,
                                           request_timeout_ms=self.request_timeout_ms)
                   for node, r in requests.items()}
        out: dict[int, Any] = {}
        for node, fut in futures.items():
            try:
                out[node] = await fut
            except Exception as exc:
                out[node] = exc
        return out

    async def send_all(self, node_id: int, requests: Sequence[Any]) -> list[Any]:
        """Pipeline requests to one node (a window below max in-flight); exceptions returned."""
        out: list[Any] = []
        for i in range(0, len(requests), self.window):
            futures = [self.manager.send(r, node_id=node_id,
                                         request_timeout_ms=self.request_timeout_ms)
                       for r in requests[i:i + self.window]]
            for fut in futures:
                try:
                    out.append(await fut)
                except Exception as exc:
                    out.append(exc)
        return out

    async def max_version(self, node_id: int, api_key: int) -> int:
        """Highest version this node advertises for ``api_key`` (-1: not at all)."""
        conn = self.manager.get_connection(node_id)
        await conn
        versions = conn.broker_version_data.api_versions if conn.broker_version_data else {}
        return versions.get(api_key, (0, -1))[1]


    async def leaders(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> leader id; unknown topics are simply absent."""
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                await self.sleep(attempt)
            try:
                response = await self.send(None, request)
            except Exception as exc:
                last = exc
                continue
            leaders = {}
            for t in response.topics:
                if t.error_code != NONE:
                    self.raw.topic_errors[t.name] = t.error_code
                if t.error_code != NONE:  # e.g. a deleted topic that still has offsets
                    log.info("metadata for topic %s: %s", t.name, error_name(t.error_code))
                    continue
                topic_id = kafka_uuid(getattr(t, "topic_id", None))
                if topic_id:
                    self.raw.topic_names[topic_id] = t.name
                for p in t.partitions:
                    leaders[(t.name, p.partition_index)] = p.leader_id
            return leaders
        raise ClusterUnreachable(f"metadata request failed {self.max_retries + 1} times: {last}")

    async def list_offsets(self, tps: Sequence[tuple[str, int]], isolation: int,
                            timestamp: int = LATEST
                            ) -> dict[tuple[str, int], tuple[int, int | None]]:
        """ListOffsets LATEST per partition -> (error, offset); HW with read_uncommitted,
        LSO with read_committed (``timestamp=EARLIEST``: the log start offset). One request
        per leader, sent to all leaders at once. Leader moves are retried with fresh
        metadata."""
        result: dict[tuple[str, int], tuple[int, int | None]] = {}
        pending = sorted(set(tps))
        for attempt in range(self.max_retries + 1):
            if not pending:
                break
            if attempt:
                await self.sleep(attempt)
            leaders = await self.leaders(sorted({t for t, _ in pending}))
            by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
            retry: list[tuple[str, int]] = []
            for tp in pending:
                leader = leaders.get(tp)
                if leader is None:
                    result[tp] = (Errors.UnknownTopicOrPartitionError.errno, None)
                elif leader < 0:
                    result[tp] = (LEADER_NOT_AVAILABLE, None)
                    retry.append(tp)
                else:
                    by_leader[leader].append(tp)
            requests = {}
            for leader, parts in by_leader.items():
                topics: dict[str, list[int]] = defaultdict(list)
                for t, p in parts:
                    topics[t].append(p)
                T = ListOffsetsRequest.ListOffsetsTopic
                requests[leader] = ListOffsetsRequest(
                    replica_id=-1, isolation_level=isolation,
                    topics=[T(name=t, partitions=[T.ListOffsetsPartition(
                        partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                        for p in sorted(ps)]) for t, ps in sorted(topics.items())],
                    timeout_ms=self.request_timeout_ms,
                    min_version=2 if isolation == READ_COMMITTED else 0)
            answers = await self.send_many(requests)
            for leader, parts in by_leader.items():
                response = answers[leader]
                if isinstance(response, BaseException):
                    exc = response
                    code = code_of(exc)
                    for tp in parts:
                        result[tp] = (code, None)
                    if code in LEADER_RETRY:
                        retry.extend(parts)
                    continue
                for t in response.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        result[tp] = (p.error_code, p.offset if p.error_code == NONE else None)
                        if p.error_code in LEADER_RETRY:
                            retry.append(tp)
            pending = retry
        return result

    async def end_offsets(self, tps: Sequence[tuple[str, int]]
                           ) -> dict[tuple[str, int], tuple[int | None, int | None]]:
        """(log end / high watermark, last stable offset) per partition."""
        hw = await self.list_offsets(tps, READ_UNCOMMITTED)
        lso = await self.list_offsets(tps, READ_COMMITTED)
        out = {}
        for tp in tps:
            hw_err, hw_off = hw.get(tp, (UNKNOWN_SERVER_ERROR, None))
            _, lso_off = lso.get(tp, (UNKNOWN_SERVER_ERROR, None))
            if hw_err:
                self.raw.errors.append(f"ListOffsets {tp[0]}-{tp[1]}: {error_name(hw_err)}")
            out[tp] = (hw_off, lso_off)
        return out
