"""The per-row rule for commits past a snapshot's log end or below its log start, as
pipelines/state/anomalies.py wrote it before it was vectorized: the oracle the vectorized
``bound_anomalies`` is differential-tested against."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def bound_rows(rows: list[dict[str, Any]], snapshots: list[dict[str, Any]],
               at: list[datetime | None] | None) -> list[tuple[str, int, str]]:
    """(kind, row index, snapshot id) per anomaly, in row order, past before below.

    A row is checked against its partition's snapshots sorted by capture time (stable):
    past the end against the first captured at or after its time, below the start against
    the last captured at or before it. ``at`` None: every snapshot is both after and before
    the row (current offsets against a snapshot); a row whose time is None gets the first
    check only."""
    snaps: dict[tuple, list[dict[str, Any]]] = {}
    for s in snapshots:
        snaps.setdefault((s["cluster_id"], s["topic"], s["partition"]), []).append(s)
    for mine in snaps.values():
        mine.sort(key=lambda s: s["captured_at"])
    out = []
    for i, c in enumerate(rows):
        mine = snaps.get((c["cluster_id"], c["topic"], c["partition"]), [])
        if c["committed_offset"] is None or not mine:
            continue
        ts = None if at is None else at[i]
        after = [s for s in mine if ts is None or s["captured_at"] >= ts]
        before = mine if at is None else [s for s in mine if ts is not None and s["captured_at"] <= ts]
        if after and after[0]["log_end_offset"] is not None and c["committed_offset"] > after[0]["log_end_offset"]:
            out.append(("past_log_end", i, after[0]["snapshot_id"]))
        if before and before[-1]["log_start_offset"] is not None \
                and c["committed_offset"] < before[-1]["log_start_offset"]:
            out.append(("below_log_start", i, before[-1]["snapshot_id"]))
    return out
