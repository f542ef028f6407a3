"""Record formats as data: ``schemas/records/*.json`` compiled into decoders and encoders.

Kafka generates its coordinator record coders from JSON message specs; we do the same
at import time, so each format is defined exactly once (in ``schemas/records``) and
the decoder, the encoder and the docs cannot drift apart. A compiled codec is a tree
of small closures, one per field, specialised for one (record type, version).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from pipelines.decode import wire
from pipelines.decode.codegen import (
    EXPLICIT_DEFAULT_TAGS,
    TAGS_ABSENT,
    UNKNOWN_TAGS,
    Decoder,
    struct_decoder,
)
from pipelines.shipped_schemas import MissingSchemas, schema_dir, schema_files

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

Encoder = Callable[[bytearray, Any], None]
__all__ = ["EXPLICIT_DEFAULT_TAGS", "TAGS_ABSENT", "UNKNOWN_TAGS", "Decoder", "Encoder",
           "FieldSpec", "RecordFormat", "StructCodec", "Versions", "embedded_struct",
           "load_record_formats", "record_formats"]


@dataclass(frozen=True)
class Versions:
    """A Kafka version range: ``"0+"``, ``"3+"``, ``"1"`` or ``"0-4"``."""

    low: int
    high: int  # inclusive; a large number for "N+"

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if not text:
            return cls(0, 1 << 15)
        if text.endswith("+"):
            return cls(int(text[:-1]), 1 << 15)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: str
    versions: Versions
    nullable: bool = False
    default: Any = None
    tag: int | None = None
    fields: tuple[FieldSpec, ...] = ()
    optional_trailing: bool = False
    embedded: str | None = None

    @classmethod
    def parse(cls, raw: dict, structs: dict[str, list[dict]]) -> FieldSpec:
        ftype = raw["type"]
        sub = raw.get("fields")
        base = ftype[2:] if ftype.startswith("[]") else ftype
        if sub is None and base in structs:
            sub = structs[base]
        if sub is not None:
            ftype = "[]struct" if ftype.startswith("[]") else "struct"
        return cls(
            name=raw["name"],
            type=ftype,
            versions=Versions.parse(raw.get("versions")),
            nullable=bool(raw.get("nullable", False)),
            default=raw.get("default", _implicit_default(ftype)),
            tag=raw.get("tag"),
            fields=tuple(cls.parse(f, structs) for f in (sub or ())),
            optional_trailing=bool(raw.get("optional_trailing", False)),
            embedded=raw.get("embedded"),
        )


def _implicit_default(ftype: str) -> Any:
    if ftype.startswith("int") or ftype == "uint16":
        return 0
    if ftype == "string":
        return ""
    if ftype == "bytes":
        return b""
    if ftype == "uuid":
        return wire.ZERO_UUID
    if ftype.startswith("[]"):
        return []
    return None


@dataclass(frozen=True)
class ValueFormat:
    versions: Versions
    flexible: Versions
    fields: tuple[FieldSpec, ...]


@dataclass(frozen=True)
class RecordFormat:
    """One ``__consumer_offsets`` record type: its key layout and value versions."""

    record_type: int
    name: str
    status: str
    key_fields: tuple[FieldSpec, ...]
    value: ValueFormat
    note: str = ""
    _codecs: dict = field(default_factory=dict, compare=False, repr=False)

    def key_codec(self) -> StructCodec:
        codec = self._codecs.get("key")  # one lookup on the hot path (every record)
        if codec is not None:
            return codec
        if "key" not in self._codecs:
            self._codecs["key"] = StructCodec.compile(self.key_fields, 0, flexible=False)
        return self._codecs["key"]

    def value_codec(self, version: int) -> StructCodec | None:
        """The codec for one value version, or None when the version is unknown."""
        codec = self._codecs.get(version)  # one lookup on the hot path (every record)
        if codec is not None:
            return codec
        if version not in self.value.versions:
            return None
        if version not in self._codecs:
            self._codecs[version] = StructCodec.compile(
                self.value.fields, version, flexible=version in self.value.flexible, top_level=True
            )
        return self._codecs[version]


# ----------------------------------------------------------------------------- compiling


@dataclass
class StructCodec:
    """Decoder and encoder of one struct at one version."""

    decode: Decoder
    encode: Encoder

    @classmethod
    def compile(
        cls, fields: tuple[FieldSpec, ...], version: int, flexible: bool, top_level: bool = False
    ) -> StructCodec:
        """Specialise ``fields`` for one version.

        ``top_level`` tolerates a value that ends where its tagged-field section should
        start (hand-built vectors in the wild omit it); the absence is remembered. Tagged
        fields absent from the section get their defaults; an optional trailing field is
        None when the value ends before it. The decoder is generated source
        (:mod:`pipelines.decode.codegen`); the encoder a tree of closures.
        """
        return cls(struct_decoder(fields, version, flexible, top_level),
                   _struct_encoder(fields, version, flexible))


def _struct_encoder(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> Encoder:
    present = [f for f in fields if version in f.versions]
    reg_encoders = [(f, _field_codec(f, version, flexible)) for f in present if f.tag is None]
    tagged = {
        f.tag: (f, _field_codec(f, version, flexible, tagged=True))
        for f in present
        if f.tag is not None and flexible
    }

    def encode(out: bytearray, value: dict) -> None:
        for spec, enc in reg_encoders:
            item = value.get(spec.name, spec.default)
            if spec.optional_trailing and item is None:
                continue
            enc(out, item)
        if flexible and not value.get(TAGS_ABSENT):
            _write_tagged(out, value, tagged)

    return encode


def _write_tagged(out: bytearray, value: dict, tagged: dict) -> None:
    chunks: dict[int, bytes] = dict(value.get(UNKNOWN_TAGS) or {})
    explicit = value.get(EXPLICIT_DEFAULT_TAGS) or ()
    for tag, (spec, enc) in tagged.items():
        item = value.get(spec.name, spec.default)
        if item == spec.default and tag not in explicit:
            continue
        buf = bytearray()
        enc(buf, item)
        chunks[tag] = bytes(buf)
    wire.write_uvarint(out, len(chunks))
    for tag in sorted(chunks):
        wire.write_uvarint(out, tag)
        wire.write_uvarint(out, len(chunks[tag]))
        out += chunks[tag]


_FIXED: dict[str, Encoder] = {
    "int8": wire.write_int8,
    "int16": wire.write_int16,
    "uint16": wire.write_uint16,
    "int32": wire.write_int32,
    "int64": wire.write_int64,
    "uuid": wire.write_uuid,
}


def _field_codec(spec: FieldSpec, version: int, flexible: bool, tagged: bool = False) -> Encoder:
    """One field's encoder (decoding is generated: :mod:`pipelines.decode.codegen`)."""
    ftype, nullable = spec.type, spec.nullable
    if ftype in _FIXED:
        return _FIXED[ftype]
    if ftype == "string":
        return lambda out, v: wire.write_string(out, v, flexible)
    if ftype == "bytes":
        return lambda out, v: wire.write_bytes(out, v, flexible)
    if ftype == "struct":
        encode = _struct_encoder(spec.fields, version, flexible)
        return _nullable_struct(encode, tagged) if nullable else encode
    if ftype.startswith("[]"):
        elem_spec = FieldSpec(spec.name, ftype[2:], spec.versions, fields=spec.fields)
        return _array(_field_codec(elem_spec, version, flexible), nullable, flexible)
    raise ValueError(f"unknown field type {ftype!r} for {spec.name}")


def _nullable_struct(struct_encode: Encoder, tagged: bool) -> Encoder:
    """Nullable structs carry a presence marker before their fields.

    Kafka's generator writes int8 -1/1 for a regular field but unsigned varint 0/1
    inside a tagged field.
    """
    null_marker = 0 if tagged else 0xFF

    def encode(out: bytearray, value: dict | None) -> None:
        if value is None:
            out.append(null_marker)
        else:
            out.append(1)
            struct_encode(out, value)

    return encode


def _array(enc: Encoder, nullable: bool, flexible: bool) -> Encoder:
    def encode(out: bytearray, value: list | None) -> None:
        if value is None:
            if flexible:
                out.append(0)
            else:
                wire.write_int32(out, -1)
            return
        if flexible:
            wire.write_uvarint(out, len(value) + 1)
        else:
            wire.write_int32(out, len(value))
        for item in value:
            enc(out, item)

    return encode


# ----------------------------------------------------------------------------- loading


def _parse_record(raw: dict) -> RecordFormat:
    value = raw.get("value") or {"versions": "0", "fields": []}
    structs = value.get("structs", {})
    return RecordFormat(
        record_type=raw["type"],
        name=raw["name"],
        status=raw.get("status", "live"),
        note=raw.get("note", ""),
        key_fields=tuple(FieldSpec.parse(f, {}) for f in raw["key"]),
        value=ValueFormat(
            versions=Versions.parse(value["versions"]),
            flexible=Versions.parse(value["flexible"]) if "flexible" in value else Versions(1, 0),
            fields=tuple(FieldSpec.parse(f, structs) for f in value["fields"]),
        ),
    )


def load_record_formats(directory: Traversable) -> dict[int, RecordFormat]:
    """The record formats of one directory (``NN_name.json`` files), checked for gaps.

    Kafka numbers coordinator record types 0, 1, 2, ...; a hole in the numbering means a
    file went missing, and its records would decode as ``unknown_type``: refuse instead.
    """
    formats = {}
    for path in schema_files(directory):
        if not (path.name[:2].isdigit() and path.name[2:3] == "_"):
            continue  # consumer_protocol.json and other helpers
        fmt = _parse_record(json.loads(path.read_text(encoding="utf-8")))
        formats[fmt.record_type] = fmt
    if not formats:
        raise MissingSchemas(f"{directory} holds no record formats (NN_name.json)")
    missing = sorted(set(range(max(formats) + 1)) - set(formats))
    if missing:
        raise MissingSchemas(f"record formats for types {missing} are missing from {directory}")
    return formats


@cache
def record_formats() -> dict[int, RecordFormat]:
    """Every known record type, keyed by its int16 number."""
    return load_record_formats(schema_dir("records"))


@cache
def _consumer_protocol() -> dict:
    path = schema_dir("records") / "consumer_protocol.json"
    if not path.is_file():
        raise MissingSchemas(f"{path} is missing: offsetlake was built without its schemas")
    return json.loads(path.read_text(encoding="utf-8"))["structs"]


@cache
def embedded_struct(name: str) -> tuple[Versions, tuple[FieldSpec, ...]]:
    """A consumer-protocol struct (subscription/assignment) from consumer_protocol.json."""
    raw = _consumer_protocol()[name]
    return Versions.parse(raw["versions"]), tuple(FieldSpec.parse(f, {}) for f in raw["fields"])
