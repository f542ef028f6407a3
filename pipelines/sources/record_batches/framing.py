"""Kafka's record-batch framing, once: header layouts, attribute bits, codecs, varints, CRCs.

Why one module: every reader (the exact per-record reader, the vectorized Arrow reader, the
Kafka Fetch path) and the one writer must agree on these bytes; a second copy of a mask or a
varint is a second place for a format bug. Pure and cheap to import: no Spark, no sockets, no
numpy; kafka-python's codec module is loaded lazily and without the client package
(``import kafka`` costs ~150 ms and >99% of ``__consumer_offsets`` batches are uncompressed).

Two varint encodings exist in Kafka: the zig-zag varint/varlong of records (here) and the
unsigned varint of KIP-482 flexible protocol versions (:mod:`pipelines.decode.wire`).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

__all__ = [
    "ATTR_CODEC",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "CODEC_IDS",
    "CODEC_NAMES",
    "COMPRESSION_NAMES",
    "CONTROL_TYPE_IDS",
    "LEGACY_HEADER",
    "LOG_OVERHEAD",
    "MIN_LENGTH",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "V2_CRC_OFFSET",
    "V2_CRC_START",
    "V2_HEADER",
    "V2_HEADER_SIZE",
    "ZIGZAG_1",
    "ZIGZAG_2",
    "compress",
    "control_type_of",
    "coordinator_epoch_of",
    "crc32",
    "crc32c",
    "decompress",
    "read_varint",
    "write_varint",
]

#: Codec names by attribute id (attributes & ATTR_CODEC), and the reverse.
CODEC_NAMES: tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS: dict[str, int] = {name: i for i, name in enumerate(CODEC_NAMES)}
#: Name of every value the 3 codec bits can hold (5-7 are not codecs Kafka knows).
COMPRESSION_NAMES: tuple[str, ...] = (*CODEC_NAMES, "unknown(5)", "unknown(6)", "unknown(7)")

#: Kafka's constants for "no producer" / "no timestamp".
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1

#: int64 offset + int32 length precede every batch (v2) and every message (v0/v1).
LOG_OVERHEAD = 12
#: v2: baseOffset length partitionLeaderEpoch magic crc attributes lastOffsetDelta
#: baseTimestamp maxTimestamp producerId producerEpoch baseSequence recordsCount.
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size  # 61
V2_CRC_OFFSET = 17  # where the stored CRC32C sits
V2_CRC_START = 21  # the CRC32C covers attributes .. end of batch
#: v0/v1 message: offset length crc magic attributes (v1 then has an int64 timestamp).
LEGACY_HEADER = struct.Struct(">qiIbb")
#: Smallest legal value of the length field per magic: the header after the log overhead plus,
#: for v0/v1, two int32 lengths (key, value).
MIN_LENGTH: tuple[int, int, int] = (
    4 + 1 + 1 + 4 + 4,
    4 + 1 + 1 + 8 + 4 + 4,
    V2_HEADER_SIZE - LOG_OVERHEAD,
)

#: Batch attribute bits.
ATTR_CODEC = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # 1 = LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # base timestamp holds the cleaner's delete horizon

#: Control record key type ids (int16 at key offset 2); other ids are KRaft-only.
CONTROL_TYPE_IDS: dict[str, int] = {"ABORT": 0, "COMMIT": 1}

_H = struct.Struct(">h")
_I = struct.Struct(">i")

#: CRC32 (zlib) of v0/v1 messages (magic .. end); CRC32C of v2 batches is ``crc32c``.
crc32 = zlib.crc32


# --------------------------------------------------------------------------------------------
# Zig-zag varints (records, record headers)
# --------------------------------------------------------------------------------------------

#: Zig-zag decoded values of every one-byte and two-byte varint: a tuple index is ~4x cheaper
#: than the shift/xor arithmetic in a hot loop (measured: -20% decode time on the corpus).
#: ``ZIGZAG_2`` is indexed by ``(b0 & 0x7F) | (b1 << 7)``.
ZIGZAG_1: tuple[int, ...] = tuple((u >> 1) ^ -(u & 1) for u in range(1 << 7))
ZIGZAG_2: tuple[int, ...] = tuple((u >> 1) ^ -(u & 1) for u in range(1 << 14))


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint/varlong starting at ``pos``: (value, position after it).

    Raises ValueError beyond 10 bytes and IndexError at the end of ``buf``.
    """
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def write_varint(out: bytearray, v: int) -> None:
    """Append ``v`` as a minimal zig-zag varint (Kafka's varint/varlong encoding)."""
    u = (v << 1) if v >= 0 else ((-v) << 1) - 1
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


# --------------------------------------------------------------------------------------------
# Control records (transaction markers)
# --------------------------------------------------------------------------------------------


def control_type_of(key: bytes | None) -> str:
    """Control record key = int16 version, int16 type (0 ABORT, 1 COMMIT, others KRaft-only)."""
    if key is None or len(key) < 4:
        return "UNKNOWN(-1)"
    t = _H.unpack_from(key, 2)[0]
    return "ABORT" if t == 0 else "COMMIT" if t == 1 else f"UNKNOWN({t})"


def coordinator_epoch_of(value: bytes | None) -> int | None:
    """EndTxnMarker value = int16 version, int32 coordinator epoch; None if unreadable."""
    if value is None or len(value) < 6:
        return None
    return _I.unpack_from(value, 2)[0]


# --------------------------------------------------------------------------------------------
# Compression
# --------------------------------------------------------------------------------------------

def _without_package(package: str, names: list[str], module_name: str) -> Any:
    """The first of ``names`` found as a file of ``package``, loaded as a module of its own
    (as ``module_name``) without running the package's ``__init__``; None when none is a
    plain file there (the caller then imports it the ordinary way).

    Why: two packages this reader needs one file of do costly work at import: kafka-python's
    ``__init__`` imports the whole client (admin, consumer, producer: ~80-150 ms) where a
    reader of segment files needs only ``codec.py`` (the standard library and the compression
    libraries); crc32c's looks up its own version with ``importlib.metadata`` (which imports
    ``email`` and reads the installed distributions: ~25 ms of every command's start, a tenth
    of ``offsetlake decode --stats``) where the C extension needs nothing of its package."""
    spec = importlib.util.find_spec(package)  # a top-level spec: the __init__ does not run
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        for name in names:
            path = Path(location) / name
            if path.is_file():
                file_spec = importlib.util.spec_from_file_location(module_name, path)
                module = importlib.util.module_from_spec(file_spec)
                file_spec.loader.exec_module(module)
                return module
    return None


crc32c = (_without_package("crc32c", [f"_crc32c{s}" for s in importlib.machinery.EXTENSION_SUFFIXES],
                           "crc32c._crc32c") or importlib.import_module("crc32c")).crc32c

_codec_module: Any = None


def _codecs() -> Any:
    global _codec_module
    if _codec_module is None:
        _codec_module = sys.modules.get("kafka.codec") or _load_kafka_codec()
    return _codec_module


def _load_kafka_codec() -> Any:
    """kafka-python's ``kafka/codec.py`` (Kafka's gzip/snappy/lz4/zstd framing), without the
    client (:func:`_without_package`) when the client is not imported yet."""
    return _without_package("kafka", ["codec.py"], "offsetlake_kafka_codec") \
        or importlib.import_module("kafka.codec")


def decompress(codec: int, payload: bytes, magic: int) -> bytes:
    """Decompress a batch payload (codec id as in the attributes); raises on any failure
    (the caller reports it)."""
    kc = _codecs()
    if codec == 1:
        return kc.gzip_decode(payload)
    if codec == 2:
        return kc.snappy_decode(payload)
    if codec == 3:
        # Kafka < 0.10 (magic 0) wrote a wrong LZ4 frame header checksum; try the likely
        # framing first and the other one second, as producers and brokers did not always agree.
        first, second = (
            (kc.lz4_decode_old_kafka, kc.lz4_decode)
            if magic == 0
            else (kc.lz4_decode, kc.lz4_decode_old_kafka)
        )
        try:
            return first(payload)
        except Exception:
            return second(payload)
    if codec == 4:
        return kc.zstd_decode(payload)
    raise ValueError(f"unknown compression codec {codec}")


def compress(compression: str, payload: bytes) -> bytes:
    """Compress a records section with the named codec (not "none")."""
    kc = _codecs()
    if compression == "gzip":
        return kc.gzip_encode(payload)
    if compression == "snappy":
        return kc.snappy_encode(payload)
    if compression == "lz4":
        return kc.lz4_encode(payload)
    if compression == "zstd":
        return kc.zstd_encode(payload)
    raise ValueError(f"unknown compression {compression!r}; expected one of {CODEC_NAMES}")
