"""``pipelines.state.anomalies._after_deletion`` as it was before issue 9 vectorized it (a
Python walk over every commit of the groups with a group tombstone or a pending deletion,
in log order, one state per group), kept verbatim as the oracle of
tests/test_deletion_walk.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.state.anomalies import (
    KINDS,
    LiveAttribution,
    _last_is_tombstone,
    _of_groups,
    anomaly_row,
)


def after_deletion(commits: pa.Table, events: list[tuple[str, str, Any]], cursor: list[dict[str, Any]],
                    attributed: LiveAttribution, now: datetime, new_cursor: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """The first commit after a group's deletion with no new group record between.

    A deletion is a group-level tombstone whose group's last offset record before it is a
    tombstone (DeleteGroups and expiry write the offset tombstones first). A lone
    GroupMetadata tombstone is the classic -> consumer conversion, not a deletion (on a
    compacted log the consumer-group records written with it may be gone).
    Per group, the cursor row (topic '', partition -1) keeps whether the last offset record
    was a tombstone and the pending deletion's position; appended to ``new_cursor``.
    """
    before = {(r["cluster_id"], r["group_id"]): r for r in cursor if r["partition"] < 0}
    state = {k: {"deleted_at": r["group_deleted_at"], "offsets_deleted": bool(r["offsets_deleted"])}
             for k, r in before.items()}
    # the log-order walk is only needed where a deletion is pending or a group tombstone lands
    # (rare); elsewhere a group record only clears a deletion there is none of
    detailed = {k for k, v in state.items() if v["deleted_at"] is not None} | {
        (c, g) for c, g, r in events if r.is_tombstone}
    for c, g, _ in events:
        state.setdefault((c, g), {"deleted_at": None, "offsets_deleted": False})
    out = []
    if commits.num_rows:  # every group: was its last offset record of the batch a tombstone?
        for key, deleted in _last_is_tombstone(commits).items():
            if key not in detailed:
                state[key] = {"deleted_at": None, "offsets_deleted": deleted}
    if detailed:
        mine, rows = _of_groups(commits, detailed)
        # (cluster, group, offsets partition, position, is commit, commit row or tombstone flag);
        # a commit's row becomes a dict only when it is flagged
        columns = [mine.column(n).to_pylist() for n in ("cluster_id", "group_id", "offsets_partition",
                                                         "offset", "is_tombstone")]
        items: list[tuple] = [(c, g, p, o, 1, (i, t))
                              for i, (c, g, p, o, t) in enumerate(zip(*columns, strict=True))]
        items += [(c, g, r.offsets_partition, r.offset, 0, r.is_tombstone) for c, g, r in events]
        items.sort(key=lambda t: t[:4])
        for cluster_id, group_id, _p, position, is_commit, what in items:
            st = state.setdefault((cluster_id, group_id), {"deleted_at": None, "offsets_deleted": False})
            if not is_commit:
                st["deleted_at"] = position if what and st["offsets_deleted"] else None
            elif what[1]:
                st["offsets_deleted"] = True
            else:
                st["offsets_deleted"] = False
                if st["deleted_at"] is not None:
                    who, member = attributed.at(rows[what[0]:what[0] + 1])
                    commit = mine.slice(what[0], 1).to_pylist()[0]
                    commit.update(attribution=who[0], member_id=member[0])
                    out.append(anomaly_row("commit_after_group_deleted", commit, now, "ingest",
                                           reason=KINDS["commit_after_group_deleted"][1]
                                           + f" (tombstone at offset {st['deleted_at']})"))
                    st["deleted_at"] = None
    for (cluster_id, group_id), st in sorted(state.items()):
        old = before.get((cluster_id, group_id))
        if old is not None and old["group_deleted_at"] == st["deleted_at"] \
                and bool(old["offsets_deleted"]) == st["offsets_deleted"]:
            continue
        new_cursor.append({"cluster_id": cluster_id, "group_id": group_id, "topic": "", "partition": -1,
                           "last_offset": None, "last_leader_epoch": None, "last_position": None,
                           "group_deleted_at": st["deleted_at"], "offsets_deleted": st["offsets_deleted"],
                           "updated_at": now})
    return out
