"""The generator's results: the expected committed offsets, aborted commits and the manifest.

Why its own module: these are the types callers (tests, the CLI's demo command, benchmarks)
hold on to; everything else in :mod:`pipelines.demo` is how they are produced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["AbortedCommit", "Committed", "DemoManifest"]


class Committed(NamedTuple):
    """The committed offset a coordinator would serve for one (group, topic, partition)."""

    offset: int
    leader_epoch: int
    metadata: str


class AbortedCommit(NamedTuple):
    """A transactional offset commit whose transaction was aborted: it must never win."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str
    producer_id: int


@dataclass
class DemoManifest:
    """What :func:`generate_cluster` wrote and the final state a coordinator rebuilds from it."""

    out_dir: str
    num_partitions: int
    seed: int
    scale: int
    start_ms: int
    end_ms: int
    compression: list[str]
    topics: dict[str, dict[str, Any]]
    broker_restarts_ms: list[int]
    stories: dict[str, str]
    groups: dict[str, dict[str, Any]]
    deleted_groups: list[str]
    committed: dict[tuple[str, str, int], Committed]
    aborted: list[AbortedCommit]
    counts: dict[str, Any]
    partitions: dict[int, dict[str, Any]]
    #: the audit-trail story's known anomalies ({kind, group, topic, partition,
    #: committed_offset}), its commits' expected attribution, and the log-end floors of
    #: partitions committed beyond their end (see :mod:`pipelines.state.audit`)
    audit: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (tuple keys become rows)."""
        return {
            "generator": "pipelines.demo",
            "out_dir": self.out_dir,
            "num_partitions": self.num_partitions,
            "seed": self.seed,
            "scale": self.scale,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "compression": self.compression,
            "topics": self.topics,
            "broker_restarts_ms": self.broker_restarts_ms,
            "stories": self.stories,
            "groups": self.groups,
            "deleted_groups": self.deleted_groups,
            "committed_offsets": [
                {"group": g, "topic": t, "partition": p, "offset": c.offset,
                 "leader_epoch": c.leader_epoch, "metadata": c.metadata}
                for (g, t, p), c in sorted(self.committed.items())
            ],
            "aborted_commits": [a._asdict() for a in self.aborted],
            "counts": self.counts,
            "partitions": {str(p): v for p, v in sorted(self.partitions.items())},
            "audit": self.audit,
        }

    def write_manifest(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path`` (sorted keys, so equal runs give equal files)."""
        out = Path(path)
        out.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")
        return out

    def summary(self) -> str:
        """A few human-readable lines: totals, then one line per group."""
        c = self.counts
        lines = [
            f"{c['records']:,} records ({c['data_records']:,} data, {c['control_records']} "
            f"markers: {c['commit_markers']} COMMIT / {c['abort_markers']} ABORT) in "
            f"{c['batches']:,} batches, {c['bytes']:,} bytes, {self.num_partitions} partitions, "
            f"scale {self.scale}, seed {self.seed}",
            "records by type: " + ", ".join(f"{k}={v:,}" for k, v in sorted(
                c["records_by_type"].items(), key=lambda kv: int(kv[0]))),
            "tombstones by type: " + ", ".join(f"{k}={v}" for k, v in sorted(
                c["tombstones_by_type"].items(), key=lambda kv: int(kv[0]))),
            f"committed offsets expected: {len(self.committed)}; aborted commits: "
            f"{len(self.aborted)}; deleted groups: {', '.join(self.deleted_groups) or '-'}",
        ]
        for gid, g in sorted(self.groups.items()):
            extra = (f"gen {g['generation']}" if g["group_type"] == "classic"
                     else f"epoch {g['group_epoch']}/{g['assignment_epoch']}"
                     if g["group_type"] == "consumer" else "offsets only")
            lines.append(f"  p{g['offsets_partition']:<3} {gid:<20} {g['group_type']:<8} "
                         f"{g['state']:<11} {extra:<13} {len(g['members'])} member(s)")
        return "\n".join(lines)
