"""Segment files on disk: what a path's name says, and the segments of each partition directory.

Why its own module: finding ``__consumer_offsets-N/<base offset>.log`` files (and Kafka's
``.swap``/``.deleted``/``.cleaned`` renames) is the same for every reader and knows nothing of
the bytes inside.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PartitionLog",
    "SegmentFile",
    "find_segments",
    "parse_segment_name",
    "partition_of_dir",
]

_SEGMENT_NAME = re.compile(r"^(\d+)\.log((?:\.(?:swap|deleted|cleaned))?(?:@[0-9A-Za-z]+)?)$")
_PARTITION_DIR = re.compile(
    r"^__consumer_offsets-(\d+)(?:\.[0-9A-Za-z]+-(?:delete|future|stray))?$"
)


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
