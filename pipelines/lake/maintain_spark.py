"""``offsetlake maintain --delta-engine spark``: the same maintenance through delta-spark.

Why: a lake kept by delta-spark on a cluster is compacted and vacuumed by the cluster, with
Delta's own OPTIMIZE and VACUUM, under the same rules as :mod:`pipelines.lake.maintain`:
retention never below 168 h, each table's ``deletedFileRetentionDuration`` and
``logRetentionDuration`` raised to it (never lowered), row counts equal before and after
(a difference is an error), every table attempted. Table properties are read from the
Delta log (a log-only read) exactly as the delta-rs path reads them.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.lake.engines import spark_uri
from pipelines.lake.keys import quote_identifier, sql_literal
from pipelines.lake.location import LakeLocation, lake_location
from pipelines.lake.maintain import (
    DEFAULT_RETENTION_HOURS,
    MaintenanceError,
    check_retention,
    maintain_each,
    retention_changes,
    table_names,
)


def set_properties_sql(path: str, changes: dict[str, str]) -> str:
    """``ALTER TABLE delta.`path` SET TBLPROPERTIES (...)`` for ``changes``."""
    props = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in sorted(changes.items()))
    return f"ALTER TABLE delta.{quote_identifier(path)} SET TBLPROPERTIES ({props})"


def _maintain_table(spark, table: LakeLocation, name: str, retention_hours: int,
                    dry_run: bool) -> dict[str, Any]:
    from delta.tables import DeltaTable as SparkTable
    from deltalake import DeltaTable

    path = spark_uri(table.uri)
    changes, effective = retention_changes(DeltaTable(table.uri, storage_options=table.delta_options()),
                                            retention_hours)
    rows_before = spark.read.format("delta").load(path).count()
    out: dict[str, Any] = {"rows_before": rows_before, "retention_changes": changes,
                           "vacuum_retention_hours": effective}
    if dry_run:
        would = spark.sql(f"VACUUM delta.{quote_identifier(path)} RETAIN {effective:g} HOURS DRY RUN")
        out["vacuum"] = {"would_remove": would.count()}
        return out
    if changes:
        spark.sql(set_properties_sql(path, changes))
    metrics = SparkTable.forPath(spark, path).optimize().executeCompaction().collect()
    out["optimize"] = {"mode": "compact", "metrics": metrics[0].asDict(recursive=True) if metrics else {}}
    SparkTable.forPath(spark, path).vacuum(effective)
    rows_after = spark.read.format("delta").load(path).count()
    out["rows_after"] = rows_after
    if rows_after != rows_before:
        raise MaintenanceError(f"{name}: {rows_before} rows before maintenance, {rows_after} after", out)
    return out


def maintain_with_spark(spark, lake: Path | str | LakeLocation,
                        retention_hours: int = DEFAULT_RETENTION_HOURS, dry_run: bool = False,
                        tables: list[str] | None = None) -> dict[str, Any]:
    """Compact and vacuum every Delta table under ``lake`` with delta-spark; a report."""
    check_retention(retention_hours)
    root = lake_location(lake)
    names = table_names(root)
    if not names:
        raise FileNotFoundError(f"no lake at {root}")
    started = time.perf_counter()
    report: dict[str, Any] = {"lake": str(root), "engine": "delta-spark", "dry_run": dry_run,
                              "retention_hours": retention_hours,
                              "started_at": datetime.now(timezone.utc).isoformat(),
                              "tables": {}, "errors": []}
    maintain_each(root, names, tables, report, lambda name: _maintain_table(
        spark, root.child(name), name, retention_hours, dry_run), engine="delta-spark")
    report["seconds"] = round(time.perf_counter() - started, 3)
    if report["errors"]:
        raise MaintenanceError(f"maintenance failed for {len(report['errors'])} table(s): "
                               + "; ".join(report["errors"]), report)
    return report
