"""The quality gate: a Great Expectations 1.x suite over the lake and the latest reconciliation.

Why: reconciliation proves the state matches the brokers; these expectations prove the
tables are internally sound (keys, one current row per key, records in the partition
Kafka's hash puts their group in, sane offsets and timestamps) and turn "no unexplained
difference" into a pass/fail gate with a record of why.

How: an ephemeral GX context with a pandas datasource fed from Arrow (these checks are
column scans of modest tables; Spark would add a JVM start for nothing). The history
tables' suites validate only the rows added since the last run that passed them
(:mod:`pipelines.reconcile.increments`), and the record time range comes from
``ingest_progress``: a scheduled run's cost follows the new data, not the lake's age. One suite per
table, one ValidationDefinition each, run with a shared GX run id. Results go to the
append-only ``quality_results`` Delta table (one row per expectation per run) and to GX
data docs rendered by GX's own ``SiteBuilder`` into ``<lake>/_quality/data_docs/`` (the
index shows the latest run; earlier runs' pages stay on disk, ``quality_results`` keeps
the full history).

Public API: :func:`run_quality_gate`, :class:`QualityReport`, :class:`ExpectationOutcome`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import logging
import os
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode import partition_for
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine
from pipelines.reconcile.classes import CLASSES
from pipelines.reconcile.increments import read_new_history, table_version, validated_versions
from pipelines.reconcile.snapshot import string_field
from pipelines.state.progress import time_range
from pipelines.without_pandas import NotInstalled

log = logging.getLogger(__name__)

TABLE = "quality_results"
DATA_DOCS_DIR = Path("_quality") / "data_docs"
DEFAULT_TIMESTAMP_TOLERANCE = timedelta(hours=1)
_PARTITION_OK = "partition_for_ok"
_SAMPLE = 20


@dataclass(frozen=True)
class _Check:
    """One expectation with the readable name it is reported under."""

    name: str
    expectation: Any  # a great_expectations.expectations.Expectation


@dataclass
class _Suite:
    table: str
    frame: Any  # pandas.DataFrame
    checks: list[_Check]
    index_columns: list[str]
    complete: bool = False  # COMPLETE result format (every failing row), for small tables
    history: dict[str, Any] | None = None  # what history rows it covers (increments.py)


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result, flattened for ``quality_results`` and the CLI summary."""

    suite: str
    table: str
    expectation: str
    expectation_type: str
    column: str | None
    success: bool
    observed_value: str | None
    element_count: int | None
    unexpected_count: int | None
    details: dict[str, Any]

    def examples(self, limit: int = 10) -> list[Any]:
        result = self.details.get("result") or {}
        rows = result.get("unexpected_index_list") or result.get("partial_unexpected_index_list")
        return list(rows or result.get("partial_unexpected_list") or [])[:limit]


@dataclass
class QualityReport:
    """One gate run: every outcome, whether all held, and where the data docs are."""

    run_id: str
    run_at: datetime
    outcomes: list[ExpectationOutcome] = field(default_factory=list)
    data_docs_index: Path | None = None
    #: offset_anomalies rows by kind (every kind listed) and the kinds that fail the gate
    anomalies: dict[str, int] = field(default_factory=dict)
    fail_on_anomalies: tuple[str, ...] = ()
    log_start_recorded: bool = False

    @property
    def passed(self) -> bool:
        return all(o.success for o in self.outcomes)

    def failed(self) -> list[ExpectationOutcome]:
        return [o for o in self.outcomes if not o.success]

    def summary(self) -> dict[str, Any]:
        return {
            "ran": True,
            "run_id": self.run_id,
            "passed": self.passed,
            "expectations": len(self.outcomes),
            "failed": [{"expectation": o.expectation, "table": o.table, "column": o.column,
                        "observed_value": o.observed_value,
                        "unexpected_count": o.unexpected_count, "examples": o.examples()}
                       for o in self.failed()],
            "data_docs": str(self.data_docs_index) if self.data_docs_index else None,
            "anomalies": {
                "counts": self.anomalies, "fail_on": list(self.fail_on_anomalies),
                "warnings": {k: n for k, n in self.anomalies.items()
                             if n and k not in self.fail_on_anomalies},
                "below_log_start": "checked" if self.log_start_recorded else
                "unavailable: no snapshot recorded log start offsets",
            },
        }


# ------------------------------------------------------------------------------ frames


def _read(engine: DeltaEngine, table: str, columns: list[str], cluster_id: str) -> pa.Table:
    """The cluster's rows of a lake table (the contract's empty table when it does not exist)."""
    if not engine.exists(table):
        return contract(table).arrow_schema.empty_table().select(columns)
    return engine.read(table, columns=columns, filter_expr=string_field("cluster_id") == cluster_id)


def with_partition_check(table: pa.Table, num_partitions: int) -> pa.Table:
    """Add ``partition_for_ok``: does ``partition_for(group_id, N)`` equal the row's
    ``offsets_partition`` (spec 3.5, section 5 item 4)? Hashes each distinct group once."""
    groups = table.column("group_id").cast(pa.string())
    distinct = pc.unique(groups)
    expected = pa.array([partition_for(g, num_partitions) for g in distinct.to_pylist()],
                        pa.int32())
    per_row = pc.take(expected, pc.index_in(groups, value_set=distinct))
    ok = pc.equal(per_row, table.column("offsets_partition").cast(pa.int32()))
    return table.append_column(_PARTITION_OK, ok)


def history_time_range(engine: DeltaEngine, cluster_id: str) -> tuple[datetime, datetime] | None:
    """Min and max record timestamp in ``offsets_raw`` (None without timestamps), kept by
    ingest in ``ingest_progress`` (no scan of the history)."""
    return time_range(engine, cluster_id)


def _strings_plain(table: pa.Table) -> pa.Table:
    """delta-rs hands back ``string_view``; pandas/GX want plain strings."""
    fields = [f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f
              for f in table.schema]
    return table.cast(pa.schema(fields))


def _frame(table: pa.Table, *, exact_ints: bool = False) -> Any:
    """pandas for GX; ``exact_ints`` keeps nullable ints as ints (not floats) so failing rows
    are reported as ``partition: 1``, not ``1.0`` -- for small tables only (object columns)."""
    return _strings_plain(table).to_pandas(integer_object_nulls=exact_ints)


# ------------------------------------------------------------------------------ suites


def _history(engine: DeltaEngine, table: str, columns: list[str], cluster_id: str,
             num_partitions: int, since: dict[str, int]) -> tuple[pa.Table, dict[str, Any] | None]:
    """A history table's rows to validate: those added since the last passing run's
    version when known, else all of them (with the version read, for the next run)."""
    new = read_new_history(engine, table, columns, cluster_id, since.get(table))
    if new is not None:
        return new.rows, {**new.meta, "num_partitions": num_partitions}
    version = table_version(engine, table)
    rows = _read(engine, table, columns, cluster_id)
    meta = None if version is None else {"table_version": version, "since_version": None,
                                         "num_partitions": num_partitions}
    return rows, meta


def _not_null(gxe: Any, columns: list[str]) -> list[_Check]:
    return [_Check(f"{col} is never null", gxe.ExpectColumnValuesToNotBeNull(column=col))
            for col in columns]


def _build_suites(engine: DeltaEngine, cluster_id: str, reconciliation: pa.Table | None,
                  num_partitions: int, tolerance: timedelta) -> list[_Suite]:
    import great_expectations.expectations as gxe

    suites: list[_Suite] = []
    span = history_time_range(engine, cluster_id)
    low = high = None
    if span is not None:
        low, high = span[0] - tolerance, span[1] + tolerance

    def time_check(column: str) -> list[_Check]:
        if low is None:
            log.info("no record timestamps in offsets_raw: %s range not checked", column)
            return []
        return [_Check(f"{column} within the history's record time range ± {tolerance}",
                       gxe.ExpectColumnValuesToBeBetween(column=column, min_value=low,
                                                         max_value=high))]

    def partition_check() -> _Check:  # a fresh expectation per suite (GX binds it to one)
        return _Check(f"partition_for(group_id, {num_partitions}) == offsets_partition",
                      gxe.ExpectColumnValuesToBeInSet(column=_PARTITION_OK, value_set=[True]))

    key = list(contract("committed_offsets").key)
    co = _read(engine, "committed_offsets",
               [*key, "committed_offset", "commit_timestamp", "offsets_partition"], cluster_id)
    suites.append(_Suite("committed_offsets", _frame(with_partition_check(co, num_partitions)), [
        *_not_null(gxe, key),
        _Check("one current row per (cluster_id, group_id, topic, partition)",
               gxe.ExpectCompoundColumnsToBeUnique(column_list=key)),
        _Check("committed_offset >= -1",
               gxe.ExpectColumnValuesToBeBetween(column="committed_offset", min_value=-1)),
        partition_check(),
        *time_check("commit_timestamp"),
    ], index_columns=key))

    key = list(contract("consumer_groups").key)
    cg = _read(engine, "consumer_groups", [*key, "offsets_partition"], cluster_id)
    suites.append(_Suite("consumer_groups", _frame(with_partition_check(cg, num_partitions)), [
        *_not_null(gxe, key),
        _Check("one current row per (cluster_id, group_id)",
               gxe.ExpectCompoundColumnsToBeUnique(column_list=key)),
        partition_check(),
    ], index_columns=key))

    key = list(contract("group_members").key)
    gm = _read(engine, "group_members", key, cluster_id)
    suites.append(_Suite("group_members", _frame(gm), [
        *_not_null(gxe, key),
        _Check("one current row per (cluster_id, group_id, member_id)",
               gxe.ExpectCompoundColumnsToBeUnique(column_list=key)),
    ], index_columns=key))

    suites += _history_suites(engine, cluster_id, num_partitions, partition_check, time_check)

    if reconciliation is not None:
        rkey = ["cluster_id", "reconcile_id", "snapshot_id", "level", "group_id",
                "classification"]
        suites.append(_Suite("reconciliation", _frame(reconciliation, exact_ints=True), [
            *_not_null(gxe, rkey),
            _Check("every classification is a known class",
                   gxe.ExpectColumnValuesToBeInSet(column="classification",
                                                   value_set=list(CLASSES))),
            _Check("no unexplained difference in the latest reconciliation",
                   gxe.ExpectColumnValuesToBeInSet(column="explained", value_set=[True])),
        ], index_columns=["level", "group_id", "topic", "partition", "classification"],
            complete=True))
    return suites


def _history_suites(engine: DeltaEngine, cluster_id: str, num_partitions: int,
                    partition_check: Any, time_check: Any) -> list[_Suite]:
    """The history tables' suites, over the rows added since the last run that passed
    them (:mod:`pipelines.reconcile.increments`), else over all of them."""
    import great_expectations.expectations as gxe

    since = validated_versions(engine, cluster_id, num_partitions)
    index = ["offsets_partition", "offset", "group_id"]
    oc, covered = _history(engine, "offset_commits",
                           [*index, "committed_offset", "commit_timestamp"], cluster_id,
                           num_partitions, since)
    commits = _Suite("offset_commits", _frame(with_partition_check(oc, num_partitions)), [
        partition_check(),
        _Check("committed_offset >= -1",
               gxe.ExpectColumnValuesToBeBetween(column="committed_offset", min_value=-1)),
        *time_check("commit_timestamp"),
    ], index_columns=index, history=covered)

    gmeta, covered = _history(engine, "group_metadata", index, cluster_id, num_partitions, since)
    return [commits, _Suite("group_metadata", _frame(with_partition_check(gmeta, num_partitions)),
                            [partition_check()], index_columns=index, history=covered)]


def _anomaly_suite(engine: DeltaEngine, cluster_id: str, fail_on: tuple[str, ...]) -> _Suite:
    """``offset_anomalies`` must hold no row of the kinds the caller fails on."""
    import great_expectations.expectations as gxe

    index = ["offsets_partition", "offset", "kind"]
    rows = _read(engine, "offset_anomalies", [*index, "group_id", "topic", "partition", "severity"],
                 cluster_id) if engine.exists("offset_anomalies") \
        else contract("offset_anomalies").arrow_schema.empty_table().select(
            [*index, "group_id", "topic", "partition", "severity"])
    return _Suite("offset_anomalies", _frame(rows), [
        _Check(f"no offset anomaly of kind {', '.join(fail_on)}",
               gxe.ExpectColumnValuesToNotBeInSet(column="kind", value_set=list(fail_on))),
    ], index_columns=index)


# ------------------------------------------------------------------------------ run


def _quiet_gx() -> None:
    """GX logs dozens of INFO lines while importing; keep the CLI's INFO log readable
    (unless someone configured GX's logger on purpose). Call before importing GX."""
    gx_log = logging.getLogger("great_expectations")
    if gx_log.level == logging.NOTSET:
        gx_log.setLevel(logging.WARNING)


#: What GX imports, when installed, for data sources and stores the gate never uses (it
#: validates pandas frames in memory): Spark (whose ``pyspark.ml`` loads SciPy's sparse and
#: linear algebra modules), SQLAlchemy (an Airflow dependency), the cloud SDKs and the SQL
#: warehouses' drivers. GX treats each as optional (``great_expectations.compatibility``).
GX_UNUSED_INTEGRATIONS = ("pyspark", "py4j", "sqlalchemy", "boto3", "botocore", "azure",
                          "google.cloud", "google.auth", "google.oauth2", "google.api_core",
                          "databricks", "snowflake", "trino", "pyathena", "pyodbc", "psycopg2",
                          "sqlalchemy_bigquery")


#: What GX imports at its own import for expectations the gate never runs (the KL divergence
#: and Kolmogorov-Smirnov tests): SciPy's statistics and Altair's charts, ~0.8 s of CPU.
#: Both are required by GX, so they are not hidden but loaded on first use, if any.
GX_LOADED_ON_FIRST_USE = ("scipy.stats", "altair")

#: the GX modules the gate imports
_GX_MODULES = ("great_expectations", "great_expectations.core.run_identifier",
               "great_expectations.data_context.types.base", "great_expectations.expectations")


class LoadedOnFirstUse(importlib.abc.MetaPathFinder):
    """Imports ``names`` as they are found, but runs a module's code only when one of its
    attributes is first read (:class:`importlib.util.LazyLoader`): ``from scipy import
    stats`` at a module's top costs nothing until ``stats.entropy`` is called."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


def import_gx_without_unused_integrations() -> None:
    """Import GX as though its integrations the gate does not use were not installed, and
    without running what it imports for expectations the gate never runs.

    Why: importing GX is most of a scheduled ``reconcile``'s own time, and GX imports every
    optional integration it finds (``GX_UNUSED_INTEGRATIONS``; pyspark is always installed
    here) and SciPy's and Altair's modules (``GX_LOADED_ON_FIRST_USE``). For a process that
    runs the gate and ends (the CLI's ``reconcile``) only: GX keeps what it found for the
    process' life, so a notebook or an Airflow worker that also runs GX on Spark or SQL must
    import it as it is. A package already imported stays as it is; the finders are gone once
    GX is imported (a module left unloaded then loads at its first use)."""
    if "great_expectations" in sys.modules:
        return
    _quiet_gx()
    finders = [NotInstalled(tuple(name for name in GX_UNUSED_INTEGRATIONS if name not in sys.modules),
                            "unused by the quality gate"),
               LoadedOnFirstUse(GX_LOADED_ON_FIRST_USE)]
    sys.meta_path[:0] = finders
    try:
        for module in _GX_MODULES:
            importlib.import_module(module)
    finally:
        for finder in finders:
            sys.meta_path.remove(finder)


def _docs_dir(root: Any) -> Path | None:
    """Where the data docs go: an absolute local directory, or None for a lake at a URI.

    GX's site builder fails with a traceback on a relative directory (the default ``./lake``).
    """
    text = str(root)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        log.info("GX data docs are written only for lakes on a local disk; %s is not", text)
        return None
    return Path(os.path.abspath(text)) / DATA_DOCS_DIR


def _context(docs_dir: Path | None) -> Any:
    """An ephemeral GX context: in-memory stores, no default temp docs site, no progress bars,
    and our data docs site when ``docs_dir`` is given."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    sites = {} if docs_dir is None else {"offsetlake": {
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                          "base_directory": str(docs_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    }}
    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites=sites, progress_bars=ProgressBarsConfig(globally=False))
    return gx.get_context(mode="ephemeral", project_config=config)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _outcome(suite: _Suite, check: _Check, result: Any) -> ExpectationOutcome:
    raw = result.to_json_dict()
    res = raw.get("result") or {}
    config = raw.get("expectation_config") or {}
    kwargs = {k: v for k, v in (config.get("kwargs") or {}).items() if k != "batch_id"}
    column = kwargs.get("column") or ",".join(kwargs.get("column_list") or []) or None
    observed = res.get("observed_value")
    if observed is None and "unexpected_count" in res:
        observed = f"{res['unexpected_count']} of {res.get('element_count')} rows unexpected"
    exception = raw.get("exception_info") or {}
    if exception.get("raised_exception"):
        observed = f"error: {exception.get('exception_message')}"
    return ExpectationOutcome(
        suite=f"offsetlake.{suite.table}", table=suite.table, expectation=check.name,
        expectation_type=config.get("type", ""), column=column, success=bool(raw.get("success")),
        observed_value=None if observed is None else (
            observed if isinstance(observed, str) else json.dumps(_jsonable(observed))),
        element_count=res.get("element_count"), unexpected_count=res.get("unexpected_count"),
        details=_jsonable({"kwargs": kwargs, "result": res,
                           "exception_info": exception if exception.get("raised_exception")
                           else None, **({"history": suite.history} if suite.history else {})}))


def run_quality_gate(engine: DeltaEngine, *, cluster_id: str = "default",
                     reconciliation: pa.Table | None = None, reconcile_id: str | None = None,
                     snapshot_id: str | None = None, num_partitions: int = 50,
                     timestamp_tolerance: timedelta = DEFAULT_TIMESTAMP_TOLERANCE,
                     data_docs: bool = True, run_at: datetime | None = None,
                     fail_on_anomalies: tuple[str, ...] = ()) -> QualityReport:
    """Validate the lake (and ``reconciliation``, this run's rows) and record the results.

    ``num_partitions`` is the N of ``partition_for`` (the caller resolves it from the
    snapshot / flag / 50). Writes one ``quality_results`` row per expectation; builds data
    docs under ``<lake>/_quality/data_docs/`` unless ``data_docs`` is False.

    ``offset_anomalies`` are counted by kind and logged as warnings; the kinds in
    ``fail_on_anomalies`` (``"all"``: every kind) are an expectation that fails on any row.
    """
    from pipelines.state.anomalies import KINDS, anomaly_counts, log_start_recorded

    fail_on = tuple(KINDS) if "all" in fail_on_anomalies else tuple(fail_on_anomalies)
    unknown = sorted(set(fail_on) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown anomaly kind(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(KINDS)} or all")
    _quiet_gx()
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier

    run_at = run_at or datetime.now(timezone.utc)
    run_id = f"{run_at.strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid.uuid4().hex[:8]}"  # path-safe: names a data docs folder
    docs_dir = _docs_dir(engine.root) if data_docs else None
    context = _context(docs_dir)
    source = context.data_sources.add_pandas(name="offsetlake")
    gx_run = RunIdentifier(run_name=run_id, run_time=run_at)
    report = QualityReport(run_id=run_id, run_at=run_at, anomalies=anomaly_counts(engine, cluster_id),
                           fail_on_anomalies=fail_on, log_start_recorded=log_start_recorded(engine))
    for kind, n in report.anomalies.items():
        if n:
            log.warning("quality: %d %s anomal%s in offset_anomalies%s", n, kind, "y" if n == 1 else "ies",
                        " (fails the gate)" if kind in fail_on else "")

    suites = _build_suites(engine, cluster_id, reconciliation, num_partitions, timestamp_tolerance)
    if fail_on:
        suites.append(_anomaly_suite(engine, cluster_id, fail_on))
    for suite in suites:
        gx_suite = context.suites.add(gx.ExpectationSuite(name=f"offsetlake.{suite.table}"))
        for check in suite.checks:
            check.expectation.meta = {"name": check.name}
            gx_suite.add_expectation(check.expectation)
        batch = source.add_dataframe_asset(name=suite.table) \
            .add_batch_definition_whole_dataframe(f"{suite.table}-whole")
        definition = context.validation_definitions.add(gx.ValidationDefinition(
            name=f"{suite.table}-{run_id}", data=batch, suite=gx_suite))
        result_format: dict[str, Any] = {
            "result_format": "COMPLETE" if suite.complete else "SUMMARY",
            "unexpected_index_column_names": suite.index_columns,
            "partial_unexpected_count": _SAMPLE}
        validation = definition.run(batch_parameters={"dataframe": suite.frame},
                                    result_format=result_format, run_id=gx_run)
        by_name = {c.name: c for c in suite.checks}
        for result in validation.results:
            name = (result.expectation_config.meta or {}).get("name", "")
            report.outcomes.append(_outcome(suite, by_name.get(name, _Check(name, None)), result))

    if docs_dir is not None:
        try:
            context.build_data_docs(site_names=["offsetlake"])
            report.data_docs_index = docs_dir / "index.html"
        except Exception:  # docs are a convenience; the gate's verdict must not depend on them
            log.warning("building GX data docs under %s failed", docs_dir, exc_info=True)

    _store(engine, report, cluster_id, reconcile_id, snapshot_id)
    for o in report.failed():
        log.warning("quality: %s / %s failed: %s", o.table, o.expectation, o.observed_value)
    log.info("quality run %s: %d expectations, %d failed", run_id, len(report.outcomes),
             len(report.failed()))
    return report


def _store(engine: DeltaEngine, report: QualityReport, cluster_id: str,
           reconcile_id: str | None, snapshot_id: str | None) -> None:
    """Append the run's outcomes to ``quality_results`` (idempotent per run id)."""
    spec = contract(TABLE)
    rows = [{
        "cluster_id": cluster_id, "run_id": report.run_id, "run_at": report.run_at,
        "reconcile_id": reconcile_id, "snapshot_id": snapshot_id, "suite": o.suite,
        "table": o.table, "expectation": o.expectation, "expectation_type": o.expectation_type,
        "column": o.column, "success": o.success, "observed_value": o.observed_value,
        "element_count": o.element_count, "unexpected_count": o.unexpected_count,
        "details_json": json.dumps(o.details, ensure_ascii=False),
    } for o in report.outcomes]
    engine.append(spec, pa.Table.from_pylist(rows, schema=spec.arrow_schema),
                  f"offsetlake-quality:{cluster_id}:{report.run_id}", 0)


__all__ = ["DATA_DOCS_DIR", "ExpectationOutcome", "QualityReport", "history_time_range",
           "run_quality_gate", "with_partition_check"]
