"""The two sides a reconciliation compares, read back from the lake.

Why: classification (:mod:`pipelines.reconcile.reconcile`) works on small plain dicts: the
lake's rebuilt coordinator state (committed offsets, groups, members, tombstoned groups, how
far each ``__consumer_offsets`` partition was ingested) and one stored snapshot of the
cluster's answers. Reading them is this module's one job; each read is of a state or
snapshot table (how far each partition was ingested comes from ``ingest_progress``), so
its cost follows the groups and keys, not the history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow.compute as pc

from pipelines.lake.engines import DeltaEngine
from pipelines.reconcile.snapshot import SnapshotInfo, read_snapshot, string_field
from pipelines.state.progress import log_ends

_GROUP_TOMBSTONE_TYPES = (2, 3, 11, 17)  # classic, consumer, share, streams group metadata


@dataclass
class LakeState:
    """The lake side, as plain dicts (small: one entry per group / group-partition)."""

    offsets: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=dict)
    tombstoned: set[str] = field(default_factory=set)  # groups whose latest group record is a tombstone
    log_end: dict[int, int] = field(default_factory=dict)  # offsets_partition -> max offset + 1


@dataclass
class SnapshotState:
    """The broker side of one snapshot."""

    info: SnapshotInfo
    offsets: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    group_errors: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=dict)
    points: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)  # hw, lso


def _cluster_filter(cluster_id: str) -> pc.Expression:
    return string_field("cluster_id") == cluster_id


def _rows(engine: DeltaEngine, table: str, columns: list[str], cluster_id: str,
          extra: pc.Expression | None = None) -> list[dict[str, Any]]:
    if not engine.exists(table):
        return []
    expr = _cluster_filter(cluster_id) if extra is None else _cluster_filter(cluster_id) & extra
    return engine.read(table, columns=columns, filter_expr=expr).to_pylist()


def load_lake_state(engine: DeltaEngine, cluster_id: str) -> LakeState:
    """Read what reconciliation needs from the lake's state and history tables."""
    state = LakeState()
    for r in _rows(engine, "committed_offsets",
                   ["group_id", "topic", "partition", "committed_offset", "leader_epoch",
                    "metadata", "offsets_partition", "offset"], cluster_id):
        state.offsets[(r["group_id"], r["topic"], r["partition"])] = r
    for r in _rows(engine, "consumer_groups",
                   ["group_id", "group_type", "group_state", "protocol_type", "num_members",
                    "offsets_partition", "last_record_offset", "generation", "assignment_epoch"],
                   cluster_id):
        state.groups[r["group_id"]] = r
    for r in _rows(engine, "group_members", ["group_id", "member_id"], cluster_id):
        state.members.setdefault(r["group_id"], set()).add(r["member_id"])
    tomb = pc.field("is_tombstone") & pc.field("record_type").isin(list(_GROUP_TOMBSTONE_TYPES))
    for r in _rows(engine, "group_records_latest", ["group_id"], cluster_id, tomb):
        if r["group_id"] not in state.groups:
            state.tombstoned.add(r["group_id"])
    state.log_end = log_ends(engine, cluster_id)  # ingest_progress: no scan of the history
    return state


def load_snapshot_state(engine: DeltaEngine, info: SnapshotInfo) -> SnapshotState:
    """Read one stored snapshot back into dicts."""
    tables = read_snapshot(engine, info.snapshot_id, info.cluster_id)
    snap = SnapshotState(info=info)
    for r in tables["snapshot_offsets"].to_pylist():
        if r["topic"] is None:
            snap.group_errors[r["group_id"]] = (int(r["error_code"] or 0), r["error_name"])
        else:
            snap.offsets[(r["group_id"], r["topic"], r["partition"])] = r
    for r in tables["snapshot_groups"].to_pylist():
        snap.groups[r["group_id"]] = r
        if r.get("group_epoch") is not None and not r["error_code"]:
            # described (Consumer/Share/StreamsGroupDescribe): its member list is the broker's
            # answer even when empty, so a member only the lake holds is a mismatch
            snap.members.setdefault(r["group_id"], set())
    for r in tables["snapshot_members"].to_pylist():
        snap.members.setdefault(r["group_id"], set()).add(r["member_id"])
    for r in tables["snapshot_points"].to_pylist():
        snap.points[int(r["offsets_partition"])] = (r["high_watermark"], r["last_stable_offset"])
    return snap
