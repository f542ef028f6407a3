"""Lake maintenance: compact small files, checkpoint the log, vacuum -- without losing history.

Why: every micro-batch appends one small file per history table and every merge rewrites
state files, so a lake fed every few minutes reads thousands of tiny files within days;
and removed files pile up until vacuumed. Maintenance must never cost records or the time
travel that audits rely on ("what did the lake say when reconcile X ran?"), so:

* compaction is delta-rs ``optimize.compact`` (``dataChange=false``: same rows, fewer
  files); history tables with a ``group_id`` are z-ordered by it instead when a rewrite is
  cheap (the table is at most ``zorder_max_bytes``), because z-order rewrites the table;
  nothing runs on a table without at least two small files in one partition;
* each table's ``delta.deletedFileRetentionDuration`` and ``delta.logRetentionDuration``
  are raised to the vacuum retention when shorter (never lowered). Both matter: delta-rs
  drops tombstones older than the former from every checkpoint, after which the removed
  files are invisible to a lite vacuum (a leak) and look like orphans to a full one (time
  travel broken inside the retention); log files older than the latter are cleaned up
  after checkpoints, and time travel needs them;
* vacuum keeps ``enforce_retention_duration`` on, refuses less than 168 h and runs in lite
  mode by default: it only deletes files whose removal is older than the retention.
  ``full_vacuum`` also deletes unreferenced files (failed writes) older than it;
* the log is checkpointed last, so readers start from the newest state;
* row counts are compared before/after every table; a difference is an error.

Delta transactions (the exactly-once ``(app_id, batch_id)`` markers) are kept by all of
these operations, so ingest replays after maintenance are still recognised. Run it while
no MERGE-ing writer is active (the Airflow DAG runs it after ingest): delta-rs compaction
and a concurrent merge conflict and one of them fails (concurrent appends are fine).

Public API: :func:`maintain` (the CLI's ``maintain``), :func:`find_tables`,
:class:`MaintenanceError`, :data:`MIN_RETENTION_HOURS`, :data:`DEFAULT_RETENTION_HOURS`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.lake.contracts import contracts
from pipelines.lake.files import delta_rs_writer
from pipelines.lake.location import LakeLocation, lake_location

log = logging.getLogger(__name__)

#: Delta's own default for deletedFileRetentionDuration; shorter breaks concurrent readers.
MIN_RETENTION_HOURS = 168
#: 30 days: the window in which audits time-travel to earlier versions.
DEFAULT_RETENTION_HOURS = 720
#: A file below this is "small": two or more of them make a table worth compacting.
SMALL_FILE_BYTES = 32 * 1024 * 1024
#: Z-order rewrites the whole table; above this size only compaction runs.
ZORDER_MAX_BYTES = 1024 * 1024 * 1024
ZORDER_COLUMNS = ("group_id",)
#: How many removed file names the report lists per table (the count is always exact).
MAX_LISTED_FILES = 100

_DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
_LOG_RETENTION = "delta.logRetentionDuration"
_DEFAULT_HOURS = {_DELETED_FILE_RETENTION: 168.0, _LOG_RETENTION: 720.0}  # Delta's defaults
_UNIT_HOURS = {"microsecond": 1 / 3.6e9, "millisecond": 1 / 3.6e6, "second": 1 / 3600,
               "minute": 1 / 60, "hour": 1.0, "day": 24.0, "week": 168.0}
_INTERVAL = re.compile(r"^\s*(?:interval\s+)?(\d+)\s*([a-z]+?)s?\s*$", re.IGNORECASE)


class MaintenanceError(RuntimeError):
    """Some table failed; ``report`` is the full report, every other table included."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


def interval_hours(text: str | None) -> float | None:
    """Hours of a Delta interval property (``interval 7 days``, ``168 hours``); None if odd."""
    if not text:
        return None
    m = _INTERVAL.match(text)
    if not m or m.group(2).lower() not in _UNIT_HOURS:
        return None
    return int(m.group(1)) * _UNIT_HOURS[m.group(2).lower()]


def table_names(lake: Path | str | LakeLocation) -> list[str]:
    """Names of the Delta tables directly under ``lake`` (``_checkpoints``, ``_quality``
    skipped), local or on an object store (listed through the lake's filesystem)."""
    from pyarrow.fs import FileSelector, FileType

    where = lake_location(lake)
    fs = where.filesystem()
    root = where.fs_path()
    if fs.get_file_info(root).type != FileType.Directory:
        return []
    children = [i for i in fs.get_file_info(FileSelector(root, allow_not_found=True))
                if i.type == FileType.Directory and not i.base_name.startswith(("_", "."))]
    logs = fs.get_file_info([f"{c.path}/_delta_log" for c in children])
    return sorted(c.base_name for c, log_dir in zip(children, logs, strict=True)
                  if log_dir.type == FileType.Directory)


def find_tables(lake: Path | str | LakeLocation) -> list[Path] | list[str]:
    """Every Delta table directly under ``lake``: paths for a local lake, URIs otherwise."""
    where = lake_location(lake)
    if where.is_local:
        return [where.local_path / name for name in table_names(where)]
    return [where.join(name) for name in table_names(where)]


def _files(dt: Any) -> tuple[int, int, int, int | None]:
    """(files, bytes, small files, rows) of the current version, from the log's add actions.
    The small files are counted per partition, the most of any one: compaction merges files
    of the same partition only (``group_generations``' open and closed rows stay apart)."""
    import pyarrow as pa

    adds = pa.table(dt.get_add_actions(flatten=False))
    sizes = adds.column("size_bytes").to_pylist()
    rows = adds.column("num_records").to_pylist()
    total_rows = None if any(r is None for r in rows) else int(sum(rows))
    where = adds.column("partition").to_pylist() if "partition" in adds.column_names \
        else [None] * len(sizes)
    small: dict[str, int] = {}
    for s, partition in zip(sizes, where, strict=True):
        if s < SMALL_FILE_BYTES:
            small[repr(partition)] = small.get(repr(partition), 0) + 1
    return len(sizes), int(sum(sizes)), max(small.values(), default=0), total_rows


def _row_count(dt: Any, from_stats: int | None) -> int:
    """Rows of the current version: the log's statistics, else the Parquet footers."""
    if from_stats is not None:
        return from_stats
    return int(dt.to_pyarrow_dataset().count_rows())


def retention_changes(dt: Any, retention_hours: int) -> tuple[dict[str, str], float]:
    """Properties to raise so the table keeps what ``retention_hours`` promises, and the
    retention vacuum must use (the table's own when it is already longer: never lower it)."""
    config = dt.metadata().configuration or {}
    changes: dict[str, str] = {}
    effective = float(retention_hours)
    for key in (_DELETED_FILE_RETENTION, _LOG_RETENTION):
        current = interval_hours(config.get(key)) if key in config else _DEFAULT_HOURS[key]
        if current is None:
            log.warning("%s: unreadable %s=%r; setting it to %d hours", dt.table_uri, key,
                        config.get(key), retention_hours)
        if current is None or current < retention_hours:
            changes[key] = f"interval {retention_hours} hours"
        elif key == _DELETED_FILE_RETENTION:
            effective = max(effective, current)
    return changes, effective


def _zorder_columns(name: str, schema_names: list[str]) -> list[str]:
    spec = contracts().get(name)
    if spec is None or spec.kind != "history":
        return []
    return [c for c in ZORDER_COLUMNS if c in schema_names]


def _last_checkpoint(table: LakeLocation) -> int | None:
    fs = table.filesystem()
    try:
        with fs.open_input_stream(table.fs_path(table.join("_delta_log", "_last_checkpoint"))) as f:
            return int(json.loads(f.read())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sizes(table: LakeLocation, names: list[str]) -> int:
    """Bytes of the files vacuum names (relative to the table, or full URIs)."""
    from pyarrow.fs import FileType

    if not names:
        return 0
    paths = [table.fs_path(n if "://" in n else table.join(n)) for n in names]
    with contextlib.suppress(OSError):
        return sum(i.size for i in table.filesystem().get_file_info(paths)
                   if i.type == FileType.File)  # already gone: nothing to count
    return 0


def _maintain_table(table: LakeLocation, name: str, retention_hours: int, dry_run: bool, *,
                    full_vacuum: bool, zorder_max_bytes: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    def open_table() -> Any:
        return DeltaTable(table.uri, storage_options=table.delta_options())

    started = time.perf_counter()
    dt = open_table()
    version_before = dt.version()
    files, size, small, stat_rows = _files(dt)
    rows_before = _row_count(dt, stat_rows)
    out: dict[str, Any] = {"version_before": version_before, "rows_before": rows_before,
                           "files_before": files, "bytes_before": size}

    # 1. retention properties first: the checkpoint written below must keep the tombstones
    changes, effective = retention_changes(dt, retention_hours)
    out["properties_would_set" if dry_run else "properties_set"] = changes
    if changes and not dry_run:
        dt.alter.set_table_properties(changes, raise_if_not_exists=False)
        dt = open_table()

    # 2. compaction (z-order for the big history tables when a full rewrite is cheap)
    zorder = _zorder_columns(name, dt.schema().to_arrow().names)
    spec = contracts().get(name)  # files rewritten as the pipeline writes them
    writer = delta_rs_writer(spec) if spec is not None else None
    if small < 2:
        out["optimize"] = {"mode": "skipped", "reason": f"{small} small file(s)"}
    elif dry_run:
        mode = "z-order" if zorder and size <= zorder_max_bytes else "compact"
        out["optimize"] = {"mode": mode, "would_consider_files": small}
    else:
        if zorder and size <= zorder_max_bytes:
            metrics = dt.optimize.z_order(zorder, writer_properties=writer)
            mode = f"z-order({', '.join(zorder)})"
        else:
            metrics = dt.optimize.compact(writer_properties=writer)
            mode = "compact"
        out["optimize"] = {"mode": mode, "files_added": metrics.get("numFilesAdded"),
                           "files_removed": metrics.get("numFilesRemoved")}
        dt = open_table()

    # 3. vacuum: only files whose removal is older than the retention
    removed = dt.vacuum(retention_hours=int(effective), dry_run=True,
                        enforce_retention_duration=True, full=full_vacuum)
    removed_bytes = _sizes(table, removed)
    if removed and not dry_run:
        removed = dt.vacuum(retention_hours=int(effective), dry_run=False,
                            enforce_retention_duration=True, full=full_vacuum)
        dt = open_table()
    out["vacuum"] = {"retention_hours": int(effective) if effective.is_integer() else effective, "mode": "full" if full_vacuum else "lite",
                     "would_remove" if dry_run else "removed": len(removed),
                     "bytes": removed_bytes, "files": sorted(removed)[:MAX_LISTED_FILES]}

    # 4. checkpoint the final version
    version = dt.version()
    if dry_run:
        out["checkpoint"] = None
    elif _last_checkpoint(table) == version:
        out["checkpoint"] = {"version": version, "created": False}
    else:
        dt.create_checkpoint()
        out["checkpoint"] = {"version": version, "created": True}

    files, size, _, stat_rows = _files(dt)
    rows_after = _row_count(dt, stat_rows)
    out.update(version_after=version, rows_after=rows_after, files_after=files,
               bytes_after=size, seconds=round(time.perf_counter() - started, 3))
    if rows_after != rows_before:
        raise MaintenanceError(f"{name}: row count changed from {rows_before} to {rows_after}",
                               out)
    return out


def maintain(lake: Path | str | LakeLocation, retention_hours: int = DEFAULT_RETENTION_HOURS,
             dry_run: bool = False, *, full_vacuum: bool = False,
             zorder_max_bytes: int = ZORDER_MAX_BYTES,
             tables: list[str] | None = None) -> dict[str, Any]:
    """Compact, vacuum and checkpoint every Delta table under ``lake``; returns a report.

    ``retention_hours`` (>= 168) is how far back time travel must keep working; tables whose
    own retention is longer keep theirs. ``dry_run`` changes nothing and reports what would
    be compacted and vacuumed. ``tables`` limits the run to those names. Every table is
    attempted; if any fails, :class:`MaintenanceError` is raised after the others ran, with
    the full report attached (and logged).
    """
    check_retention(retention_hours)
    from pyarrow.fs import FileType

    root = lake_location(lake)
    if root.filesystem().get_file_info(root.fs_path()).type != FileType.Directory:
        raise FileNotFoundError(f"no lake at {root}")
    started = time.perf_counter()
    report: dict[str, Any] = {
        "lake": str(root), "dry_run": dry_run, "retention_hours": retention_hours,
        "vacuum_mode": "full" if full_vacuum else "lite",
        "started_at": datetime.now(timezone.utc).isoformat(), "tables": {}, "errors": [],
    }
    maintain_each(root, table_names(root), tables, report, lambda name: _maintain_table(
        root.child(name), name, retention_hours, dry_run, full_vacuum=full_vacuum,
        zorder_max_bytes=zorder_max_bytes))
    t = report["tables"].values()
    key = "would_remove" if dry_run else "removed"
    report["totals"] = {
        "tables": len(report["tables"]),
        "files_before": sum(x.get("files_before", 0) for x in t),
        "files_after": sum(x.get("files_after", 0) for x in t),
        "compacted_tables": sum(1 for x in t if x.get("optimize", {}).get("mode") not in
                                (None, "skipped")),
        f"vacuum_{key}": sum(x.get("vacuum", {}).get(key, 0) for x in t),
        "vacuum_bytes": sum(x.get("vacuum", {}).get("bytes", 0) for x in t),
    }
    report["seconds"] = round(time.perf_counter() - started, 3)
    log.info("maintenance of %s%s: %s", root, " (dry run)" if dry_run else "", report["totals"])
    if report["errors"]:
        log.warning("maintenance report: %s", json.dumps(report, default=str))
        raise MaintenanceError(f"maintenance failed for {len(report['errors'])} table(s): "
                               + "; ".join(report["errors"]), report)
    return report


def check_retention(retention_hours: float) -> None:
    """Refuse a retention under a week, whichever engine maintains the lake."""
    if retention_hours < MIN_RETENTION_HOURS:
        raise ValueError(f"retention of {retention_hours} h refused: at least "
                         f"{MIN_RETENTION_HOURS} h (7 days) keeps time travel and concurrent "
                         "readers safe")


def maintain_each(root: LakeLocation, names: Iterable[str], tables: Collection[str] | None,
                  report: dict[str, Any], maintain_table: Callable[[str], dict[str, Any]],
                  engine: str = "") -> None:
    """Maintain each table of ``names`` (those in ``tables`` when given) into ``report``:
    every table is attempted, and one table's failure is recorded and never stops the
    others, whichever engine (``engine`` names it in the log) does the work."""
    for name in names:
        if tables is not None and name not in tables:
            continue
        try:
            report["tables"][name] = maintain_table(name)
        except MaintenanceError as exc:
            report["tables"][name] = {**exc.report, "error": str(exc)}
            report["errors"].append(str(exc))
        except Exception as exc:  # one table's failure must not stop the others
            log.exception("maintaining %s%s failed", root.join(name), engine and f" with {engine}")
            report["tables"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            report["errors"].append(f"{name}: {type(exc).__name__}: {exc}")


__all__ = ["DEFAULT_RETENTION_HOURS", "MIN_RETENTION_HOURS", "MaintenanceError",
           "check_retention", "find_tables", "interval_hours", "maintain", "maintain_each",
           "table_names"]
