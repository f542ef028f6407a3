"""Lag rows: offset lag and time lag per (group, topic, partition) of a snapshot.

Why: both capture paths turn committed offsets and log end offsets into the same
``snapshot_lag`` rows; the time lag comes from the records the live capture read
(:mod:`~pipelines.reconcile.cluster.record_times`), a recorded capture has none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pipelines.reconcile.cluster.errors import NONE
from pipelines.reconcile.cluster.record_times import (
    CAUGHT_UP,
    RecordTime,
    RecordTimes,
    ms_to_datetime,
    plan,
    produce_rate,
    time_lag,
)
from pipelines.reconcile.cluster.rows import LagRow, LogEndOffsetRow, OffsetRow


def lag_rows(offsets: Iterable[OffsetRow], ends: Iterable[LogEndOffsetRow],
             times: RecordTimes | None = None,
             window_starts: Mapping[tuple[str, int], int | None] | None = None) -> list[LagRow]:
    """Offset lag and time lag per (group, topic, partition). ``times`` None (a recorded
    capture): the log was not read, so only a caught-up partition has a time lag (0)."""
    marks = {(e.topic, e.partition): e for e in ends}
    rows = []
    for r in offsets:
        if r.topic is None or r.partition is None:
            continue
        committed = r.committed_offset if r.error_code == NONE and (r.committed_offset or 0) >= 0 else None
        e = marks.get((r.topic, r.partition))
        end = e.log_end_offset if e is not None else None
        known = end is not None and committed is not None
        past_end = committed > end if known else None  # type: ignore[operator]
        lag = max(end - committed, 0) if known else None  # type: ignore[operator]
        newest = times.newest.get((r.topic, r.partition)) if times is not None else None
        at: RecordTime | None = None
        step = plan(committed, end, e.last_stable_offset if e else None,
                    e.log_start_offset if e else None)
        if step == CAUGHT_UP:
            time_lag_ms, reason = 0, None
        elif step is not None:
            time_lag_ms, reason = None, step
        elif times is None:
            time_lag_ms, reason = None, "not_captured"
        else:
            at = times.at.get((r.topic, r.partition, committed))  # type: ignore[arg-type]
            time_lag_ms, reason = time_lag(at, newest)
        rows.append(LagRow(
            r.group_id, r.topic, r.partition, committed, end, lag, past_end,
            committed_timestamp=(ms_to_datetime(at.timestamp_ms)
                                 if at is not None and at.timestamp_ms is not None else None),
            newest_offset=newest.offset if newest is not None else None,
            newest_timestamp=(ms_to_datetime(newest.timestamp_ms) if newest is not None
                              and newest.timestamp_ms is not None else None),
            time_lag_ms=time_lag_ms, time_lag_reason=reason,
            produce_rate=produce_rate(end, (window_starts or {}).get((r.topic, r.partition)))))
    return rows
