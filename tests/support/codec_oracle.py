"""The per-record codec as it was before issue 9's generated decoders: a tree of closures per
(record type, version), and ``decode_record`` over it. The oracle the generated decoders
(pipelines/decode/codegen.py) and the column-wise group-record path must match exactly: same
dicts (keys, order, values), same statuses, same error messages.

Kept verbatim in behaviour (copied from pipelines/decode/formats.py and records.py at e73508f);
it compiles its own codecs from the same shipped ``schemas/records`` specs.
"""

from __future__ import annotations

import contextlib
from functools import cache
from typing import Any

from pipelines.decode import wire
from pipelines.decode.formats import (
    EXPLICIT_DEFAULT_TAGS,
    TAGS_ABSENT,
    UNKNOWN_TAGS,
    FieldSpec,
    RecordFormat,
    embedded_struct,
    record_formats,
)
from pipelines.decode.records import (
    CONTROL,
    LEGACY_LAYOUT,
    OK,
    PARSE_ERROR,
    TOMBSTONE,
    UNKNOWN_TYPE,
    UNKNOWN_VALUE_VERSION,
    DecodedRecord,
)
from pipelines.decode.wire import WireError

EARLY_ACCESS_STATUSES = frozenset({"kip-848", "kip-932", "kip-1071", "removed"})


def compile_struct(fields: tuple[FieldSpec, ...], version: int, flexible: bool,
                   top_level: bool = False):
    present = [f for f in fields if version in f.versions]
    regular = [(f, field_codec(f, version, flexible)) for f in present if f.tag is None]
    tagged = {f.tag: (f, field_codec(f, version, flexible, tagged=True))
              for f in present if f.tag is not None and flexible}
    order = [(f.name, f.tag is not None and flexible, f) for f in present]
    reg_decoders = {f.name: c for f, c in regular}
    plain = [(f.name, c) for f, c in regular]
    if len(regular) == len(present) and not any(f.optional_trailing for f in present):
        order = []

    def decode(buf: bytes, pos: int) -> tuple[dict, int]:
        out: dict[str, Any] = {}
        if not order:
            for name, dec in plain:
                out[name], pos = dec(buf, pos)
        for name, is_tagged, spec in order:
            if is_tagged:
                out[name] = list(spec.default) if isinstance(spec.default, list) else spec.default
            elif spec.optional_trailing and len(buf) - pos <= (1 if flexible else 0):
                out[name] = None
            else:
                out[name], pos = reg_decoders[name](buf, pos)
        if flexible:
            if top_level and pos == len(buf):
                out[TAGS_ABSENT] = True
            else:
                pos = read_tagged(buf, pos, tagged, out)
        return out, pos

    return decode


def read_tagged(buf: bytes, pos: int, tagged: dict, out: dict) -> int:
    count, pos = wire.read_uvarint(buf, pos)
    last_tag = -1
    for _ in range(count):
        tag, pos = wire.read_uvarint(buf, pos)
        size, pos = wire.read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise WireError(f"tagged field {tag} runs past the end")
        if tag <= last_tag:
            raise WireError(f"tagged fields out of order: {tag} after {last_tag}")
        last_tag = tag
        known = tagged.get(tag)
        chunk = bytes(buf[pos:end])
        if known is None:
            out.setdefault(UNKNOWN_TAGS, {})[tag] = chunk
        else:
            spec, dec = known
            value, used = dec(chunk, 0)
            if used != size:
                raise WireError(f"tagged field {spec.name} used {used} of {size} bytes")
            out[spec.name] = value
            if value == spec.default:
                out.setdefault(EXPLICIT_DEFAULT_TAGS, []).append(tag)
        pos = end
    return pos


_FIXED = {"int8": wire.read_int8, "int16": wire.read_int16, "uint16": wire.read_uint16,
          "int32": wire.read_int32, "int64": wire.read_int64, "uuid": wire.read_uuid}


def field_codec(spec: FieldSpec, version: int, flexible: bool, tagged: bool = False):
    ftype, nullable = spec.type, spec.nullable
    if ftype in _FIXED:
        return _FIXED[ftype]
    if ftype == "string":
        reader = wire.read_compact_string if flexible else wire.read_string
        return (lambda buf, pos: reader(buf, pos, True)) if nullable else reader
    if ftype == "bytes":
        breader = wire.read_compact_bytes if flexible else wire.read_bytes
        return lambda buf, pos: breader(buf, pos, nullable)
    if ftype == "struct":
        codec = compile_struct(spec.fields, version, flexible)
        return nullable_struct(codec, tagged) if nullable else codec
    if ftype.startswith("[]"):
        elem_spec = FieldSpec(spec.name, ftype[2:], spec.versions, fields=spec.fields)
        return array(field_codec(elem_spec, version, flexible), nullable, flexible)
    raise ValueError(f"unknown field type {ftype!r} for {spec.name}")


def nullable_struct(codec, tagged: bool):
    def decode(buf: bytes, pos: int):
        if tagged:
            marker, pos = wire.read_uvarint(buf, pos)
            is_null = marker == 0
        else:
            marker, pos = wire.read_int8(buf, pos)
            is_null = marker < 0
        if is_null:
            return None, pos
        return codec(buf, pos)

    return decode


def array(dec, nullable: bool, flexible: bool):
    def decode(buf: bytes, pos: int):
        if flexible:
            n, pos = wire.read_uvarint(buf, pos)
            n -= 1
        else:
            n, pos = wire.read_int32(buf, pos)
        if n < 0:
            if nullable and n == -1:
                return None, pos
            raise WireError(f"negative array length {n}")
        if n > len(buf) - pos:
            raise WireError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
        items = []
        for _ in range(n):
            item, pos = dec(buf, pos)
            items.append(item)
        return items, pos

    return decode


@cache
def key_decoder(record_type: int):
    return compile_struct(record_formats()[record_type].key_fields, 0, flexible=False)


@cache
def value_decoder(record_type: int, version: int):
    fmt = record_formats()[record_type]
    if version not in fmt.value.versions:
        return None
    return compile_struct(fmt.value.fields, version, flexible=version in fmt.value.flexible,
                          top_level=True)


@cache
def embedded_decoder(name: str, version: int):
    versions, fields = embedded_struct(name)
    return compile_struct(fields, min(max(version, versions.low), versions.high), flexible=False)


def decode_embedded(name: str, blob: bytes) -> dict[str, Any]:
    version, pos = wire.read_int16(blob, 0)
    if version < 0:
        raise WireError(f"negative {name} version {version}")
    value, pos = embedded_decoder(name, version)(blob, pos)
    out = {"version": version, **value}
    if pos < len(blob):
        out["_trailing_bytes"] = bytes(blob[pos:])
    return out


def decode_key(key: bytes) -> tuple[int, RecordFormat | None, dict | None]:
    record_type, pos = wire.read_int16(key, 0)
    fmt = record_formats().get(record_type)
    if fmt is None:
        return record_type, None, None
    fields, pos = key_decoder(record_type)(key, pos)
    if pos != len(key):
        raise WireError(f"{len(key) - pos} trailing bytes after the key")
    return record_type, fmt, fields


def decode_value(fmt: RecordFormat, value: bytes) -> tuple[int, dict | None]:
    version, pos = wire.read_int16(value, 0)
    codec = value_decoder(fmt.record_type, version)
    if codec is None:
        return version, None
    fields, pos = codec(value, pos)
    if pos != len(value):
        raise WireError(f"{len(value) - pos} trailing bytes after the value")
    if fmt.record_type == 2 and fields.get("protocol_type") == "consumer":
        for member in fields.get("members") or ():
            for name, kind in (("subscription", "ConsumerProtocolSubscription"),
                               ("assignment", "ConsumerProtocolAssignment")):
                blob = member.get(name)
                if blob:
                    with contextlib.suppress(WireError):
                        member[name] = decode_embedded(kind, blob)
    return version, fields


def decode_record(key: bytes | None, value: bytes | None, is_control: bool = False) -> DecodedRecord:
    """The per-record codec before issue 9 (never raises)."""
    if is_control:
        return DecodedRecord(None, "ControlRecord", None, None, None, CONTROL)
    if key is None:
        return DecodedRecord(None, None, None, None, None, PARSE_ERROR, "record has no key")
    try:
        record_type, fmt, key_fields = decode_key(key)
    except WireError as exc:
        return DecodedRecord(None, None, None, None, None, PARSE_ERROR, f"key: {exc}")
    if fmt is None:
        return DecodedRecord(record_type, None, None, None, None, UNKNOWN_TYPE,
                             f"unknown record type {record_type}")
    if value is None:
        return DecodedRecord(record_type, fmt.name, key_fields, None, None, TOMBSTONE)
    version = wire.read_int16(value, 0)[0] if len(value) >= 2 else None
    try:
        version, fields = decode_value(fmt, value)
    except WireError as exc:
        status = LEGACY_LAYOUT if fmt.status in EARLY_ACCESS_STATUSES else PARSE_ERROR
        where = "value" if version is None else f"value v{version}"
        return DecodedRecord(record_type, fmt.name, key_fields, version, None, status,
                             f"{where}: {exc}")
    if fields is None:
        return DecodedRecord(
            record_type, fmt.name, key_fields, version, None, UNKNOWN_VALUE_VERSION,
            f"{fmt.name} value version {version} is not one of {fmt.value.versions.low}-"
            f"{min(fmt.value.versions.high, 99)}")
    note = "no tagged-field section (read as empty)" if fields.get(TAGS_ABSENT) else None
    return DecodedRecord(record_type, fmt.name, key_fields, version, fields, OK, note)
