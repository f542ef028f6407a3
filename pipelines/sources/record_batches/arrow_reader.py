"""Vectorized segment reading: segment file bytes -> RAW_ARROW_SCHEMA record batches.

Why: nearly every ``__consumer_offsets`` batch is an uncompressed magic-2 batch of one to a
few records, and the record-object path (:mod:`.exact_reader`) spends ~5 us per record
building ``Record`` tuples and then Python lists for Arrow. Here, per group of files
(~8 MiB), the only per-batch Python work is the framing walk (one ``struct`` unpack and one
C-speed CRC32C per batch); everything else is numpy over all batches at once:

1. **walk** (:mod:`.arrow_walk`): follow the length fields with exactly the acceptance test of
   ``decode_segment_bytes``' fast branch (magic 2, sane length, inside the file, base offset
   at or above the floor, CRC32C valid). Whatever fails it goes through the exact
   ``slow_step`` right there, so framing, resynchronisation, floors and Problems are the
   exact path's by construction;
2. **headers** (:mod:`.arrow_decode`, as are 3 and 4): one row gather through a
   sliding-window view copies the 61 header bytes of every candidate batch; fields are
   big-endian views through a structured dtype;
3. **records** (:mod:`.arrow_records`): zig-zag varints (length, timestamp delta, offset
   delta, key and value lengths; attributes skipped; header count must be 0) are decoded for
   the k-th record of every batch at once, k = 0, 1, ... ("rounds"), with every check the
   exact decoder makes; a compressed batch (gzip, snappy, lz4, zstd) is first decompressed
   into a synthetic uncompressed copy in the group's buffer, so it takes the same rounds;
4. **columns**: key/value become ``pa.binary`` arrays by one Arrow ``take`` over a view of the
   file bytes whose offsets alternate gap/key/gap/key (no per-record bytes objects), batch
   facts are expanded with ``np.repeat``.

A batch the vector path does not fully validate (a compressed control batch, not decompressable,
record headers, varints over 9 bytes, a record that does not fill its declared length, extreme
offsets or timestamps, very long batches) and legacy magic 0/1 messages (pre-0.11 brokers)
are decoded by the exact path instead, at their place, with their Problems. So the output equals ``batches_to_arrow(iter_batches(...))`` row for
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
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..segments.files import SegmentFile, find_segments, parse_segment_name, partition_of_dir
from .arrow_decode import build_group
from .arrow_walk import SegmentBytes, WalkedPart, open_segment, segment_bytes, walk
from .problems import Problem

__all__ = [
    "bytes_to_arrow",
    "index_segments_arrow",
    "read_arrow",
    "read_file_arrow",
    "read_segments_arrow",
]

#: Bytes of segment data processed together: large enough to amortise numpy's per-call cost
#: over many small files, small enough to bound memory for 1 GiB segments.
GROUP_BYTES = 8 << 20


# --------------------------------------------------------------------------------------------
# Driving: files -> groups -> chunks of ~rows_per_batch rows
# --------------------------------------------------------------------------------------------


def _groups(files: Iterable[SegmentBytes]) -> Iterator[list[WalkedPart]]:
    """Walk files in order, cutting them into groups of about GROUP_BYTES."""
    group: list[WalkedPart] = []
    size = 0
    for f in files:
        while True:
            part = walk(f, f.pos + max(GROUP_BYTES - size, 1))
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
    files: Iterable[SegmentBytes],
    cluster_id: str | None,
    rows_per_batch: int | None,
    problems: list[Problem] | None,
    index_only: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Decoded groups re-cut like batches_to_arrow: a chunk ends after the first Kafka batch
    that brings it to ``rows_per_batch`` rows; a chunk inside one group is a zero-copy slice.
    ``rows_per_batch=None``: each group's rows as decoded, for callers that make one table of
    them anyway (a re-cut copies every chunk that spans two groups: ~0.35 s per 10M records)."""
    pending: list[pa.RecordBatch] = []
    have = 0
    for group in _groups(files):
        rb, ends = build_group(group, cluster_id, problems, index_only)
        if rb is None:
            continue
        if rows_per_batch is None:
            yield rb
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
    files = (open_segment(seg, offsets_partition) for seg in segments)
    return _chunks(files, cluster_id, rows_per_batch, problems)


def index_segments_arrow(
    segments: Sequence[SegmentFile], problems: list[Problem] | None = None
) -> Iterator[pa.RecordBatch]:
    """INDEX_ARROW_SCHEMA rows of ``segments``: the same rows as :func:`read_segments_arrow`,
    only what planning reads needs (offsets, transaction facts, where each batch lies)."""
    files = (open_segment(seg, None, i) for i, seg in enumerate(segments))
    return _chunks(files, None, None, problems, index_only=True)


def bytes_to_arrow(
    data: bytes,
    *,
    path: str = "<memory>",
    offsets_partition: int = -1,
    base_offset: int = 0,
    cluster_id: str | None = None,
    rows_per_batch: int | None = 65536,
    problems: list[Problem] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Segment bytes in memory as RAW_ARROW_SCHEMA batches; equal to
    ``batches_to_arrow(decode_segment_bytes(data, ...), ...)`` (the same rows in other
    chunks with ``rows_per_batch=None``: each ~8 MiB group of batches as decoded)."""
    files = [segment_bytes(data, path, offsets_partition, base_offset)]
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


def read_arrow(
    *paths: str | os.PathLike[str],
    cluster_id: str | None = None,
    rows_per_batch: int = 65536,
    problems: list[Problem] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every record under ``paths`` (data and control, no folding) as RAW_ARROW_SCHEMA batches,
    in :func:`~pipelines.sources.segments.files.find_segments` order: the same rows, chunk
    boundaries and Problems as ``batches_to_arrow(iter_batches(*paths, problems=...))``."""
    segs = (seg for plog in find_segments(*paths) for seg in plog.segments)
    yield from read_segments_arrow(
        segs, cluster_id=cluster_id, rows_per_batch=rows_per_batch, problems=problems
    )
