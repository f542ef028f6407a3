"""The vectorized decode of a group of walked segment regions: numpy over every batch at once.

Why: nearly every ``__consumer_offsets`` batch is an uncompressed magic-2 batch of one to a
few records; per-record Python costs ~5 us, numpy over all of a group's batches ~0.35 us.

1. **headers**: one row gather through a sliding-window view copies the 61 header bytes of
   every candidate batch; fields are big-endian views through a structured dtype;
2. **records** (:mod:`.arrow_records`): zig-zag varints (length, timestamp delta, offset
   delta, key and value lengths; attributes skipped; header count must be 0) are decoded for
   the k-th record of every batch at once, k = 0, 1, ... ("rounds"), with every check the
   exact decoder makes;
3. **columns**: key/value become ``pa.binary`` arrays by one Arrow ``take`` over a view of the
   file bytes (:func:`.arrow_columns.binary_ranges`), batch facts are expanded with
   ``np.repeat``.

Compressed batches (gzip, snappy, lz4, zstd) take the same rounds: before them, each one's
records section is decompressed (:func:`.framing.decompress`, as the exact decoder does) and
the batch is replaced in the group buffer by a synthetic uncompressed copy, its 61-byte header
with the codec bits cleared followed by the decompressed records (:func:`_inflate`); its
columns still report the batch as written (compression, attributes, position).

Control batches (transaction markers) take the same rounds; a control record's type is read
from its key's bytes 2-3 as ``framing.control_type_of`` reads it. A batch the vector path
does not fully validate (compressed control batches, not decompressable, record headers,
varints over 9 bytes, a record that does not fill its declared length, extreme offsets or
timestamps, very long batches) is decoded by the exact ``decode_v2_batch`` instead, at its
place, with its Problems.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..raw import INDEX_ARROW_SCHEMA, RAW_ARROW_SCHEMA
from .arrow_columns import binary_ranges, coded_strings, numpy_to_arrow
from .arrow_records import Rounds, parse_records
from .arrow_walk import WalkedPart
from .exact_batch import BatchInfo, Record, decode_v2_batch
from .framing import (
    ATTR_CODEC,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    COMPRESSION_NAMES,
    LOG_OVERHEAD,
    V2_HEADER,
    V2_HEADER_SIZE,
    decompress,
)
from .problems import Problem, log_problem

__all__ = ["build_group"]

# Padding after the group buffer: varint reads look up to 8 bytes past a (clamped) position,
# and the 61-byte header window view needs a buffer at least that long even when empty.
_PAD = bytes(64)
# Still compressed after _inflate (a control batch, or not decompressable): the exact path.
_ATTR_NOT_FAST = ATTR_CODEC
#: control record type -> name, as framing.control_type_of names them
_CONTROL_NAMES = {0: "ABORT", 1: "COMMIT"}
_ATTRS_LOW = 22  # the low byte of the int16 attributes in a v2 header: codec and control bits
_LIMIT = 1 << 62  # |base offset|, |base timestamp| bound: sums with deltas cannot overflow
_TS_TYPE = RAW_ARROW_SCHEMA.field("timestamp").type


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


@dataclass(slots=True)
class _Group:
    """A group of walked parts laid out for the vector path: what every step of _build shares.

    ``u`` views one buffer over the regions holding fast candidates; candidate i lies at
    ``gpos[i]`` in it (``fpos[i]`` in the file of part ``part_of[i]``) and is batch
    ``fast_ord[i]`` of the group's ``nb`` batches in log order; ``exact`` holds (ordinal, batch,
    records) for every batch the exact path decoded. ``codec`` is each candidate's codec id as
    written and ``body_end`` where its records end in ``u`` if any was inflated (both set by
    :func:`_inflate`).
    ``hdr``/``ok``/``rounds`` come from the vector pass (:func:`_vector_pass`).
    """

    parts: Sequence[WalkedPart]
    buf: bytes
    u: np.ndarray
    part_of: np.ndarray
    fpos: np.ndarray
    gpos: np.ndarray
    nb: int
    fast_ord: np.ndarray
    exact: list[tuple[int, BatchInfo, list[Record]]]
    codec: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    body_end: np.ndarray | None = None  # None: every batch as written (nothing inflated)
    hdr: dict[str, np.ndarray] = field(default_factory=dict)
    ok: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    rounds: Rounds = field(default_factory=Rounds)


def _layout(parts: Sequence[WalkedPart]) -> _Group:
    """One buffer over the regions holding fast candidates, their positions in it, and the
    log-order index (ordinal) of every batch of the group."""
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
    nfast = np.array([len(p.fast) for p in parts], dtype=np.int64)
    part_of = np.repeat(np.arange(len(parts), dtype=np.int64), nfast)
    fpos = (
        np.concatenate([np.array(p.fast, dtype=np.int64) for p in parts if p.fast])
        if nfast.sum()
        else np.zeros(0, dtype=np.int64)
    )
    gpos = fpos + np.array(gshift, dtype=np.int64)[part_of]

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
    u = np.frombuffer(buf, dtype=np.uint8)
    return _Group(parts, buf, u, part_of, fpos, gpos, nb, fast_ord, exact)


def _be_int32(u: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Big-endian int32 at positions ``p`` of ``u`` (batch length fields), as int64."""
    return u[p[:, None] + np.arange(4)].view(">i4")[:, 0].astype(np.int64)


def _inflate(g: _Group) -> None:
    """Replace every compressed non-control candidate in the group buffer by a synthetic
    uncompressed copy (its header with the codec bits cleared, the length field kept as
    written, then the decompressed records), in place, so key/value ranges stay in file
    order; set ``codec`` and ``body_end``. A batch that does not decompress keeps its bytes
    and codec bits, so the vector pass declines it and the exact decoder reports it."""
    low = g.u[g.gpos + _ATTRS_LOW]
    g.codec = (low & ATTR_CODEC).astype(np.int32)
    todo = np.flatnonzero((g.codec != 0) & (low & ATTR_CONTROL == 0)).tolist()
    if not todo:
        return
    ends = g.gpos + LOG_OVERHEAD + _be_int32(g.u, g.gpos + 8)
    buf, pieces, prev = g.buf, [], 0
    grow = np.zeros(g.gpos.size, dtype=np.int64)
    done: list[int] = []
    sizes: list[int] = []
    idx = np.array(todo, dtype=np.int64)
    for i, pos, end, codec in zip(todo, g.gpos[idx].tolist(), ends[idx].tolist(),
                                  g.codec[idx].tolist(), strict=True):
        try:
            records = decompress(codec, buf[pos + V2_HEADER_SIZE : end], 2)
        except Exception:  # the exact decoder reports it, with its own text
            continue
        header = bytearray(buf[pos : pos + V2_HEADER_SIZE])
        header[_ATTRS_LOW] &= 0xFF ^ ATTR_CODEC
        pieces += [buf[prev:pos], header, records]
        prev = end
        done.append(i)
        sizes.append(V2_HEADER_SIZE + len(records) - (end - pos))
    pieces.append(buf[prev:])
    grow[done] = sizes
    ends += grow
    shift = np.cumsum(grow) - grow  # growth of the candidates before each one
    g.gpos = g.gpos + shift
    g.body_end = ends + shift
    g.buf = b"".join(pieces)
    g.u = np.frombuffer(g.buf, dtype=np.uint8)


def _vector_pass(g: _Group) -> None:
    """Headers of all candidates at once, which of them the vector path takes (``ok``), and
    their records (``rounds``; ``parse_records`` clears ``ok`` for batches it declines)."""
    hdr = _headers(g.u, g.gpos)
    hdr["count"] = count = hdr["count"].astype(np.int64)
    hdr["length"] = hdr["length"].astype(np.int64)
    base, attrs, base_ts = hdr["base"], hdr["attrs"], hdr["base_ts"]
    bstart = g.gpos + V2_HEADER_SIZE
    bend = g.gpos + LOG_OVERHEAD + hdr["length"] if g.body_end is None else g.body_end
    ok = (
        (attrs & _ATTR_NOT_FAST == 0)
        & (count >= 0)
        & (base > -_LIMIT)  # not np.abs: abs(INT64_MIN) wraps to a negative number
        & (base < _LIMIT)
        & (base_ts > -_LIMIT)
        & (base_ts < _LIMIT)
        & ((count > 0) | (bstart == bend))
    )
    g.hdr, g.ok = hdr, ok
    g.rounds = parse_records(g.u, bstart, bend, count, ok)


def _decode_declined(g: _Group, problems: list[Problem] | None) -> None:
    """Candidates the vector path declined: the exact fast-branch decode, in place; then every
    Problem of the group in file order, handed to ``problems`` (or logged); ``g.exact`` sorted
    into log order."""
    fallback_problems: list[tuple[int, int, Problem]] = []
    length = g.hdr["length"]
    for i in np.flatnonzero(~g.ok).tolist():
        pi = int(g.part_of[i])
        f = g.parts[pi].file
        pos = int(g.fpos[i])
        end = pos + LOG_OVERHEAD + int(length[i])
        header = V2_HEADER.unpack_from(f.data, pos)
        batch, recs, error = decode_v2_batch(
            f.data, f.mv, pos, end, header, True, f.path, f.partition
        )
        if error is not None:
            fallback_problems.append((pi, pos, Problem(f.path, pos, end - pos, error)))
        g.exact.append((int(g.fast_ord[i]), batch, recs))
    merged = [(pi, pr.position, pr) for pi, p in enumerate(g.parts) for pr in p.problems]
    if fallback_problems:
        merged = sorted(merged + fallback_problems, key=lambda t: (t[0], t[1]))
    if problems is not None:  # the caller reports them (one line each, in its summary)
        problems.extend(pr for _, _, pr in merged)
    else:
        for _, _, pr in merged:
            log_problem(pr)
    g.exact.sort(key=lambda t: t[0])


@dataclass(slots=True)
class _Batches:
    """Batch-level facts of a group, one value per batch in log order (``cols``: the raw
    schema's per-batch columns), and where each batch's rows lie (``ends``: cumulative rows)."""

    counts: np.ndarray
    ends: np.ndarray
    ex_ord: np.ndarray  # ordinals of the exact batches, in g.exact order
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    file_names: list[str] = field(default_factory=list)
    source: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    comp_names: list[str] = field(default_factory=lambda: list(COMPRESSION_NAMES))
    comp: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))


def _row_counts(g: _Group) -> _Batches:
    """Records per batch (vector batches from their header count, exact ones as decoded)."""
    counts = np.zeros(g.nb, dtype=np.int64)
    counts[g.fast_ord[g.ok]] = g.hdr["count"][g.ok]
    ex_ord = np.array([o for o, _, _ in g.exact], dtype=np.int64)
    counts[ex_ord] = [len(r) for _, _, r in g.exact]
    return _Batches(counts, np.cumsum(counts), ex_ord)


def _batch_columns(g: _Group, b: _Batches) -> None:
    """Fill ``b`` with the per-batch columns: header fields for vector batches, BatchInfo
    fields for exact ones, files and compression as codes into name lists."""
    nb, fast_ord, ex_ord, hdr = g.nb, g.fast_ord, b.ex_ord, g.hdr
    ex_batches = [batch for _, batch, _ in g.exact]
    file_code: dict[str, int] = {}
    part_file = np.empty(len(g.parts), dtype=np.int64)
    partitions = np.empty(len(g.parts), dtype=np.int32)
    for i, p in enumerate(g.parts):
        part_file[i] = file_code.setdefault(p.file.path, len(b.file_names))
        if part_file[i] == len(b.file_names):
            b.file_names.append(p.file.path)
        partitions[i] = p.file.partition

    def per_batch(fast_values: np.ndarray, attr: str, dtype: type[np.generic]) -> np.ndarray:
        col = np.empty(nb, dtype=dtype)
        col[fast_ord] = fast_values
        if ex_batches:
            col[ex_ord] = [getattr(batch, attr) for batch in ex_batches]
        return col

    b.comp = np.empty(nb, dtype=np.int32)
    b.comp[fast_ord] = g.codec  # as written: a decompressed batch still reports its codec
    b.source = np.empty(nb, dtype=np.int32)
    b.source[fast_ord] = part_file[g.part_of]
    part_col = np.empty(nb, dtype=np.int32)
    part_col[fast_ord] = partitions[g.part_of]
    if ex_batches:
        comp_code = {name: i for i, name in enumerate(b.comp_names)}
        b.comp[ex_ord] = [comp_code.setdefault(x.compression, len(comp_code)) for x in ex_batches]
        b.comp_names = list(comp_code)
        b.source[ex_ord] = [file_code[x.source] for x in ex_batches]
        part_col[ex_ord] = [x.offsets_partition for x in ex_batches]
    attrs, nfast = hdr["attrs"], fast_ord.size
    b.cols = {
        "offsets_partition": part_col,
        "producer_id": per_batch(hdr["pid"], "producer_id", np.int64),
        "producer_epoch": per_batch(hdr["epoch"], "producer_epoch", np.int16),
        "is_transactional": per_batch((attrs & ATTR_TRANSACTIONAL) != 0, "is_transactional",
                                      np.bool_),
        "is_control": per_batch((attrs & ATTR_CONTROL) != 0, "is_control", np.bool_),
        "partition_leader_epoch": per_batch(hdr["leader_epoch"], "partition_leader_epoch",
                                            np.int32),
        "magic": per_batch(np.full(nfast, 2, np.int8), "magic", np.int8),
        "batch_base_offset": per_batch(hdr["base"], "base_offset", np.int64),
        "crc_valid": per_batch(np.ones(nfast, bool), "crc_valid", np.bool_),
        "source_position": per_batch(g.fpos, "position", np.int64),
        "timestamp_type": per_batch((attrs & ATTR_TIMESTAMP_TYPE) != 0, "timestamp_type",
                                    np.int8),
    }


@dataclass(slots=True)
class _Rows:
    """Record-level columns of a group: offsets and timestamps of every row, key/value byte
    ranges in the group buffer of the vector rows (``fast_rows``), the exact rows' keys,
    values and control types."""

    offset: np.ndarray
    timestamp: np.ndarray
    fast_rows: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    control: np.ndarray
    control_names: list[str] = field(default_factory=list)
    keys_extra: list[bytes | None] = field(default_factory=list)
    values_extra: list[bytes | None] = field(default_factory=list)


def _vector_rows(g: _Group, row_start: np.ndarray, nrows: int, offsets_only: bool = False) -> _Rows:
    """The vector path's records scattered to their rows (exact rows left for _exact_rows);
    ``offsets_only``: their offsets alone (what an index keeps of them)."""
    offset = np.empty(nrows, dtype=np.int64)
    timestamp = np.empty(nrows, dtype=np.int64)
    control = np.full(nrows, -1, dtype=np.int32)
    rounds, hdr = g.rounds, g.hdr
    none = np.zeros(0, dtype=np.int64)
    if not rounds.batch:
        return _Rows(offset, timestamp, none, none, none, none, none, control)
    cand = np.concatenate(rounds.batch)
    keep = g.ok[cand]
    cand = cand[keep]

    def cat(chunks: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(chunks)[keep]

    rows = row_start[g.fast_ord[cand]] + cat(rounds.k)
    offset[rows] = hdr["base"][cand] + cat(rounds.off_delta)
    names = _control_rows(g, hdr["attrs"][cand] & ATTR_CONTROL != 0, rows, cat(rounds.key_start),
                          cat(rounds.key_len), control)
    if offsets_only:
        return _Rows(offset, timestamp, none, none, none, none, none, control, names)
    timestamp[rows] = np.where(
        hdr["attrs"][cand] & ATTR_TIMESTAMP_TYPE,
        hdr["max_ts"][cand],
        hdr["base_ts"][cand] + cat(rounds.ts_delta),
    )
    if g.exact or len(rounds.batch) > 1:  # rounds are interleaved: scatter to row order
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

    return _Rows(offset, timestamp, fast_rows,
                 in_row_order(rounds.key_start), in_row_order(rounds.key_len),
                 in_row_order(rounds.value_start), in_row_order(rounds.value_len), control, names)


def _control_rows(g: _Group, is_control: np.ndarray, rows: np.ndarray, key_start: np.ndarray,
                  key_len: np.ndarray, control: np.ndarray) -> list[str]:
    """The control type of the vector path's control records (``is_control``, at ``rows``),
    coded into ``control``; returns the names the codes stand for. A key shorter than 4
    bytes (or null) is "UNKNOWN(-1)", as in ``framing.control_type_of``."""
    if not is_control.any():
        return []
    at, start, length = rows[is_control], key_start[is_control], key_len[is_control]
    readable = length >= 4
    where = np.where(readable, start + 2, 0)
    kind = np.where(readable, (g.u[where].astype(np.int16) << 8) | g.u[where + 1], -1).astype(np.int16)
    names, codes = np.unique(kind, return_inverse=True)
    control[at] = codes
    return [_CONTROL_NAMES.get(int(t), f"UNKNOWN({int(t)})") for t in names]


def _exact_rows(g: _Group, b: _Batches, row_start: np.ndarray, r: _Rows) -> None:
    """The exact batches' records into their rows of ``r``."""
    if not g.exact:
        return
    ex_counts = np.array([len(recs) for _, _, recs in g.exact], dtype=np.int64)
    ex_rows = np.repeat(row_start[b.ex_ord] - (np.cumsum(ex_counts) - ex_counts), ex_counts)
    ex_rows += np.arange(ex_rows.size, dtype=np.int64)
    recs = [rec for _, _, rs in g.exact for rec in rs]
    r.offset[ex_rows] = [rec[0] for rec in recs]
    # negative = no timestamp (null), whatever its magnitude, as batches_to_arrow has it
    r.timestamp[ex_rows] = [rec[1] if rec[1] >= 0 else -1 for rec in recs]
    r.keys_extra = [rec[3] for rec in recs]
    r.values_extra = [rec[4] for rec in recs]
    codes = {name: i for i, name in enumerate(r.control_names)}  # the vector rows' codes first
    for row, rec in zip(ex_rows.tolist(), recs, strict=True):
        if rec[6] is not None:
            r.control[row] = codes.setdefault(rec[6], len(codes))
    r.control_names = list(codes)


def _control_types(r: _Rows) -> pa.Array:
    if r.control_names:
        return coded_strings(r.control_names, r.control)
    return pa.nulls(r.offset.size, pa.string())


def _index_batch(g: _Group, b: _Batches, r: _Rows, row_batch: np.ndarray) -> pa.RecordBatch:
    """INDEX_ARROW_SCHEMA rows: no bytes, no strings per row (a fraction of the work)."""
    ordinals = np.array([next(p.file.ordinal for p in g.parts if p.file.path == name)
                         for name in b.file_names], dtype=np.int32)
    index = {
        "offset": numpy_to_arrow(r.offset),
        "producer_id": numpy_to_arrow(b.cols["producer_id"][row_batch]),
        "is_transactional": numpy_to_arrow(b.cols["is_transactional"][row_batch]),
        "is_control": numpy_to_arrow(b.cols["is_control"][row_batch]),
        "control_type": _control_types(r),
        "source_file": numpy_to_arrow(ordinals[b.source][row_batch]),
        "source_position": numpy_to_arrow(b.cols["source_position"][row_batch]),
    }
    return pa.RecordBatch.from_arrays([index[f.name] for f in INDEX_ARROW_SCHEMA],
                                      schema=INDEX_ARROW_SCHEMA)


def _raw_batch(
    g: _Group, b: _Batches, r: _Rows, row_batch: np.ndarray, cluster_id: str | None
) -> pa.RecordBatch:
    """RAW_ARROW_SCHEMA rows; every column is built with its schema type (from_arrays
    rejects any mismatch)."""
    nrows = r.offset.size
    cols: dict[str, pa.Array] = {
        "cluster_id": pa.nulls(nrows, pa.string())
        if cluster_id is None
        else coded_strings([cluster_id], np.zeros(nrows, dtype=np.int32)),
        "offset": numpy_to_arrow(r.offset),
        "timestamp": numpy_to_arrow(r.timestamp, r.timestamp < 0).view(_TS_TYPE),
        "key": binary_ranges(g.buf, r.key_start, r.key_len, r.keys_extra, r.fast_rows),
        "value": binary_ranges(g.buf, r.value_start, r.value_len, r.values_extra, r.fast_rows),
        "control_type": _control_types(r),
        "compression": coded_strings(b.comp_names, b.comp[row_batch]),
        "source": coded_strings(b.file_names, b.source[row_batch]),
    }
    for name, values in b.cols.items():
        cols[name] = numpy_to_arrow(values[row_batch])
    arrays = [cols[f.name] for f in RAW_ARROW_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=RAW_ARROW_SCHEMA)


def build_group(
    parts: Sequence[WalkedPart], cluster_id: str | None, problems: list[Problem] | None,
    index_only: bool = False,
) -> tuple[pa.RecordBatch | None, np.ndarray]:
    """Decode a group of walked parts: (rows as RAW_ARROW_SCHEMA, or INDEX_ARROW_SCHEMA when
    ``index_only``, or None if none; cumulative row count at the end of every batch in log
    order)."""
    g = _layout(parts)
    _inflate(g)
    _vector_pass(g)
    _decode_declined(g, problems)
    b = _row_counts(g)
    nrows = int(b.ends[-1]) if g.nb else 0
    if nrows == 0:
        return None, b.ends
    _batch_columns(g, b)
    row_batch = np.repeat(np.arange(g.nb, dtype=np.int64), b.counts)
    row_start = b.ends - b.counts
    r = _vector_rows(g, row_start, nrows, offsets_only=index_only)
    _exact_rows(g, b, row_start, r)
    if index_only:
        return _index_batch(g, b, r, row_batch), b.ends
    return _raw_batch(g, b, r, row_batch, cluster_id), b.ends
