"""Kafka's primitive encodings (big-endian ints, strings, varints, compact forms, uuids).

Readers take ``(buf, pos)`` and return ``(value, new_pos)``; writers append to a
``bytearray``. Both raise :class:`WireError` on malformed input so that one
``except`` in the record decoder turns any bad byte into a ``decode_status``.
"""

from __future__ import annotations

import base64
import functools
import struct

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


class WireError(ValueError):
    """Malformed bytes: underflow, negative length, bad UTF-8, overlong varint."""


def _fixed(st: struct.Struct):
    unpack, size = st.unpack_from, st.size

    def read(buf: bytes, pos: int):
        if pos + size > len(buf):
            raise WireError(f"need {size} bytes at {pos}, have {len(buf) - pos}")
        return unpack(buf, pos)[0], pos + size

    return read


read_int8 = _fixed(_I8)
read_int16 = _fixed(_I16)
read_uint16 = _fixed(_U16)
read_int32 = _fixed(_I32)
read_int64 = _fixed(_I64)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint as used by KIP-482 (at most 5 bytes for 32 bits)."""
    result = shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise WireError(f"varint runs past end at {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise WireError("varint longer than 5 bytes")


def _take(buf: bytes, pos: int, n: int) -> tuple[bytes, int]:
    end = pos + n
    if n < 0 or end > len(buf):
        raise WireError(f"need {n} bytes at {pos}, have {len(buf) - pos}")
    return bytes(buf[pos:end]), end


_unpack_i16 = _I16.unpack_from


def read_string(buf: bytes, pos: int, nullable: bool = False) -> tuple[str | None, int]:
    # the hot path of every group record: read_int16, _take and _utf8 inlined (same checks,
    # same messages)
    if pos + 2 > len(buf):
        raise WireError(f"need 2 bytes at {pos}, have {len(buf) - pos}")
    n = _unpack_i16(buf, pos)[0]
    pos += 2
    if n < 0:
        if nullable and n == -1:
            return None, pos
        raise WireError(f"negative string length {n}")
    end = pos + n
    if end > len(buf):
        raise WireError(f"need {n} bytes at {pos}, have {len(buf) - pos}")
    try:
        return str(buf[pos:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise WireError(f"invalid UTF-8: {exc}") from None


def read_compact_string(buf: bytes, pos: int, nullable: bool = False) -> tuple[str | None, int]:
    if pos < len(buf) and buf[pos] < 0x80:  # a one-byte length (strings under 127 bytes)
        n = buf[pos]
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise WireError("null in a non-nullable compact string")
    end = pos + n - 1
    if n < 1 or end > len(buf):
        raise WireError(f"need {n - 1} bytes at {pos}, have {len(buf) - pos}")
    try:
        return str(buf[pos:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise WireError(f"invalid UTF-8: {exc}") from None


def read_bytes(buf: bytes, pos: int, nullable: bool = False) -> tuple[bytes | None, int]:
    n, pos = read_int32(buf, pos)
    if n < 0:
        if nullable and n == -1:
            return None, pos
        raise WireError(f"negative bytes length {n}")
    return _take(buf, pos, n)


def read_compact_bytes(buf: bytes, pos: int, nullable: bool = False) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        if nullable:
            return None, pos
        raise WireError("null in non-nullable compact bytes")
    return _take(buf, pos, n - 1)


def read_uuid(buf: bytes, pos: int) -> tuple[str, int]:
    raw, pos = _take(buf, pos, 16)
    return uuid_to_str(raw), pos


@functools.lru_cache(maxsize=1 << 16)  # topic and member ids repeat in every group record
def uuid_to_str(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_from_str(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise WireError(f"not a 16-byte Kafka uuid: {text!r}")
    return raw


# ----------------------------------------------------------------------------- writers


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise WireError(f"unsigned varint cannot be negative: {value}")
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _pack(st: struct.Struct):
    pack = st.pack

    def write(out: bytearray, value: int) -> None:
        try:
            out += pack(value)
        except struct.error as exc:
            raise WireError(str(exc)) from None

    return write


write_int8 = _pack(_I8)
write_int16 = _pack(_I16)
write_uint16 = _pack(_U16)
write_int32 = _pack(_I32)
write_int64 = _pack(_I64)


def write_string(out: bytearray, value: str | None, compact: bool) -> None:
    if value is None:
        if compact:
            out.append(0)
        else:
            write_int16(out, -1)
        return
    raw = value.encode("utf-8")
    if compact:
        write_uvarint(out, len(raw) + 1)
    else:
        write_int16(out, len(raw))
    out += raw


def write_bytes(out: bytearray, value: bytes | None, compact: bool) -> None:
    if value is None:
        if compact:
            out.append(0)
        else:
            write_int32(out, -1)
        return
    if compact:
        write_uvarint(out, len(value) + 1)
    else:
        write_int32(out, len(value))
    out += value


def write_uuid(out: bytearray, value: str) -> None:
    out += uuid_from_str(value)
