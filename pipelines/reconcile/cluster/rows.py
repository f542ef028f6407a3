"""The snapshot's rows and tables: what a capture of the cluster's answers holds.

Why: the live capture (:mod:`~pipelines.reconcile.cluster.live`) and the recorded one
(:mod:`~pipelines.reconcile.cluster.recorded`) produce the same :class:`ClusterSnapshot`,
stored by :mod:`pipelines.reconcile.snapshot` with the Arrow schemas :data:`SCHEMAS`. The
conversions both paths apply to a broker's values (group type, topic id form, classic
assignment bytes) live here with the rows they fill.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.reconcile.cluster.errors import NONE

log = logging.getLogger(__name__)

GROUP_TYPES = ("classic", "consumer", "share", "streams")
#: The recent window of the catch-up estimate: the group's commit rate (from the lake's
#: history) and the producers' rate (ListOffsets by timestamp) over the same span.
RATE_WINDOW_S = 900


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


def new_snapshot_id(captured_at: datetime, salt: str | None = None) -> str:
    """Time-ordered id; a recorded capture salts it with its folder so reruns agree."""
    suffix = (hashlib.sha1(salt.encode()).hexdigest()[:8] if salt is not None
              else uuid.uuid4().hex[:8])
    return f"{captured_at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}-{suffix}"


def decode_assignment(blob: bytes | None, group_id: str, member_id: str
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


def group_type(value: str | None) -> str:
    """ListGroups' group type, lower-cased; ``unknown`` when absent or new."""
    if not value:
        return "unknown"
    value = value.lower()
    return value if value in GROUP_TYPES else "unknown"
