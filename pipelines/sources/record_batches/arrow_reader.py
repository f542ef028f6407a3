"""Vectorized segment reading: segment file bytes -> RAW_ARROW_SCHEMA record batches.

Why: nearly every ``__consumer_offsets`` batch is an uncompressed magic-2 batch of one to a
few records, and the record-object path (:mod:`pipelines.sources.segments`) spends ~5 us per
record building ``Record`` tuples and then Python lists for Arrow. Here, per group of files
(~8 MiB), the only per-batch Python work is the framing walk (one ``struct`` unpack and one
C-speed CRC32C per batch); everything else is numpy over all batches at once:

1. **walk** (:func:`_walk`): follow the length fields with exactly the acceptance test of
   ``decode_segment_bytes``' fast branch (magic 2, sane length, inside the file, base offset
   at or above the floor, CRC32C valid). Whatever fails it goes through the exact
   ``_slow_step`` right there, so framing, resynchronisation, floors and Problems are the
   exact path's by construction;
2. **headers**: one row gather through a sliding-window view copies the 61 header bytes of
   every candidate batch; fields are big-endian views through a structured dtype;
3. **records**: zig-zag varints (length, timestamp delta, offset delta, key and value
   lengths; attributes skipped; header count must be 0) are decoded for the k-th record of
   every batch at once, k = 0, 1, ... ("rounds"), with every check the exact decoder makes;
4. **columns**: key/value become ``pa.binary`` arrays by one Arrow ``take`` over a view of the
   file bytes whose offsets alternate gap/key/gap/key (no per-record bytes objects), batch
   facts are expanded with ``np.repeat``.

A batch the vector path does not fully validate (compressed, control, record headers,
varints over 9 bytes, a record that does not fill its declared length, extreme offsets or
timestamps, very long batches) is decoded by the exact ``_decode_v2_batch`` instead, at its
place, with its Problems. So the output equals ``batches_to_arrow(iter_batches(...))`` row for
row, chunk boundaries and Problems included (tests/test_segments.py checks this on every
corpus file and on the corruption cases).

Measured with ``benchmarks/decode.py --repeat 3`` (best of 3 per stage; pinned to one core of
a shared 2-vCPU x86_64 box with load average 2-5 from other work; CPython 3.11, pyarrow 26;
three runs each):

==========================================  ============================  ==================
public corpus: 340 files, 171,764 records   before (record objects)       now
in 125,150 batches
==========================================  ============================  ==================
``read_arrow``, records/s                   148k-191k                     833k-1.22M
read + vectorized offset-commit decode,     140k-175k                     647k-911k
offset commits/s (goal: 300k, one core)
golden scenario-a ``read_arrow``, rec/s     179k-194k                     1.08M-1.15M
==========================================  ============================  ==================

Of the ~0.15 s the public corpus now takes, ~0.07 s is the walk (~0.5 us per batch: one
unpack, one CRC32C), ~0.01 s reading the files, ~0.02 s ``find_segments``, ~0.06 s the numpy
and Arrow work (~0.35 us per record).

The read_committed fold over these rows is :mod:`.transactions`; the Kafka source feeds Fetch
response bytes through :func:`bytes_to_arrow` (a Fetch response's records are segment bytes).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..raw import RAW_ARROW_SCHEMA
from ..segments import (  # the exact reader, until it lands in record_batches/exact_reader.py
    BatchInfo,
    Record,
    SegmentFile,
    _decode_v2_batch,
    _slow_step,
    parse_segment_name,
    partition_of_dir,
)
from .framing import (
    ATTR_CODEC,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    LOG_OVERHEAD,
    MIN_LENGTH,
    V2_CRC_START,
    V2_HEADER,
    V2_HEADER_SIZE,
    crc32c,
)
from .problems import Problem, log_problem

#: What index_segments_arrow returns per record: enough to plan and fold, no bytes.
INDEX_ARROW_SCHEMA = pa.schema(
    [RAW_ARROW_SCHEMA.field(name) for name in
     ("offset", "producer_id", "is_transactional", "is_control", "control_type")]
    + [pa.field("source_file", pa.int32()), RAW_ARROW_SCHEMA.field("source_position")]
)

__all__ = [
    "INDEX_ARROW_SCHEMA",
    "bytes_to_arrow",
    "index_segments_arrow",
    "numpy_to_arrow",
    "read_file_arrow",
    "read_segments_arrow",
]

#: Bytes of segment data processed together: large enough to amortise numpy's per-call cost
#: over many small files, small enough to bound memory for 1 GiB segments.
GROUP_BYTES = 8 << 20
# base offset, length, magic, crc, lastOffsetDelta of a v2 header in one unpack
_WALK = struct.Struct(">qi4xbI2xi")
# Padding after the group buffer: varint reads look up to 8 bytes past a (clamped) position,
# and the 61-byte header window view needs a buffer at least that long even when empty.
_PAD = bytes(64)
_ATTR_NOT_FAST = ATTR_CODEC | ATTR_CONTROL  # compressed or control: decoded by the exact path
_LIMIT = 1 << 62  # |base offset|, |base timestamp| bound: sums with deltas cannot overflow
_FEW_ROUNDS = 16  # after this many record rounds, stragglers go to the exact decoder...
_FEW_BATCHES = 16  # ...when fewer than this many batches are still active
_TS_TYPE = RAW_ARROW_SCHEMA.field("timestamp").type
_NUMPY_TYPES = {
    np.int8: pa.int8(),
    np.int16: pa.int16(),
    np.int32: pa.int32(),
    np.int64: pa.int64(),
}


# --------------------------------------------------------------------------------------------
# Walking (per batch, Python; mirrors decode_segment_bytes)
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _File:
    """One segment being read: its bytes and where the walk stands."""

    path: str
    partition: int
    data: bytes
    mv: memoryview
    pos: int
    floor: int  # lowest base offset the next batch may have (as in decode_segment_bytes)
    ordinal: int = 0  # the file's place among the files being read

    @property
    def done(self) -> bool:
        return self.pos >= len(self.data)


@dataclass(slots=True)
class _Part:
    """What one walk over (part of) a file found, in file order.

    ``fast`` holds the positions of batches that passed the exact fast branch's framing test;
    ``exact`` the (ordinal, batch, records) the exact path decoded, where ordinal is the
    batch's index among all batches of this part.
    """

    file: _File
    fast: list[int] = field(default_factory=list)
    exact: list[tuple[int, BatchInfo, list[Record]]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    start: int = 0  # byte region [start, end) of the file covering the fast batches
    end: int = 0
    walked: int = 0  # bytes of the file this walk advanced over


def _file(data: bytes, path: str, offsets_partition: int, base_offset: int) -> _File:
    if not isinstance(data, bytes):
        data = bytes(data)  # slices of bytearray/mmap would not be bytes
    return _File(path, offsets_partition, data, memoryview(data), 0, base_offset)


def _open(segment: SegmentFile, offsets_partition: int | None, ordinal: int = 0) -> _File:
    part = segment.offsets_partition if offsets_partition is None else offsets_partition
    f = _file(segment.path.read_bytes(), str(segment.path), part, segment.base_offset)
    f.ordinal = ordinal
    return f


def _walk(f: _File, stop: int) -> _Part:
    """Walk ``f`` from where it stands until its end or past byte ``stop``.

    The inner loop is the acceptance test of decode_segment_bytes' fast branch, nothing more;
    anything it declines is handed to the exact ``_slow_step`` with the same floor, so the
    framing (and every Problem) is the exact path's.
    """
    part = _Part(f)
    fast = part.fast
    exact = part.exact
    problems = part.problems
    data, mv, n, path = f.data, f.mv, len(f.data), f.path
    pos, floor = f.pos, f.floor
    begin = pos

    def report(position: int, skipped: int, reason: str) -> None:  # logged once, by _build
        problems.append(Problem(path, position, skipped, reason))

    unpack = _WALK.unpack_from
    check = crc32c
    append = fast.append
    overhead, min_length, crc_start = LOG_OVERHEAD, MIN_LENGTH[2], V2_CRC_START  # locals: hot loop
    lim = min(n - V2_HEADER_SIZE, stop)
    while pos < n and pos <= stop:
        while pos <= lim:
            base, length, magic, crc, last_delta = unpack(data, pos)
            end = pos + overhead + length
            if (
                magic != 2
                or length < min_length
                or end > n
                or base < floor
                or check(data[pos + crc_start : end]) != crc
            ):
                break
            append(pos)
            floor = base + last_delta + 1
            pos = end
        if pos >= n or pos > stop:
            break
        step = _slow_step(data, mv, pos, n, floor, path, f.partition, report)
        if step is None:
            pos = n
            break
        pos, item = step
        if item is not None:
            exact.append((len(fast) + len(exact), item[0], item[1]))
            if item[0].crc_valid:  # a damaged header must not move the floor
                floor = item[0].last_offset + 1
    f.pos, f.floor = pos, floor
    part.walked = pos - begin
    if fast:
        part.start = fast[0]
        part.end = fast[-1] + LOG_OVERHEAD + struct.unpack_from(">i", data, fast[-1] + 8)[0]
    return part


# --------------------------------------------------------------------------------------------
# Vectorized decoding of a group of parts
# --------------------------------------------------------------------------------------------


# The header fields the Arrow view needs, as big-endian fields of one 61-byte record.
_HEADER_DTYPE = np.dtype(
    {
        "names": [
            "base",
            "length",
            "leader_epoch",
            "attrs",
            "base_ts",
            "max_ts",
            "pid",
            "epoch",
            "count",
        ],
        "formats": [">i8", ">i4", ">i4", ">i2", ">i8", ">i8", ">i8", ">i2", ">i4"],
        "offsets": [0, 8, 12, 21, 27, 35, 43, 51, 57],
        "itemsize": V2_HEADER_SIZE,
    }
)


def _headers(u: np.ndarray, gpos: np.ndarray) -> dict[str, np.ndarray]:
    """Header fields of the batches at ``gpos``, native byte order: one row gather through a
    sliding-window view (61 bytes per batch, no index array per byte), then field views."""
    rows = np.lib.stride_tricks.sliding_window_view(u, V2_HEADER_SIZE)[gpos]
    rec = rows.view(_HEADER_DTYPE)[:, 0]
    return {name: rec[name].astype(rec[name].dtype.newbyteorder("=")) for name in rec.dtype.names}


def _varint(u: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Zig-zag varints at positions ``p``: (value, byte count, ok or None if all ok).

    Up to 9 bytes (63 bits: int64 arithmetic is exact, so Python and numpy agree); longer
    ones are flagged and their batch goes to the exact decoder.
    """
    b = u[p]
    raw = (b & 0x7F).astype(np.int64)
    nb = np.ones(p.shape, dtype=np.int64)
    idx = np.flatnonzero(b & 0x80)
    ok = None
    j = 1
    while idx.size:
        if j == 9:
            ok = np.ones(p.shape, dtype=bool)
            ok[idx] = False
            break
        b = u[p[idx] + j]
        raw[idx] |= (b & 0x7F).astype(np.int64) << (7 * j)
        nb[idx] += 1
        idx = idx[b >= 0x80]
        j += 1
    return (raw >> 1) ^ -(raw & 1), nb, ok


@dataclass(slots=True)
class _Rounds:
    """Records decoded by the vector path, one entry per (round k, active batch)."""

    batch: list[np.ndarray] = field(default_factory=list)  # candidate index
    k: list[np.ndarray] = field(default_factory=list)  # record index within its batch
    off_delta: list[np.ndarray] = field(default_factory=list)
    ts_delta: list[np.ndarray] = field(default_factory=list)
    key_start: list[np.ndarray] = field(default_factory=list)
    key_len: list[np.ndarray] = field(default_factory=list)
    value_start: list[np.ndarray] = field(default_factory=list)
    value_len: list[np.ndarray] = field(default_factory=list)


def _parse_records(
    u: np.ndarray, start: np.ndarray, end: np.ndarray, count: np.ndarray, ok: np.ndarray
) -> _Rounds:
    """Decode the records of every batch with ``ok`` (cleared for batches that fail).

    Round k decodes the k-th record of every batch still active. Positions are clamped to
    the record's end, so garbage lengths never index outside the buffer; since positions only
    grow, "header count byte at record end - 1" proves every field lay inside the record.
    """
    out = _Rounds()
    cur = start.copy()
    act = np.flatnonzero(ok & (count > 0))
    k = 0
    while act.size:
        if k >= _FEW_ROUNDS and act.size < _FEW_BATCHES:
            ok[act] = False  # a few long batches: the exact loop is cheaper than rounds
            break
        p = cur[act]
        be = end[act]
        rlen, nb, vok = _varint(u, p)
        rs = p + nb
        re = rs + rlen
        good = (rlen >= 6) & (re <= be)
        if vok is not None:
            good &= vok
        lim = np.where(good, re, p)
        q = np.minimum(rs + 1, lim)  # skip the record attributes byte
        ts_delta, nb, v = _varint(u, q)
        q = np.minimum(q + nb, lim)
        if v is not None:
            good &= v
        off_delta, nb, v = _varint(u, q)
        q = np.minimum(q + nb, lim)
        if v is not None:
            good &= v
        klen, nb, v = _varint(u, q)
        ks = q + nb
        q = np.minimum(ks + np.maximum(klen, 0), lim)
        if v is not None:
            good &= v
        vlen, nb, v = _varint(u, q)
        vs = q + nb
        q = np.minimum(vs + np.maximum(vlen, 0), lim)
        if v is not None:
            good &= v
        last = count[act] == k + 1
        good &= (u[q] == 0) & (q + 1 == re) & (~last | (re == be))
        if not good.all():
            ok[act[~good]] = False
            act, re, last = act[good], re[good], last[good]
            ts_delta, off_delta = ts_delta[good], off_delta[good]
            ks, klen, vs, vlen = ks[good], klen[good], vs[good], vlen[good]
        out.batch.append(act)
        out.k.append(np.full(act.size, k, dtype=np.int64))
        out.off_delta.append(off_delta)
        out.ts_delta.append(ts_delta)
        out.key_start.append(ks)
        out.key_len.append(klen)
        out.value_start.append(vs)
        out.value_len.append(vlen)
        cur[act] = re
        act = act[~last]
        k += 1
    return out


def numpy_to_arrow(values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """Zero-copy Arrow array of a numpy array (bool: bit-packed), nulls where ``null``.

    ``pa.array(ndarray)`` would do, but its first call imports pandas (~0.5 s), a cost the
    first read of every process would pay.
    """
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        typ = pa.bool_()
    else:
        data = pa.py_buffer(values)
        typ = _NUMPY_TYPES[values.dtype.type]
    validity = None
    if null is not None and null.any():
        validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(typ, values.size, [validity, data])


def _bytes_array(values: Sequence[bytes | None], typ: pa.DataType) -> pa.Array:
    """``pa.binary``/``pa.string`` array of a short Python list, without ``pa.array``."""
    lens = np.fromiter((-1 if v is None else len(v) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(np.maximum(lens, 0), out=offsets[1:])
    data = b"".join(v for v in values if v is not None)
    null = lens < 0
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
    return pa.Array.from_buffers(
        typ, len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _binary(
    buf: bytes,
    starts: np.ndarray,
    lens: np.ndarray,
    extra: list[bytes | None] | None,
    fast_rows: np.ndarray | None,
) -> pa.Array:
    """``pa.binary`` array of the byte ranges ``buf[start:start+len]`` (null where len < 0),
    then, if ``extra`` is given, merged with those values at the rows not in ``fast_rows``.

    Ranges must be increasing and disjoint (records in file order): they become the odd
    elements of a zero-copy view of ``buf`` whose even elements are the gaps, and one Arrow
    ``take`` copies them out.
    """
    m = starts.size
    large = len(buf) >= (1 << 31) - 1
    offsets = np.empty(2 * m + 2, dtype=np.int64 if large else np.int32)
    offsets[0] = 0
    offsets[1 : 2 * m + 1 : 2] = starts
    offsets[2 : 2 * m + 2 : 2] = starts + np.maximum(lens, 0)
    offsets[2 * m + 1] = len(buf)
    view = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        2 * m + 1,
        [None, pa.py_buffer(offsets), pa.py_buffer(buf)],
    )
    valid = lens >= 0
    idx = np.arange(1, 2 * m, 2, dtype=np.int64)
    arr = view.take(numpy_to_arrow(idx, ~valid))
    if large:
        arr = arr.cast(pa.binary())
    if not extra:
        return arr
    assert fast_rows is not None
    n = m + len(extra)
    perm = np.empty(n, dtype=np.int64)
    perm[fast_rows] = np.arange(m, dtype=np.int64)
    rest = np.ones(n, dtype=bool)
    rest[fast_rows] = False
    perm[rest] = np.arange(m, n, dtype=np.int64)
    both = pa.concat_arrays([arr, _bytes_array(extra, pa.binary())])
    return both.take(numpy_to_arrow(perm))


def _strings(values: list[str], codes: np.ndarray) -> pa.Array:
    """String column from per-row codes into ``values`` (code -1 = null)."""
    table = _bytes_array([v.encode("utf-8") for v in values], pa.string())
    return table.take(numpy_to_arrow(codes, codes < 0))


def _build(
    parts: Sequence[_Part], cluster_id: str | None, problems: list[Problem] | None,
    index_only: bool = False,
) -> tuple[pa.RecordBatch | None, np.ndarray]:
    """Decode a group of walked parts: (rows as RAW_ARROW_SCHEMA, or INDEX_ARROW_SCHEMA when
    ``index_only``, or None if none; cumulative row count at the end of every batch in log
    order)."""
    # ---- one buffer over the regions holding fast candidates, and their positions in it
    pieces: list[memoryview | bytes] = []
    gshift: list[int] = []
    size = 0
    for p in parts:
        gshift.append(size - p.start)
        if p.fast:
            pieces.append(p.file.mv[p.start : p.end])
            size += p.end - p.start
    pieces.append(_PAD)
    buf = b"".join(pieces)
    u = np.frombuffer(buf, dtype=np.uint8)
    nfast = np.array([len(p.fast) for p in parts], dtype=np.int64)
    part_of = np.repeat(np.arange(len(parts), dtype=np.int64), nfast)
    fpos = (
        np.concatenate([np.array(p.fast, dtype=np.int64) for p in parts if p.fast])
        if nfast.sum()
        else np.zeros(0, dtype=np.int64)
    )
    gpos = fpos + np.array(gshift, dtype=np.int64)[part_of]

    # ---- ordinals: index of every batch of the group in log order
    totals = nfast + np.array([len(p.exact) for p in parts], dtype=np.int64)
    base_ord = np.cumsum(totals) - totals
    nb = int(totals.sum())
    is_exact = np.zeros(nb, dtype=bool)
    exact: list[tuple[int, BatchInfo, list[Record]]] = []
    for i, p in enumerate(parts):
        b0 = int(base_ord[i])
        for o, batch, recs in p.exact:
            exact.append((b0 + o, batch, recs))
            is_exact[b0 + o] = True
    fast_ord = np.flatnonzero(~is_exact)

    # ---- headers of all candidates at once
    hdr = _headers(u, gpos)
    base, attrs, count = hdr["base"], hdr["attrs"], hdr["count"].astype(np.int64)
    length = hdr["length"].astype(np.int64)
    base_ts, max_ts = hdr["base_ts"], hdr["max_ts"]
    bstart = gpos + V2_HEADER_SIZE
    bend = gpos + LOG_OVERHEAD + length
    ok = (
        (attrs & _ATTR_NOT_FAST == 0)
        & (count >= 0)
        & (base > -_LIMIT)  # not np.abs: abs(INT64_MIN) wraps to a negative number
        & (base < _LIMIT)
        & (base_ts > -_LIMIT)
        & (base_ts < _LIMIT)
        & ((count > 0) | (bstart == bend))
    )
    rounds = _parse_records(u, bstart, bend, count, ok)

    # ---- candidates the vector path declined: the exact fast-branch decode, in place
    fallback_problems: list[tuple[int, int, Problem]] = []
    for i in np.flatnonzero(~ok).tolist():
        pi = int(part_of[i])
        f = parts[pi].file
        pos = int(fpos[i])
        end = pos + LOG_OVERHEAD + int(length[i])
        header = V2_HEADER.unpack_from(f.data, pos)
        batch, recs, error = _decode_v2_batch(
            f.data, f.mv, pos, end, header, True, f.path, f.partition
        )
        if error is not None:
            fallback_problems.append((pi, pos, Problem(f.path, pos, end - pos, error)))
        exact.append((int(fast_ord[i]), batch, recs))
    merged = [(pi, pr.position, pr) for pi, p in enumerate(parts) for pr in p.problems]
    if fallback_problems:
        merged = sorted(merged + fallback_problems, key=lambda t: (t[0], t[1]))
    if problems is not None:  # the caller reports them (one line each, in its summary)
        problems.extend(pr for _, _, pr in merged)
    else:
        for _, _, pr in merged:
            log_problem(pr)
    exact.sort(key=lambda t: t[0])

    # ---- batch-level columns (one value per batch of the group), then rows
    counts = np.zeros(nb, dtype=np.int64)
    counts[fast_ord[ok]] = count[ok]
    ex_ord = np.array([o for o, _, _ in exact], dtype=np.int64)
    ex_batches = [b for _, b, _ in exact]
    counts[ex_ord] = [len(r) for _, _, r in exact]
    ends = np.cumsum(counts)
    nrows = int(ends[-1]) if nb else 0
    if nrows == 0:
        return None, ends

    file_names: list[str] = []
    file_code: dict[str, int] = {}
    part_file = np.empty(len(parts), dtype=np.int64)
    partitions = np.empty(len(parts), dtype=np.int32)
    for i, p in enumerate(parts):
        part_file[i] = file_code.setdefault(p.file.path, len(file_names))
        if part_file[i] == len(file_names):
            file_names.append(p.file.path)
        partitions[i] = p.file.partition

    def per_batch(fast_values: np.ndarray, attr: str, dtype: type[np.generic]) -> np.ndarray:
        col = np.empty(nb, dtype=dtype)
        col[fast_ord] = fast_values
        if exact:
            col[ex_ord] = [getattr(b, attr) for b in ex_batches]
        return col

    comp_names = ["none"]
    comp = np.zeros(nb, dtype=np.int32)
    source = np.empty(nb, dtype=np.int32)
    source[fast_ord] = part_file[part_of]
    part_col = np.empty(nb, dtype=np.int32)
    part_col[fast_ord] = partitions[part_of]
    if exact:
        comp_code = {"none": 0}
        comp[ex_ord] = [comp_code.setdefault(b.compression, len(comp_code)) for b in ex_batches]
        comp_names = list(comp_code)
        source[ex_ord] = [file_code[b.source] for b in ex_batches]
        part_col[ex_ord] = [b.offsets_partition for b in ex_batches]
    batch_cols = {
        "offsets_partition": part_col,
        "producer_id": per_batch(hdr["pid"], "producer_id", np.int64),
        "producer_epoch": per_batch(hdr["epoch"], "producer_epoch", np.int16),
        "is_transactional": per_batch((attrs & ATTR_TRANSACTIONAL) != 0, "is_transactional", np.bool_),
        "is_control": per_batch(np.zeros(fast_ord.size, bool), "is_control", np.bool_),
        "partition_leader_epoch": per_batch(
            hdr["leader_epoch"], "partition_leader_epoch", np.int32
        ),
        "magic": per_batch(np.full(fast_ord.size, 2, np.int8), "magic", np.int8),
        "batch_base_offset": per_batch(base, "base_offset", np.int64),
        "crc_valid": per_batch(np.ones(fast_ord.size, bool), "crc_valid", np.bool_),
        "source_position": per_batch(fpos, "position", np.int64),
        "timestamp_type": per_batch((attrs & ATTR_TIMESTAMP_TYPE) != 0, "timestamp_type", np.int8),
    }
    row_batch = np.repeat(np.arange(nb, dtype=np.int64), counts)
    row_start = ends - counts

    # ---- record-level columns: vector rows scattered to their row, exact rows likewise
    offset = np.empty(nrows, dtype=np.int64)
    timestamp = np.empty(nrows, dtype=np.int64)
    if rounds.batch:
        cand = np.concatenate(rounds.batch)
        keep = ok[cand]
        cand = cand[keep]

        def cat(chunks: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(chunks)[keep]

        rows = row_start[fast_ord[cand]] + cat(rounds.k)
        offset[rows] = base[cand] + cat(rounds.off_delta)
        timestamp[rows] = np.where(
            attrs[cand] & ATTR_TIMESTAMP_TYPE, max_ts[cand], base_ts[cand] + cat(rounds.ts_delta)
        )
        if exact or len(rounds.batch) > 1:  # rounds are interleaved: scatter to row order
            is_fast = np.zeros(nrows, dtype=bool)
            is_fast[rows] = True
            fast_rows = np.flatnonzero(is_fast)

            def in_row_order(chunks: list[np.ndarray]) -> np.ndarray:
                col = np.empty(nrows, dtype=np.int64)
                col[rows] = cat(chunks)
                return col[fast_rows]
        else:  # one round, no exact batches: already in row order
            fast_rows = rows

            def in_row_order(chunks: list[np.ndarray]) -> np.ndarray:
                return cat(chunks)

        key_start, key_len = in_row_order(rounds.key_start), in_row_order(rounds.key_len)
        value_start = in_row_order(rounds.value_start)
        value_len = in_row_order(rounds.value_len)
    else:
        fast_rows = np.zeros(0, dtype=np.int64)
        key_start = key_len = value_start = value_len = fast_rows
    control = np.full(nrows, -1, dtype=np.int32)
    control_names: list[str] = []
    keys_extra: list[bytes | None] = []
    values_extra: list[bytes | None] = []
    if exact:
        ex_counts = np.array([len(r) for _, _, r in exact], dtype=np.int64)
        ex_rows = np.repeat(row_start[ex_ord] - (np.cumsum(ex_counts) - ex_counts), ex_counts)
        ex_rows += np.arange(ex_rows.size, dtype=np.int64)
        recs = [r for _, _, rs in exact for r in rs]
        offset[ex_rows] = [r[0] for r in recs]
        # negative = no timestamp (null), whatever its magnitude, as batches_to_arrow has it
        timestamp[ex_rows] = [r[1] if r[1] >= 0 else -1 for r in recs]
        keys_extra = [r[3] for r in recs]
        values_extra = [r[4] for r in recs]
        codes: dict[str, int] = {}
        for row, r in zip(ex_rows.tolist(), recs, strict=True):
            if r[6] is not None:
                control[row] = codes.setdefault(r[6], len(codes))
        control_names = list(codes)

    if index_only:  # no bytes, no strings per row: a fraction of the work
        ordinals = np.array([next(p.file.ordinal for p in parts if p.file.path == name)
                             for name in file_names], dtype=np.int32)
        index = {
            "offset": numpy_to_arrow(offset),
            "producer_id": numpy_to_arrow(batch_cols["producer_id"][row_batch]),
            "is_transactional": numpy_to_arrow(batch_cols["is_transactional"][row_batch]),
            "is_control": numpy_to_arrow(batch_cols["is_control"][row_batch]),
            "control_type": _strings(control_names, control) if control_names
            else pa.nulls(nrows, pa.string()),
            "source_file": numpy_to_arrow(ordinals[source][row_batch]),
            "source_position": numpy_to_arrow(batch_cols["source_position"][row_batch]),
        }
        return pa.RecordBatch.from_arrays([index[f.name] for f in INDEX_ARROW_SCHEMA],
                                          schema=INDEX_ARROW_SCHEMA), ends
    cols: dict[str, pa.Array] = {
        "cluster_id": pa.nulls(nrows, pa.string())
        if cluster_id is None
        else _strings([cluster_id], np.zeros(nrows, dtype=np.int32)),
        "offset": numpy_to_arrow(offset),
        "timestamp": numpy_to_arrow(timestamp, timestamp < 0).view(_TS_TYPE),
        "key": _binary(buf, key_start, key_len, keys_extra, fast_rows),
        "value": _binary(buf, value_start, value_len, values_extra, fast_rows),
        "control_type": _strings(control_names, control)
        if control_names
        else pa.nulls(nrows, pa.string()),
        "compression": _strings(comp_names, comp[row_batch]),
        "source": _strings(file_names, source[row_batch]),
    }
    for name, values in batch_cols.items():
        cols[name] = numpy_to_arrow(values[row_batch])
    # every column is built with its schema type; from_arrays rejects any mismatch
    arrays = [cols[f.name] for f in RAW_ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=RAW_ARROW_SCHEMA), ends


# --------------------------------------------------------------------------------------------
# Driving: files -> groups -> chunks of ~rows_per_batch rows
# --------------------------------------------------------------------------------------------


def _groups(files: Iterable[_File]) -> Iterator[list[_Part]]:
    """Walk files in order, cutting them into groups of about GROUP_BYTES."""
    group: list[_Part] = []
    size = 0
    for f in files:
        while True:
            part = _walk(f, f.pos + max(GROUP_BYTES - size, 1))
            group.append(part)
            size += part.walked
            if size >= GROUP_BYTES:
                yield group
                group, size = [], 0
            if f.done:
                break
    if group:
        yield group


def _chunks(
    files: Iterable[_File],
    cluster_id: str | None,
    rows_per_batch: int,
    problems: list[Problem] | None,
    index_only: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Decoded groups re-cut like batches_to_arrow: a chunk ends after the first Kafka batch
    that brings it to ``rows_per_batch`` rows; a chunk inside one group is a zero-copy slice."""
    pending: list[pa.RecordBatch] = []
    have = 0
    for group in _groups(files):
        rb, ends = _build(group, cluster_id, problems, index_only)
        if rb is None:
            continue
        start = 0
        total = rb.num_rows
        while start < total:
            target = start + max(rows_per_batch - have, 1)
            i = int(np.searchsorted(ends, target, side="left"))
            if i == ends.size:
                pending.append(rb.slice(start))
                have += total - start
                break
            cut = int(ends[i])
            piece = rb.slice(start, cut - start)
            yield pa.concat_batches([*pending, piece]) if pending else piece
            pending, have, start = [], 0, cut
    if pending:
        yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]


def read_segments_arrow(
    segments: Iterable[SegmentFile],
    *,
    cluster_id: str | None = None,
    rows_per_batch: int = 65536,
    offsets_partition: int | None = None,
    problems: list[Problem] | None = None,
) -> Iterator[pa.RecordBatch]:
    """RAW_ARROW_SCHEMA batches of ``segments`` read in the given order: the same rows, chunks
    and Problems as ``batches_to_arrow(b for s in segments for b in read_segment_file(s))``."""
    files = (_open(seg, offsets_partition) for seg in segments)
    return _chunks(files, cluster_id, rows_per_batch, problems)


def index_segments_arrow(
    segments: Sequence[SegmentFile], problems: list[Problem] | None = None
) -> Iterator[pa.RecordBatch]:
    """INDEX_ARROW_SCHEMA rows of ``segments``: the same rows as :func:`read_segments_arrow`,
    only what planning reads needs (offsets, transaction facts, where each batch lies)."""
    files = (_open(seg, None, i) for i, seg in enumerate(segments))
    return _chunks(files, None, 1 << 20, problems, index_only=True)


def bytes_to_arrow(
    data: bytes,
    *,
    path: str = "<memory>",
    offsets_partition: int = -1,
    base_offset: int = 0,
    cluster_id: str | None = None,
    rows_per_batch: int = 65536,
    problems: list[Problem] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Segment bytes in memory as RAW_ARROW_SCHEMA batches; equal to
    ``batches_to_arrow(decode_segment_bytes(data, ...), ...)``."""
    files = [_file(data, path, offsets_partition, base_offset)]
    return _chunks(files, cluster_id, rows_per_batch, problems)


def _segment(segment: SegmentFile | str | os.PathLike[str]) -> SegmentFile:
    if isinstance(segment, SegmentFile):
        return segment
    p = Path(segment)
    return parse_segment_name(p) or SegmentFile(p, partition_of_dir(p.parent), 0, "")


def read_file_arrow(
    segment: SegmentFile | str | os.PathLike[str],
    *,
    cluster_id: str | None = None,
    offsets_partition: int | None = None,
    rows_per_batch: int = 65536,
    problems: list[Problem] | None = None,
) -> Iterator[pa.RecordBatch]:
    """One segment file as RAW_ARROW_SCHEMA batches; equal to
    ``batches_to_arrow(read_segment_file(segment, ...))``."""
    return read_segments_arrow(
        [_segment(segment)],
        cluster_id=cluster_id,
        rows_per_batch=rows_per_batch,
        offsets_partition=offsets_partition,
        problems=problems,
    )
