"""The history the quality gate has not validated yet: files added since its last pass.

Why: the gate's history suites (``offset_commits``, ``group_metadata``) check every row,
and a row once valid stays valid (history is append-only; the record time range it is
checked against only widens; ``partition_for`` depends on N alone). Validating the whole
history on every scheduled run makes the gate's cost grow with the lake; validating the
rows of the Delta commits made since the last run that passed (same N) makes it follow
the new data. The version validated is kept in that run's ``quality_results`` rows.

Anything unusual (another engine, a log file already cleaned up, a schema the files do
not share, an earlier failure) means a full validation, as before.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as ds

from pipelines.lake.engines import DeltaEngine
from pipelines.reconcile.snapshot import string_field

log = logging.getLogger(__name__)

HISTORY_SUITES = ("offset_commits", "group_metadata")
RESULTS_TABLE = "quality_results"


@dataclass(frozen=True)
class HistoryRead:
    """Rows to validate and what they cover (kept with the outcomes for the next run)."""

    rows: pa.Table
    meta: dict[str, Any]


def table_version(engine: DeltaEngine, table: str) -> int | None:
    """The Delta version of ``table`` (None: an engine without a lake location, or no table)."""
    location = getattr(engine, "location", None)
    if location is None or not engine.exists(table):
        return None
    from deltalake import DeltaTable

    return DeltaTable(engine.path(table), storage_options=location.delta_options()).version()


def validated_versions(engine: DeltaEngine, cluster_id: str, num_partitions: int) -> dict[str, int]:
    """Per history table, the version the cluster's latest gate run validated, when every
    expectation on that table passed with the same N (else absent: validate everything)."""
    if getattr(engine, "location", None) is None or not engine.exists(RESULTS_TABLE):
        return {}
    rows = engine.read(RESULTS_TABLE, ["run_at", "table", "success", "details_json"],
                       (string_field("cluster_id") == cluster_id)
                       & string_field("table").isin(list(HISTORY_SUITES))).to_pylist()
    out = {}
    for table in HISTORY_SUITES:
        mine = [r for r in rows if r["table"] == table]
        if not mine:
            continue
        last = max(r["run_at"] for r in mine)
        latest = [r for r in mine if r["run_at"] == last]
        metas = [json.loads(r["details_json"]).get("history") or {} for r in latest]
        versions = {m.get("table_version") for m in metas}
        if all(r["success"] for r in latest) and len(versions) == 1 and None not in versions \
                and all(m.get("num_partitions") == num_partitions for m in metas):
            out[table] = versions.pop()
    return out


def _added_files(engine: DeltaEngine, table: str, since: int, until: int) -> list[str] | None:
    """Data files added by the commits ``since + 1 .. until`` of ``table`` (None when a
    commit file is gone, e.g. after log cleanup)."""
    location = engine.location  # type: ignore[attr-defined]
    fs = location.filesystem()
    paths = []
    for version in range(since + 1, until + 1):
        path = location.fs_path(location.join(table, "_delta_log", f"{version:020d}.json"))
        try:
            with fs.open_input_stream(path) as stream:
                text = stream.read().decode()
        except (FileNotFoundError, OSError):
            return None
        for line in text.splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                paths.append(location.fs_path(location.join(table, unquote(action["add"]["path"]))))
    return paths


def read_new_history(engine: DeltaEngine, table: str, columns: list[str], cluster_id: str,
                     since: int | None) -> HistoryRead | None:
    """The cluster's rows of ``table`` added after version ``since`` (None: cannot tell,
    read the whole table instead)."""
    version = table_version(engine, table)
    if since is None or version is None or since > version:
        return None
    files = _added_files(engine, table, since, version)
    if files is None:
        return None
    from pipelines.lake.contracts import contract

    schema = contract(table).arrow_schema
    try:
        data = ds.dataset(files, schema=schema, format="parquet",
                          filesystem=engine.location.filesystem())  # type: ignore[attr-defined]
        rows = data.to_table(columns=columns, filter=ds.field("cluster_id") == cluster_id)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        log.info("the files added to %s since version %d are not readable as one dataset: "
                 "validating the whole table", table, since, exc_info=True)
        return None
    return HistoryRead(rows, {"table_version": version, "since_version": since,
                              "files": len(files)})


__all__ = ["HISTORY_SUITES", "HistoryRead", "read_new_history", "table_version",
           "validated_versions"]
