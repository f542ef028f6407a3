"""Decode and encode one ``__consumer_offsets`` record (key bytes + value bytes).

The key is ``int16 record_type`` + a version-0 struct; the value is ``int16 version`` +
that version's struct; a null value is a tombstone (spec 1.1). Decoding never raises:
every outcome is a :class:`DecodedRecord` with a ``decode_status``, so one bad record
can never stop a job, and the raw bytes stay with the caller.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

from pipelines.decode import consumer_protocol, wire
from pipelines.decode.formats import TAGS_ABSENT, RecordFormat, record_formats
from pipelines.decode.wire import WireError

OK = "ok"
TOMBSTONE = "tombstone"
CONTROL = "control"
UNKNOWN_TYPE = "unknown_type"
UNKNOWN_VALUE_VERSION = "unknown_value_version"
LEGACY_LAYOUT = "legacy_layout"
PARSE_ERROR = "parse_error"
STATUSES = (OK, TOMBSTONE, CONTROL, UNKNOWN_TYPE, UNKNOWN_VALUE_VERSION, LEGACY_LAYOUT, PARSE_ERROR)

OFFSET_COMMIT_TYPES = frozenset({0, 1})
GROUP_METADATA_TYPE = 2
# Types whose layouts changed without a version bump while KIP-848/932/1071 were early
# access: a value that does not parse is an old layout, not corruption (spec 1.7).
_EARLY_ACCESS_STATUSES = frozenset({"kip-848", "kip-932", "kip-1071", "removed"})


@dataclass(slots=True)
class DecodedRecord:
    record_type: int | None
    type_name: str | None
    key: dict[str, Any] | None
    value_version: int | None
    value: dict[str, Any] | None
    decode_status: str
    decode_error: str | None = None

    @property
    def group_id(self) -> str | None:
        """The group a record belongs to, whatever its type calls the key field."""
        if self.key is None:
            return None
        return self.key.get("group_id", self.key.get("group"))


def record_format(record_type: int) -> RecordFormat | None:
    return record_formats().get(record_type)


def decode_key(key: bytes) -> tuple[int, RecordFormat | None, dict[str, Any] | None]:
    """``(record_type, format, fields)``; format and fields are None for unknown types."""
    record_type, pos = wire.read_int16(key, 0)
    fmt = record_formats().get(record_type)
    if fmt is None:
        return record_type, None, None
    fields, pos = fmt.key_codec().decode(key, pos)
    if pos != len(key):
        raise WireError(f"{len(key) - pos} trailing bytes after the key")
    return record_type, fmt, fields


def decode_value(fmt: RecordFormat, value: bytes, embedded: bool = True
                 ) -> tuple[int, dict[str, Any] | None]:
    """``(version, fields)``; fields is None when the version is not one we know.
    ``embedded=False`` leaves classic members' consumer-protocol blobs as bytes."""
    version, pos = wire.read_int16(value, 0)
    codec = fmt.value_codec(version)
    if codec is None:
        return version, None
    fields, pos = codec.decode(value, pos)
    if pos != len(value):
        raise WireError(f"{len(value) - pos} trailing bytes after the value")
    if embedded and fmt.record_type == GROUP_METADATA_TYPE:
        _expand_consumer_protocol(fields)
    return version, fields


#: What a value decodes to: (version, fields, decode_status, decode_error).
ValueOutcome = tuple[int | None, dict[str, Any] | None, str, str | None]


def decode_record(key: bytes | None, value: bytes | None, is_control: bool = False,
                  keys: dict[bytes, Any] | None = None, embedded: bool = True,
                  values: dict[tuple[int, bytes], ValueOutcome] | None = None) -> DecodedRecord:
    """Decode one record; never raises.

    ``keys`` and ``values``, when given, memoize decoded keys by their bytes and decoded
    values by (record type, bytes) for a caller decoding many records: a group's keys
    repeat (one per member and record type), and so do values that hold no group or member
    id (an epoch, an assignment, a member's metadata: half the values of a group-heavy
    log recur under other keys). What they decode to is then shared between records and
    must be treated as read-only.
    ``embedded=False`` skips decoding the subscription and assignment blobs of classic
    members, for a caller that reads only the type, group, version and status (which a blob
    never changes: one that does not parse stays bytes)."""
    if is_control:
        return DecodedRecord(None, "ControlRecord", None, None, None, CONTROL)
    if key is None:
        return DecodedRecord(None, None, None, None, None, PARSE_ERROR, "record has no key")
    decoded = None if keys is None else keys.get(key)
    if decoded is None:
        try:
            decoded = decode_key(key)
        except WireError as exc:
            decoded = exc
        if keys is not None:
            keys[key] = decoded
    if isinstance(decoded, WireError):
        return DecodedRecord(None, None, None, None, None, PARSE_ERROR, f"key: {decoded}")
    record_type, fmt, key_fields = decoded
    if fmt is None:
        return DecodedRecord(
            record_type, None, None, None, None, UNKNOWN_TYPE, f"unknown record type {record_type}"
        )
    if value is None:
        return DecodedRecord(record_type, fmt.name, key_fields, None, None, TOMBSTONE)
    outcome = None if values is None else values.get((record_type, value))
    if outcome is None:
        outcome = _value_outcome(fmt, value, embedded)
        if values is not None:
            values[(record_type, value)] = outcome
    return DecodedRecord(record_type, fmt.name, key_fields, *outcome)


def _value_outcome(fmt: RecordFormat, value: bytes, embedded: bool) -> ValueOutcome:
    version = wire.read_int16(value, 0)[0] if len(value) >= 2 else None
    try:
        version, fields = decode_value(fmt, value, embedded)
    except WireError as exc:
        status = LEGACY_LAYOUT if fmt.status in _EARLY_ACCESS_STATUSES else PARSE_ERROR
        where = "value" if version is None else f"value v{version}"
        return version, None, status, f"{where}: {exc}"
    if fields is None:
        return (version, None, UNKNOWN_VALUE_VERSION,
                f"{fmt.name} value version {version} is not one of {fmt.value.versions.low}-"
                f"{min(fmt.value.versions.high, 99)}")
    note = "no tagged-field section (read as empty)" if fields.get(TAGS_ABSENT) else None
    return version, fields, OK, note


def _expand_consumer_protocol(group: dict[str, Any]) -> None:
    """Replace member subscription/assignment bytes by their decoded form.

    Only for protocol type "consumer" (Kafka's dump tool applies the same gate; other
    protocol types such as connect or sr carry their own formats). A blob that does not
    parse stays as bytes, as in Kafka's tool.
    """
    if group.get("protocol_type") != "consumer":
        return
    for member in group.get("members") or ():
        for name, kind in (("subscription", consumer_protocol.SUBSCRIPTION),
                           ("assignment", consumer_protocol.ASSIGNMENT)):
            blob = member.get(name)
            if not blob:
                continue
            decoded = _embedded(kind, blob)
            if decoded is not None:
                member[name] = decoded


@functools.lru_cache(maxsize=8192)
def _embedded(kind: str, blob: bytes) -> dict[str, Any] | None:
    """A member's subscription or assignment (the codec reads them as ``bytes``) decoded,
    None when it does not parse.

    Cached: the same blobs recur (a member sends the same subscription at every rebalance,
    and an assignment stays while the group is stable), so each distinct one is decoded once
    and shared, read-only like the records the decoder already shares. Group-heavy history
    (278k blobs, 2.04M records): the decode path's CPU 10.5 -> 8.0-8.75 s."""
    with contextlib.suppress(WireError):
        return consumer_protocol.decode_embedded(kind, blob)
    return None


# ----------------------------------------------------------------------------- encoding


def encode_key(record_type: int, fields: dict[str, Any]) -> bytes:
    fmt = _require(record_type)
    out = bytearray()
    wire.write_int16(out, record_type)
    fmt.key_codec().encode(out, fields)
    return bytes(out)


def encode_value(record_type: int, version: int, fields: dict[str, Any]) -> bytes:
    fmt = _require(record_type)
    codec = fmt.value_codec(version)
    if codec is None:
        raise ValueError(f"{fmt.name} has no value version {version}")
    if record_type == GROUP_METADATA_TYPE:
        fields = _collapse_consumer_protocol(fields)
    out = bytearray()
    wire.write_int16(out, version)
    codec.encode(out, fields)
    return bytes(out)


def encode_record(record: DecodedRecord) -> tuple[bytes, bytes | None]:
    """The inverse of :func:`decode_record` for records that decoded ok or as tombstones."""
    if record.record_type is None or record.key is None:
        raise ValueError(f"cannot encode a record with status {record.decode_status}")
    key = encode_key(record.record_type, record.key)
    if record.value is None:
        return key, None
    return key, encode_value(record.record_type, record.value_version, record.value)


def _collapse_consumer_protocol(group: dict[str, Any]) -> dict[str, Any]:
    members = []
    for member in group.get("members") or ():
        member = dict(member)
        if isinstance(member.get("subscription"), dict):
            member["subscription"] = consumer_protocol.encode_subscription(member["subscription"])
        if isinstance(member.get("assignment"), dict):
            member["assignment"] = consumer_protocol.encode_assignment(member["assignment"])
        members.append(member)
    return {**group, "members": members}


def _require(record_type: int) -> RecordFormat:
    fmt = record_formats().get(record_type)
    if fmt is None:
        raise ValueError(f"unknown record type {record_type}")
    return fmt
