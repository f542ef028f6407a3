"""The report's history window (``offsetlake report --since``) and its whole-lake header.

Why: a scheduled report after each ingest must cost what the new data costs, not what the
lake has piled up. With a window, the history tables the report plots (``offset_commits``,
``commit_attribution``) are read only from the files whose Delta statistics say they hold
a commit at or after the window's start (other files are never opened), and only those
rows are used. The header's whole-lake figures (records per cluster, first and last
record) come from the Delta log's file statistics and ``ingest_progress``, not a scan of
``offsets_raw``; a lake whose log lacks them is scanned as before.

Public API: :func:`parse_since`, :func:`history_source`, :func:`register_history`,
:func:`history_span`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from pipelines.lake.location import LakeLocation
from pipelines.queries import arrow_source, open_table, utc_instant

#: Delta statistics may hold timestamps truncated to milliseconds: a file is skipped only
#: when its newest time is older than the window's start by more than this.
_STATS_SLACK = timedelta(milliseconds=1)
_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
#: The history tables the report plots, and the time columns a window applies to.
HISTORY_TABLES = ("offset_commits", "commit_attribution")
_TIME_COLUMNS = ("record_timestamp", "commit_timestamp")


def parse_since(text: str, last: datetime | None) -> datetime:
    """``--since``: an instant (ISO 8601, UTC unless it has an offset, or epoch ms) or a
    duration before the lake's newest record (``90m``, ``24h``, ``7d``)."""
    m = _DURATION.match(text)
    if m:
        end = last or datetime.now(timezone.utc)
        return end - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    stripped = text.strip()
    return utc_instant(int(stripped) if stripped.lstrip("-").isdigit() else stripped)


def _stale_files(dt: Any, since: datetime) -> set[str]:
    """Relative paths of the files whose statistics show every commit time before ``since``
    (a file without statistics for a column is kept)."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    names = actions.schema.names
    cols = [f"max.{c}" for c in _TIME_COLUMNS if f"max.{c}" in names]
    if "max.record_timestamp" not in cols:
        return set()
    cut = since - _STATS_SLACK
    stale = []
    for row in actions.select(["path", *cols]).to_pylist():
        times = [row[c] for c in cols]
        if times[0] is not None and all(t is None or t < cut for t in times):
            stale.append(row["path"])
    return set(stale)


def history_source(lake: str | LakeLocation, table: str, since: datetime | None
                   ) -> pa.Table | pads.Dataset:
    """``table`` for DuckDB, as :func:`pipelines.queries.arrow_source` gives it, without
    the files that hold nothing at or after ``since`` (rows are filtered by the caller)."""
    source = arrow_source(lake, table)
    if since is None or not isinstance(source, pads.FileSystemDataset):
        return source
    _, dt = open_table(lake, table)
    kept = fresh_files(dt, source.files, since)
    if not kept:
        return source.schema.empty_table()
    return pads.dataset(kept, schema=source.schema, format="parquet", filesystem=source.filesystem)


def fresh_files(dt: Any, files: list[str], since: datetime) -> list[str]:
    """Of a table's current ``files`` (paths or URIs), those that can hold a row from ``since``."""
    stale = _stale_files(dt, since)
    return [f for f in files if not any(f.endswith("/" + p) for p in stale)] if stale else files


def window_predicate(since: datetime) -> str:
    """The SQL condition of the window on a history row (its record time, else its commit
    time, as the report plots it); ``since`` as a literal (it is a datetime, not text)."""
    return (f"COALESCE(record_timestamp, commit_timestamp) >= "
            f"TIMESTAMPTZ '{since.astimezone(timezone.utc).isoformat()}'")


def register_history(con: Any, lake: str | LakeLocation, since: datetime | None) -> None:
    """``offset_commits`` on ``con``: the whole table, or with a window only its rows at or
    after ``since`` (a view over the files that can hold them)."""
    if since is None:
        con.register("offset_commits", arrow_source(lake, "offset_commits"))
        return
    con.register("offset_commits_history", history_source(lake, "offset_commits", since))
    con.execute("CREATE VIEW offset_commits AS SELECT * FROM offset_commits_history "
                f"WHERE {window_predicate(since)}")


def filter_window(table: pa.Table, since: datetime | None) -> pa.Table:
    """Rows of a history table at or after ``since`` (all without a window)."""
    if since is None:
        return table
    us = pa.timestamp("us", "UTC")
    ts = table.column("record_timestamp").cast(us)
    if "commit_timestamp" in table.schema.names:
        ts = pc.coalesce(ts, table.column("commit_timestamp").cast(us))
    return table.filter(pc.fill_null(pc.greater_equal(ts, pa.scalar(since, us)), False))


def history_span(lake: str | LakeLocation) -> list[dict[str, Any]] | None:
    """Records, first and last record time per cluster without scanning ``offsets_raw``:
    counts from the Delta log (when every file holds one cluster, as ingest writes them),
    times from ``ingest_progress``. None when the lake's log cannot answer exactly."""
    _, raw = open_table(lake, "offsets_raw")
    _, progress = open_table(lake, "ingest_progress")
    if raw is None or progress is None:
        return None
    actions = pa.table(raw.get_add_actions(flatten=True))
    needed = {"num_records", "min.cluster_id", "max.cluster_id", "min.timestamp", "max.timestamp"}
    if not needed <= set(actions.schema.names):
        return None
    counts: dict[str, int] = {}
    stats: dict[str, list[datetime]] = {}
    for row in actions.select(sorted(needed)).to_pylist():
        cluster = row["min.cluster_id"]
        if row["num_records"] is None or cluster is None or cluster != row["max.cluster_id"]:
            return None
        counts[cluster] = counts.get(cluster, 0) + row["num_records"]
        stats.setdefault(cluster, []).extend(t for t in (row["min.timestamp"], row["max.timestamp"])
                                             if t is not None)
    spans = progress.to_pyarrow_table(columns=["cluster_id", "first_timestamp", "last_timestamp"]
                                      ).group_by("cluster_id").aggregate(
        [("first_timestamp", "min"), ("last_timestamp", "max")])
    times = {r["cluster_id"]: {"first": r["first_timestamp_min"], "last": r["last_timestamp_max"]}
             for r in spans.to_pylist()}
    if set(times) != {c for c, n in counts.items() if n}:
        return None
    for c, t in times.items():  # progress must cover the whole table (not a lake older than it)
        if not stats.get(c) or t["first"] is None or t["last"] is None \
                or abs(min(stats[c]) - t["first"]) > _STATS_SLACK \
                or abs(max(stats[c]) - t["last"]) > _STATS_SLACK:
            return None
    return [{"cluster_id": c, "records": counts[c], "first": times[c]["first"],
             "last": times[c]["last"]} for c in sorted(times)]


__all__ = ["HISTORY_TABLES", "filter_window", "fresh_files", "history_source", "history_span", "parse_since",
           "register_history", "window_predicate"]
