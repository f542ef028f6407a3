"""Whether an ``availableNow`` run over segment files would find nothing new, asked without
Spark.

Why: a scheduled run over files that did not change since the last run (a backup directory
copied daily and polled hourly, a rerun) plans no micro-batch, yet it started Spark to learn
that: ~2.3 s of a ~3 s run. What the streaming source would answer needs two things Spark
keeps in files: the end offsets of the last micro-batch (the offset log's last entry) and
that the batch was committed (the commit log's entry of the same number); the files' index,
as the last run stored it, and the planner's own ``plan_end_offsets`` give the rest, exactly
as the source computes its next end from there. Anything unexpected (a batch planned and
not committed, which Spark replays; a log this does not read) answers "may find
something", and Spark runs.
"""

from __future__ import annotations

import json
from pathlib import Path

#: the version line of Spark's offset and commit logs (HDFSMetadataLog), Spark 3 and 4
_LOG_VERSION = "v1"


def committed_end(spark_checkpoint: Path) -> dict[str, int] | None:
    """The segment source's end offsets of the last micro-batch Spark committed under
    ``spark_checkpoint``; None when there is none, when the last batch planned was not
    committed (a stopped run: the next run replays it), or when the logs are not as read
    here (one source, version ``v1``)."""
    planned = _entries(spark_checkpoint / "offsets")
    if not planned or max(planned) not in _entries(spark_checkpoint / "commits"):
        return None
    lines = (spark_checkpoint / "offsets" / str(max(planned))).read_text().splitlines()
    if len(lines) != 3 or lines[0] != _LOG_VERSION:  # version, batch metadata, one source
        return None
    try:
        end = json.loads(lines[2])
    except ValueError:
        return None
    if not isinstance(end, dict) or not all(
            isinstance(k, str) and type(v) is int for k, v in end.items()):
        return None
    return end


def _entries(log: Path) -> set[int]:
    """The batch numbers of a Spark metadata log (its files named by number; not its
    ``.N.crc`` checksums nor temporary files)."""
    if not log.is_dir():
        return set()
    return {int(p.name) for p in log.iterdir() if p.name.isdigit()}


def nothing_new(path: str, checkpoint: Path) -> bool:
    """Whether the segment files under ``path`` hold no record past what the checkpoint's
    last committed micro-batch read, and no batch is waiting to be committed.

    Read only from the index the last run stored: a partition whose files changed since
    (a grown or new segment) answers "may hold something" at once, so a run with new data
    indexes its files beside the JVM's start as before (``index_ahead``), not here."""
    from pipelines.sources.segments.files import find_segments
    from pipelines.sources.segments.index import SegmentIndexCache, log_key, plan_end_offsets

    kept = checkpoint / "pending_batches"
    if kept.is_dir() and any(kept.iterdir()):
        return False
    end = committed_end(checkpoint / "spark")
    if end is None:
        return False
    root = Path(path)
    plogs = find_segments(root)
    indexes = SegmentIndexCache(checkpoint / "segment_index").stored(plogs)
    if indexes is None:
        return False
    keyed = {log_key(root, plog): index for plog, index in zip(plogs, indexes, strict=True)}
    return plan_end_offsets(keyed, end, None) == end  # the source's own next end
