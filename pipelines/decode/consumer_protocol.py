"""The consumer protocol's Subscription and Assignment blobs inside classic group members.

Both are ``int16 version`` + a never-flexible struct. Kafka's clients parse a version
newer than they know with the newest known layout (new versions only append fields),
and so do we; bytes past the known layout are kept so re-encoding is exact.
"""

from __future__ import annotations

from typing import Any

from pipelines.decode import wire
from pipelines.decode.formats import StructCodec, embedded_struct
from pipelines.decode.wire import WireError

SUBSCRIPTION = "ConsumerProtocolSubscription"
ASSIGNMENT = "ConsumerProtocolAssignment"
TRAILING = "_trailing_bytes"

_codecs: dict[tuple[str, int], StructCodec] = {}
_by_version: dict[tuple[str, int], StructCodec] = {}  # keyed by the version as written


def _codec(name: str, version: int) -> StructCodec:
    codec = _by_version.get((name, version))  # one lookup per member blob on the hot path
    if codec is None:
        codec = _by_version[(name, version)] = _effective_codec(name, version)
    return codec


def _effective_codec(name: str, version: int) -> StructCodec:
    versions, fields = embedded_struct(name)
    effective = min(max(version, versions.low), versions.high)
    key = (name, effective)
    if key not in _codecs:
        _codecs[key] = StructCodec.compile(fields, effective, flexible=False)
    return _codecs[key]


def decode_embedded(name: str, blob: bytes) -> dict[str, Any]:
    """Decode one blob; raises WireError when it is not valid consumer-protocol bytes."""
    version, pos = wire.read_int16(blob, 0)
    if version < 0:
        raise WireError(f"negative {name} version {version}")
    value, pos = _codec(name, version).decode(blob, pos)
    out = {"version": version, **value}
    if pos < len(blob):
        out[TRAILING] = bytes(blob[pos:])
    return out


def encode_embedded(name: str, value: dict[str, Any]) -> bytes:
    out = bytearray()
    wire.write_int16(out, value["version"])
    _codec(name, value["version"]).encode(out, value)
    out += value.get(TRAILING, b"")
    return bytes(out)


def decode_subscription(blob: bytes) -> dict[str, Any]:
    return decode_embedded(SUBSCRIPTION, blob)


def decode_assignment(blob: bytes) -> dict[str, Any]:
    return decode_embedded(ASSIGNMENT, blob)


def encode_subscription(value: dict[str, Any]) -> bytes:
    return encode_embedded(SUBSCRIPTION, value)


def encode_assignment(value: dict[str, Any]) -> bytes:
    return encode_embedded(ASSIGNMENT, value)
