"""Live-cluster snapshot: what the brokers say about groups and committed offsets right now.

Why: the lake's coordinator-state tables are rebuilt from ``__consumer_offsets``; to
reconcile them we need the brokers' own answers (spec section 3) taken at a known point.
The snapshot therefore reads the ``__consumer_offsets`` high watermarks *first*: a topic
reader that has consumed up to those watermarks saw everything the answers can reflect,
and anything newer on the broker is classified as "broker ahead of snapshot" (spec 3.3).

Pure Python on kafka-python 3.x (its protocol classes encode/decode, its connection manager
does the I/O); no Spark. Per-group errors are isolated: one group's failure is recorded in
its rows, never raised. Only an unreachable cluster raises, as :class:`ClusterUnreachable`.

Public API: :func:`capture_snapshot`, :func:`snapshot_from_recorded`, :class:`ClusterSnapshot`
(+ row dataclasses), :class:`ClusterUnreachable`, :func:`error_name`.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import logging
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pyarrow as pa
from kafka.admin import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import ListOffsetsRequest, OffsetFetchRequest
from kafka.protocol.data_container import SlotsBuilder
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.schemas import StructField

from pipelines.kafka_options import KafkaSecurityError, normalize, probe
from pipelines.reconcile.record_times import (
    CAUGHT_UP,
    RATE_WINDOW_S,
    RecordTime,
    RecordTimes,
    fetch_record_times,
    ms_to_datetime,
    newest_offset,
    plan,
    produce_rate,
    time_lag,
)

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
GROUP_TYPES = ("classic", "consumer", "share", "streams")

# Kafka error codes this module reasons about (org.apache.kafka.common.protocol.Errors)
UNKNOWN_SERVER_ERROR = -1
NONE = 0
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNSUPPORTED_VERSION = 35
UNKNOWN_LEADER_EPOCH = 74
UNSTABLE_OFFSET_COMMIT = 88

# Retried after looking the coordinator up again / retried as is (spec 3.2).
_REDISCOVER = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, NETWORK_EXCEPTION,
                         REQUEST_TIMED_OUT})
_RETRY_SAME = frozenset({COORDINATOR_LOAD_IN_PROGRESS})
_LEADER_RETRY = frozenset({LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH,
                           NETWORK_EXCEPTION, REQUEST_TIMED_OUT})

_API_OFFSET_FETCH = 9
_API_FIND_COORDINATOR = 10
_API_CONSUMER_GROUP_DESCRIBE = 69
_API_SHARE_GROUP_DESCRIBE = 77  # KIP-932
_API_STREAMS_GROUP_DESCRIBE = 89  # KIP-1071
_MAX_GROUPS_PER_REQUEST = 10_000

_LATEST = -1
_EARLIEST = -2
_READ_UNCOMMITTED = 0
_READ_COMMITTED = 1


class ClusterUnreachable(RuntimeError):
    """No usable connection: the bootstrap servers did not answer in time, refused the
    client (e.g. SASL authentication), or the cluster's metadata vanished mid-capture.

    The message is one line, meant to be printed as is by a CLI.
    """


def error_name(code: int | None) -> str | None:
    """Kafka's canonical name for an error code (``None`` for no error)."""
    if code is None or code == NONE:
        return None
    if code == UNKNOWN_SERVER_ERROR:
        return "UNKNOWN_SERVER_ERROR"
    cls = Errors.for_code(code)
    if getattr(cls, "errno", None) == code and getattr(cls, "message", None):
        return str(cls.message)
    return f"UNKNOWN_ERROR_CODE_{code}"


def _code_of(exc: BaseException) -> int:
    """Map a client-side exception to the Kafka error code that describes it best."""
    if isinstance(exc, Errors.IncompatibleBrokerVersion):
        return UNSUPPORTED_VERSION
    if isinstance(exc, (Errors.KafkaTimeoutError, Errors.RequestTimedOutError)):
        return REQUEST_TIMED_OUT
    if isinstance(exc, (Errors.KafkaConnectionError, Errors.NodeNotReadyError,
                        Errors.UnknownBrokerIdError, Errors.Cancelled)):
        return NETWORK_EXCEPTION
    errno = getattr(exc, "errno", None)
    return errno if isinstance(errno, int) else UNKNOWN_SERVER_ERROR


# --------------------------------------------------------------------------------------
# KIP-848 ConsumerGroupDescribe (api key 69): kafka-python 3.0.12 has no class for it, so it
# is defined with kafka-python's own message machinery from Kafka's JSON schema.
# --------------------------------------------------------------------------------------


class _InlineSchemaMessage(type(ApiMessage)):  # type: ignore[misc]
    """ApiMessage metaclass taking the JSON schema inline (``_schema``) instead of loading
    ``<ClassName>.json`` from kafka-python's package resources."""

    def __new__(mcls, name, bases, attrs, **kw):
        schema = attrs.pop("_schema", None)
        if schema is None:
            return super().__new__(mcls, name, bases, attrs, **kw)
        attrs["_json"] = copy.deepcopy(schema)
        attrs["_struct"] = StructField(attrs["_json"])
        attrs["__license__"] = None
        return SlotsBuilder.__new__(mcls, name, bases, attrs)


def _topic_partitions_field() -> dict[str, Any]:
    return {"name": "TopicPartitions", "type": "[]TopicPartitions", "versions": "0+", "fields": [
        {"name": "TopicId", "type": "uuid", "versions": "0+"},
        {"name": "TopicName", "type": "string", "versions": "0+"},
        {"name": "Partitions", "type": "[]int32", "versions": "0+"},
    ]}


# Apache Kafka clients/src/main/resources/common/message/ConsumerGroupDescribe{Request,
# Response}.json: v0 (KIP-848), v1 adds Member.MemberType (KIP-1099); common structs inlined.
_CGD_REQUEST_SCHEMA: dict[str, Any] = {
    "apiKey": 69, "type": "request", "name": "ConsumerGroupDescribeRequest",
    "validVersions": "0-1", "flexibleVersions": "0+", "fields": [
        {"name": "GroupIds", "type": "[]string", "versions": "0+"},
        {"name": "IncludeAuthorizedOperations", "type": "bool", "versions": "0+"},
    ]}
_CGD_RESPONSE_SCHEMA: dict[str, Any] = {
    "apiKey": 69, "type": "response", "name": "ConsumerGroupDescribeResponse",
    "validVersions": "0-1", "flexibleVersions": "0+", "fields": [
        {"name": "ThrottleTimeMs", "type": "int32", "versions": "0+"},
        {"name": "Groups", "type": "[]DescribedGroup", "versions": "0+", "fields": [
            {"name": "ErrorCode", "type": "int16", "versions": "0+"},
            {"name": "ErrorMessage", "type": "string", "versions": "0+",
             "nullableVersions": "0+", "default": "null"},
            {"name": "GroupId", "type": "string", "versions": "0+"},
            {"name": "GroupState", "type": "string", "versions": "0+"},
            {"name": "GroupEpoch", "type": "int32", "versions": "0+"},
            {"name": "AssignmentEpoch", "type": "int32", "versions": "0+"},
            {"name": "AssignorName", "type": "string", "versions": "0+"},
            {"name": "Members", "type": "[]Member", "versions": "0+", "fields": [
                {"name": "MemberId", "type": "string", "versions": "0+"},
                {"name": "InstanceId", "type": "string", "versions": "0+",
                 "nullableVersions": "0+", "default": "null"},
                {"name": "RackId", "type": "string", "versions": "0+",
                 "nullableVersions": "0+", "default": "null"},
                {"name": "MemberEpoch", "type": "int32", "versions": "0+"},
                {"name": "ClientId", "type": "string", "versions": "0+"},
                {"name": "ClientHost", "type": "string", "versions": "0+"},
                {"name": "SubscribedTopicNames", "type": "[]string", "versions": "0+"},
                {"name": "SubscribedTopicRegex", "type": "string", "versions": "0+",
                 "nullableVersions": "0+", "default": "null"},
                {"name": "Assignment", "type": "Assignment", "versions": "0+",
                 "fields": [_topic_partitions_field()]},
                {"name": "TargetAssignment", "type": "Assignment", "versions": "0+",
                 "fields": [_topic_partitions_field()]},
                {"name": "MemberType", "type": "int8", "versions": "1+", "default": "-1",
                 "ignorable": True},
            ]},
            {"name": "AuthorizedOperations", "type": "int32", "versions": "0+",
             "default": "-2147483648"},
        ]},
    ]}

try:  # a later kafka-python may ship these; prefer its classes then
    from kafka.protocol.admin import (  # type: ignore[attr-defined]
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
    )
except ImportError:

    class ConsumerGroupDescribeRequest(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[no-redef]
        _schema = _CGD_REQUEST_SCHEMA

    class ConsumerGroupDescribeResponse(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[no-redef]
        _schema = _CGD_RESPONSE_SCHEMA


def _share_assignment_field() -> dict[str, Any]:
    return {"name": "Assignment", "type": "Assignment", "versions": "1+",
            "fields": [{"name": "TopicPartitions", "type": "[]TopicPartitions", "versions": "1+",
                        "fields": [
                            {"name": "TopicId", "type": "uuid", "versions": "1+"},
                            {"name": "TopicName", "type": "string", "versions": "1+"},
                            {"name": "Partitions", "type": "[]int32", "versions": "1+"}]}]}


# Apache Kafka clients/src/main/resources/common/message/ShareGroupDescribe{Request,Response}.json
# (api key 77, KIP-932): v1 is the first stable version (4.1+; v0 was 4.0's early access and
# was removed), so only v1 is spoken; common structs inlined.
_SGD_REQUEST_SCHEMA: dict[str, Any] = {
    "apiKey": 77, "type": "request", "name": "ShareGroupDescribeRequest",
    "validVersions": "1", "flexibleVersions": "1+", "fields": [
        {"name": "GroupIds", "type": "[]string", "versions": "1+"},
        {"name": "IncludeAuthorizedOperations", "type": "bool", "versions": "1+"},
    ]}
_SGD_RESPONSE_SCHEMA: dict[str, Any] = {
    "apiKey": 77, "type": "response", "name": "ShareGroupDescribeResponse",
    "validVersions": "1", "flexibleVersions": "1+", "fields": [
        {"name": "ThrottleTimeMs", "type": "int32", "versions": "1+"},
        {"name": "Groups", "type": "[]DescribedGroup", "versions": "1+", "fields": [
            {"name": "ErrorCode", "type": "int16", "versions": "1+"},
            {"name": "ErrorMessage", "type": "string", "versions": "1+",
             "nullableVersions": "1+", "default": "null"},
            {"name": "GroupId", "type": "string", "versions": "1+"},
            {"name": "GroupState", "type": "string", "versions": "1+"},
            {"name": "GroupEpoch", "type": "int32", "versions": "1+"},
            {"name": "AssignmentEpoch", "type": "int32", "versions": "1+"},
            {"name": "AssignorName", "type": "string", "versions": "1+"},
            {"name": "Members", "type": "[]Member", "versions": "1+", "fields": [
                {"name": "MemberId", "type": "string", "versions": "1+"},
                {"name": "RackId", "type": "string", "versions": "1+",
                 "nullableVersions": "1+", "default": "null"},
                {"name": "MemberEpoch", "type": "int32", "versions": "1+"},
                {"name": "ClientId", "type": "string", "versions": "1+"},
                {"name": "ClientHost", "type": "string", "versions": "1+"},
                {"name": "SubscribedTopicNames", "type": "[]string", "versions": "1+"},
                _share_assignment_field(),
            ]},
            {"name": "AuthorizedOperations", "type": "int32", "versions": "1+",
             "default": "-2147483648"},
        ]},
    ]}


def _key_values_field(name: str) -> dict[str, Any]:
    return {"name": name, "type": "[]KeyValue", "versions": "0+", "fields": [
        {"name": "Key", "type": "string", "versions": "0+"},
        {"name": "Value", "type": "string", "versions": "0+"}]}


def _topic_infos_field(name: str) -> dict[str, Any]:
    return {"name": name, "type": "[]TopicInfo", "versions": "0+", "fields": [
        {"name": "Name", "type": "string", "versions": "0+"},
        {"name": "Partitions", "type": "int32", "versions": "0+"},
        {"name": "ReplicationFactor", "type": "int16", "versions": "0+"},
        _key_values_field("TopicConfigs")]}


def _task_offsets_field(name: str) -> dict[str, Any]:
    return {"name": name, "type": "[]TaskOffset", "versions": "0+", "fields": [
        {"name": "Subtopology", "type": "string", "versions": "0+"},
        {"name": "Partition", "type": "int32", "versions": "0+"},
        {"name": "Offset", "type": "int64", "versions": "0+"}]}


def _streams_assignment_field(name: str) -> dict[str, Any]:
    def tasks(kind: str) -> dict[str, Any]:
        return {"name": kind, "type": "[]TaskIds", "versions": "0+", "fields": [
            {"name": "Subtopology", "type": "string", "versions": "0+"},
            {"name": "Partitions", "type": "[]int32", "versions": "0+"}]}
    return {"name": name, "type": "Assignment", "versions": "0+",
            "fields": [tasks("ActiveTasks"), tasks("StandbyTasks"), tasks("WarmupTasks")]}


# Apache Kafka clients/src/main/resources/common/message/StreamsGroupDescribe{Request,
# Response}.json (api key 89, KIP-1071): v0 (v1 adds IncludeTopologyDescription, KIP-1331,
# not spoken here); common structs inlined.
_STGD_REQUEST_SCHEMA: dict[str, Any] = {
    "apiKey": 89, "type": "request", "name": "StreamsGroupDescribeRequest",
    "validVersions": "0", "flexibleVersions": "0+", "fields": [
        {"name": "GroupIds", "type": "[]string", "versions": "0+"},
        {"name": "IncludeAuthorizedOperations", "type": "bool", "versions": "0+"},
    ]}
_STGD_RESPONSE_SCHEMA: dict[str, Any] = {
    "apiKey": 89, "type": "response", "name": "StreamsGroupDescribeResponse",
    "validVersions": "0", "flexibleVersions": "0+", "fields": [
        {"name": "ThrottleTimeMs", "type": "int32", "versions": "0+"},
        {"name": "Groups", "type": "[]DescribedGroup", "versions": "0+", "fields": [
            {"name": "ErrorCode", "type": "int16", "versions": "0+"},
            {"name": "ErrorMessage", "type": "string", "versions": "0+",
             "nullableVersions": "0+", "default": "null"},
            {"name": "GroupId", "type": "string", "versions": "0+"},
            {"name": "GroupState", "type": "string", "versions": "0+"},
            {"name": "GroupEpoch", "type": "int32", "versions": "0+"},
            {"name": "AssignmentEpoch", "type": "int32", "versions": "0+"},
            {"name": "Topology", "type": "[]Subtopology", "versions": "0+",
             "nullableVersions": "0+", "default": "null", "fields": [
                 {"name": "SubtopologyId", "type": "string", "versions": "0+"},
                 {"name": "SourceTopics", "type": "[]string", "versions": "0+"},
                 {"name": "SourceTopicRegex", "type": "[]string", "versions": "0+"},
                 _topic_infos_field("StateChangelogTopics"),
                 {"name": "RepartitionSinkTopics", "type": "[]string", "versions": "0+"},
                 _topic_infos_field("RepartitionSourceTopics"),
             ]},
            {"name": "Members", "type": "[]Member", "versions": "0+", "fields": [
                {"name": "MemberId", "type": "string", "versions": "0+"},
                {"name": "MemberEpoch", "type": "int32", "versions": "0+"},
                {"name": "InstanceId", "type": "string", "versions": "0+",
                 "nullableVersions": "0+", "default": "null"},
                {"name": "RackId", "type": "string", "versions": "0+",
                 "nullableVersions": "0+", "default": "null"},
                {"name": "ClientId", "type": "string", "versions": "0+"},
                {"name": "ClientHost", "type": "string", "versions": "0+"},
                {"name": "TopologyId", "type": "string", "versions": "0+"},
                {"name": "ProcessId", "type": "string", "versions": "0+"},
                _key_values_field("ClientTags"),
                _task_offsets_field("TaskOffsets"),
                _task_offsets_field("TaskEndOffsets"),
                _streams_assignment_field("Assignment"),
                _streams_assignment_field("TargetAssignment"),
            ]},
            {"name": "AuthorizedOperations", "type": "int32", "versions": "0+",
             "default": "-2147483648"},
        ]},
    ]}


class ShareGroupDescribeRequest(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = _SGD_REQUEST_SCHEMA


class ShareGroupDescribeResponse(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = _SGD_RESPONSE_SCHEMA


class StreamsGroupDescribeRequest(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = _STGD_REQUEST_SCHEMA


class StreamsGroupDescribeResponse(ApiMessage, metaclass=_InlineSchemaMessage):  # type: ignore[misc]
    _schema = _STGD_RESPONSE_SCHEMA


# --------------------------------------------------------------------------------------
# Snapshot rows and tables
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupRow:
    group_id: str
    group_type: str  # classic | consumer | share | streams | unknown
    group_state: str | None
    protocol_type: str | None
    protocol: str | None  # classic: DescribeGroups protocol (assignor); consumer: assignor name
    coordinator_id: int | None
    error_code: int = NONE
    error_name: str | None = None
    # consumer/share/streams groups: the epochs the broker described (None: not described)
    group_epoch: int | None = None
    assignment_epoch: int | None = None


@dataclass(frozen=True)
class MemberRow:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str | None
    client_host: str | None
    assignment: list[dict[str, Any]] | None  # [{"topic": str, "partitions": [int]}]; None = unknown


@dataclass(frozen=True)
class OffsetRow:
    """One OffsetFetch partition answer; a group-level error is one row with topic None."""

    group_id: str
    topic: str | None
    partition: int | None
    committed_offset: int | None
    leader_epoch: int | None
    metadata: str | None
    error_code: int = NONE
    error_name: str | None = None


@dataclass(frozen=True)
class LogEndOffsetRow:
    topic: str
    partition: int
    log_end_offset: int | None
    last_stable_offset: int | None
    log_start_offset: int | None = None  # ListOffsets EARLIEST (None: not asked / unknown)


@dataclass(frozen=True)
class LagRow:
    group_id: str
    topic: str
    partition: int
    committed_offset: int | None
    log_end_offset: int | None
    lag: int | None
    committed_past_end: bool | None = None  # legal, never a negative lag (lag is then 0)
    # time lag, read from the log itself (issue 11): the record at the committed offset and
    # the newest record a read_committed consumer can see (last_stable_offset - 1)
    committed_timestamp: datetime | None = None
    newest_offset: int | None = None
    newest_timestamp: datetime | None = None
    time_lag_ms: int | None = None
    time_lag_reason: str | None = None  # why time_lag_ms is null (None when it is known)
    # estimate from the lake's commit history (filled when stored, see snapshot.py)
    commit_rate: float | None = None  # offsets per second over the recent window
    est_catch_up_s: float | None = None
    # producers' offsets per second over the same window (ListOffsets by timestamp)
    produce_rate: float | None = None


@dataclass(frozen=True)
class PointRow:
    """A ``__consumer_offsets`` partition's watermarks, read before anything else."""

    offsets_partition: int
    high_watermark: int | None
    last_stable_offset: int | None


_TS = pa.timestamp("us", tz="UTC")
_ASSIGNMENT = pa.list_(pa.struct([("topic", pa.string()),
                                  ("partitions", pa.list_(pa.int32()))]))
_COMMON = [("snapshot_id", pa.string()), ("captured_at", _TS)]


def _table_schema(columns: list[tuple[str, pa.DataType]]) -> pa.Schema:
    return pa.schema([*_COMMON, *columns])


SCHEMAS: dict[str, pa.Schema] = {
    "snapshot_groups": _table_schema([
        ("group_id", pa.string()), ("group_type", pa.string()), ("group_state", pa.string()),
        ("protocol_type", pa.string()), ("protocol", pa.string()),
        ("coordinator_id", pa.int32()), ("error_code", pa.int16()), ("error_name", pa.string()),
        ("group_epoch", pa.int32()), ("assignment_epoch", pa.int32())]),
    "snapshot_members": _table_schema([
        ("group_id", pa.string()), ("member_id", pa.string()),
        ("group_instance_id", pa.string()), ("client_id", pa.string()),
        ("client_host", pa.string()), ("assignment", _ASSIGNMENT)]),
    "snapshot_offsets": _table_schema([
        ("group_id", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
        ("committed_offset", pa.int64()), ("leader_epoch", pa.int32()),
        ("metadata", pa.string()), ("error_code", pa.int16()), ("error_name", pa.string())]),
    "snapshot_log_end_offsets": _table_schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("log_end_offset", pa.int64()),
        ("last_stable_offset", pa.int64()), ("log_start_offset", pa.int64())]),
    "snapshot_lag": _table_schema([
        ("group_id", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
        ("committed_offset", pa.int64()), ("log_end_offset", pa.int64()), ("lag", pa.int64()),
        ("committed_past_end", pa.bool_()), ("committed_timestamp", _TS),
        ("newest_offset", pa.int64()), ("newest_timestamp", _TS), ("time_lag_ms", pa.int64()),
        ("time_lag_reason", pa.string()), ("commit_rate", pa.float64()),
        ("est_catch_up_s", pa.float64()), ("produce_rate", pa.float64())]),
    "snapshot_points": _table_schema([
        ("offsets_partition", pa.int32()), ("high_watermark", pa.int64()),
        ("last_stable_offset", pa.int64())]),
}


@dataclass
class ClusterSnapshot:
    """Everything one capture saw. ``errors`` lists non-fatal problems (a broker whose
    ListGroups failed, a broker without require_stable, ...) for logs and reports."""

    snapshot_id: str
    captured_at: datetime
    source: str
    require_stable: bool = False
    groups: list[GroupRow] = field(default_factory=list)
    members: list[MemberRow] = field(default_factory=list)
    offsets: list[OffsetRow] = field(default_factory=list)
    log_end_offsets: list[LogEndOffsetRow] = field(default_factory=list)
    lag: list[LagRow] = field(default_factory=list)
    points: list[PointRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # topic id -> name from the cluster at capture time (Metadata v10+, ConsumerGroupDescribe)
    topic_names: dict[str, str] = field(default_factory=dict)
    #: what the principal was refused: ``group:<id>``, ``topic:<name>`` (``topic:__consumer_offsets``
    #: = the offsets topic not visible: no snapshot point)
    not_authorized: list[str] = field(default_factory=list)
    #: share/streams groups listed but not described: their coordinator does not offer
    #: ShareGroupDescribe / StreamsGroupDescribe (epochs and members then not compared;
    #: not an error, so the snapshot is not partial for it)
    not_described: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        """Something was not seen (refused by ACLs, or a recorded error): a reconcile against
        this snapshot cannot be complete."""
        return bool(self.not_authorized or self.errors)

    def to_arrow(self) -> dict[str, pa.Table]:
        """One Arrow table per snapshot table; every row carries snapshot_id and captured_at."""
        common = {"snapshot_id": self.snapshot_id, "captured_at": self.captured_at}
        sources: dict[str, list[Any]] = {
            "snapshot_groups": self.groups, "snapshot_members": self.members,
            "snapshot_offsets": self.offsets, "snapshot_log_end_offsets": self.log_end_offsets,
            "snapshot_lag": self.lag, "snapshot_points": self.points,
        }
        return {name: pa.Table.from_pylist([{**common, **asdict(r)} for r in rows],
                                           schema=SCHEMAS[name])
                for name, rows in sources.items()}


def _new_snapshot_id(captured_at: datetime, salt: str | None = None) -> str:
    suffix = (hashlib.sha1(salt.encode()).hexdigest()[:8] if salt is not None
              else uuid.uuid4().hex[:8])
    return f"{captured_at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}-{suffix}"


# --------------------------------------------------------------------------------------
# Assembly shared by the live and the recorded path
# --------------------------------------------------------------------------------------


def _decode_assignment(blob: bytes | None, group_id: str, member_id: str
                       ) -> list[dict[str, Any]] | None:
    """Classic consumer-protocol assignment -> [{"topic", "partitions"}]; None if absent or
    undecodable (never raises: an odd blob must not abort the capture, spec 1.6)."""
    if not blob:
        return None
    try:
        try:
            from pipelines.decode.consumer_protocol import decode_assignment
        except ImportError:  # the project decoder is optional here; kafka-python's will do
            from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

            decoded = ConsumerProtocolAssignment.decode(bytes(blob))
            parts = [{"topic": tp.topic, "partitions": list(tp.partitions)}
                     for tp in decoded.assigned_partitions]
        else:
            parts = decode_assignment(bytes(blob)).get("assigned_partitions") or []
        return [{"topic": str(p["topic"]), "partitions": [int(x) for x in p["partitions"]]}
                for p in parts]
    except Exception as exc:
        log.warning("group %s member %s: undecodable assignment (%d bytes): %s", group_id,
                    member_id, len(blob), exc)
        return None


def kafka_uuid(value: Any) -> str | None:
    """A topic id as Kafka prints it (base64url, no padding: the decoded records' form);
    None for an absent or zero id (a broker's "unknown")."""
    if value is None:
        return None
    raw = value.bytes if isinstance(value, uuid.UUID) else value
    if isinstance(raw, (bytes, bytearray)):
        if not any(raw):
            return None
        return base64.urlsafe_b64encode(bytes(raw)).decode("ascii").rstrip("=")
    text = str(value)
    return None if not text or text == "AAAAAAAAAAAAAAAAAAAAAA" else text


def _group_type(value: str | None) -> str:
    if not value:
        return "unknown"
    value = value.lower()
    return value if value in GROUP_TYPES else "unknown"


def _lag_rows(offsets: Iterable[OffsetRow], ends: Iterable[LogEndOffsetRow],
              times: RecordTimes | None = None,
              window_starts: Mapping[tuple[str, int], int | None] | None = None) -> list[LagRow]:
    """Offset lag and time lag per (group, topic, partition). ``times`` None (a recorded
    capture): the log was not read, so only a caught-up partition has a time lag (0)."""
    marks = {(e.topic, e.partition): e for e in ends}
    rows = []
    for r in offsets:
        if r.topic is None or r.partition is None:
            continue
        committed = r.committed_offset if r.error_code == NONE and (r.committed_offset or 0) >= 0 else None
        e = marks.get((r.topic, r.partition))
        end = e.log_end_offset if e is not None else None
        known = end is not None and committed is not None
        past_end = committed > end if known else None  # type: ignore[operator]
        lag = max(end - committed, 0) if known else None  # type: ignore[operator]
        newest = times.newest.get((r.topic, r.partition)) if times is not None else None
        at: RecordTime | None = None
        step = plan(committed, end, e.last_stable_offset if e else None,
                    e.log_start_offset if e else None)
        if step == CAUGHT_UP:
            time_lag_ms, reason = 0, None
        elif step is not None:
            time_lag_ms, reason = None, step
        elif times is None:
            time_lag_ms, reason = None, "not_captured"
        else:
            at = times.at.get((r.topic, r.partition, committed))  # type: ignore[arg-type]
            time_lag_ms, reason = time_lag(at, newest)
        rows.append(LagRow(
            r.group_id, r.topic, r.partition, committed, end, lag, past_end,
            committed_timestamp=(ms_to_datetime(at.timestamp_ms)
                                 if at is not None and at.timestamp_ms is not None else None),
            newest_offset=newest.offset if newest is not None else None,
            newest_timestamp=(ms_to_datetime(newest.timestamp_ms) if newest is not None
                              and newest.timestamp_ms is not None else None),
            time_lag_ms=time_lag_ms, time_lag_reason=reason,
            produce_rate=produce_rate(end, (window_starts or {}).get((r.topic, r.partition)))))
    return rows


# --------------------------------------------------------------------------------------
# Live capture
# --------------------------------------------------------------------------------------


@dataclass
class _Listing:
    group_id: str
    protocol_type: str | None
    group_state: str | None
    group_type: str | None
    listed_by: int


@dataclass
class _Raw:
    """Raw answers gathered on the I/O thread; rows are built afterwards, off the loop."""

    captured_at: datetime | None = None
    points: list[PointRow] = field(default_factory=list)
    listings: dict[str, _Listing] = field(default_factory=dict)
    coordinators: dict[str, int] = field(default_factory=dict)
    coordinator_errors: dict[str, int] = field(default_factory=dict)
    described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    consumer_described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    # ShareGroupDescribe / StreamsGroupDescribe answers (UNSUPPORTED_VERSION: not offered)
    share_described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    streams_described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    fetched: dict[str, tuple[int, Any]] = field(default_factory=dict)
    ends: list[LogEndOffsetRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    topic_errors: dict[str, int] = field(default_factory=dict)  # Metadata errors per topic
    topic_names: dict[str, str] = field(default_factory=dict)  # topic id -> name (Metadata)
    # groups the lake knows but ListGroups did not list, asked one by one (OffsetFetch)
    unlisted: dict[str, tuple[int, Any]] = field(default_factory=dict)
    # partitions the lake knows that OffsetFetch(topics=null) left out, asked by name
    refetched: dict[str, tuple[int, Any]] = field(default_factory=dict)
    starts: dict[tuple[str, int], int | None] = field(default_factory=dict)  # log start offsets
    # first offset with a timestamp inside the catch-up window (ListOffsets by timestamp)
    window_starts: dict[tuple[str, int], int | None] = field(default_factory=dict)
    times: RecordTimes | None = None  # records at committed offsets and newest (time lag)


class _Capture:
    """One capture's I/O, run as a coroutine on kafka-python's I/O thread."""

    def __init__(self, admin: KafkaAdminClient, *, require_stable: bool, max_retries: int,
                 retry_backoff_ms: int, max_backoff_ms: int, request_timeout_ms: int,
                 max_in_flight: int,
                 expected: Mapping[str, Iterable[tuple[str, int]]] | None = None) -> None:
        self.admin = admin
        # (group -> partitions) the lake holds: what ListGroups / OffsetFetch(null) may hide
        self.expected = {g: set(tps) for g, tps in (expected or {}).items()}
        self.missing: dict[str, dict[str, list[int]]] = {}
        self.manager = admin._manager  # kafka-python's connection manager (3.x)
        self.require_stable = require_stable
        self.max_retries = max_retries
        self.retry_backoff_ms = retry_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.window = max(1, max_in_flight - 1)
        self.raw = _Raw()

    # ------------------------------------------------------------------ plumbing
    async def _sleep(self, attempt: int) -> None:
        delay_ms = min(self.retry_backoff_ms * (2 ** max(attempt - 1, 0)), self.max_backoff_ms)
        await self.admin._net.sleep(delay_ms / 1000)

    async def _send(self, node_id: int | None, request: Any) -> Any:
        return await self.manager.send(request, node_id=node_id,
                                       request_timeout_ms=self.request_timeout_ms)

    async def _send_many(self, requests: Mapping[int, Any]) -> dict[int, Any]:
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

    async def _send_all(self, node_id: int, requests: Sequence[Any]) -> list[Any]:
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

    async def _max_version(self, node_id: int, api_key: int) -> int:
        """Highest version this node advertises for ``api_key`` (-1: not at all)."""
        conn = self.manager.get_connection(node_id)
        await conn
        versions = conn.broker_version_data.api_versions if conn.broker_version_data else {}
        return versions.get(api_key, (0, -1))[1]

    # ------------------------------------------------------------------ metadata/offsets
    async def _leaders(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """(topic, partition) -> leader id; unknown topics are simply absent."""
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                await self._sleep(attempt)
            try:
                response = await self._send(None, request)
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

    async def _list_offsets(self, tps: Sequence[tuple[str, int]], isolation: int,
                            timestamp: int = _LATEST
                            ) -> dict[tuple[str, int], tuple[int, int | None]]:
        """ListOffsets LATEST per partition -> (error, offset); HW with read_uncommitted,
        LSO with read_committed (``timestamp=_EARLIEST``: the log start offset). One request
        per leader, sent to all leaders at once. Leader moves are retried with fresh
        metadata."""
        result: dict[tuple[str, int], tuple[int, int | None]] = {}
        pending = sorted(set(tps))
        for attempt in range(self.max_retries + 1):
            if not pending:
                break
            if attempt:
                await self._sleep(attempt)
            leaders = await self._leaders(sorted({t for t, _ in pending}))
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
                    min_version=2 if isolation == _READ_COMMITTED else 0)
            answers = await self._send_many(requests)
            for leader, parts in by_leader.items():
                response = answers[leader]
                if isinstance(response, BaseException):
                    exc = response
                    code = _code_of(exc)
                    for tp in parts:
                        result[tp] = (code, None)
                    if code in _LEADER_RETRY:
                        retry.extend(parts)
                    continue
                for t in response.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        result[tp] = (p.error_code, p.offset if p.error_code == NONE else None)
                        if p.error_code in _LEADER_RETRY:
                            retry.append(tp)
            pending = retry
        return result

    async def _end_offsets(self, tps: Sequence[tuple[str, int]]
                           ) -> dict[tuple[str, int], tuple[int | None, int | None]]:
        """(log end / high watermark, last stable offset) per partition."""
        hw = await self._list_offsets(tps, _READ_UNCOMMITTED)
        lso = await self._list_offsets(tps, _READ_COMMITTED)
        out = {}
        for tp in tps:
            hw_err, hw_off = hw.get(tp, (UNKNOWN_SERVER_ERROR, None))
            _, lso_off = lso.get(tp, (UNKNOWN_SERVER_ERROR, None))
            if hw_err:
                self.raw.errors.append(f"ListOffsets {tp[0]}-{tp[1]}: {error_name(hw_err)}")
            out[tp] = (hw_off, lso_off)
        return out

    # ------------------------------------------------------------------ groups
    async def _list_groups(self) -> None:
        """ListGroups on every broker (each lists the groups it coordinates), combined."""
        for broker in sorted(self.manager.cluster.brokers(), key=lambda b: b.node_id):
            node = broker.node_id
            for attempt in range(self.max_retries + 1):
                if attempt:
                    await self._sleep(attempt)
                try:
                    response = await self._send(node, ListGroupsRequest(min_version=0))
                except Exception as exc:
                    code = _code_of(exc)
                else:
                    code = response.error_code
                if code == NONE:
                    break
                if code not in _RETRY_SAME | _REDISCOVER:
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
                self.raw.listings[g.group_id] = _Listing(
                    g.group_id, g.protocol_type,
                    g.group_state if version >= 4 else None,
                    g.group_type if version >= 5 else None, node)

    async def _find_coordinators(self, group_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """FindCoordinator: batched keys (v4+, KIP-699) or one request per key."""
        node = self.manager.least_loaded_node()
        if node is None:
            return {g: (NETWORK_EXCEPTION, -1) for g in group_ids}
        try:
            batched = await self._max_version(node, _API_FIND_COORDINATOR) >= 4
        except Exception as exc:
            return {g: (_code_of(exc), -1) for g in group_ids}
        answers: list[tuple[str, Any]] = []
        if batched:
            try:
                response = await self._send(node, FindCoordinatorRequest(
                    key_type=0, coordinator_keys=list(group_ids), min_version=4))
            except Exception as exc:
                return {g: (_code_of(exc), -1) for g in group_ids}
            answers = [(c.key, c) for c in response.coordinators]
        else:
            requests = [FindCoordinatorRequest(key=g, key_type=0, max_version=3)
                        for g in group_ids]
            answers = list(zip(group_ids, await self._send_all(node, requests), strict=True))
        out: dict[str, tuple[int, int]] = {}
        for key, answer in answers:
            if isinstance(answer, BaseException):
                out[key] = (_code_of(answer), -1)
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
                await self._sleep(attempt)
            unknown = [g for g in pending if g not in self.raw.coordinators]
            if unknown:
                for g, (code, node) in (await self._find_coordinators(unknown)).items():
                    if code == NONE:
                        self.raw.coordinators[g] = node
                        self.raw.coordinator_errors.pop(g, None)
                    else:
                        last_error[g] = code
                        self.raw.coordinator_errors[g] = code
                        if code not in _RETRY_SAME | _REDISCOVER:
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
                        code = _code_of(exc)
                        log.warning("%s on coordinator %s failed: %s", phase, node, exc)
                        answers = {g: (code, None) for g in chunk}
                    for g in chunk:
                        code, payload = answers.get(g, (UNKNOWN_SERVER_ERROR, None))
                        if code in _REDISCOVER:
                            self.raw.coordinators.pop(g, None)
                            last_error[g] = code
                            retry.append(g)
                        elif code in _RETRY_SAME:
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
        response = await self._send(node, DescribeGroupsRequest(
            groups=gids, include_authorized_operations=False))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _describe_consumer(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        if await self._max_version(node, _API_CONSUMER_GROUP_DESCRIBE) < 0:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        response = await self._send(node, ConsumerGroupDescribeRequest(
            group_ids=gids, include_authorized_operations=False))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _describe_share(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        """ShareGroupDescribe v1 (KIP-932) where the coordinator offers it (v0 was 4.0's
        early access, never spoken); otherwise UNSUPPORTED_VERSION: not described."""
        if await self._max_version(node, _API_SHARE_GROUP_DESCRIBE) < 1:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        response = await self._send(node, ShareGroupDescribeRequest(
            group_ids=gids, include_authorized_operations=False, min_version=1, max_version=1))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _describe_streams(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        """StreamsGroupDescribe v0 (KIP-1071) where the coordinator offers it; otherwise
        UNSUPPORTED_VERSION: not described."""
        if await self._max_version(node, _API_STREAMS_GROUP_DESCRIBE) < 0:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        response = await self._send(node, StreamsGroupDescribeRequest(
            group_ids=gids, include_authorized_operations=False, max_version=0))
        return {g.group_id: (g.error_code, g) for g in response.groups}

    async def _offset_fetch(self, node: int, gids: list[str]) -> dict[str, tuple[int, Any]]:
        """All offsets of each group (topics=null, KIP-88): many groups per request on
        OffsetFetch v8+ (KIP-709), otherwise one request per group."""
        max_v = await self._max_version(node, _API_OFFSET_FETCH)
        if self.require_stable and max_v < 7:
            self.raw.errors.append(
                f"broker {node} has OffsetFetch v{max_v} < 7: require_stable not applied")
        if max_v >= 8:
            G = OffsetFetchRequest.OffsetFetchRequestGroup
            response = await self._send(node, OffsetFetchRequest(
                groups=[G(group_id=g, topics=None) for g in gids],
                require_stable=self.require_stable, min_version=8, max_version=8))
            return {g.group_id: (g.error_code, g.topics) for g in response.groups}
        if max_v < 2:
            return {g: (UNSUPPORTED_VERSION, None) for g in gids}
        requests = [OffsetFetchRequest(group_id=g, topics=None, require_stable=self.require_stable,
                                       min_version=2, max_version=7) for g in gids]
        out: dict[str, tuple[int, Any]] = {}
        for g, answer in zip(gids, await self._send_all(node, requests), strict=True):
            if isinstance(answer, BaseException):
                out[g] = (_code_of(answer), None)
            else:
                out[g] = (answer.error_code, answer.topics)
        return out

    async def _offset_fetch_topics(self, node: int, gids: list[str]
                                   ) -> dict[str, tuple[int, Any]]:
        """OffsetFetch naming the partitions (``self.missing``): unlike topics=null, which
        silently leaves out topics the principal may not describe, named topics are answered
        TOPIC_AUTHORIZATION_FAILED."""
        max_v = await self._max_version(node, _API_OFFSET_FETCH)
        if max_v >= 8:
            G = OffsetFetchRequest.OffsetFetchRequestGroup
            T = G.OffsetFetchRequestTopics
            response = await self._send(node, OffsetFetchRequest(
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
        for g, answer in zip(gids, await self._send_all(node, requests), strict=True):
            out[g] = ((_code_of(answer), None) if isinstance(answer, BaseException)
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
    async def run(self) -> _Raw:
        raw = self.raw
        # 1. the snapshot point: __consumer_offsets watermarks before any group answer
        raw.captured_at = datetime.now(timezone.utc)
        leaders = await self._leaders([OFFSETS_TOPIC])
        co_tps = sorted(tp for tp in leaders if tp[0] == OFFSETS_TOPIC)
        if not co_tps:
            raw.errors.append(f"{OFFSETS_TOPIC} not in metadata (absent or not authorized): "
                              "no snapshot point")
        ends = await self._end_offsets(co_tps)
        raw.points = [PointRow(p, *ends[(t, p)]) for t, p in co_tps]
        # 2. every broker's ListGroups
        await self._list_groups()
        listings = raw.listings
        # 3. describe: DescribeGroups for classic (and untyped) groups, ConsumerGroupDescribe
        #    for KIP-848 groups, ShareGroupDescribe / StreamsGroupDescribe for share / streams
        #    groups where their coordinator offers the API
        classic = [g for g, li in sorted(listings.items())
                   if _group_type(li.group_type) in ("classic", "unknown")]
        modern = [g for g, li in sorted(listings.items()) if _group_type(li.group_type) == "consumer"]
        if classic:
            raw.described = await self._group_phase(classic, "DescribeGroups",
                                                    self._describe_classic)
        if modern:
            raw.consumer_described = await self._group_phase(modern, "ConsumerGroupDescribe",
                                                             self._describe_consumer)
        share = [g for g, li in sorted(listings.items()) if _group_type(li.group_type) == "share"]
        streams = [g for g, li in sorted(listings.items())
                   if _group_type(li.group_type) == "streams"]
        if share:
            raw.share_described = await self._group_phase(share, "ShareGroupDescribe",
                                                          self._describe_share)
        if streams:
            raw.streams_described = await self._group_phase(streams, "StreamsGroupDescribe",
                                                            self._describe_streams)
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
            leo = await self._end_offsets(held)
            starts = await self._list_offsets(held, _READ_UNCOMMITTED, _EARLIEST)
            raw.starts = {tp: starts.get(tp, (UNKNOWN_SERVER_ERROR, None))[1] for tp in held}
            raw.ends = [LogEndOffsetRow(t, p, *leo[(t, p)], raw.starts[(t, p)])
                        for t, p in held]
            # the producers' recent pace, for the catch-up estimate (ListOffsets by timestamp)
            since_ms = int(raw.captured_at.timestamp() * 1000) - RATE_WINDOW_S * 1000
            found = await self._list_offsets(held, _READ_UNCOMMITTED, since_ms)
            raw.window_starts = {tp: found[tp][1] if found.get(tp, (-1, None))[0] == NONE
                                 else None for tp in held}
            # 6. the records at the committed offsets and the newest ones: exact time lag
            raw.times = await self._record_times(held)
        return raw

    async def _record_times(self, held: Sequence[tuple[str, int]]) -> RecordTimes:
        """Bounded Fetches (one per broker per round) for the records whose timestamps the
        time lag needs (:mod:`pipelines.reconcile.record_times`)."""
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
            wanted, newest, raw.starts, leaders=self._leaders, send_many=self._send_many,
            max_retries=self.max_retries, code_of=_code_of, leader_retry=_LEADER_RETRY,
            sleep=self._sleep)
        log.debug("time lag: %d records read with %d Fetch requests",
                  len(times.at) + len(times.newest), times.fetch_requests)
        return times


def _assemble(raw: _Raw, *, source: str, require_stable: bool) -> ClusterSnapshot:
    """Rows from the raw answers (runs on the caller's thread, not the I/O loop)."""
    assert raw.captured_at is not None
    groups: list[GroupRow] = []
    members: list[MemberRow] = []
    offsets: list[OffsetRow] = []
    not_described: list[str] = []
    for gid in sorted(raw.listings):
        li = raw.listings[gid]
        gtype = _group_type(li.group_type)
        state, protocol_type, protocol = li.group_state, li.protocol_type, None
        error = NONE
        if gid in raw.described:
            error, described = raw.described[gid]
            if described is not None:
                state = state or described.group_state
                protocol_type = protocol_type if protocol_type is not None else described.protocol_type
                protocol = described.protocol_data
                consumer_protocol = (described.protocol_type or protocol_type) == "consumer"
                for m in described.members:
                    members.append(MemberRow(
                        gid, m.member_id, m.group_instance_id, m.client_id, m.client_host,
                        _decode_assignment(m.member_assignment, gid, m.member_id)
                        if consumer_protocol else None))
        epochs: tuple[int | None, int | None] = (None, None)
        if gid in raw.consumer_described:
            error, described = raw.consumer_described[gid]
            if described is not None:
                epochs = (described.group_epoch, described.assignment_epoch)
                state = state or described.group_state
                protocol = described.assignor_name
                for m in described.members:
                    members.append(MemberRow(
                        gid, m.member_id, m.instance_id, m.client_id, m.client_host,
                        [{"topic": tp.topic_name, "partitions": sorted(tp.partitions)}
                         for tp in m.assignment.topic_partitions]))
                    for tp in m.assignment.topic_partitions:
                        topic_id = kafka_uuid(tp.topic_id)
                        if topic_id and tp.topic_name:
                            raw.topic_names.setdefault(topic_id, tp.topic_name)
        for api, answers in (("ShareGroupDescribe", raw.share_described),
                             ("StreamsGroupDescribe", raw.streams_described)):
            if gid not in answers:
                continue
            code, described = answers[gid]
            if code == UNSUPPORTED_VERSION:  # the coordinator does not offer the API
                not_described.append(f"{gid}: {api} not offered by broker "
                                     f"{raw.coordinators.get(gid)}")
            elif code != NONE:
                error = code
                if code != Errors.GroupAuthorizationFailedError.errno:  # -> not_authorized
                    raw.errors.append(f"{api} {gid}: {error_name(code)}")
            elif described is not None:
                epochs = (described.group_epoch, described.assignment_epoch)
                state = state or described.group_state
                members.extend(_described_members(gid, gtype, described))
        if error == NONE and gid in raw.coordinator_errors:
            error = raw.coordinator_errors[gid]
        groups.append(GroupRow(gid, gtype, state, protocol_type, protocol,
                               raw.coordinators.get(gid), error, error_name(error), *epochs))
        code, topics = raw.fetched.get(gid, (NONE, []))
        if code != NONE:
            offsets.append(OffsetRow(gid, None, None, None, None, None, code, error_name(code)))
            continue
        for t in topics or []:
            for p in t.partitions:
                offsets.append(OffsetRow(
                    gid, t.name, p.partition_index, p.committed_offset,
                    p.committed_leader_epoch, p.metadata, p.error_code, error_name(p.error_code)))
    offsets.extend(_completeness_rows(raw))
    if not_described:
        log.info("%d share/streams group(s) not described (API not offered): %s",
                 len(not_described), "; ".join(not_described))
    captured_at = raw.captured_at
    return ClusterSnapshot(
        snapshot_id=_new_snapshot_id(captured_at), captured_at=captured_at, source=source,
        require_stable=require_stable, groups=groups, members=members, offsets=offsets,
        log_end_offsets=raw.ends, lag=_lag_rows(offsets, raw.ends, raw.times, raw.window_starts),
        points=raw.points,
        errors=list(raw.errors), not_authorized=_refused(raw, groups, offsets),
        topic_names=dict(raw.topic_names), not_described=not_described)


def _described_members(gid: str, gtype: str, described: Any) -> list[MemberRow]:
    """Member rows of a ShareGroupDescribe / StreamsGroupDescribe group, shaped as the
    recorded path shapes ``kafka-share-groups.sh`` / ``kafka-streams-groups.sh`` members:
    share members carry their assigned topic partitions; streams members are assigned tasks
    (subtopology, partition), not topic partitions, so their assignment stays None."""
    rows = []
    for m in described.members:
        if gtype == "share":
            assignment: list[dict[str, Any]] | None = [
                {"topic": tp.topic_name, "partitions": sorted(tp.partitions)}
                for tp in sorted(m.assignment.topic_partitions, key=lambda t: t.topic_name)]
            instance = None
        else:
            assignment, instance = None, m.instance_id
        rows.append(MemberRow(gid, m.member_id, instance, m.client_id, m.client_host,
                              assignment))
    return rows


def _completeness_rows(raw: _Raw) -> list[OffsetRow]:
    """Offset rows of the groups asked by name (not listed) and of the partitions asked by
    name: errors (e.g. GROUP/TOPIC_AUTHORIZATION_FAILED) and any offsets they revealed."""
    rows: list[OffsetRow] = []
    for answers in (raw.unlisted, raw.refetched):
        for gid, (code, topics) in sorted(answers.items()):
            if code != NONE:
                if not any(r.group_id == gid and r.topic is None for r in rows):
                    rows.append(OffsetRow(gid, None, None, None, None, None, code, error_name(code)))
                continue
            for t in topics or []:
                for p in t.partitions:
                    if p.error_code != NONE or (p.committed_offset is not None
                                                  and p.committed_offset >= 0):
                        rows.append(OffsetRow(gid, t.name, p.partition_index, p.committed_offset,
                                              p.committed_leader_epoch, p.metadata, p.error_code,
                                              error_name(p.error_code)))
    return rows


def _refused(raw: _Raw, groups: Sequence[GroupRow], offsets: Sequence[OffsetRow]) -> list[str]:
    """``group:<id>`` / ``topic:<name>`` the principal was refused, sorted."""
    refused: set[str] = set()
    group_denied = Errors.GroupAuthorizationFailedError.errno
    topic_denied = Errors.TopicAuthorizationFailedError.errno
    for name, code in raw.topic_errors.items():
        if code == topic_denied:
            refused.add(f"topic:{name}")
    for g in groups:
        if g.error_code == group_denied:
            refused.add(f"group:{g.group_id}")
    for r in offsets:
        if r.error_code == group_denied:
            refused.add(f"group:{r.group_id}")
        elif r.error_code == topic_denied and r.topic is not None:
            refused.add(f"topic:{r.topic}")
    return sorted(refused)


def capture_snapshot(bootstrap_servers: str | Sequence[str], *, require_stable: bool = False,
                     timeout_s: float = 10.0, request_timeout_ms: int = 30_000,
                     max_retries: int = 5, retry_backoff_ms: int = 100,
                     max_backoff_ms: int = 2_000, client_id: str = "offsetlake-snapshot",
                     expected_offsets: Mapping[str, Iterable[tuple[str, int]]] | None = None,
                     **kafka_config: Any) -> ClusterSnapshot:
    """Capture groups, members, committed offsets, log end offsets and lag from a live cluster.

    Order matters: the ``__consumer_offsets`` high watermarks are read first (the snapshot
    point, with ``captured_at``), then ListGroups on every broker, DescribeGroups /
    ConsumerGroupDescribe, OffsetFetch (topics=null; v8 batches per coordinator), and the
    log end offsets of the partitions the groups hold offsets for.

    ``require_stable`` (OffsetFetch v7+) makes partitions with pending transactional offsets
    answer UNSTABLE_OFFSET_COMMIT, recorded in their offset rows. ``timeout_s`` bounds the
    bootstrap; ``max_retries`` / ``retry_backoff_ms`` (doubling, capped by ``max_backoff_ms``)
    bound the retries of retriable group errors. ``kafka_config`` passes through to
    kafka-python's KafkaAdminClient (``security_protocol``, ``sasl_mechanism``,
    ``sasl_plain_username``, ``sasl_plain_password``, ``ssl_cafile``, ``ssl_certfile``, ...).

    ``expected_offsets`` (group -> (topic, partition) pairs, e.g. what the lake holds) are
    asked by name when the broad answers leave them out, so what ACLs hide is answered
    GROUP/TOPIC_AUTHORIZATION_FAILED and recorded (``not_authorized``, ``partial``) instead of
    silently missing. Kafka options go through :func:`pipelines.kafka_options.normalize`.

    Raises :class:`ClusterUnreachable` when no bootstrap server answers within ``timeout_s``,
    :class:`~pipelines.kafka_options.KafkaAuthenticationError` at once on a definite SASL/TLS
    refusal, :class:`~pipelines.kafka_options.KafkaOptionError` for invalid options.
    """
    servers = (bootstrap_servers if isinstance(bootstrap_servers, str)
               else ",".join(bootstrap_servers))
    created: list[KafkaNetClient] = []
    user_factory = kafka_config.pop("kafka_client", KafkaNetClient)
    # the one strict normaliser (also used by ingest): unknown keys, bad booleans, SASL/SSL
    # settings without a protocol using them are refused (KafkaOptionError)
    kafka_config = normalize(kafka_config, KafkaAdminClient.DEFAULT_CONFIG)
    probe_config = {**kafka_config, "bootstrap_servers": servers}

    def factory(**cfg: Any) -> KafkaNetClient:
        client = user_factory(**cfg)
        created.append(client)
        # a definite TLS/SASL refusal is named now, not retried until bootstrap_timeout_ms
        probe(client, timeout_s, probe_config)
        return client

    started = time.monotonic()
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=servers, client_id=client_id,
            request_timeout_ms=request_timeout_ms, bootstrap_timeout_ms=int(timeout_s * 1000),
            retry_backoff_ms=retry_backoff_ms, kafka_client=factory, **kafka_config)
    except (Errors.KafkaConfigurationError, KafkaSecurityError):
        for client in created:
            _close_quietly(client)
        raise
    except Errors.KafkaError as exc:
        for client in created:  # KafkaAdminClient leaves its I/O thread running on failure
            _close_quietly(client)
        if isinstance(exc, (Errors.KafkaTimeoutError, Errors.KafkaConnectionError,
                            Errors.NodeNotReadyError)):
            message = f"cannot reach bootstrap servers {servers} within {timeout_s:g}s"
        else:  # e.g. SASL authentication or authorization failures during bootstrap
            message = (f"cannot connect to bootstrap servers {servers}: "
                       f"{type(exc).__name__}: {exc}".replace("\n", " "))
        raise ClusterUnreachable(message) from exc
    try:
        capture = _Capture(
            admin, require_stable=require_stable, max_retries=max_retries,
            retry_backoff_ms=retry_backoff_ms, max_backoff_ms=max_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            max_in_flight=admin.config["max_in_flight_requests_per_connection"],
            expected=expected_offsets)
        raw = admin._manager.run(capture.run)
    finally:
        admin.close()
    snapshot = _assemble(raw, source=servers, require_stable=require_stable)
    log.info("snapshot %s of %s: %d groups, %d offset rows, %d errors in %.2fs",
             snapshot.snapshot_id, servers, len(snapshot.groups), len(snapshot.offsets),
             len(snapshot.errors), time.monotonic() - started)
    return snapshot


def _close_quietly(client: KafkaNetClient) -> None:
    try:
        client.close()
    except Exception:
        log.debug("closing a failed client", exc_info=True)
    try:
        client._net.stop()
    except Exception:
        log.debug("stopping a failed client's I/O thread", exc_info=True)


# --------------------------------------------------------------------------------------
# Recorded captures (golden corpus)
# --------------------------------------------------------------------------------------

_LIBRDKAFKA_STATES = {
    "STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead", "UNKNOWN": "Unknown",
    "PREPARING_REBALANCE": "PreparingRebalance", "COMPLETING_REBALANCE": "CompletingRebalance",
    "ASSIGNING": "Assigning", "RECONCILING": "Reconciling",
}


def _read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def _hex_bytes(value: Any) -> bytes | None:
    if isinstance(value, dict) and "hex" in value:
        return bytes.fromhex(value["hex"])
    if isinstance(value, str):
        return bytes.fromhex(value)
    return None


_CLI_STATE_ROW = re.compile(r"^(\S+)\s+\S+\s*\(\d+\)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$")


def _recorded_cli_epochs(live: Path) -> dict[str, tuple[int, int]]:
    """Group epoch and assignment epoch per share/streams group from a recording's
    ``kafka-share-groups.sh`` / ``kafka-streams-groups.sh --describe --state --verbose``."""
    out: dict[str, tuple[int, int]] = {}
    for name in ("cli_share_describe_state.txt", "cli_streams_describe_state.txt"):
        path = live / name
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                m = _CLI_STATE_ROW.match(line)
                if m:
                    out[m[1]] = (int(m[3]), int(m[4]))
    return out


def _recorded_cli_members(live: Path, types: dict[str, str]) -> list[MemberRow]:
    """Share and streams group members from a recording's ``kafka-share-groups.sh`` /
    ``kafka-streams-groups.sh --describe --members --verbose`` output (ShareGroupDescribe /
    StreamsGroupDescribe: DescribeGroups answers these groups with error 69, so the tools'
    answers are the only member view a recording has)."""
    out: list[MemberRow] = []
    share = live / "cli_share_describe_members_verbose.txt"
    if share.exists():
        for line in share.read_text(encoding="utf-8").splitlines():
            f = line.split()
            if len(f) < 6 or types.get(f[0]) != "share":
                continue
            assignment = []
            for part in (f[6].split(";") if len(f) > 6 else ()):
                topic, _, parts = part.rpartition(":")
                if topic:
                    assignment.append({"topic": topic, "partitions": sorted(int(x) for x in parts.split(",") if x)})
            out.append(MemberRow(f[0], f[1], None, f[3], f[2], assignment))
    streams = live / "cli_streams_describe_members_verbose.txt"
    if streams.exists():
        for line in streams.read_text(encoding="utf-8").splitlines():
            f = line.split()
            if len(f) >= 8 and types.get(f[0]) == "streams":
                out.append(MemberRow(f[0], f[3], None, f[7], None, None))  # tasks, not partitions
    return out


def snapshot_from_recorded(live_dir: Path | str, *, require_stable: bool = False
                           ) -> ClusterSnapshot:
    """The same snapshot built from a recorded capture folder (e.g. golden ``live/``).

    Reads ``list_groups.json`` (ListGroups), ``describe_groups.json`` (DescribeGroups, bytes
    as hex), ``consumer_group_describe.json`` (librdkafka's describe_consumer_groups),
    ``offset_fetch.json`` or, with ``require_stable``, ``offset_fetch_require_stable.json``,
    ``log_end_offsets.json``, and ``../capture_log.json`` for the ``__consumer_offsets``
    watermarks read before the capture and its start time. Missing optional files just
    leave their part empty.
    """
    live = Path(live_dir)
    errors: list[str] = []
    listed = _read_json(live / "list_groups.json")
    lg_version = int(listed.get("_version", 5))

    described: dict[str, dict[str, Any]] = {}
    if (live / "describe_groups.json").exists():
        described = {g["group_id"]: g for g in _read_json(live / "describe_groups.json")["groups"]}
    cgd: dict[str, dict[str, Any]] = {}
    if (live / "consumer_group_describe.json").exists():
        cgd = {k: v for k, v in _read_json(live / "consumer_group_describe.json").items()
               if not k.startswith("_")}

    capture_log_path = live.parent / "capture_log.json"
    points: list[PointRow] = []
    if capture_log_path.exists():
        capture_log = _read_json(capture_log_path)
        captured_at = datetime.fromtimestamp(capture_log["started_ms"] / 1000, tz=timezone.utc)
        for part, marks in sorted(capture_log.get("co_end_offsets_before", {}).items(),
                                  key=lambda kv: int(kv[0])):
            points.append(PointRow(int(part), marks.get("high_watermark"),
                                   marks.get("last_stable_offset")))
    else:
        errors.append(f"{capture_log_path} absent: no snapshot point")
        captured_at = datetime.fromtimestamp((live / "list_groups.json").stat().st_mtime,
                                             tz=timezone.utc)

    groups: list[GroupRow] = []
    members: list[MemberRow] = []
    for g in listed["groups"]:
        gid = g["group_id"]
        gtype = _group_type(g.get("group_type") if lg_version >= 5 else None)
        state = g.get("group_state") if lg_version >= 4 else None
        protocol_type = g.get("protocol_type")
        protocol = None
        error = NONE
        modern = cgd.get(gid)
        coordinator = (modern or {}).get("coordinator", {}).get("id")
        if gtype in ("classic", "unknown") and gid in described:
            d = described[gid]
            error = int(d.get("error_code") or 0)
            state = state or d.get("group_state")
            protocol = d.get("protocol_data")
            consumer_protocol = (d.get("protocol_type") or protocol_type) == "consumer"
            for m in d.get("members", []):
                blob = _hex_bytes(m.get("member_assignment"))
                members.append(MemberRow(
                    gid, m["member_id"], m.get("group_instance_id"), m.get("client_id"),
                    m.get("client_host"),
                    _decode_assignment(blob, gid, m["member_id"]) if consumer_protocol else None))
        elif gtype == "consumer" and modern is not None:
            state = state or _LIBRDKAFKA_STATES.get(str(modern.get("state")), modern.get("state"))
            protocol = modern.get("partition_assignor")
            for m in modern.get("members", []):
                by_topic: dict[str, list[int]] = defaultdict(list)
                for topic, partition in m.get("assignment") or []:
                    by_topic[topic].append(int(partition))
                members.append(MemberRow(
                    gid, m["member_id"], m.get("group_instance_id"), m.get("client_id"),
                    m.get("host"),
                    [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]))
        groups.append(GroupRow(gid, gtype, state, protocol_type, protocol, coordinator, error,
                               error_name(error)))

    members.extend(_recorded_cli_members(live, {g.group_id: g.group_type for g in groups}))
    described_epochs = _recorded_cli_epochs(live)
    groups = [replace(g, group_epoch=described_epochs[g.group_id][0],
                      assignment_epoch=described_epochs[g.group_id][1])
              if g.group_id in described_epochs and g.group_type in ("share", "streams") else g
              for g in groups]

    fetch_file = live / ("offset_fetch_require_stable.json" if require_stable
                         else "offset_fetch.json")
    offsets: list[OffsetRow] = []
    fetched = _read_json(fetch_file)
    for grp in fetched["groups"]:
        code = int(grp.get("error_code") or 0)
        if code:
            offsets.append(OffsetRow(grp["group_id"], None, None, None, None, None, code,
                                     error_name(code)))
            continue
        for t in grp.get("topics") or []:
            for p in t["partitions"]:
                pcode = int(p.get("error_code") or 0)
                offsets.append(OffsetRow(
                    grp["group_id"], t["name"], int(p["partition_index"]),
                    p.get("committed_offset"), p.get("committed_leader_epoch", -1),
                    p.get("metadata"), pcode, error_name(pcode)))

    ends: list[LogEndOffsetRow] = []
    held = sorted({(r.topic, r.partition) for r in offsets
                   if r.topic is not None and r.partition is not None})
    if (live / "log_end_offsets.json").exists():
        leo = _read_json(live / "log_end_offsets.json")
        for topic, partition in held:
            marks = leo.get(topic, {}).get(str(partition))
            if marks is None:
                errors.append(f"no recorded log end offset for {topic}-{partition}")
                ends.append(LogEndOffsetRow(topic, partition, None, None))
            else:
                ends.append(LogEndOffsetRow(topic, partition, marks.get("log_end_offset"),
                                            marks.get("last_stable_offset")))
    else:
        errors.append(f"{live / 'log_end_offsets.json'} absent: no lag")

    return ClusterSnapshot(
        snapshot_id=_new_snapshot_id(captured_at, salt=str(live.resolve())),
        captured_at=captured_at, source=str(live), require_stable=require_stable,
        groups=sorted(groups, key=lambda r: r.group_id), members=members, offsets=offsets,
        log_end_offsets=ends, lag=_lag_rows(offsets, ends), points=points, errors=errors)


__all__ = [
    "GROUP_TYPES", "SCHEMAS", "ClusterSnapshot", "ClusterUnreachable",
    "ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse", "GroupRow", "LagRow",
    "LogEndOffsetRow", "MemberRow", "OffsetRow", "PointRow", "ShareGroupDescribeRequest",
    "ShareGroupDescribeResponse", "StreamsGroupDescribeRequest", "StreamsGroupDescribeResponse",
    "capture_snapshot", "error_name",
    "snapshot_from_recorded",
]
