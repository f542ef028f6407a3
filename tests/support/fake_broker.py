"""A small Kafka cluster on loopback for tests: N broker ids on N ports, one asyncio thread.

Why: no Kafka broker can be installed here (see PLATFORM.md), yet the snapshot client and
the streaming source must be tested against real wire bytes. Requests are decoded and
responses encoded with kafka-python's own protocol classes, so what a test exercises is
kafka-python's real client stack talking to a server that follows the Kafka protocol.

What it serves (see ``_API_SPECS`` for the version ranges it advertises):

* ApiVersions, Metadata, FindCoordinator (v0-v3 one key, v4+ batched keys), ListGroups
  (v0-v5: group state from v4, group type from v5), DescribeGroups (v0-v6),
  ConsumerGroupDescribe (KIP-848, api key 69, defined here with kafka-python's message
  machinery because kafka-python 3.0.12 has no class for it), ShareGroupDescribe (v1,
  KIP-932) and StreamsGroupDescribe (v0, KIP-1071) likewise, OffsetFetch (v1-v8: null topics
  = all partitions from v2, many groups per request with per-group errors from v8,
  require_stable from v7), ListOffsets (latest, earliest, and by timestamp over v2 batches)
  and Fetch (v4-v12, real v2 record batches from an
  in-memory log, with high watermark, last stable offset and aborted transactions).
* Every group-scoped request is routed like a real coordinator: a broker that does not own
  the group answers NOT_COORDINATOR; partition-scoped requests to a non-leader get
  NOT_LEADER_OR_FOLLOWER.
* Faults per test: transient group errors for the first K requests
  (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE), permanent ones
  (GROUP_AUTHORIZATION_FAILED) for one group of a batch, stale FindCoordinator answers
  (the coordinator "moved"), lowered max versions per API ("older broker"), pending
  transactional offsets (UNSTABLE_OFFSET_COMMIT with require_stable), stopped brokers.
* SASL (:meth:`FakeKafkaCluster.enable_sasl`): SaslHandshake + SaslAuthenticate with a real
  SCRAM-SHA-256/512 server exchange (RFC 5802/7677, as Kafka's ScramSaslServer) or PLAIN;
  unknown users and wrong passwords answer SASL_AUTHENTICATION_FAILED and close the
  connection, an unlisted mechanism UNSUPPORTED_SASL_MECHANISM; any other request before
  authentication closes the connection, as a SASL listener does.
* ACLs (:meth:`FakeKafkaCluster.grant`, like Kafka's StandardAuthorizer): Metadata answers
  TOPIC_AUTHORIZATION_FAILED for a named topic without DESCRIBE and omits it from "all
  topics"; ListGroups omits groups without DESCRIBE; DescribeGroups, ConsumerGroupDescribe,
  FindCoordinator and OffsetFetch answer GROUP_AUTHORIZATION_FAILED per group; OffsetFetch
  with null topics silently omits topics without DESCRIBE and answers
  TOPIC_AUTHORIZATION_FAILED for named ones; ListOffsets needs DESCRIBE, Fetch READ.
* A request log and counters per API key / broker / version.

Bounded: binds 127.0.0.1 only, advertises only 127.0.0.1, runs in a daemon thread and shuts
itself down after ``max_lifetime_s`` even if a test forgets to stop it.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import collections
import contextlib
import contextvars
import hashlib
import hmac
import logging
import os
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka.record.util import calc_crc32c

from pipelines.sources.kafka.options import OFFSETS_TOPIC

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"

# Kafka error codes used here (org.apache.kafka.common.protocol.Errors).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
SASL_AUTHENTICATION_FAILED = 58
GROUP_ID_NOT_FOUND = 69
UNSTABLE_OFFSET_COMMIT = 88

_UNKNOWN_AUTHORIZED_OPERATIONS = -(1 << 31)
_LATEST = -1
_EARLIEST = -2


# --------------------------------------------------------------------------------------
# KIP-848 ConsumerGroupDescribe (api key 69): kafka-python 3.0.12 ships no class for it.
# --------------------------------------------------------------------------------------


# kafka-python 3.0.12 has no ConsumerGroupDescribe (KIP-848); the client module defines it
# from Kafka's schema, and the fake broker answers with the very same classes.
from pipelines.reconcile.cluster.messages import (  # noqa: E402
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
)

# --------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------


@dataclass
class FakeMember:
    """A group member. Classic members carry protocol bytes; KIP-848 members topic lists."""

    member_id: str
    client_id: str = "fake-client"
    client_host: str = "/127.0.0.1"
    group_instance_id: str | None = None
    # classic protocol: raw ConsumerProtocolSubscription / ConsumerProtocolAssignment bytes
    metadata: bytes = b""
    assignment: bytes = b""
    # KIP-848 consumer group members
    member_epoch: int = 1
    rack_id: str | None = None
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    assigned_partitions: dict[str, list[int]] = field(default_factory=dict)
    target_partitions: dict[str, list[int]] | None = None  # None: same as assigned
    member_type: int = 1  # KIP-1099: 0 classic member inside a consumer group, 1 consumer
    # streams group members (KIP-1071): tasks as subtopology id -> partitions
    process_id: str = ""
    active_tasks: dict[str, list[int]] = field(default_factory=dict)
    standby_tasks: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class FakeGroup:
    """A group as its coordinator knows it."""

    group_id: str
    group_type: str = "classic"  # classic | consumer | share | streams
    state: str = "Empty"
    protocol_type: str = "consumer"
    protocol: str = ""  # classic: selected assignor; shown by DescribeGroups when Stable
    members: list[FakeMember] = field(default_factory=list)
    group_epoch: int = 1
    assignment_epoch: int = 1
    assignor_name: str = "uniform"
    coordinator: int | None = None  # broker id; None = leader of its __consumer_offsets partition
    # streams groups: subtopology id -> source topics (StreamsGroupDescribe's Topology)
    subtopologies: dict[str, list[str]] = field(default_factory=dict)
    topology_epoch: int = 0


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass
class GroupFault:
    """Answer ``error_code`` for this group on ``apis``; ``remaining`` None means forever."""

    error_code: int
    remaining: int | None
    apis: frozenset[int]


@dataclass(frozen=True)
class RequestRecord:
    broker_id: int
    api_key: int
    api_name: str
    api_version: int
    correlation_id: int
    client_id: str | None
    group_ids: tuple[str, ...] = ()


@dataclass
class _Batch:
    base_offset: int
    last_offset: int
    data: bytes
    transactional: bool = False
    control: bool = False
    producer_id: int = -1
    abort_marker: bool | None = None  # control batches: True = ABORT, False = COMMIT


class FakePartition:
    """One partition's log: record batches (real bytes) plus watermarks.

    Without injected bytes a partition is just a log end offset (and start offset) so that
    ListOffsets and lag work; with bytes, the watermarks follow the batches unless overridden.
    """

    def __init__(self, topic: str, index: int, leader: int, log_end_offset: int = 0,
                 log_start_offset: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.leader = leader
        self.leader_epoch = 0
        self._batches: list[_Batch] = []
        self._last_offsets: list[int] = []
        self._next_offset = log_end_offset
        self._log_start = log_start_offset
        self.high_watermark_override: int | None = None
        self.last_stable_offset_override: int | None = None
        self._txn_cache: tuple[int, list[tuple[int, int, int]]] | None = None

    # -- content ----------------------------------------------------------------------
    def set_log(self, raw: bytes, *, log_start_offset: int | None = None) -> None:
        """Replace the log with ``raw`` record batches as they are (offsets kept), e.g. the
        bytes of real ``.log`` segment files concatenated in order."""
        batches = list(_split_batches(raw))
        self._batches = batches
        self._last_offsets = [b.last_offset for b in batches]
        if batches:
            self._next_offset = batches[-1].last_offset + 1
            self._log_start = batches[0].base_offset if log_start_offset is None else log_start_offset
        elif log_start_offset is not None:
            self._log_start = log_start_offset
        self._txn_cache = None

    def append(self, raw: bytes) -> tuple[int, int]:
        """Append batches, assigning offsets from the log end like a leader does.

        Returns (first offset, next offset). Base offsets are rewritten; the CRC does not cover
        them, so the batches stay valid.
        """
        first = self._next_offset
        for batch in _split_batches(raw):
            data = bytearray(batch.data)
            struct.pack_into(">q", data, 0, self._next_offset)
            delta = batch.last_offset - batch.base_offset
            new = _Batch(self._next_offset, self._next_offset + delta, bytes(data),
                         batch.transactional, batch.control, batch.producer_id, batch.abort_marker)
            self._batches.append(new)
            self._last_offsets.append(new.last_offset)
            self._next_offset = new.last_offset + 1
        self._txn_cache = None
        return first, self._next_offset

    def set_offsets(self, *, log_end_offset: int | None = None,
                    log_start_offset: int | None = None) -> None:
        """For partitions without bytes: where the log starts and ends."""
        if log_end_offset is not None:
            self._next_offset = log_end_offset
        if log_start_offset is not None:
            self._log_start = log_start_offset
        self._txn_cache = None

    # -- watermarks -------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        if self.high_watermark_override is not None:
            return self.high_watermark_override
        return self._next_offset

    def _transactions(self) -> tuple[int, list[tuple[int, int, int]]]:
        """(first offset of the oldest open transaction or -1, aborted [(pid, first, last)])."""
        if self._txn_cache is None:
            open_txns: dict[int, int] = {}
            aborted: list[tuple[int, int, int]] = []
            for b in self._batches:
                if b.control:
                    first = open_txns.pop(b.producer_id, None)
                    if first is not None and b.abort_marker:
                        aborted.append((b.producer_id, first, b.last_offset))
                elif b.transactional and b.producer_id not in open_txns:
                    open_txns[b.producer_id] = b.base_offset
            self._txn_cache = (min(open_txns.values()) if open_txns else -1, aborted)
        return self._txn_cache

    @property
    def last_stable_offset(self) -> int:
        if self.last_stable_offset_override is not None:
            return min(self.last_stable_offset_override, self.high_watermark)
        first_open, _ = self._transactions()
        hw = self.high_watermark
        return hw if first_open < 0 else min(first_open, hw)

    def offset_for_timestamp(self, target_ms: int) -> tuple[int, int]:
        """ListOffsets by timestamp: (offset, timestamp) of the first record at or after
        ``target_ms`` below the high watermark, (-1, -1) when there is none (as Kafka)."""
        for b in self._batches:
            if b.control or b.base_offset >= self.high_watermark:
                continue
            for record in DefaultRecordBatch(bytearray(b.data)) if b.data[16] >= 2 else ():
                if record.offset < self.log_start_offset or record.offset >= self.high_watermark:
                    continue
                if record.timestamp >= target_ms:
                    return record.offset, record.timestamp
        return -1, -1

    def aborted_transactions(self, start: int, upper: int) -> list[tuple[int, int]]:
        """Aborted transactions overlapping [start, upper): what a read_committed fetch needs."""
        _, aborted = self._transactions()
        return [(pid, first) for pid, first, last in aborted if last >= start and first < upper]

    # -- reading ----------------------------------------------------------------------
    def read(self, fetch_offset: int, upper: int, max_bytes: int, *, at_least_one: bool) -> bytes:
        """Whole batches from the one holding ``fetch_offset`` up to (excluding) ``upper``."""
        out = bytearray()
        i = bisect.bisect_left(self._last_offsets, fetch_offset)
        while i < len(self._batches):
            b = self._batches[i]
            if b.base_offset >= upper:
                break
            if (out or not at_least_one) and len(out) + len(b.data) > max_bytes:
                break
            out += b.data
            i += 1
        return bytes(out)


def _split_batches(raw: bytes) -> Iterator[_Batch]:
    """Cut a byte string into record batches (magic 2; legacy magic 0/1 kept opaque)."""
    pos = 0
    view = memoryview(raw)
    while pos + 12 <= len(raw):
        base_offset, length = struct.unpack_from(">qi", raw, pos)
        end = pos + 12 + length
        if length <= 0 or end > len(raw):
            log.warning("ignoring %d trailing bytes that do not form a whole batch", len(raw) - pos)
            return
        data = bytes(view[pos:end])
        magic = data[16]
        if magic >= 2:
            attributes, last_delta = struct.unpack_from(">hi", data, 21)
            producer_id = struct.unpack_from(">q", data, 43)[0]
            control = bool(attributes & 0x20)
            abort = None
            if control:
                for record in DefaultRecordBatch(bytearray(data)):
                    abort = bool(getattr(record, "abort", False))
                    break
            yield _Batch(base_offset, base_offset + last_delta, data, bool(attributes & 0x10),
                         control, producer_id, abort)
        else:
            yield _Batch(base_offset, base_offset, data)
        pos = end


# --------------------------------------------------------------------------------------
# Record-batch and consumer-protocol helpers for tests
# --------------------------------------------------------------------------------------


def record_batch(records: Iterable[tuple[bytes | None, bytes | None]], *,
                 timestamp_ms: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
                 transactional: bool = False, compression_type: int = 0) -> bytes:
    """One v2 record batch built by kafka-python's MemoryRecordsBuilder (base offset 0)."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    builder = MemoryRecordsBuilder(
        magic=2, compression_type=compression_type, batch_size=1 << 30, offset=0,
        transactional=transactional, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=0 if producer_id >= 0 else -1)
    for i, (key, value) in enumerate(records):
        if builder.append(ts + i, key, value) is None:
            raise ValueError("record does not fit in one batch")
    builder.close()
    return bytes(builder.buffer())


def control_batch(*, producer_id: int, producer_epoch: int = 0, commit: bool,
                  coordinator_epoch: int = 0, timestamp_ms: int | None = None) -> bytes:
    """A transaction marker batch (COMMIT or ABORT) like the transaction coordinator writes.

    kafka-python only builds data batches, so this builds one record with the control key
    (version 0, type 0 = ABORT / 1 = COMMIT) and EndTxnMarker value, then sets the control
    attribute bit and base sequence -1 and recomputes the CRC-32C.
    """
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    data = bytearray(record_batch([(key, value)], timestamp_ms=timestamp_ms,
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  transactional=True))
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x20
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">i", data, 53, -1)  # base sequence
    struct.pack_into(">I", data, 17, calc_crc32c(memoryview(data)[21:]))
    return bytes(data)


def consumer_assignment(partitions: dict[str, Sequence[int]], user_data: bytes = b"") -> bytes:
    """ConsumerProtocolAssignment v0 bytes, as a classic member's SyncGroup assignment."""
    tps = [ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=list(ps))
           for t, ps in partitions.items()]
    return bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=tps,
                                            user_data=user_data).encode())


def consumer_subscription(topics: Sequence[str], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0 bytes, as a classic member's JoinGroup metadata."""
    return bytes(ConsumerProtocolSubscription(version=0, topics=list(topics),
                                              user_data=user_data).encode())


def java_partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % n`` (kept local: test support stands alone)."""
    h = 0
    raw = group_id.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --------------------------------------------------------------------------------------
# Security: SASL sessions and ACLs
# --------------------------------------------------------------------------------------

_SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
_SCRAM_ITERATIONS = 4096
_AUTH_FAILED_MESSAGE = ("Authentication failed during authentication due to invalid "
                        "credentials with SASL mechanism {}")


@dataclass
class Acl:
    """What one principal may do; ``"*"`` in a set means every resource of that kind."""

    describe_topics: set[str] = field(default_factory=set)
    read_topics: set[str] = field(default_factory=set)
    describe_groups: set[str] = field(default_factory=set)

    @staticmethod
    def _has(names: set[str], name: str) -> bool:
        return "*" in names or name in names


@dataclass
class _Session:
    """One connection's SASL state (Kafka authenticates connections, not requests)."""

    mechanism: str | None = None
    principal: str | None = None
    scram: dict[str, Any] = field(default_factory=dict)
    close_after_response: bool = False


_SESSION: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "fake_kafka_session", default=None)


def _scram_keys(password: str, salt: bytes, mechanism: str) -> tuple[bytes, bytes]:
    """(stored key, server key) as a broker keeps them for a SCRAM credential."""
    h = _SCRAM_HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), salt, _SCRAM_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return h(client_key).digest(), server_key


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ApiSpec:
    request: type
    response: type
    min_version: int
    max_version: int
    handler: str


_API_SPECS: dict[int, _ApiSpec] = {
    ApiKey.ApiVersions: _ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 4, "_api_versions"),
    ApiKey.Metadata: _ApiSpec(MetadataRequest, MetadataResponse, 0, 12, "_metadata"),
    ApiKey.FindCoordinator: _ApiSpec(FindCoordinatorRequest, FindCoordinatorResponse, 0, 6,
                                     "_find_coordinator"),
    ApiKey.ListGroups: _ApiSpec(ListGroupsRequest, ListGroupsResponse, 0, 5, "_list_groups"),
    ApiKey.DescribeGroups: _ApiSpec(DescribeGroupsRequest, DescribeGroupsResponse, 0, 6,
                                    "_describe_groups"),
    ApiKey.ConsumerGroupDescribe: _ApiSpec(ConsumerGroupDescribeRequest,
                                           ConsumerGroupDescribeResponse, 0, 1,
                                           "_consumer_group_describe"),
    ApiKey.ShareGroupDescribe: _ApiSpec(ShareGroupDescribeRequest, ShareGroupDescribeResponse,
                                        1, 1, "_share_group_describe"),
    ApiKey.StreamsGroupDescribe: _ApiSpec(StreamsGroupDescribeRequest,
                                          StreamsGroupDescribeResponse, 0, 0,
                                          "_streams_group_describe"),
    ApiKey.OffsetFetch: _ApiSpec(OffsetFetchRequest, OffsetFetchResponse, 1, 8, "_offset_fetch"),
    ApiKey.ListOffsets: _ApiSpec(ListOffsetsRequest, ListOffsetsResponse, 1, 9, "_list_offsets"),
    ApiKey.Fetch: _ApiSpec(FetchRequest, FetchResponse, 4, 12, "_fetch"),
    ApiKey.SaslHandshake: _ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1,
                                   "_sasl_handshake"),
    ApiKey.SaslAuthenticate: _ApiSpec(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2,
                                      "_sasl_authenticate"),
}
_PRE_AUTH_APIS = frozenset({int(ApiKey.ApiVersions), int(ApiKey.SaslHandshake),
                            int(ApiKey.SaslAuthenticate)})

_GROUP_APIS_DEFAULT = frozenset({int(ApiKey.OffsetFetch)})


def _api_key(api: int | str | ApiKey) -> int:
    if isinstance(api, str):
        return int(ApiKey[api])
    return int(api)


@dataclass
class _Broker:
    node_id: int
    port: int = 0
    server: asyncio.base_events.Server | None = None
    up: bool = False


class FakeKafkaCluster:
    """N fake brokers (ids ``first_broker_id``..) on N loopback ports, serving one data model.

    Use as a context manager (``with FakeKafkaCluster() as kafka: ...``) or via the
    ``fake_kafka_cluster`` fixture below. Mutate the model with the helper methods (they take
    the state lock); the server thread reads it under the same lock.
    """

    def __init__(self, num_brokers: int = 3, *, first_broker_id: int = 1,
                 offsets_topic_partitions: int = 5, max_versions: dict[Any, int] | None = None,
                 max_lifetime_s: float = 120.0, fetch_max_wait_cap_ms: int = 500,
                 cluster_id: str = "fake-cluster") -> None:
        if num_brokers < 1:
            raise ValueError("need at least one broker")
        self.broker_ids = [first_broker_id + i for i in range(num_brokers)]
        self.cluster_id = cluster_id
        self.max_lifetime_s = max_lifetime_s
        self.fetch_max_wait_cap_ms = fetch_max_wait_cap_ms
        self._brokers = {bid: _Broker(bid) for bid in self.broker_ids}
        self._lock = threading.RLock()
        self.groups: dict[str, FakeGroup] = {}
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.pending_txn_offsets: set[tuple[str, str, int]] = set()
        self.topics: dict[str, list[FakePartition]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.group_faults: dict[str, list[GroupFault]] = collections.defaultdict(list)
        self.stale_coordinator_answers: dict[str, list[int]] = collections.defaultdict(list)
        self._max_versions: dict[tuple[int | None, int], int] = {}
        for api, version in (max_versions or {}).items():
            self.set_max_version(api, version)
        self.requests: list[RequestRecord] = []
        self.counts: collections.Counter[tuple[int, int, int]] = collections.Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._stopped = threading.Event()
        # security: None = no SASL listener / no authorizer (everything allowed)
        self.sasl_users: dict[str, dict[str, tuple[bytes, bytes, bytes]]] | None = None
        self.plain_users: dict[str, str] = {}
        self.sasl_mechanisms: tuple[str, ...] = ()
        self.acls: dict[str, Acl] | None = None
        self.tls_context: ssl.SSLContext | None = None  # set before start(): SSL listeners
        self.add_topic(OFFSETS_TOPIC, offsets_topic_partitions)

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> FakeKafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FakeKafkaCluster:
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fake-kafka", daemon=True)
        self._thread.start()
        for broker in self._brokers.values():
            self._run(self._start_broker(broker))
        loop.call_soon_threadsafe(loop.call_later, self.max_lifetime_s, self._expire)
        log.info("fake kafka up: %s", self.bootstrap_servers)
        return self

    def stop(self) -> None:
        """Close every listener and connection, stop the loop thread. Idempotent, and safe
        after the cluster expired by itself (``max_lifetime_s``)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive() and not self._stopped.is_set():
            self._stopped.set()
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        if thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        if not thread.is_alive() and not loop.is_closed():
            loop.close()
            log.info("fake kafka stopped")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopped.is_set()

    def _expire(self) -> None:
        log.warning("fake kafka reached max_lifetime_s=%s; shutting down", self.max_lifetime_s)
        for broker in self._brokers.values():  # stop listening before anyone sees "stopped"
            broker.up = False
            if broker.server is not None:
                broker.server.close()
        self._stopped.set()
        task = asyncio.ensure_future(self._shutdown())
        task.add_done_callback(lambda _t: asyncio.get_running_loop().stop())

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start_broker(self, broker: _Broker) -> None:
        server = await asyncio.start_server(
            lambda r, w: self._serve(broker, r, w), host=LOOPBACK, port=broker.port or 0,
            ssl=self.tls_context)
        broker.server = server
        broker.port = server.sockets[0].getsockname()[1]
        broker.up = True

    async def _stop_broker(self, broker: _Broker) -> None:
        broker.up = False
        if broker.server is not None:
            broker.server.close()
            with contextlib.suppress(Exception):
                await broker.server.wait_closed()
            broker.server = None
        for task in list(self._conn_tasks):
            if getattr(task, "broker_id", None) == broker.node_id:
                task.cancel()

    async def _shutdown(self) -> None:
        for broker in self._brokers.values():
            broker.up = False
            if broker.server is not None:
                broker.server.close()
        for task in list(self._conn_tasks):
            task.cancel()
        if self._conn_tasks:
            await asyncio.wait(list(self._conn_tasks), timeout=2)

    def stop_broker(self, broker_id: int) -> None:
        """Make one broker unreachable (listener closed, connections dropped); port kept."""
        self._run(self._stop_broker(self._brokers[broker_id]))

    def start_broker(self, broker_id: int) -> None:
        """Bring a stopped broker back on the same port."""
        self._run(self._start_broker(self._brokers[broker_id]))

    # ---------------------------------------------------------------- addresses
    def port(self, broker_id: int) -> int:
        return self._brokers[broker_id].port

    def address(self, broker_id: int) -> str:
        return f"{LOOPBACK}:{self._brokers[broker_id].port}"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.address(b) for b in self.broker_ids)

    # ---------------------------------------------------------------- model helpers
    def add_topic(self, name: str, partitions: int, *, log_end_offsets: int | Sequence[int] = 0,
                  log_start_offsets: int | Sequence[int] = 0) -> list[FakePartition]:
        """Create a topic; leaders spread round-robin over the brokers (partition p on
        broker_ids[p % N], the rule that also places group coordinators)."""
        ends = [log_end_offsets] * partitions if isinstance(log_end_offsets, int) else list(log_end_offsets)
        starts = ([log_start_offsets] * partitions if isinstance(log_start_offsets, int)
                  else list(log_start_offsets))
        if len(ends) != partitions or len(starts) != partitions:
            raise ValueError("one log end / start offset per partition")
        with self._lock:
            parts = [FakePartition(name, p, self.broker_ids[p % len(self.broker_ids)], ends[p],
                                   starts[p]) for p in range(partitions)]
            self.topics[name] = parts
            self.topic_ids[name] = uuid.uuid5(uuid.NAMESPACE_URL, f"fake-kafka/{name}")
            return parts

    def partition(self, topic: str, partition: int) -> FakePartition:
        return self.topics[topic][partition]

    def append_records(self, topic: str, partition: int, raw: bytes) -> tuple[int, int]:
        """Append batches (e.g. from :func:`record_batch`); offsets assigned at the log end."""
        with self._lock:
            return self.partition(topic, partition).append(raw)

    def set_log(self, topic: str, partition: int, raw: bytes, *,
                log_start_offset: int | None = None) -> None:
        """Serve ``raw`` (whole record batches with their own offsets) as the partition log."""
        with self._lock:
            self.partition(topic, partition).set_log(raw, log_start_offset=log_start_offset)

    def load_segments(self, topic: str, partition: int, paths: Sequence[Path | str]) -> None:
        """Serve real ``.log`` segment files (given in offset order) as the partition log."""
        self.set_log(topic, partition, b"".join(Path(p).read_bytes() for p in paths))

    def set_watermarks(self, topic: str, partition: int, *, high_watermark: int | None = None,
                       last_stable_offset: int | None = None,
                       log_end_offset: int | None = None,
                       log_start_offset: int | None = None) -> None:
        with self._lock:
            p = self.partition(topic, partition)
            p.set_offsets(log_end_offset=log_end_offset, log_start_offset=log_start_offset)
            if high_watermark is not None:
                p.high_watermark_override = high_watermark
            if last_stable_offset is not None:
                p.last_stable_offset_override = last_stable_offset

    def add_group(self, group: FakeGroup) -> FakeGroup:
        with self._lock:
            self.groups[group.group_id] = group
            self.offsets.setdefault(group.group_id, {})
            return group

    def commit(self, group_id: str, topic: str, partition: int, offset: int, *,
               leader_epoch: int = -1, metadata: str = "") -> None:
        """Store a committed offset; an unknown group appears like an assign()-only group
        (classic, Empty, protocol type "")."""
        with self._lock:
            if group_id not in self.groups:
                self.groups[group_id] = FakeGroup(group_id, protocol_type="")
            self.offsets.setdefault(group_id, {})[(topic, partition)] = CommittedOffset(
                offset, leader_epoch, metadata)

    def add_pending_transactional_offset(self, group_id: str, topic: str, partition: int) -> None:
        """A TxnOffsetCommit not yet committed: require_stable fetches get UNSTABLE_OFFSET_COMMIT."""
        with self._lock:
            self.pending_txn_offsets.add((group_id, topic, partition))

    def coordinator_of(self, group_id: str) -> int:
        with self._lock:
            group = self.groups.get(group_id)
            if group is not None and group.coordinator is not None:
                return group.coordinator
            parts = self.topics[OFFSETS_TOPIC]
            return parts[java_partition_for(group_id, len(parts))].leader

    # ---------------------------------------------------------------- security
    def enable_sasl(self, users: dict[str, str], *,
                    mechanisms: Sequence[str] = ("SCRAM-SHA-256", "SCRAM-SHA-512")) -> None:
        """Every listener becomes SASL_PLAINTEXT with these users (name -> password).
        SCRAM credentials are stored as a broker stores them (salt, stored key, server key)."""
        with self._lock:
            self.sasl_mechanisms = tuple(mechanisms)
            self.plain_users = dict(users)
            self.sasl_users = {}
            for user, password in users.items():
                creds = {}
                for mechanism in _SCRAM_HASHES:
                    salt = os.urandom(16)
                    creds[mechanism] = (salt, *_scram_keys(password, salt, mechanism))
                self.sasl_users[user] = creds

    def use_tls(self, certfile: str | Path) -> FakeKafkaCluster:
        """Serve TLS (SSL / SASL_SSL listeners) with this PEM certificate + key; call before
        :meth:`start`."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(certfile))
        self.tls_context = context
        return self

    def grant(self, principal: str, *, describe_topics: Iterable[str] = (),
              read_topics: Iterable[str] = (), describe_groups: Iterable[str] = ()) -> Acl:
        """Turn the authorizer on (if not yet) and allow ``principal`` these operations.
        A principal never granted anything may do nothing (``User:nobody``)."""
        with self._lock:
            if self.acls is None:
                self.acls = {}
            acl = self.acls.setdefault(principal, Acl())
            acl.describe_topics.update(describe_topics)
            acl.read_topics.update(read_topics)
            acl.describe_groups.update(describe_groups)
            return acl

    def _allowed(self, operation: str, name: str) -> bool:
        """``operation`` is describe_topics / read_topics / describe_groups."""
        if self.acls is None:
            return True
        session = _SESSION.get()
        principal = session.principal if session is not None else None
        acl = self.acls.get(principal or "ANONYMOUS")
        return acl is not None and Acl._has(getattr(acl, operation), name)

    # ---------------------------------------------------------------- faults
    def inject_group_error(self, group_id: str, error_code: int, *, count: int | None = None,
                           apis: Iterable[int | str | ApiKey] = (ApiKey.OffsetFetch,)) -> None:
        """Answer ``error_code`` for this group on ``apis``: ``count`` times, or forever."""
        with self._lock:
            self.group_faults[group_id].append(
                GroupFault(error_code, count, frozenset(_api_key(a) for a in apis)))

    def load_in_progress(self, group_id: str, count: int = 1, *,
                         apis: Iterable[int | str | ApiKey] = (ApiKey.OffsetFetch,)) -> None:
        self.inject_group_error(group_id, COORDINATOR_LOAD_IN_PROGRESS, count=count, apis=apis)

    def coordinator_not_available(self, group_id: str, count: int = 1, *,
                                  apis: Iterable[int | str | ApiKey] = (ApiKey.OffsetFetch,)) -> None:
        self.inject_group_error(group_id, COORDINATOR_NOT_AVAILABLE, count=count, apis=apis)

    def move_coordinator(self, group_id: str, broker_id: int, *, stale_answers: int = 0) -> None:
        """Move the group to ``broker_id``. With ``stale_answers`` > 0, FindCoordinator keeps
        naming the old coordinator that many times (the move happened after the lookup), so
        the client meets NOT_COORDINATOR there and must look up again."""
        with self._lock:
            old = self.coordinator_of(group_id)
            group = self.groups.setdefault(group_id, FakeGroup(group_id, protocol_type=""))
            group.coordinator = broker_id
            self.stale_coordinator_answers[group_id].extend([old] * stale_answers)

    def set_max_version(self, api: int | str | ApiKey, version: int, *,
                        broker_id: int | None = None) -> None:
        """Advertise at most ``version`` for ``api`` (all brokers or one): an older broker."""
        with self._lock:
            self._max_versions[(broker_id, _api_key(api))] = version

    def max_version(self, api: int | str | ApiKey, broker_id: int | None = None) -> int:
        key = _api_key(api)
        spec = _API_SPECS[key]
        v = min(spec.max_version, spec.response.max_version)
        for scope in (None, broker_id):
            if (scope, key) in self._max_versions:
                v = min(v, self._max_versions[(scope, key)])
        return v

    # ---------------------------------------------------------------- counters
    def count(self, api: int | str | ApiKey, *, broker_id: int | None = None,
              version: int | None = None) -> int:
        key = _api_key(api)
        with self._lock:
            return sum(n for (b, k, v), n in self.counts.items()
                       if k == key and (broker_id is None or b == broker_id)
                       and (version is None or v == version))

    def requests_for(self, api: int | str | ApiKey) -> list[RequestRecord]:
        key = _api_key(api)
        with self._lock:
            return [r for r in self.requests if r.api_key == key]

    def reset_counters(self) -> None:
        with self._lock:
            self.requests.clear()
            self.counts.clear()

    # ---------------------------------------------------------------- wire
    async def _serve(self, broker: _Broker, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.broker_id = broker.node_id  # type: ignore[attr-defined]
        self._conn_tasks.add(task)
        session = _Session()
        _SESSION.set(session)  # this connection's task has its own context
        try:
            while broker.up:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                if not 0 < size <= 100 << 20:
                    break
                frame = await reader.readexactly(size)
                response = await self._dispatch(broker, frame)
                if response is None:
                    break
                writer.write(response)
                await writer.drain()
                if session.close_after_response:
                    # Kafka delays closing after a failed authentication
                    # (connection.failed.authentication.delay.ms, 100 ms by default, KIP-306); a
                    # close racing the response would make the client see EOF, not the error
                    await asyncio.sleep(0.1)
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("fake broker %s failed on a request; closing connection", broker.node_id)
        finally:
            self._conn_tasks.discard(task)
            writer.close()

    async def _dispatch(self, broker: _Broker, frame: bytes) -> bytes | None:
        api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame)
        spec = _API_SPECS.get(api_key)
        if spec is None:
            log.warning("broker %s: unsupported api key %s; closing", broker.node_id, api_key)
            return None
        max_v = self.max_version(api_key, broker.node_id)
        if api_key == ApiKey.ApiVersions and api_version > max_v:
            # Kafka answers an unknown ApiVersions version with v0 + UNSUPPORTED_VERSION
            response = self._api_versions_body(broker, 0, UNSUPPORTED_VERSION)
            response.with_header(correlation_id=correlation_id)
            return bytes(response.encode(header=True, framed=True))
        if not spec.min_version <= api_version <= max_v:
            log.warning("broker %s: %s v%s not supported; closing", broker.node_id,
                        ApiKey(api_key).name, api_version)
            return None
        session = _SESSION.get()
        if self.sasl_users is not None and api_key not in _PRE_AUTH_APIS and (
                session is None or session.principal is None):
            log.warning("broker %s: %s before SASL authentication; closing", broker.node_id,
                        ApiKey(api_key).name)
            return None
        request = spec.request.decode(frame, version=api_version, header=True)
        header = request.header
        with self._lock:
            self.counts[(broker.node_id, api_key, api_version)] += 1
            self.requests.append(RequestRecord(
                broker.node_id, api_key, ApiKey(api_key).name, api_version, correlation_id,
                header.client_id, tuple(_group_ids_of(api_key, request))))
        handler = getattr(self, spec.handler)
        if asyncio.iscoroutinefunction(handler):
            response = await handler(broker, request, api_version)
        else:
            with self._lock:
                response = handler(broker, request, api_version)
        response.with_header(correlation_id=correlation_id)
        return bytes(response.encode(header=True, framed=True))

    # ---------------------------------------------------------------- routing/faults
    def _group_error(self, broker: _Broker, group_id: str, api_key: int) -> int:
        if not self._allowed("describe_groups", group_id):
            return GROUP_AUTHORIZATION_FAILED
        if self.coordinator_of(group_id) != broker.node_id:
            return NOT_COORDINATOR
        return self._consume_fault(group_id, api_key)

    def _consume_fault(self, group_id: str, api_key: int) -> int:
        for fault in self.group_faults.get(group_id, ()):
            if api_key in fault.apis and (fault.remaining is None or fault.remaining > 0):
                if fault.remaining is not None:
                    fault.remaining -= 1
                return fault.error_code
        return NONE

    # ---------------------------------------------------------------- handlers
    def _api_versions_body(self, broker: _Broker, version: int, error: int = NONE) -> Any:
        # an API lowered below its minimum (set_max_version(api, -1)) is not offered at all
        keys = [ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=spec.min_version,
                                               max_version=self.max_version(k, broker.node_id))
                for k, spec in sorted(_API_SPECS.items())
                if self.max_version(k, broker.node_id) >= spec.min_version]
        return ApiVersionsResponse(version=version, error_code=error, api_keys=keys,
                                   throttle_time_ms=0)

    def _api_versions(self, broker: _Broker, request: Any, version: int) -> Any:
        return self._api_versions_body(broker, version)

    def _sasl_handshake(self, broker: _Broker, request: Any, version: int) -> Any:
        session = _SESSION.get()
        assert session is not None
        enabled = list(self.sasl_mechanisms)
        if self.sasl_users is None or session.mechanism is not None:
            session.close_after_response = True
            return SaslHandshakeResponse(version=version, error_code=ILLEGAL_SASL_STATE,
                                         mechanisms=enabled)
        if request.mechanism not in enabled:
            session.close_after_response = True
            return SaslHandshakeResponse(version=version, error_code=UNSUPPORTED_SASL_MECHANISM,
                                         mechanisms=enabled)
        session.mechanism = request.mechanism
        return SaslHandshakeResponse(version=version, error_code=NONE, mechanisms=enabled)

    def _sasl_authenticate(self, broker: _Broker, request: Any, version: int) -> Any:
        session = _SESSION.get()
        assert session is not None

        def answer(data: bytes = b"", error: int = NONE, message: str | None = None) -> Any:
            if error:
                session.close_after_response = True
            return SaslAuthenticateResponse(version=version, error_code=error,
                                            error_message=message, auth_bytes=data,
                                            session_lifetime_ms=0)

        mechanism = session.mechanism
        failed = _AUTH_FAILED_MESSAGE.format(mechanism)
        if mechanism is None:
            return answer(error=ILLEGAL_SASL_STATE, message="SaslAuthenticate before handshake")
        token = bytes(request.auth_bytes)
        if mechanism == "PLAIN":
            _authzid, user, password = [*token.decode("utf-8").split("\x00"), "", "", ""][:3]
            if user in self.plain_users and hmac.compare_digest(self.plain_users[user], password):
                session.principal = user
                return answer()
            return answer(error=SASL_AUTHENTICATION_FAILED,
                          message="Authentication failed: Invalid username or password")
        scram = session.scram
        if not scram:  # client-first: "n,,n=user,r=nonce"
            text = token.decode("utf-8")
            bare = text.split(",", 2)[2]
            attrs = dict(kv.split("=", 1) for kv in bare.split(","))
            user = attrs.get("n", "")
            creds = (self.sasl_users or {}).get(user, {}).get(mechanism)
            if creds is None:
                return answer(error=SASL_AUTHENTICATION_FAILED, message=failed)
            salt, stored_key, server_key = creds
            nonce = attrs["r"] + base64.b64encode(os.urandom(12)).decode()
            server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={_SCRAM_ITERATIONS}"
            scram.update(user=user, bare=bare, server_first=server_first, nonce=nonce,
                         stored_key=stored_key, server_key=server_key)
            return answer(server_first.encode())
        # client-final: "c=biws,r=nonce,p=proof"
        text = token.decode("utf-8")
        without_proof, _, proof_b64 = text.rpartition(",p=")
        attrs = dict(kv.split("=", 1) for kv in without_proof.split(","))
        h = _SCRAM_HASHES[mechanism]
        auth_message = f"{scram['bare']},{scram['server_first']},{without_proof}".encode()
        signature = hmac.new(scram["stored_key"], auth_message, h).digest()
        proof = base64.b64decode(proof_b64)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        if attrs.get("r") != scram["nonce"] or len(proof) != len(signature) or \
                not hmac.compare_digest(h(client_key).digest(), scram["stored_key"]):
            return answer(error=SASL_AUTHENTICATION_FAILED, message=failed)
        session.principal = scram["user"]
        server_signature = hmac.new(scram["server_key"], auth_message, h).digest()
        return answer(f"v={base64.b64encode(server_signature).decode()}".encode())

    def _metadata(self, broker: _Broker, request: Any, version: int) -> Any:
        R = MetadataResponse
        brokers = [R.MetadataResponseBroker(node_id=b, host=LOOPBACK, port=self._brokers[b].port,
                                            rack=None) for b in self.broker_ids]
        names: list[str] | None
        if request.topics is None or (version == 0 and not request.topics):
            names = [t for t in sorted(self.topics) if self._allowed("describe_topics", t)]
        else:
            names = [t.name for t in request.topics]
        topics = []
        for name in names:
            if not self._allowed("describe_topics", name):
                topics.append(R.MetadataResponseTopic(
                    error_code=TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=uuid.UUID(int=0),
                    is_internal=False, partitions=[], authorized_operations=None))
                continue
            parts = self.topics.get(name)
            if parts is None:
                topics.append(R.MetadataResponseTopic(
                    error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=uuid.UUID(int=0),
                    is_internal=False, partitions=[], authorized_operations=None))
                continue
            topics.append(R.MetadataResponseTopic(
                error_code=NONE, name=name, topic_id=self.topic_ids[name],
                is_internal=name == OFFSETS_TOPIC,
                partitions=[R.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=NONE, partition_index=p.index, leader_id=p.leader,
                    leader_epoch=p.leader_epoch, replica_nodes=[p.leader], isr_nodes=[p.leader],
                    offline_replicas=[]) for p in parts],
                authorized_operations=None))
        return R(version=version, throttle_time_ms=0, brokers=brokers, cluster_id=self.cluster_id,
                 controller_id=self.broker_ids[0], topics=topics,
                 authorized_operations=None, error_code=NONE)

    def _answer_coordinator(self, key: str, key_type: int) -> tuple[int, int]:
        """(error, node id) for one FindCoordinator key."""
        if key_type == 0:
            if not self._allowed("describe_groups", key):
                return GROUP_AUTHORIZATION_FAILED, -1
            error = self._consume_fault(key, ApiKey.FindCoordinator)
            if error:
                return error, -1
            stale = self.stale_coordinator_answers.get(key)
            if stale:
                return NONE, stale.pop(0)
            return NONE, self.coordinator_of(key)
        n = len(self.broker_ids)
        return NONE, self.broker_ids[java_partition_for(key, 50) % n]

    def _find_coordinator(self, broker: _Broker, request: Any, version: int) -> Any:
        R = FindCoordinatorResponse
        key_type = request.key_type if version >= 1 else 0
        if version < 4:
            error, node = self._answer_coordinator(request.key, key_type)
            return R(version=version, throttle_time_ms=0, error_code=error, error_message=None,
                     node_id=node, host=LOOPBACK if node >= 0 else "",
                     port=self._brokers[node].port if node >= 0 else -1)
        coordinators = []
        for key in request.coordinator_keys:
            error, node = self._answer_coordinator(key, key_type)
            coordinators.append(R.Coordinator(
                key=key, node_id=node, host=LOOPBACK if node >= 0 else "",
                port=self._brokers[node].port if node >= 0 else -1, error_code=error,
                error_message=None))
        return R(version=version, throttle_time_ms=0, coordinators=coordinators)

    def _list_groups(self, broker: _Broker, request: Any, version: int) -> Any:
        R = ListGroupsResponse
        states = {s.lower() for s in (request.states_filter or [])} if version >= 4 else set()
        types = {t.lower() for t in (request.types_filter or [])} if version >= 5 else set()
        listed = []
        for gid in sorted(self.groups):
            group = self.groups[gid]
            if self.coordinator_of(gid) != broker.node_id or group.state == "Dead":
                continue
            if not self._allowed("describe_groups", gid):
                continue  # Kafka lists only the groups the principal may describe
            if (states and group.state.lower() not in states) or (
                    types and group.group_type.lower() not in types):
                continue
            listed.append(R.ListedGroup(group_id=gid, protocol_type=group.protocol_type,
                                        group_state=group.state, group_type=group.group_type))
        return R(version=version, throttle_time_ms=0, error_code=NONE, groups=listed)

    def _describe_groups(self, broker: _Broker, request: Any, version: int) -> Any:
        R = DescribeGroupsResponse
        D = R.DescribedGroup
        out = []
        for gid in request.groups:
            error = self._group_error(broker, gid, ApiKey.DescribeGroups)
            group = self.groups.get(gid)
            if error:
                out.append(D(error_code=error, error_message=None, group_id=gid, group_state="",
                             protocol_type="", protocol_data="", members=[],
                             authorized_operations=None))
                continue
            if group is None or group.group_type != "classic":
                # KIP-1043: v6 says GROUP_ID_NOT_FOUND; older versions answer Dead, no error
                reason = "not found" if group is None else "is not a classic group"
                out.append(D(error_code=GROUP_ID_NOT_FOUND if version >= 6 else NONE,
                             error_message=f"Group {gid} {reason}." if version >= 6 else None,
                             group_id=gid, group_state="Dead", protocol_type="",
                             protocol_data="", members=[],
                             authorized_operations=None))
                continue
            stable = group.state == "Stable"
            members = [] if group.state == "Dead" else [
                D.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id,
                    client_id=m.client_id, client_host=m.client_host,
                    member_metadata=m.metadata if stable else b"",
                    member_assignment=m.assignment if stable else b"")
                for m in group.members]
            out.append(D(error_code=NONE, error_message=None, group_id=gid,
                         group_state=group.state, protocol_type=group.protocol_type,
                         protocol_data=group.protocol if stable else "", members=members,
                         authorized_operations=None))
        return R(version=version, throttle_time_ms=0, groups=out)

    def _tps(self, cls: Any, partitions: dict[str, list[int]]) -> list[Any]:
        return [cls(topic_id=self.topic_ids.get(t, uuid.UUID(int=0)), topic_name=t,
                    partitions=list(ps)) for t, ps in sorted(partitions.items())]

    def _consumer_group_describe(self, broker: _Broker, request: Any, version: int) -> Any:
        R = ConsumerGroupDescribeResponse
        D = R.DescribedGroup
        M = D.Member
        A = M.fields["assignment"].data_class
        TP = A.TopicPartitions
        out = []
        for gid in request.group_ids:
            error, message, group = self._described_or_error(
                broker, gid, ApiKey.ConsumerGroupDescribe, "consumer")
            if group is None:
                out.append(D(error_code=error, error_message=message, group_id=gid,
                             group_state="", group_epoch=-1, assignment_epoch=-1,
                             assignor_name="", members=[],
                             authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS))
                continue
            members = [M(member_id=m.member_id, instance_id=m.group_instance_id,
                         rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
                         client_host=m.client_host,
                         subscribed_topic_names=list(m.subscribed_topic_names),
                         subscribed_topic_regex=m.subscribed_topic_regex,
                         assignment=A(topic_partitions=self._tps(TP, m.assigned_partitions)),
                         target_assignment=A(topic_partitions=self._tps(
                             TP, m.assigned_partitions if m.target_partitions is None
                             else m.target_partitions)),
                         member_type=m.member_type)
                       for m in group.members]
            out.append(D(error_code=NONE, error_message=None, group_id=gid,
                         group_state=group.state, group_epoch=group.group_epoch,
                         assignment_epoch=group.assignment_epoch,
                         assignor_name=group.assignor_name, members=members,
                         authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS))
        return R(version=version, throttle_time_ms=0, groups=out)

    def _described_or_error(self, broker: _Broker, gid: str, api_key: int, group_type: str
                            ) -> tuple[int, str | None, FakeGroup | None]:
        """(error, message, group) for one group of a Share/StreamsGroupDescribe: routing and
        ACL faults first, then GROUP_ID_NOT_FOUND for a missing group or one of another type
        (as Kafka's GroupCoordinatorService answers)."""
        error = self._group_error(broker, gid, api_key)
        group = self.groups.get(gid)
        if error:
            return error, None, None
        if group is None or group.group_type != group_type:
            return GROUP_ID_NOT_FOUND, (f"Group {gid} " + (
                "not found." if group is None else f"is not a {group_type} group.")), None
        return NONE, None, group

    def _share_group_describe(self, broker: _Broker, request: Any, version: int) -> Any:
        R = ShareGroupDescribeResponse
        D = R.DescribedGroup
        M = D.Member
        A = M.fields["assignment"].data_class
        TP = A.TopicPartitions
        out = []
        for gid in request.group_ids:
            error, message, group = self._described_or_error(
                broker, gid, ApiKey.ShareGroupDescribe, "share")
            if group is None:
                out.append(D(error_code=error, error_message=message, group_id=gid,
                             group_state="", group_epoch=-1, assignment_epoch=-1,
                             assignor_name="", members=[],
                             authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS))
                continue
            members = [M(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                         client_id=m.client_id, client_host=m.client_host,
                         subscribed_topic_names=list(m.subscribed_topic_names),
                         assignment=A(topic_partitions=self._tps(TP, m.assigned_partitions)))
                       for m in group.members]
            out.append(D(error_code=NONE, error_message=None, group_id=gid,
                         group_state=group.state, group_epoch=group.group_epoch,
                         assignment_epoch=group.assignment_epoch,
                         assignor_name=group.assignor_name, members=members,
                         authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS))
        return R(version=version, throttle_time_ms=0, groups=out)

    def _streams_group_describe(self, broker: _Broker, request: Any, version: int) -> Any:
        R = StreamsGroupDescribeResponse
        D = R.DescribedGroup
        S = D.Subtopology
        M = D.Member
        A = M.fields["assignment"].data_class
        T = A.TaskIds

        def tasks(by_subtopology: dict[str, list[int]]) -> list[Any]:
            return [T(subtopology=s, partitions=list(ps))
                    for s, ps in sorted(by_subtopology.items())]

        out = []
        for gid in request.group_ids:
            error, message, group = self._described_or_error(
                broker, gid, ApiKey.StreamsGroupDescribe, "streams")
            if group is None:
                out.append(D(error_code=error, error_message=message, group_id=gid,
                             group_state="", group_epoch=-1, assignment_epoch=-1, topology=None,
                             members=[], authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS))
                continue
            topology = [S(subtopology_id=s, source_topics=list(ts), source_topic_regex=[],
                          state_changelog_topics=[], repartition_sink_topics=[],
                          repartition_source_topics=[])
                        for s, ts in sorted(group.subtopologies.items())]
            members = [M(member_id=m.member_id, member_epoch=m.member_epoch,
                         instance_id=m.group_instance_id, rack_id=m.rack_id,
                         client_id=m.client_id, client_host=m.client_host,
                         topology_id=str(group.topology_epoch), process_id=m.process_id,
                         client_tags=[], task_offsets=[], task_end_offsets=[],
                         assignment=A(active_tasks=tasks(m.active_tasks),
                                      standby_tasks=tasks(m.standby_tasks), warmup_tasks=[]),
                         target_assignment=A(active_tasks=tasks(m.active_tasks),
                                             standby_tasks=tasks(m.standby_tasks),
                                             warmup_tasks=[]))
                       for m in group.members]
            out.append(D(error_code=NONE, error_message=None, group_id=gid,
                         group_state=group.state, group_epoch=group.group_epoch,
                         assignment_epoch=group.assignment_epoch, topology=topology,
                         members=members, authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS))
        return R(version=version, throttle_time_ms=0, groups=out)

    def _group_offsets(self, broker: _Broker, group_id: str,
                       topics: list[tuple[str, list[int]]] | None, require_stable: bool
                       ) -> tuple[int, list[tuple[str, list[tuple[int, int, int, str, int]]]]]:
        """One group of an OffsetFetch: (group error, [(topic, [(p, off, epoch, meta, err)])])."""
        error = self._group_error(broker, group_id, ApiKey.OffsetFetch)
        if error:
            return error, []
        stored = self.offsets.get(group_id, {})
        by_topic: dict[str, list[tuple[int, int, int, str, int]]] = collections.defaultdict(list)

        def one(topic: str, p: int, committed: CommittedOffset | None) -> None:
            if require_stable and (group_id, topic, p) in self.pending_txn_offsets:
                by_topic[topic].append((p, -1, -1, "", UNSTABLE_OFFSET_COMMIT))
            elif committed is None:
                by_topic[topic].append((p, -1, -1, "", NONE))
            else:
                by_topic[topic].append((p, committed.offset, committed.leader_epoch,
                                        committed.metadata, NONE))

        if topics is None:  # KIP-88: every partition the group has offsets for
            for (topic, p), committed in sorted(stored.items()):
                if self._allowed("describe_topics", topic):  # others silently left out
                    one(topic, p, committed)
        else:
            for topic, partitions in topics:
                for p in partitions:
                    if not self._allowed("describe_topics", topic):
                        by_topic[topic].append((p, -1, -1, "", TOPIC_AUTHORIZATION_FAILED))
                        continue
                    one(topic, p, stored.get((topic, p)))
        return NONE, list(by_topic.items())

    def _offset_fetch(self, broker: _Broker, request: Any, version: int) -> Any:
        R = OffsetFetchResponse
        require_stable = bool(request.require_stable) if version >= 7 else False
        if version >= 8:
            G = R.OffsetFetchResponseGroup
            T = G.OffsetFetchResponseTopics
            P = T.OffsetFetchResponsePartitions
            groups = []
            for g in request.groups:
                topics = None if g.topics is None else [
                    (t.name, list(t.partition_indexes)) for t in g.topics]
                error, result = self._group_offsets(broker, g.group_id, topics, require_stable)
                groups.append(G(group_id=g.group_id, error_code=error, topics=[
                    T(name=t, partitions=[P(partition_index=p, committed_offset=o,
                                            committed_leader_epoch=e, metadata=m, error_code=pe)
                                          for p, o, e, m, pe in parts])
                    for t, parts in result]))
            return R(version=version, throttle_time_ms=0, groups=groups)
        T = R.OffsetFetchResponseTopic
        P = T.OffsetFetchResponsePartition
        topics = None if request.topics is None else [
            (t.name, list(t.partition_indexes)) for t in request.topics]
        error, result = self._group_offsets(broker, request.group_id, topics, require_stable)
        if error and version < 2:  # v0/v1: no top-level error; copied into each partition
            result = [(t, [(p, -1, -1, "", error) for p in ps]) for t, ps in topics or []]
        return R(version=version, throttle_time_ms=0, error_code=error, topics=[
            T(name=t, partitions=[P(partition_index=p, committed_offset=o,
                                    committed_leader_epoch=e, metadata=m, error_code=pe)
                                  for p, o, e, m, pe in parts])
            for t, parts in result])

    def _partition_for_request(self, broker: _Broker, topic: str, p: int
                               ) -> tuple[int, FakePartition | None]:
        parts = self.topics.get(topic)
        if parts is None or not 0 <= p < len(parts):
            return UNKNOWN_TOPIC_OR_PARTITION, None
        part = parts[p]
        if part.leader != broker.node_id:
            return NOT_LEADER_OR_FOLLOWER, None
        return NONE, part

    def _list_offsets(self, broker: _Broker, request: Any, version: int) -> Any:
        R = ListOffsetsResponse
        T = R.ListOffsetsTopicResponse
        P = T.ListOffsetsPartitionResponse
        committed_only = version >= 2 and request.isolation_level == 1
        topics = []
        for t in request.topics:
            parts = []
            for rp in t.partitions:
                error, part = self._partition_for_request(broker, t.name, rp.partition_index)
                if not self._allowed("describe_topics", t.name):
                    error, part = TOPIC_AUTHORIZATION_FAILED, None
                offset, found_ts = -1, -1
                if part is not None:
                    if rp.timestamp == _LATEST:
                        offset = part.last_stable_offset if committed_only else part.high_watermark
                    elif rp.timestamp == _EARLIEST:
                        offset = part.log_start_offset
                    elif rp.timestamp >= 0:  # KIP-79: first offset with timestamp >= the given
                        offset, found_ts = part.offset_for_timestamp(rp.timestamp)
                parts.append(P(partition_index=rp.partition_index, error_code=error,
                               old_style_offsets=[], timestamp=found_ts, offset=offset,
                               leader_epoch=part.leader_epoch if part is not None else -1))
            topics.append(T(name=t.name, partitions=parts))
        return R(version=version, throttle_time_ms=0, topics=topics)

    def _fetch_once(self, broker: _Broker, request: Any, version: int) -> tuple[Any, int]:
        R = FetchResponse
        T = R.FetchableTopicResponse
        P = T.PartitionData
        read_committed = request.isolation_level == 1
        budget = request.max_bytes if version >= 3 else 1 << 30
        total = 0
        topics = []
        for t in request.topics:
            parts = []
            for fp in t.partitions:
                error, part = self._partition_for_request(broker, t.topic, fp.partition)
                if not self._allowed("read_topics", t.topic):
                    error, part = TOPIC_AUTHORIZATION_FAILED, None
                if part is None:
                    parts.append(P(partition_index=fp.partition, error_code=error,
                                   high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                   aborted_transactions=None, preferred_read_replica=-1,
                                   records=b""))
                    continue
                hw, lso = part.high_watermark, part.last_stable_offset
                upper = lso if read_committed else hw
                records = b""
                aborted = None
                if fp.fetch_offset < part.log_start_offset or fp.fetch_offset > hw:
                    error = OFFSET_OUT_OF_RANGE
                else:
                    records = part.read(fp.fetch_offset, upper,
                                        min(fp.partition_max_bytes, max(budget - total, 0)),
                                        at_least_one=total == 0)
                    total += len(records)
                    if read_committed:
                        aborted = [P.AbortedTransaction(producer_id=pid, first_offset=first)
                                   for pid, first in part.aborted_transactions(fp.fetch_offset,
                                                                               upper)]
                parts.append(P(partition_index=fp.partition, error_code=error,
                               high_watermark=hw, last_stable_offset=lso,
                               log_start_offset=part.log_start_offset,
                               aborted_transactions=aborted, preferred_read_replica=-1,
                               records=records))
            topics.append(T(topic=t.topic, partitions=parts))
        return R(version=version, throttle_time_ms=0, error_code=NONE, session_id=0,
                 responses=topics), total

    async def _fetch(self, broker: _Broker, request: Any, version: int) -> Any:
        """Full fetches only (session id 0); waits up to max_wait_ms when there is no data."""
        wait_s = min(request.max_wait_ms, self.fetch_max_wait_cap_ms) / 1000
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                response, size = self._fetch_once(broker, request, version)
            if size >= max(request.min_bytes, 1) or time.monotonic() >= deadline or not broker.up:
                return response
            await asyncio.sleep(min(0.02, max(deadline - time.monotonic(), 0)))


def _group_ids_of(api_key: int, request: Any) -> list[str]:
    if api_key == ApiKey.OffsetFetch:
        if getattr(request, "groups", None):
            return [g.group_id for g in request.groups]
        return [request.group_id] if getattr(request, "group_id", None) else []
    if api_key == ApiKey.DescribeGroups:
        return list(request.groups)
    if api_key in (ApiKey.ConsumerGroupDescribe, ApiKey.ShareGroupDescribe,
                   ApiKey.StreamsGroupDescribe):
        return list(request.group_ids)
    if api_key == ApiKey.FindCoordinator:
        keys = getattr(request, "coordinator_keys", None)
        return list(keys) if keys else [request.key] if getattr(request, "key", None) else []
    return []


@pytest.fixture
def fake_kafka_cluster() -> Iterator[FakeKafkaCluster]:
    """Three fake brokers on loopback, stopped when the test ends."""
    with FakeKafkaCluster() as cluster:
        yield cluster
