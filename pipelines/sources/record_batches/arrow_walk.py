"""The per-batch framing walk of the vectorized reader: segment bytes -> positions of the
batches the vector path may take, and the exact path's decode of every other batch.

Why a module of its own: this is the only per-batch Python loop of the vectorized reader (one
``struct`` unpack and one C-speed CRC32C per batch), and it must frame the bytes exactly as
``decode_segment_bytes`` does: its inner loop is that reader's fast-branch acceptance test,
and whatever fails it goes through the exact ``slow_step`` right there, so framing,
resynchronisation, offset floors and Problems are the exact reader's by construction.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..segments.files import SegmentFile
from .exact_batch import BatchInfo, Record
from .exact_reader import slow_step
from .framing import LOG_OVERHEAD, MIN_LENGTH, V2_CRC_START, V2_HEADER_SIZE, crc32c
from .problems import Problem

__all__ = ["SegmentBytes", "WalkedPart", "open_segment", "segment_bytes", "walk"]

# base offset, length, magic, crc, lastOffsetDelta of a v2 header in one unpack
_WALK = struct.Struct(">qi4xbI2xi")


@dataclass(slots=True)
class SegmentBytes:
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
class WalkedPart:
    """What one walk over (part of) a file found, in file order.

    ``fast`` holds the positions of batches that passed the exact fast branch's framing test;
    ``exact`` the (ordinal, batch, records) the exact path decoded, where ordinal is the
    batch's index among all batches of this part.
    """

    file: SegmentBytes
    fast: list[int] = field(default_factory=list)
    exact: list[tuple[int, BatchInfo, list[Record]]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    start: int = 0  # byte region [start, end) of the file covering the fast batches
    end: int = 0
    walked: int = 0  # bytes of the file this walk advanced over


def segment_bytes(data: bytes, path: str, offsets_partition: int, base_offset: int) -> SegmentBytes:
    if not isinstance(data, bytes):
        data = bytes(data)  # slices of bytearray/mmap would not be bytes
    return SegmentBytes(path, offsets_partition, data, memoryview(data), 0, base_offset)


def open_segment(segment: SegmentFile, offsets_partition: int | None, ordinal: int = 0) -> SegmentBytes:
    part = segment.offsets_partition if offsets_partition is None else offsets_partition
    f = segment_bytes(segment.path.read_bytes(), str(segment.path), part, segment.base_offset)
    f.ordinal = ordinal
    return f


def walk(f: SegmentBytes, stop: int) -> WalkedPart:
    """Walk ``f`` from where it stands until its end or past byte ``stop``.

    The inner loop is the acceptance test of decode_segment_bytes' fast branch, nothing more;
    anything it declines is handed to the exact ``slow_step`` with the same floor, so the
    framing (and every Problem) is the exact path's.
    """
    part = WalkedPart(f)
    fast = part.fast
    exact = part.exact
    problems = part.problems
    data, mv, n, path = f.data, f.mv, len(f.data), f.path
    pos, floor = f.pos, f.floor
    begin = pos

    def report(position: int, skipped: int, reason: str) -> None:  # logged once, by build_group
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
        step = slow_step(data, mv, pos, n, floor, path, f.partition, report)
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
