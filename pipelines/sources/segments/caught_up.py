"""Whether an ``availableNow`` run over segment files would find nothing new, asked without
Spark.

Why: a scheduled run over files that did not change since the last run (a backup directory
copied daily and polled hourly, a rerun) plans no micro-batch, yet it started Spark to learn
that: ~2.3 s of a ~3 s run. What the streaming source would answer needs two things Spark
keeps in files: the end offsets of the last micro-batch (the offset log's last entry) and
that the batch was committed (the commit log's entry of the same number); the files' index
and the planner's own ``plan_end_offsets`` give the rest, exactly as the source computes its
next end from there. Anything unexpected (a batch planned and not committed, which Spark
replays; a log this does not read) answers "may find something", and Spark runs.
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


def nothing_new(path: str, checkpoint: Path, cluster_id: str) -> bool:
    """Whether the segment files under ``path`` hold no record past what the checkpoint's
    last committed micro-batch read, and no batch is waiting to be committed."""
    from pipelines.sources.segments.spark_source import SegmentPlanner

    kept = checkpoint / "pending_batches"
    if kept.is_dir() and any(kept.iterdir()):
        return False
    end = committed_end(checkpoint / "spark")
    if end is None:
        return False
    planner = SegmentPlanner({"path": path, "cluster_id": cluster_id,
                              "index_cache_dir": str(checkpoint / "segment_index")})
    return planner.next_end(end) == end
