"""Read (and write) Kafka log segment files of a ``__consumer_offsets`` data directory.

Why a reader of raw segments at all: the Kafka consumer API hides producer ids, transaction
markers, batch headers and aborted data, and a broker may not even be running. Reading the
``.log`` files directly (as ``kafka-dump-log`` does) sees everything the group coordinator sees
when it replays the topic (spec section 2.1).

What is handled:

* magic 0/1 message sets (including compressed wrapper messages; magic 1 inner offsets are
  relative to the wrapper, magic 0 inner offsets are absolute) and magic 2 record batches;
* compression none/gzip/snappy/lz4/zstd via ``kafka.codec`` (imported lazily: ``import kafka``
  costs ~150 ms and >99% of batches are uncompressed);
* CRC32C (v2, attributes..end) and CRC32 (v0/v1, magic..end); a batch with a bad CRC is still
  decoded when its framing is sound, its records flagged ``crc_valid=False``;
* corruption: a bad length, bad magic, a batch running past the end of the file, undecodable
  records or a decompression failure become a :class:`Problem` (file, byte position, bytes
  skipped, reason) and the reader resynchronises on the next header whose checksum validates.
  Bad bytes never raise; only opening a file can (``OSError``).

Not covered by any checksum (Kafka's design, so brokers can assign them without re-hashing):
the base offset, the length and the partition leader epoch of a v2 batch. A flipped bit there is
detected only when it breaks framing or offset monotonicity.

Performance, measured on this machine kind (x86_64, CPython 3.11, 2 shared vCPUs; one thread;
best of 3-9 runs; both parsers validate CRCs and materialise offset, timestamp, key and value;
reproduce with ``python -m pipelines.sources.segments --bench PATH``):

=====================================================  ==================  ==================
data                                                    hand-written        kafka-python 3.0.12
=====================================================  ==================  ==================
public corpus: 340 files, 23 MB, 171,764 records in     ~480k records/s     ~224k records/s
125,150 batches (nearly all 1-record uncompressed v2)
golden scenario-a: 16,373 records, gzip/zstd/txn/       ~370-410k records/s ~170-196k records/s
control batches
=====================================================  ==================  ==================

(kafka-python = ``MemoryRecords``/``DefaultRecordBatch``/``LegacyRecordBatch`` with
``validate_crc()``.) Under load from other processes both fell by the same factor (e.g.
356k vs 127k); the ratio stayed 2.1-2.8x. The Arrow view built from these record objects
(:func:`batches_to_arrow`) runs at ~150-190k rows/s on the public corpus, so :func:`read_arrow`
and :func:`pipelines.sources.fastread.read_file_arrow` use the vectorized reader of :mod:`pipelines.sources.fastread`
instead (same output; ~0.8-1.2M rows/s), which falls back to the functions here for every
batch it does not handle itself.

So the hand-written parser is used; ``kafka.codec`` is reused for decompression only. The hot
path works on one ``bytes`` object per file with ``Struct.unpack_from``, decodes one- and
two-byte varints inline by table lookup, and builds records as NamedTuples through
``tuple.__new__`` (measured: 115 ns per record vs 175 ns for a slots dataclass and 285 ns for
the NamedTuple constructor). Batch facts live on one shared :class:`BatchInfo` per batch; a
per-batch cost (header, CRC, BatchInfo) of ~1 us is as large as the per-record cost here,
because most ``__consumer_offsets`` batches hold a single record.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .record_batches.framing import (
    ATTR_CODEC,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CODEC_IDS,
    CODEC_NAMES,
    COMPRESSION_NAMES,
    LEGACY_HEADER,
    LOG_OVERHEAD,
    MIN_LENGTH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    V2_CRC_START,
    V2_HEADER,
    V2_HEADER_SIZE,
    ZIGZAG_1,
    ZIGZAG_2,
    compress,
    control_type_of,
    coordinator_epoch_of,
    decompress,
    read_varint,
    write_varint,
)
from .record_batches.framing import crc32c as _crc32c
from .record_batches.problems import Problem

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

__all__ = [
    "CODEC_NAMES",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "BatchInfo",
    "FoldResult",
    "NewRecord",
    "PartitionLog",
    "Problem",
    "Record",
    "RecordLike",
    "SegmentFile",
    "SegmentWriter",
    "batches_to_arrow",
    "benchmark",
    "control_type_of",
    "coordinator_epoch_of",
    "decode_segment_bytes",
    "encode_batch",
    "encode_control_batch",
    "encode_records",
    "find_segments",
    "fold_arrow",
    "fold_transactions",
    "iter_batches",
    "parse_segment_name",
    "partition_of_dir",
    "read_arrow",
    "read_records",
    "read_segment_file",
    "records_to_arrow",
    "reencode_batch",
]

_CODEC_IDS = CODEC_IDS
_LOG_OVERHEAD = LOG_OVERHEAD
_V2 = V2_HEADER
_V2_HEADER = V2_HEADER_SIZE
_V2_CRC_START = V2_CRC_START
_LEGACY = LEGACY_HEADER
_QI = struct.Struct(">qi")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_U32 = struct.Struct(">I")
_MIN_LENGTH = MIN_LENGTH
_ATTR_CODEC = ATTR_CODEC
_ATTR_TIMESTAMP_TYPE = ATTR_TIMESTAMP_TYPE
_ATTR_TRANSACTIONAL = ATTR_TRANSACTIONAL
_ATTR_CONTROL = ATTR_CONTROL
_ATTR_DELETE_HORIZON = ATTR_DELETE_HORIZON

_NO_HEADERS: tuple[tuple[str, bytes | None], ...] = ()
_new_tuple = tuple.__new__

_SEGMENT_NAME = re.compile(r"^(\d+)\.log((?:\.(?:swap|deleted|cleaned))?(?:@[0-9A-Za-z]+)?)$")
_PARTITION_DIR = re.compile(
    r"^__consumer_offsets-(\d+)(?:\.[0-9A-Za-z]+-(?:delete|future|stray))?$"
)
_MAGIC_CANDIDATE = re.compile(rb"(?=[\x00-\xff]{16}[\x00-\x02])", re.DOTALL)
_NONZERO = re.compile(rb"[^\x00]")


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
        return self.base_timestamp if self.attributes & _ATTR_DELETE_HORIZON else None

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


@dataclass(slots=True, frozen=True)
class SegmentFile:
    """A segment file found on disk, with what its path says about it."""

    path: Path
    offsets_partition: int  # -1 when the directory is not __consumer_offsets-N
    base_offset: int  # from the file name; 0 when the name does not carry one
    suffix: str  # "", ".swap", ".deleted", ".cleaned", "@<commit>" or a combination


@dataclass(slots=True)
class PartitionLog:
    """The segments of one ``__consumer_offsets-N`` directory, in log order."""

    directory: Path
    offsets_partition: int
    segments: list[SegmentFile] = field(default_factory=list)


class _Corrupt(Exception):
    """Internal: bytes that cannot be decoded; always turned into a Problem."""


# --------------------------------------------------------------------------------------------
# Names and directory walking
# --------------------------------------------------------------------------------------------


def parse_segment_name(path: str | os.PathLike[str]) -> SegmentFile | None:
    """Describe ``path`` if its name is a segment name (``<base>.log`` plus Kafka's
    ``.swap``/``.deleted``/``.cleaned`` or the corpus' ``@<commit>`` suffix), else None."""
    p = Path(path)
    m = _SEGMENT_NAME.match(p.name)
    if m is None:
        return None
    return SegmentFile(p, partition_of_dir(p.parent), int(m.group(1)), m.group(2))


def partition_of_dir(directory: str | os.PathLike[str]) -> int:
    """Partition number of a ``__consumer_offsets-N`` directory (also Kafka's ``-delete`` /
    ``-future`` renames), -1 for any other directory."""
    m = _PARTITION_DIR.match(Path(directory).name)
    return int(m.group(1)) if m else -1


def find_segments(*paths: str | os.PathLike[str], include_deleted: bool = False) -> list[PartitionLog]:
    """Find segment files under ``paths`` (files or directories, recursively), grouped by
    partition directory and ordered by base offset, then name.

    Grouping is by ``__consumer_offsets-N`` *directory*, not by bare partition number: within
    one data dir that is the same thing, but two data dirs (two brokers' replicas, two
    repositories of the corpus) hold unrelated copies that must not be interleaved. Walking a
    directory only picks files inside ``__consumer_offsets-N`` directories (a data dir also
    holds every other topic); a file named explicitly is always taken.

    ``*.log.deleted`` files are skipped in directories: Kafka renames a segment so once it has
    left the log (retention moved the log start past it, or the cleaner replaced it), and
    removes it a minute later; whether one is still there when a data dir is copied is luck,
    so reading it would make the result depend on timing. Name one explicitly (or pass
    ``include_deleted``) to read it.
    """
    found: dict[Path, list[SegmentFile]] = {}
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames.sort()
                if partition_of_dir(dirpath) < 0:
                    continue
                for name in filenames:
                    seg = parse_segment_name(Path(dirpath, name))
                    if seg is not None and (include_deleted or ".deleted" not in seg.suffix):
                        found.setdefault(seg.path.parent, []).append(seg)
        else:
            seg = parse_segment_name(p) or SegmentFile(p, partition_of_dir(p.parent), 0, "")
            found.setdefault(p.parent, []).append(seg)
    logs = []
    for directory, segs in found.items():
        unique = {s.path: s for s in segs}.values()
        ordered = sorted(unique, key=lambda s: (s.base_offset, s.path.name))
        logs.append(PartitionLog(directory, partition_of_dir(directory), ordered))
    logs.sort(key=lambda pl: (pl.offsets_partition, str(pl.directory)))
    return logs


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def _decompress(codec: int, payload: bytes, magic: int) -> bytes:
    return decompress(codec, payload, magic)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_varint(buf, pos)
    except ValueError as exc:
        raise _Corrupt(str(exc)) from exc


def _read_headers(
    buf: bytes, pos: int, end: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = _varint(buf, pos)
    if count < 0 or count > end - pos:
        raise _Corrupt(f"invalid header count {count}")
    headers = []
    for _ in range(count):
        klen, pos = _varint(buf, pos)
        if klen < 0 or pos + klen > end:
            raise _Corrupt(f"invalid header key length {klen}")
        # surrogateescape keeps undecodable bytes so a re-encode is byte-exact
        hkey = buf[pos : pos + klen].decode("utf-8", "surrogateescape")
        pos += klen
        vlen, pos = _varint(buf, pos)
        if vlen < 0:
            hval = None
        else:
            if pos + vlen > end:
                raise _Corrupt(f"invalid header value length {vlen}")
            hval = buf[pos : pos + vlen]
            pos += vlen
        headers.append((hkey, hval))
    return tuple(headers), pos


_ZZ1 = ZIGZAG_1
_ZZ2 = ZIGZAG_2


def _decode_v2_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    append_ts: int | None,
    ts_type: int,
    batch: BatchInfo,
    out: list[Record],
) -> int:
    """Append the ``count`` records in ``buf[pos:end]`` to ``out``; return the end position.

    The hot path: one- and two-byte varints (lengths < 8192, small deltas: nearly every
    ``__consumer_offsets`` record) are decoded inline by table, longer ones by :func:`_varint`.
    On error the records already decoded stay in ``out`` and :class:`_Corrupt` or IndexError
    propagates.
    """
    append = out.append
    new = _new_tuple
    rec_cls = Record
    no_headers = _NO_HEADERS
    varint = _varint
    zz1 = _ZZ1
    zz2 = _ZZ2
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            rlen = zz1[b]
            pos += 1
        elif buf[pos + 1] < 0x80:
            rlen = zz2[(b & 0x7F) | (buf[pos + 1] << 7)]
            pos += 2
        else:
            rlen, pos = varint(buf, pos)
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
        b = buf[pos]
        if b < 0x80:
            klen = zz1[b]
            pos += 1
        elif buf[pos + 1] < 0x80:
            klen = zz2[(b & 0x7F) | (buf[pos + 1] << 7)]
            pos += 2
        else:
            klen, pos = varint(buf, pos)
        if klen < 0:
            key = None
        else:
            key = buf[pos : pos + klen]
            pos += klen
        b = buf[pos]
        if b < 0x80:
            vlen = zz1[b]
            pos += 1
        elif buf[pos + 1] < 0x80:
            vlen = zz2[(b & 0x7F) | (buf[pos + 1] << 7)]
            pos += 2
        else:
            vlen, pos = varint(buf, pos)
        if vlen < 0:
            value = None
        else:
            value = buf[pos : pos + vlen]
            pos += vlen
        if buf[pos] == 0:
            headers = no_headers
            pos += 1
        else:
            headers, pos = _read_headers(buf, pos, rend)
        if pos != rend:
            raise _Corrupt(
                f"record at {rend - rlen} declares {rlen} bytes but holds {pos - rend + rlen}"
            )
        append(
            new(
                rec_cls,
                (
                    base_offset + off_delta,
                    base_ts + ts_delta if append_ts is None else append_ts,
                    ts_type,
                    key,
                    value,
                    headers,
                    None,
                    batch,
                ),
            )
        )
    return pos


_COMPRESSION_NAMES = COMPRESSION_NAMES


def _decode_v2_batch(
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
    (
        base,
        length,
        leader_epoch,
        _,
        crc,
        attrs,
        last_delta,
        base_ts,
        max_ts,
        pid,
        pepoch,
        bseq,
        count,
    ) = header
    codec = attrs & _ATTR_CODEC
    ts_type = (attrs & _ATTR_TIMESTAMP_TYPE) >> 3
    batch = _new_tuple(
        BatchInfo,
        (
            path,
            offsets_partition,
            pos,
            length + 12,
            base,
            base + last_delta,
            2,
            attrs,
            _COMPRESSION_NAMES[codec],
            ts_type,
            base_ts,
            max_ts,
            leader_epoch,
            pid,
            pepoch,
            bseq,
            count,
            attrs & _ATTR_TRANSACTIONAL != 0,
            attrs & _ATTR_CONTROL != 0,
            crc,
            crc_ok,
        ),
    )
    records: list[Record] = []
    error = None
    try:
        if count < 0:
            raise _Corrupt(f"negative record count {count}")
        if codec == 0:
            buf = data
            start = pos + _V2_HEADER
        else:
            try:
                buf = _decompress(codec, mv[pos + _V2_HEADER : end].tobytes(), 2)
            except Exception as exc:
                raise _Corrupt(f"{batch.compression} decompression failed: {exc!r}") from exc
            start, end = 0, len(buf)
        rpos = _decode_v2_records(
            buf,
            start,
            end,
            count,
            base,
            base_ts,
            max_ts if ts_type else None,
            ts_type,
            batch,
            records,
        )
        if rpos != end:
            raise _Corrupt(f"{end - rpos} bytes left after {count} records")
    except (_Corrupt, IndexError, ValueError) as exc:
        error = f"undecodable batch: {exc}"
    if attrs & _ATTR_CONTROL:
        records = [r._replace(control_type=control_type_of(r.key)) for r in records]
    return batch, records, error


def _legacy_key_value(buf: bytes, pos: int, end: int) -> tuple[bytes | None, bytes | None, int]:
    if pos + 4 > end:
        raise _Corrupt("message ends inside its key length")
    klen = _I.unpack_from(buf, pos)[0]
    pos += 4
    if klen < 0:
        key = None
    else:
        if pos + klen > end:
            raise _Corrupt(f"key length {klen} runs past its message")
        key = buf[pos : pos + klen]
        pos += klen
    if pos + 4 > end:
        raise _Corrupt("message ends inside its value length")
    vlen = _I.unpack_from(buf, pos)[0]
    pos += 4
    if vlen < 0:
        value = None
    else:
        if pos + vlen > end:
            raise _Corrupt(f"value length {vlen} runs past its message")
        value = buf[pos : pos + vlen]
        pos += vlen
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
        if n - pos < _LOG_OVERHEAD + _MIN_LENGTH[0]:
            raise _Corrupt(f"{n - pos} trailing bytes in compressed message set")
        off, length, crc, magic, attrs = _LEGACY.unpack_from(buf, pos)
        end = pos + _LOG_OVERHEAD + length
        if magic not in (0, 1) or length < _MIN_LENGTH[magic] or end > n:
            raise _Corrupt(f"bad inner message header at {pos} (magic {magic}, length {length})")
        if attrs & _ATTR_CODEC:
            raise _Corrupt(f"inner message at offset {off} is itself compressed")
        p = pos + 18
        ts = NO_TIMESTAMP
        if magic == 1:
            ts = _Q.unpack_from(buf, p)[0]
            p += 8
        key, value, p = _legacy_key_value(buf, p, end)
        out.append(_Inner(off, ts, key, value, zlib.crc32(mv[pos + 16 : end]) == crc))
        pos = end


def _plausible_header(
    data: bytes, mv: memoryview, p: int, floor: int, n: int, check_crc: bool
) -> bool:
    """Could a batch start at ``p``? With ``check_crc`` the batch must also checksum."""
    if n - p < _LOG_OVERHEAD + _MIN_LENGTH[0]:
        return False
    base, length = _QI.unpack_from(data, p)
    magic = data[p + 16]
    if magic > 2 or base < floor or length < _MIN_LENGTH[magic] or p + _LOG_OVERHEAD + length > n:
        return False
    end = p + _LOG_OVERHEAD + length
    if magic == 2:
        if _I.unpack_from(data, p + 23)[0] < 0 or _I.unpack_from(data, p + 57)[0] < 0:
            return False  # negative lastOffsetDelta or recordsCount
        return (
            not check_crc
            or _crc32c(mv[p + _V2_CRC_START : end]) == _U32.unpack_from(data, p + 17)[0]
        )
    return not check_crc or zlib.crc32(mv[p + 16 : end]) == _U32.unpack_from(data, p + 12)[0]


def _resync(data: bytes, mv: memoryview, start: int, floor: int, n: int) -> int:
    """Position of the next batch header at or after ``start`` that checksums, or ``n``.

    Candidates are positions whose magic byte (at +16) is 0..2, found by a C-speed regex;
    zero-filled stretches (preallocated segments) are skipped in one jump since a real header
    has a non-zero length field.
    """
    p = start
    while True:
        m = _MAGIC_CANDIDATE.search(data, p)
        if m is None:
            return n
        p = m.start()
        if n - p < _LOG_OVERHEAD + _MIN_LENGTH[0]:
            return n
        if _plausible_header(data, mv, p, floor, n, True):
            return p
        if data[p + 8 : p + 12] == b"\x00\x00\x00\x00":
            z = _NONZERO.search(data, p + 12)
            if z is None:
                return n
            p = max(p + 1, z.start() - 11)
        else:
            p += 1


def decode_segment_bytes(
    data: bytes,
    *,
    path: str = "<memory>",
    offsets_partition: int = -1,
    base_offset: int = 0,
    problems: list[Problem] | None = None,
) -> Iterator[tuple[BatchInfo, list[Record]]]:
    """Decode a segment's bytes into ``(batch, records)`` pairs in file order.

    ``base_offset`` (the segment's name) is the lowest offset a resynchronisation accepts.
    Problems are appended to ``problems`` when given (the caller reports them: one log line
    per problem, not one here and one there), else logged at WARNING; nothing raises.
    """

    def report(position: int, skipped: int, reason: str) -> None:
        if problems is not None:
            problems.append(Problem(path, position, skipped, reason))
        else:
            log.warning("%s @%d: %s (%d bytes skipped)", path, position, reason, skipped)

    if not isinstance(data, bytes):
        data = bytes(data)  # slices of bytearray/mmap would not be bytes
    n = len(data)
    mv = memoryview(data)
    pos = 0
    floor = base_offset  # lowest base offset the next batch may have
    v2_unpack = _V2.unpack_from
    decode_v2 = _decode_v2_batch
    crc32c = _crc32c
    try:
        while pos < n:
            # Fast path: a well-framed v2 batch whose checksum and offset are as expected.
            if n - pos >= _V2_HEADER and data[pos + 16] == 2:
                header = v2_unpack(data, pos)
                end = pos + 12 + header[1]
                if (
                    header[1] >= 49
                    and end <= n
                    and header[0] >= floor
                    and crc32c(mv[pos + 21 : end]) == header[4]
                ):
                    batch, records, error = decode_v2(
                        data, mv, pos, end, header, True, path, offsets_partition
                    )
                    if error is not None:
                        report(pos, end - pos, error)
                    yield batch, records
                    floor = batch.last_offset + 1
                    pos = end
                    continue
            # Everything else: legacy messages, damaged framing, bad checksums.
            step = _slow_step(data, mv, pos, n, floor, path, offsets_partition, report)
            if step is None:
                break
            pos, item = step
            if item is not None:
                yield item
                if item[0].crc_valid:  # a damaged header must not move the floor
                    floor = item[0].last_offset + 1
    finally:
        mv.release()


def _slow_step(
    data: bytes,
    mv: memoryview,
    pos: int,
    n: int,
    floor: int,
    path: str,
    offsets_partition: int,
    report: Callable[[int, int, str], None],
) -> tuple[int, tuple[BatchInfo, list[Record]] | None] | None:
    """Handle the batch at ``pos`` when the fast path declined it.

    Returns (next position, decoded batch or None), or None when the rest of the file is
    unreadable (already reported).
    """
    if _NONZERO.search(data, pos) is None:
        report(pos, n - pos, "zero-filled tail (preallocated segment or unclean shutdown)")
        return None
    if n - pos < 17:
        report(pos, n - pos, f"truncated: {n - pos} bytes left, too few for a batch header")
        return None
    base, length = _QI.unpack_from(data, pos)
    magic = data[pos + 16]
    end = pos + _LOG_OVERHEAD + length
    reason = None
    if magic > 2:
        reason = f"bad magic {magic}"
    elif length < _MIN_LENGTH[magic]:
        reason = f"bad length {length}"
    elif end > n:
        reason = (
            f"batch declares {length} bytes but only {n - pos - _LOG_OVERHEAD} remain (truncated)"
        )
    elif base < 0:
        reason = f"negative base offset {base}"
    if reason is not None:
        nxt = _resync(data, mv, pos + 1, floor, n)
        report(pos, nxt - pos, reason + "; resynchronised" if nxt < n else reason)
        return nxt, None

    if magic == 2:
        header = _V2.unpack_from(data, pos)
        crc = header[4]
        crc_ok = _crc32c(mv[pos + _V2_CRC_START : end]) == crc
        batch, records, error = _decode_v2_batch(
            data, mv, pos, end, header, crc_ok, path, offsets_partition
        )
    else:
        crc = _LEGACY.unpack_from(data, pos)[2]
        crc_ok = zlib.crc32(mv[pos + 16 : end]) == crc
        batch, records, error = _decode_legacy(
            data, mv, pos, end, magic, crc_ok, path, offsets_partition
        )
    if not crc_ok:
        # The length field is not checksummed: trust it only if a sound batch (or the end of
        # the file) follows, or if the records filled the batch exactly and something
        # header-shaped follows. Otherwise skip to the next header that checksums.
        trusted = (
            end == n
            or _plausible_header(data, mv, end, base, n, True)
            or (error is None and _plausible_header(data, mv, end, base, n, False))
        )
        if not trusted:
            nxt = _resync(data, mv, pos + 1, floor, n)
            report(pos, nxt - pos, "checksum mismatch and no batch follows; resynchronised")
            return nxt, None
        report(pos, 0, f"checksum mismatch (stored {crc}); records flagged crc_valid=False")
    elif not batch.crc_valid:
        report(pos, 0, "inner message checksum mismatch; records flagged crc_valid=False")
    if base < floor:
        report(pos, 0, f"base offset {base} below the expected minimum {floor}")
    if error is not None:
        report(pos, end - pos, error)
    return end, (batch, records)


def _decode_legacy(
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
    off, length, crc, _, attrs = _LEGACY.unpack_from(data, pos)
    codec = attrs & _ATTR_CODEC
    compression = CODEC_NAMES[codec] if codec < 5 else f"unknown({codec})"
    ts_type = (attrs & _ATTR_TIMESTAMP_TYPE) >> 3 if magic == 1 else -1
    p = pos + 18
    ts = NO_TIMESTAMP
    if magic == 1:
        ts = _Q.unpack_from(data, p)[0]
        p += 8
    inner: list[_Inner] = []
    error = None
    try:
        key, value, p = _legacy_key_value(data, p, end)
        if codec == 0:
            inner.append(_Inner(off, ts, key, value, True))
        else:
            if value is None:
                raise _Corrupt("compressed wrapper message without a value")
            try:
                payload = _decompress(codec, value, magic)
            except Exception as exc:
                raise _Corrupt(f"{compression} decompression failed: {exc!r}") from exc
            _decode_legacy_inner(payload, inner)
    except (_Corrupt, IndexError, ValueError, struct.error) as exc:
        error = f"undecodable message: {exc}"
    # magic >= 1 wrappers carry the absolute offset of the LAST inner message and inner offsets
    # relative to the first; magic 0 inner offsets are absolute.
    shift = off - inner[-1].offset if (codec and magic >= 1 and inner) else 0
    if not all(i.crc_ok for i in inner):
        crc_ok = False
    batch = _new_tuple(
        BatchInfo,
        (
            path,
            offsets_partition,
            pos,
            length + _LOG_OVERHEAD,
            inner[0].offset + shift if inner else off,
            off,
            magic,
            attrs,
            compression,
            ts_type,
            ts,
            ts,
            -1,
            NO_PRODUCER_ID,
            -1,
            -1,
            len(inner),
            False,
            False,
            crc,
            crc_ok,
        ),
    )
    log_append = ts_type == 1
    records = [
        _new_tuple(
            Record,
            (
                i.offset + shift,
                ts if log_append else i.timestamp,
                ts_type,
                i.key,
                i.value,
                _NO_HEADERS,
                None,
                batch,
            ),
        )
        for i in inner
    ]
    return batch, records, error


def read_segment_file(
    segment: SegmentFile | str | os.PathLike[str],
    *,
    offsets_partition: int | None = None,
    problems: list[Problem] | None = None,
) -> Iterator[tuple[BatchInfo, list[Record]]]:
    """Decode one segment file. The partition defaults to what its directory name says."""
    if not isinstance(segment, SegmentFile):
        p = Path(segment)
        segment = parse_segment_name(p) or SegmentFile(p, partition_of_dir(p.parent), 0, "")
    data = segment.path.read_bytes()
    part = segment.offsets_partition if offsets_partition is None else offsets_partition
    yield from decode_segment_bytes(
        data,
        path=str(segment.path),
        offsets_partition=part,
        base_offset=segment.base_offset,
        problems=problems,
    )


def iter_batches(
    *paths: str | os.PathLike[str], problems: list[Problem] | None = None
) -> Iterator[tuple[BatchInfo, list[Record]]]:
    """All ``(batch, records)`` under ``paths``: partition directory by directory, each in
    segment order (see :func:`find_segments`)."""
    for plog in find_segments(*paths):
        for seg in plog.segments:
            yield from read_segment_file(seg, problems=problems)


def read_records(
    *paths: str | os.PathLike[str], problems: list[Problem] | None = None
) -> Iterator[Record]:
    """All records (data and control) under ``paths`` in log order per partition directory."""
    for _, records in iter_batches(*paths, problems=problems):
        yield from records


# --------------------------------------------------------------------------------------------
# Arrow view
# --------------------------------------------------------------------------------------------


# RAW_ARROW_SCHEMA column -> BatchInfo field, for the columns that are facts of the batch.
_BATCH_COLUMNS = (
    ("offsets_partition", "offsets_partition"),
    ("producer_id", "producer_id"),
    ("producer_epoch", "producer_epoch"),
    ("is_transactional", "is_transactional"),
    ("is_control", "is_control"),
    ("partition_leader_epoch", "partition_leader_epoch"),
    ("magic", "magic"),
    ("compression", "compression"),
    ("batch_base_offset", "base_offset"),
    ("crc_valid", "crc_valid"),
    ("source", "source"),
    ("source_position", "position"),
)


class _Columns:
    """Rows gathered for one Arrow batch.

    Batch-level columns are built with one value per Kafka batch and expanded by an Arrow
    ``take`` (C speed): most batches hold one record, so per-row Python work for 12 columns
    would dominate (measured: 150k -> 400k+ rows/s on the public corpus).
    """

    def __init__(self, cluster_id: str | None) -> None:
        self.cluster_id = cluster_id
        self.batches: list[BatchInfo] = []
        self.counts: list[int] = []
        self.records: list[Record] = []

    @property
    def rows(self) -> int:
        return len(self.records)

    def add(self, batch: BatchInfo, records: Sequence[Record]) -> None:
        if records:
            self.batches.append(batch)
            self.counts.append(len(records))
            self.records.extend(records)

    def to_arrow(self) -> pa.RecordBatch:
        import numpy as np
        import pyarrow as pa

        from .raw import RAW_ARROW_SCHEMA

        schema = RAW_ARROW_SCHEMA
        recs = self.records
        expand = pa.array(np.repeat(np.arange(len(self.batches), dtype=np.int64), self.counts))
        cols: dict[str, pa.Array] = {
            "cluster_id": pa.array([self.cluster_id], pa.string()).take(
                pa.array(np.zeros(len(recs), dtype=np.int64))
            ),
            "offset": pa.array([r[0] for r in recs], pa.int64()),
            "timestamp": pa.array(
                [r[1] if r[1] >= 0 else None for r in recs], schema.field("timestamp").type
            ),
            "timestamp_type": pa.array([r[2] for r in recs], pa.int8()),
            "key": pa.array([r[3] for r in recs], pa.binary()),
            "value": pa.array([r[4] for r in recs], pa.binary()),
            "control_type": pa.array([r[6] for r in recs], pa.string()),
        }
        for column, attr in _BATCH_COLUMNS:
            per_batch = [getattr(b, attr) for b in self.batches]
            cols[column] = pa.array(per_batch, schema.field(column).type).take(expand)
        return pa.RecordBatch.from_arrays([cols[f.name] for f in schema], schema=schema)


def batches_to_arrow(
    batches: Iterable[tuple[BatchInfo, Sequence[Record]]],
    *,
    cluster_id: str | None = None,
    rows_per_batch: int = 65536,
) -> Iterator[pa.RecordBatch]:
    """Arrow record batches (RAW_ARROW_SCHEMA) of about ``rows_per_batch`` rows; a Kafka batch
    is never split, so a chunk may exceed the target by one batch's records."""
    cols = _Columns(cluster_id)
    for batch, records in batches:
        cols.add(batch, records)
        if cols.rows >= rows_per_batch:
            yield cols.to_arrow()
            cols = _Columns(cluster_id)
    if cols.rows:
        yield cols.to_arrow()


def records_to_arrow(
    records: Iterable[Record], *, cluster_id: str | None = None, rows_per_batch: int = 65536
) -> Iterator[pa.RecordBatch]:
    """Same as :func:`batches_to_arrow` for loose records (e.g. after folding)."""

    def regroup() -> Iterator[tuple[BatchInfo, list[Record]]]:
        current: BatchInfo | None = None
        group: list[Record] = []
        for r in records:
            if r.batch is not current:
                if group and current is not None:
                    yield current, group
                current, group = r.batch, []
            group.append(r)
        if group and current is not None:
            yield current, group

    return batches_to_arrow(regroup(), cluster_id=cluster_id, rows_per_batch=rows_per_batch)


def read_arrow(
    *paths: str | os.PathLike[str],
    cluster_id: str | None = None,
    rows_per_batch: int = 65536,
    problems: list[Problem] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every record under ``paths`` (data and control, no folding) as RAW_ARROW_SCHEMA batches,
    in :func:`iter_batches` order.

    Vectorized (:mod:`pipelines.sources.fastread`, ~6x faster): the same rows, chunk
    boundaries and Problems as ``batches_to_arrow(iter_batches(*paths, problems=...))``.
    """
    from .fastread import read_segments_arrow

    segs = (seg for plog in find_segments(*paths) for seg in plog.segments)
    yield from read_segments_arrow(
        segs, cluster_id=cluster_id, rows_per_batch=rows_per_batch, problems=problems
    )


# --------------------------------------------------------------------------------------------
# Transaction folding (spec section 2.4)
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FoldResult:
    """What a read_committed consumer would see of one partition, plus what it hides.

    Control records are *not* in ``records`` (a consumer never returns them); they are kept in
    ``markers`` so callers can count them.
    """

    records: list[Record]  # non-transactional + committed transactional data, log order
    held_back: list[Record]  # data of transactions with no marker yet, log order
    aborted: list[Record]  # data of aborted transactions, log order
    markers: list[Record]  # control records, log order
    last_stable_offset: int  # first offset of the earliest open transaction, else end + 1

    @property
    def commit_markers(self) -> int:
        return sum(1 for m in self.markers if m.control_type == "COMMIT")

    @property
    def abort_markers(self) -> int:
        return sum(1 for m in self.markers if m.control_type == "ABORT")


def fold_transactions(
    records: Iterable[Record], *, stop_at_lso: bool = False, log_end_offset: int | None = None
) -> FoldResult:
    """Resolve transactions in ONE partition's records (log order), like a read_committed
    consumer: drop aborted data, keep committed data at its log position, hold back data whose
    producer has no marker yet.

    Transactions are keyed by producer id, as the broker's producer state is: a marker of any
    epoch ends the producer's open transaction. ``stop_at_lso=True`` also drops decided
    records at or after the last stable offset, which is exactly what a read_committed consumer
    returns (a streaming reader then resumes at ``last_stable_offset``). ``log_end_offset``
    overrides "last batch's last offset + 1" (0 for empty input).
    """
    out: list[Record | None] = []
    pending: dict[int, list[int]] = {}  # producer id -> indexes into out
    first_open: dict[int, int] = {}  # producer id -> offset of its open transaction's first record
    aborted_idx: list[int] = []
    markers: list[Record] = []
    end = 0
    for r in records:
        b = r[7]
        if b.last_offset + 1 > end:
            end = b.last_offset + 1
        if b.is_control:
            markers.append(r)
            # Only COMMIT/ABORT end a transaction; other control types (KRaft-only) do not.
            if r.control_type in ("COMMIT", "ABORT"):
                idx = pending.pop(b.producer_id, None)
                first_open.pop(b.producer_id, None)
                if idx and r.control_type == "ABORT":
                    aborted_idx.extend(idx)
            continue
        out.append(r)
        if b.is_transactional:
            pid = b.producer_id
            if pid not in pending:
                pending[pid] = []
                first_open[pid] = r.offset
            pending[pid].append(len(out) - 1)
    aborted = []
    for i in sorted(aborted_idx):
        aborted.append(out[i])
        out[i] = None
    held_back = []
    for i in sorted(i for idx in pending.values() for i in idx):
        held_back.append(out[i])
        out[i] = None
    if log_end_offset is not None:
        end = log_end_offset
    lso = min(first_open.values(), default=end)
    kept: list[Record] = [r for r in out if r is not None and (not stop_at_lso or r.offset < lso)]
    return FoldResult(kept, held_back, aborted, markers, lso)


def fold_arrow(
    table: pa.Table | pa.RecordBatch,
    *,
    stop_at_lso: bool = False,
    log_end_offset: int | None = None,
) -> tuple[pa.Table, int]:
    """:func:`fold_transactions` on RAW_ARROW_SCHEMA rows of one partition, vectorized:
    (data kept plus markers, in log order; last stable offset). See
    :func:`pipelines.sources.fastread.fold_arrow` for the one difference (log end offset)."""
    from .fastread import fold_arrow as fold

    return fold(table, stop_at_lso=stop_at_lso, log_end_offset=log_end_offset)


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


class RecordLike(Protocol):
    """What the encoder needs of a record (a :class:`Record` qualifies)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


class NewRecord(NamedTuple):
    """A record to write; satisfies :class:`RecordLike`."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


_put_varint = write_varint


def _put_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out.append(1)  # zig-zag(-1)
    else:
        _put_varint(out, len(b))
        out += b


def encode_records(records: Iterable[RecordLike], base_offset: int, base_timestamp: int) -> bytes:
    """The records section of a v2 batch (uncompressed), with minimal varints as Kafka writes."""
    out = bytearray()
    body = bytearray()
    for r in records:
        body.clear()
        body.append(0)  # record attributes
        _put_varint(body, r.timestamp - base_timestamp)
        _put_varint(body, r.offset - base_offset)
        _put_bytes(body, r.key)
        _put_bytes(body, r.value)
        headers = r.headers
        _put_varint(body, len(headers))
        for hk, hv in headers:
            _put_bytes(body, hk.encode("utf-8", "surrogateescape"))
            _put_bytes(body, hv)
        _put_varint(out, len(body))
        out += body
    return bytes(out)


_compress = compress


def encode_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int,
    compression: str = "none",
    timestamp_type: int = 0,
    partition_leader_epoch: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode one v2 record batch with a correct CRC32C.

    Defaults follow Kafka's MemoryRecordsBuilder: base timestamp = first record's, max timestamp
    = largest record timestamp, last offset delta = last record's offset - base. Pass them
    explicitly to reproduce a batch the log cleaner has thinned (its last offset delta and
    timestamps no longer follow from the remaining records).
    """
    codec = _CODEC_IDS.get(compression)
    if codec is None:
        raise ValueError(f"unknown compression {compression!r}; expected one of {CODEC_NAMES}")
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    attrs = (
        codec
        | (_ATTR_TIMESTAMP_TYPE if timestamp_type == 1 else 0)
        | (_ATTR_TRANSACTIONAL if is_transactional else 0)
        | (_ATTR_CONTROL if is_control else 0)
        | (_ATTR_DELETE_HORIZON if delete_horizon_ms is not None else 0)
    )
    body = encode_records(records, base_offset, base_timestamp)
    if codec:
        body = _compress(compression, body)
    out = bytearray(_V2_HEADER)
    _V2.pack_into(
        out,
        0,
        base_offset,
        _V2_HEADER - _LOG_OVERHEAD + len(body),
        partition_leader_epoch,
        2,
        0,
        attrs,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out += body
    _U32.pack_into(out, 17, _crc32c(memoryview(out)[_V2_CRC_START:]))
    return bytes(out)


def encode_control_batch(
    control_type: str,
    *,
    offset: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = 0,
) -> bytes:
    """A transaction marker batch (``"COMMIT"`` or ``"ABORT"``) as the coordinator writes it."""
    types = {"ABORT": 0, "COMMIT": 1}
    if control_type not in types:
        raise ValueError(f"control_type must be COMMIT or ABORT, not {control_type!r}")
    key = struct.pack(">hh", 0, types[control_type])
    value = struct.pack(">hi", 0, coordinator_epoch)
    return encode_batch(
        [NewRecord(offset, timestamp, key, value)],
        base_offset=offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def reencode_batch(batch: BatchInfo, records: Sequence[Record]) -> bytes:
    """Encode ``records`` with every header fact of ``batch``: for an uncompressed CreateTime
    batch this reproduces the original bytes exactly. Not possible for LogAppendTime batches
    (the broker overwrote the max timestamp and readers report it for every record, so the
    producer's timestamp deltas are gone) nor, in general, for compressed ones (codec library
    and level differ from the JVM's, so only the decompressed section is reproducible)."""
    if batch.magic != 2:
        raise ValueError("only magic 2 batches can be re-encoded")
    return encode_batch(
        records,
        base_offset=batch.base_offset,
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        last_offset_delta=batch.last_offset - batch.base_offset,
        base_timestamp=None if batch.delete_horizon_ms is not None else batch.base_timestamp,
        max_timestamp=batch.max_timestamp,
        delete_horizon_ms=batch.delete_horizon_ms,
    )


class SegmentWriter:
    """Append v2 batches to ``<data_dir>/__consumer_offsets-N/<base offset>.log``, assigning
    offsets like a broker. Used by the demo and tests to produce realistic logs.

    Use as a context manager (or call :meth:`close`). :meth:`roll` starts a new segment at the
    next offset, to produce multi-segment partitions. An existing segment of the same name is
    overwritten.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        offsets_partition: int,
        *,
        base_offset: int = 0,
        partition_leader_epoch: int = 0,
        compression: str = "none",
    ) -> None:
        self.directory = Path(data_dir) / f"__consumer_offsets-{offsets_partition}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.offsets_partition = offsets_partition
        self.next_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.compression = compression
        self.paths: list[Path] = []
        self._file: Any = None
        self._open_segment()

    def _open_segment(self) -> None:
        path = self.directory / f"{self.next_offset:020d}.log"
        self._file = path.open("wb")
        self.paths.append(path)

    @property
    def path(self) -> Path:
        """The segment being written."""
        return self.paths[-1]

    def write_raw(self, batch: bytes, next_offset: int) -> None:
        """Append pre-encoded batch bytes (e.g. from :func:`encode_batch`)."""
        self._file.write(batch)
        self.next_offset = next_offset

    def append(
        self,
        items: Iterable[tuple[bytes | None, bytes | None]],
        *,
        timestamp: int | Sequence[int],
        compression: str | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        timestamp_type: int = 0,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> tuple[int, int]:
        """Write ``(key, value)`` pairs as one batch; return its (base offset, last offset).
        ``timestamp`` is one value for all records or one per record."""
        pairs = list(items)
        if not pairs:
            raise ValueError("a batch needs at least one record")
        stamps = [timestamp] * len(pairs) if isinstance(timestamp, int) else list(timestamp)
        if len(stamps) != len(pairs):
            raise ValueError("one timestamp per record expected")
        base = self.next_offset
        recs = [
            NewRecord(base + i, t, k, v, tuple(headers))
            for i, ((k, v), t) in enumerate(zip(pairs, stamps, strict=True))
        ]
        data = encode_batch(
            recs,
            base_offset=base,
            compression=compression or self.compression,
            timestamp_type=timestamp_type,
            partition_leader_epoch=self.partition_leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=transactional,
        )
        self.write_raw(data, base + len(recs))
        return base, base + len(recs) - 1

    def append_marker(
        self,
        control_type: str,
        *,
        producer_id: int,
        producer_epoch: int,
        timestamp: int,
        coordinator_epoch: int = 0,
    ) -> int:
        """Write a COMMIT/ABORT marker for ``producer_id``; return its offset."""
        off = self.next_offset
        data = encode_control_batch(
            control_type,
            offset=off,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp=timestamp,
            coordinator_epoch=coordinator_epoch,
            partition_leader_epoch=self.partition_leader_epoch,
        )
        self.write_raw(data, off + 1)
        return off

    def roll(self) -> Path:
        """Close the current segment and start ``<next offset>.log``."""
        self._file.close()
        self._open_segment()
        return self.path

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Benchmark (reproduces the figures in the module docstring)
# --------------------------------------------------------------------------------------------


def benchmark(*paths: str | os.PathLike[str], repeat: int = 3) -> dict[str, float]:
    """Records/s of this reader vs kafka-python's record parsing on the same files (best of
    ``repeat``; both validate CRCs and materialise offset, timestamp, key and value)."""
    from kafka.record import MemoryRecords

    files = [seg.path for plog in find_segments(*paths) for seg in plog.segments]
    blobs = [(str(f), f.read_bytes()) for f in files]

    def ours() -> int:
        n = 0
        for path, data in blobs:
            for _, recs in decode_segment_bytes(data, path=path):
                n += len(recs)
        return n

    def theirs() -> int:
        n = 0
        for _, data in blobs:
            mr = MemoryRecords(data)
            while mr.has_next():
                batch = mr.next_batch()
                batch.validate_crc()
                for r in batch:
                    _ = (r.offset, r.timestamp, r.key, r.value)
                    n += 1
        return n

    result: dict[str, float] = {}
    for name, fn in (("hand_written", ours), ("kafka_python", theirs)):
        best = float("inf")
        count = 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            count = fn()
            best = min(best, time.perf_counter() - t0)
        result[f"{name}_records"] = count
        result[f"{name}_records_per_s"] = count / best if best else 0.0
    return result


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description="Summarise or benchmark __consumer_offsets segments."
    )
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--bench", action="store_true", help="compare with kafka-python's parser")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.bench:
        for k, v in benchmark(*args.paths).items():
            log.info("%s: %s", k, f"{v:,.0f}")
        return 0
    problems: list[Problem] = []
    batches = records = 0
    for _, recs in iter_batches(*args.paths, problems=problems):
        batches += 1
        records += len(recs)
    log.info("%d batches, %d records, %d problems", batches, records, len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(_main())
