"""One record batch (v2) or top-level message (v0/v1), decoded exactly into record objects.

Why its own module: the exact reader walks a segment with it, and the vectorized
:mod:`~pipelines.sources.record_batches.arrow_reader` hands it every batch it does not decode
itself (compressed, control, damaged), so both produce the same records, facts and error texts.
:class:`BatchInfo` and :class:`Record` are the record objects of that exact path. Errors never
raise out of here: a decoder returns the records it could decode and the error text.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .framing import (
    ATTR_CODEC,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CODEC_NAMES,
    COMPRESSION_NAMES,
    LEGACY_HEADER,
    LOG_OVERHEAD,
    MIN_LENGTH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    ZIGZAG_1,
    ZIGZAG_2,
    control_type_of,
    crc32,
    decompress,
    read_varint,
)

__all__ = ["BatchInfo", "Record", "decode_legacy", "decode_v2_batch"]

_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_NO_HEADERS: tuple[tuple[str, bytes | None], ...] = ()
_new_tuple = tuple.__new__


# --------------------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------------------


class BatchInfo(NamedTuple):
    """Facts of one v2 record batch, or of one top-level v0/v1 message (a compressed wrapper
    and its inner messages count as one batch, as Kafka's shallow iteration does).

    Shared by all records of the batch, so per-record cost stays one small tuple.
    """

    source: str  # file path, or e.g. "<memory>"
    offsets_partition: int  # from the directory name __consumer_offsets-N; -1 unknown
    position: int  # byte position of the batch in the file
    size: int  # bytes on disk including the 12-byte offset+length prefix
    base_offset: int
    last_offset: int
    magic: int
    attributes: int
    compression: str  # none/gzip/snappy/lz4/zstd, or "unknown(n)"
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime, -1 none (magic 0)
    base_timestamp: int  # v2 first timestamp (the delete horizon if attribute bit 6 is set)
    max_timestamp: int
    partition_leader_epoch: int  # -1 for magic 0/1
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int  # declared count (v2) / number of (inner) messages (v0/v1)
    is_transactional: bool
    is_control: bool
    crc: int  # the stored checksum
    crc_valid: bool  # for wrappers: the wrapper's and every inner message's CRC

    @property
    def delete_horizon_ms(self) -> int | None:
        """Set by the log cleaner once tombstones/markers of this batch may be removed."""
        return self.base_timestamp if self.attributes & ATTR_DELETE_HORIZON else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset - self.base_offset) & 0x7FFFFFFF


class Record(NamedTuple):
    """One record in log order; batch facts are reached through :attr:`batch`."""

    offset: int  # absolute
    timestamp: int  # ms; -1 for magic 0
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime, -1 none (magic 0)
    key: bytes | None
    value: bytes | None  # None = tombstone
    headers: tuple[tuple[str, bytes | None], ...]
    control_type: str | None  # "ABORT"/"COMMIT"/"UNKNOWN(n)" on control records, else None
    batch: BatchInfo

    @property
    def offsets_partition(self) -> int:
        return self.batch.offsets_partition

    @property
    def batch_base_offset(self) -> int:
        return self.batch.base_offset

    @property
    def batch_last_offset(self) -> int:
        return self.batch.last_offset

    @property
    def batch_position(self) -> int:
        return self.batch.position

    @property
    def partition_leader_epoch(self) -> int:
        return self.batch.partition_leader_epoch

    @property
    def magic(self) -> int:
        return self.batch.magic

    @property
    def compression(self) -> str:
        return self.batch.compression

    @property
    def producer_id(self) -> int:
        return self.batch.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.batch.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.batch.base_sequence

    @property
    def sequence(self) -> int:
        """The record's own producer sequence (what kafka-dump-log prints), -1 if none."""
        b = self.batch
        if b.base_sequence < 0:
            return -1
        return (b.base_sequence + self.offset - b.base_offset) & 0x7FFFFFFF

    @property
    def is_transactional(self) -> bool:
        return self.batch.is_transactional

    @property
    def is_control(self) -> bool:
        return self.batch.is_control

    @property
    def crc_valid(self) -> bool:
        return self.batch.crc_valid

    @property
    def source(self) -> str:
        return self.batch.source


class _Corrupt(Exception):
    """Internal: bytes that cannot be decoded; always turned into a Problem."""


# --------------------------------------------------------------------------------------------
# Magic 2 record batches
# --------------------------------------------------------------------------------------------


def _read_headers(
    buf: bytes, pos: int, end: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = read_varint(buf, pos)
    if count < 0 or count > end - pos:
        raise _Corrupt(f"invalid header count {count}")
    headers = []
    for _ in range(count):
        klen, pos = read_varint(buf, pos)
        if klen < 0 or pos + klen > end:
            raise _Corrupt(f"invalid header key length {klen}")
        # surrogateescape keeps undecodable bytes so a re-encode is byte-exact
        hkey = buf[pos : pos + klen].decode("utf-8", "surrogateescape")
        pos += klen
        vlen, pos = read_varint(buf, pos)
        if vlen < 0:
            hval = None
        else:
            if pos + vlen > end:
                raise _Corrupt(f"invalid header value length {vlen}")
            hval = buf[pos : pos + vlen]
            pos += vlen
        headers.append((hkey, hval))
    return tuple(headers), pos


def _short_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint as :func:`read_varint` reads it, one- and two-byte ones by table
    (lengths < 8192: nearly every ``__consumer_offsets`` record's)."""
    b = buf[pos]
    if b < 0x80:
        return ZIGZAG_1[b], pos + 1
    if buf[pos + 1] < 0x80:
        return ZIGZAG_2[(b & 0x7F) | (buf[pos + 1] << 7)], pos + 2
    return read_varint(buf, pos)


def _sized_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    """A record's key or value: a varint length, then that many bytes (null if negative)."""
    n, pos = _short_varint(buf, pos)
    if n < 0:
        return None, pos
    return buf[pos : pos + n], pos + n


def _decode_v2_records(
    buf: bytes, pos: int, end: int, count: int, base_offset: int, base_ts: int,
    append_ts: int | None, ts_type: int, batch: BatchInfo, out: list[Record],
) -> int:
    """Append the ``count`` records in ``buf[pos:end]`` to ``out``; return the end position.

    The record's one-byte fields (attributes, most timestamp and offset deltas, an empty
    header count) are read inline, the lengths through :func:`_short_varint`. On error the
    records already decoded stay in ``out`` and _Corrupt, ValueError or IndexError propagates.
    """
    append, new, rec_cls, no_headers = out.append, _new_tuple, Record, _NO_HEADERS
    varint, zz1, short, sized = read_varint, ZIGZAG_1, _short_varint, _sized_bytes
    for _ in range(count):
        rlen, pos = short(buf, pos)
        rend = pos + rlen
        if rend > end or rlen < 6:
            raise _Corrupt(f"record length {rlen} at {pos} outside its batch")
        b = buf[pos + 1]  # skip the record attributes (int8, unused by Kafka)
        if b < 0x80:
            ts_delta = zz1[b]
            pos += 2
        else:
            ts_delta, pos = varint(buf, pos + 1)
        b = buf[pos]
        if b < 0x80:
            off_delta = zz1[b]
            pos += 1
        else:
            off_delta, pos = varint(buf, pos)
        key, pos = sized(buf, pos)
        value, pos = sized(buf, pos)
        if buf[pos] == 0:
            headers = no_headers
            pos += 1
        else:
            headers, pos = _read_headers(buf, pos, rend)
        if pos != rend:
            raise _Corrupt(
                f"record at {rend - rlen} declares {rlen} bytes but holds {pos - rend + rlen}"
            )
        ts = base_ts + ts_delta if append_ts is None else append_ts
        append(new(rec_cls, (base_offset + off_delta, ts, ts_type, key, value, headers, None,
                             batch)))
    return pos


def decode_v2_batch(
    data: bytes,
    mv: memoryview,
    pos: int,
    end: int,
    header: tuple[int, ...],
    crc_ok: bool,
    path: str,
    offsets_partition: int,
) -> tuple[BatchInfo, list[Record], str | None]:
    """Build the BatchInfo of a framed v2 batch and decode its records.

    Returns the records decoded (all of them, or those before the error) and the error text.
    """
    base, length, epoch, _, crc, attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq, count = (
        header
    )
    codec = attrs & ATTR_CODEC
    ts_type = (attrs & ATTR_TIMESTAMP_TYPE) >> 3
    batch = _new_tuple(BatchInfo, (
        path, offsets_partition, pos, length + 12, base, base + last_delta, 2, attrs,
        COMPRESSION_NAMES[codec], ts_type, base_ts, max_ts, epoch, pid, pepoch, bseq, count,
        attrs & ATTR_TRANSACTIONAL != 0, attrs & ATTR_CONTROL != 0, crc, crc_ok,
    ))
    records: list[Record] = []
    error = None
    try:
        if count < 0:
            raise _Corrupt(f"negative record count {count}")
        if codec == 0:
            buf = data
            start = pos + V2_HEADER_SIZE
        else:
            try:
                buf = decompress(codec, mv[pos + V2_HEADER_SIZE : end].tobytes(), 2)
            except Exception as exc:
                raise _Corrupt(f"{batch.compression} decompression failed: {exc!r}") from exc
            start, end = 0, len(buf)
        rpos = _decode_v2_records(
            buf, start, end, count, base, base_ts, max_ts if ts_type else None, ts_type, batch,
            records,
        )
        if rpos != end:
            raise _Corrupt(f"{end - rpos} bytes left after {count} records")
    except (_Corrupt, IndexError, ValueError) as exc:
        error = f"undecodable batch: {exc}"
    if attrs & ATTR_CONTROL:
        records = [r._replace(control_type=control_type_of(r.key)) for r in records]
    return batch, records, error


# --------------------------------------------------------------------------------------------
# Magic 0/1 messages
# --------------------------------------------------------------------------------------------


def _legacy_bytes(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    """A legacy message's key or value (``what``): an int32 length, then that many bytes
    (null for a negative length)."""
    if pos + 4 > end:
        raise _Corrupt(f"message ends inside its {what} length")
    n = _I.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise _Corrupt(f"{what} length {n} runs past its message")
    return buf[pos : pos + n], pos + n


def _legacy_key_value(buf: bytes, pos: int, end: int) -> tuple[bytes | None, bytes | None, int]:
    key, pos = _legacy_bytes(buf, pos, end, "key")
    value, pos = _legacy_bytes(buf, pos, end, "value")
    return key, value, pos


class _Inner(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    crc_ok: bool


def _decode_legacy_inner(buf: bytes, out: list[_Inner]) -> None:
    """Decode the message set inside a compressed v0/v1 wrapper into ``out``."""
    n = len(buf)
    pos = 0
    mv = memoryview(buf)
    while pos < n:
        if n - pos < LOG_OVERHEAD + MIN_LENGTH[0]:
            raise _Corrupt(f"{n - pos} trailing bytes in compressed message set")
        off, length, crc, magic, attrs = LEGACY_HEADER.unpack_from(buf, pos)
        end = pos + LOG_OVERHEAD + length
        if magic not in (0, 1) or length < MIN_LENGTH[magic] or end > n:
            raise _Corrupt(f"bad inner message header at {pos} (magic {magic}, length {length})")
        if attrs & ATTR_CODEC:
            raise _Corrupt(f"inner message at offset {off} is itself compressed")
        p = pos + 18
        ts = NO_TIMESTAMP
        if magic == 1:
            ts = _Q.unpack_from(buf, p)[0]
            p += 8
        key, value, p = _legacy_key_value(buf, p, end)
        out.append(_Inner(off, ts, key, value, crc32(mv[pos + 16 : end]) == crc))
        pos = end


def _legacy_messages(
    data: bytes, p: int, end: int, off: int, ts: int, codec: int, magic: int, compression: str
) -> tuple[list[_Inner], str | None]:
    """The message(s) of one top-level v0/v1 message at ``p`` (after its timestamp): itself,
    or the inner messages of a compressed wrapper; plus the error text if undecodable."""
    inner: list[_Inner] = []
    try:
        key, value, p = _legacy_key_value(data, p, end)
        if codec == 0:
            inner.append(_Inner(off, ts, key, value, True))
        else:
            if value is None:
                raise _Corrupt("compressed wrapper message without a value")
            try:
                payload = decompress(codec, value, magic)
            except Exception as exc:
                raise _Corrupt(f"{compression} decompression failed: {exc!r}") from exc
            _decode_legacy_inner(payload, inner)
    except (_Corrupt, IndexError, ValueError, struct.error) as exc:
        return inner, f"undecodable message: {exc}"
    return inner, None


def decode_legacy(
    data: bytes,
    mv: memoryview,
    pos: int,
    end: int,
    magic: int,
    crc_ok: bool,
    path: str,
    offsets_partition: int,
) -> tuple[BatchInfo, list[Record], str | None]:
    """One top-level v0/v1 message: a plain message, or a compressed wrapper of a message set."""
    off, length, crc, _, attrs = LEGACY_HEADER.unpack_from(data, pos)
    codec = attrs & ATTR_CODEC
    compression = CODEC_NAMES[codec] if codec < 5 else f"unknown({codec})"
    ts_type = (attrs & ATTR_TIMESTAMP_TYPE) >> 3 if magic == 1 else -1
    p = pos + 18
    ts = NO_TIMESTAMP
    if magic == 1:
        ts = _Q.unpack_from(data, p)[0]
        p += 8
    inner, error = _legacy_messages(data, p, end, off, ts, codec, magic, compression)
    # magic >= 1 wrappers carry the absolute offset of the LAST inner message and inner offsets
    # relative to the first; magic 0 inner offsets are absolute.
    shift = off - inner[-1].offset if (codec and magic >= 1 and inner) else 0
    if not all(i.crc_ok for i in inner):
        crc_ok = False
    batch = _new_tuple(BatchInfo, (
        path, offsets_partition, pos, length + LOG_OVERHEAD,
        inner[0].offset + shift if inner else off, off, magic, attrs, compression, ts_type, ts,
        ts, -1, NO_PRODUCER_ID, -1, -1, len(inner), False, False, crc, crc_ok,
    ))
    log_append = ts_type == 1
    records = [
        _new_tuple(Record, (i.offset + shift, ts if log_append else i.timestamp, ts_type, i.key,
                            i.value, _NO_HEADERS, None, batch))
        for i in inner
    ]
    return batch, records, error
