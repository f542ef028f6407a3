"""Cluster snapshots in the lake: the brokers' answers kept next to the tables built from the log.

Why: reconciliation needs the live answers at a known point (spec 3.2-3.3), and lag is
only worth something as history. Each snapshot (:mod:`pipelines.reconcile.cluster`) is
appended to six ``snapshot_*`` Delta tables, every row stamped with ``cluster_id``,
``snapshot_id`` and ``captured_at``; nothing is ever overwritten, so ``snapshot_lag`` is
the lag history across snapshots.

The ``snapshot_runs`` row is written *last*: a snapshot listed there is complete, and
readers (:func:`latest_snapshot`) never see a half-written one. Every write carries the
Delta transaction ``("offsetlake-snapshot:<cluster>:<snapshot_id>", 0)``, so storing the
same snapshot twice (a retried job, a recorded capture) is a no-op per table.

Public API: :func:`take_snapshot` (live cluster -> lake, the CLI's ``snapshot``),
:func:`store_snapshot` (any :class:`ClusterSnapshot`, e.g. from
:func:`~pipelines.reconcile.cluster.recorded.snapshot_from_recorded`), :func:`latest_snapshot`,
:func:`read_snapshot`, :class:`SnapshotInfo`.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.kafka_options import normalize
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine, DeltaRsEngine
from pipelines.reconcile.cluster.rows import RATE_WINDOW_S, ClusterSnapshot

log = logging.getLogger(__name__)

SNAPSHOT_TABLES = ("snapshot_groups", "snapshot_members", "snapshot_offsets",
                   "snapshot_log_end_offsets", "snapshot_lag", "snapshot_points")
RUNS_TABLE = "snapshot_runs"


@dataclass(frozen=True)
class SnapshotInfo:
    """One ``snapshot_runs`` row: which snapshot, when, and how it was taken."""

    snapshot_id: str
    cluster_id: str
    captured_at: datetime
    source: str | None
    require_stable: bool
    num_offsets_partitions: int
    errors: tuple[str, ...] = ()
    partial: bool = False
    not_authorized: tuple[str, ...] = ()
    stored_at: datetime | None = None


def string_field(name: str) -> pc.Expression:
    """A string column for a delta-rs dataset filter.

    delta-rs datasets expose strings as ``string_view``; comparing them to a plain string
    scalar fails on the file statistics unless the column is cast first (PLATFORM.md).
    """
    return pc.field(name).cast(pa.string())


def _app_id(cluster_id: str, snapshot_id: str) -> str:
    return f"offsetlake-snapshot:{cluster_id}:{snapshot_id}"


def _with_cluster(table: pa.Table, cluster_id: str) -> pa.Table:
    return table.append_column("cluster_id", pa.array([cluster_id] * table.num_rows, pa.string()))


def _runs_row(snapshot: ClusterSnapshot, cluster_id: str, stored_at: datetime) -> pa.Table:
    offset_errors = sum(1 for r in snapshot.offsets if r.error_code)
    partitions = len({p.offsets_partition for p in snapshot.points})
    return pa.Table.from_pylist([{
        "cluster_id": cluster_id, "snapshot_id": snapshot.snapshot_id,
        "captured_at": snapshot.captured_at, "source": snapshot.source,
        "require_stable": snapshot.require_stable, "num_groups": len(snapshot.groups),
        "num_members": len(snapshot.members), "num_offsets": len(snapshot.offsets),
        "num_offset_errors": offset_errors, "num_offsets_partitions": partitions,
        "errors": list(snapshot.errors), "stored_at": stored_at,
        "partial": snapshot.partial, "not_authorized": list(snapshot.not_authorized),
    }], schema=contract(RUNS_TABLE).arrow_schema)


def store_snapshot(engine: DeltaEngine, snapshot: ClusterSnapshot, cluster_id: str = "default",
                   *, stored_at: datetime | None = None) -> dict[str, int]:
    """Append one snapshot to the six ``snapshot_*`` tables, then register it in
    ``snapshot_runs``; returns the rows written per table (0 where a retry found it done).

    Raises ``ValueError`` when a *different* snapshot with the same id is already stored
    (e.g. a recorded capture stored once with and once without ``require_stable``): the
    second would be silently skipped by the idempotent writes otherwise.
    """
    stored_at = stored_at or datetime.now(timezone.utc)
    _upgrade_runs_table(engine)
    _upgrade_runs_table(engine, "snapshot_lag", _ADDED_LAG_COLUMNS)
    _upgrade_runs_table(engine, "snapshot_log_end_offsets", _ADDED_END_COLUMNS)
    _upgrade_runs_table(engine, "snapshot_groups", _ADDED_GROUP_COLUMNS)
    snapshot = with_catch_up_estimates(engine, snapshot, cluster_id)
    existing = _runs(engine, cluster_id, snapshot.snapshot_id)
    if existing and existing[0].require_stable != snapshot.require_stable:
        raise ValueError(
            f"snapshot {snapshot.snapshot_id} of cluster {cluster_id} is already stored with "
            f"require_stable={existing[0].require_stable}; a different capture needs its own id")
    app_id = _app_id(cluster_id, snapshot.snapshot_id)
    written: dict[str, int] = {}
    for name, table in snapshot.to_arrow().items():
        data = _with_cluster(table, cluster_id)
        written[name] = data.num_rows if engine.append(contract(name), data, app_id, 0) else 0
    runs = _runs_row(snapshot, cluster_id, stored_at)
    written[RUNS_TABLE] = 1 if engine.append(contract(RUNS_TABLE), runs, app_id, 0) else 0
    written.update(_store_topic_names(engine, snapshot, cluster_id, stored_at))
    # commits past this snapshot's log end / below its log start (pipelines.state.audit)
    from pipelines.state.audit import ANOMALIES, snapshot_anomalies

    found = snapshot_anomalies(engine, cluster_id, snapshot.snapshot_id, stored_at)
    if found:  # listed only when there are some: the snapshot tables' counts stay as they were
        written[ANOMALIES] = found
    log.info("stored snapshot %s of cluster %s: %s", snapshot.snapshot_id, cluster_id,
             ", ".join(f"{k}={v}" for k, v in written.items()))
    return written


def _store_topic_names(engine: DeltaEngine, snapshot: ClusterSnapshot, cluster_id: str,
                       now: datetime) -> dict[str, int]:
    """Topic id -> name as the cluster answered at capture time, into ``topic_names``, and
    filled into ``group_generations`` / ``group_members`` rows that still hold a bare id
    (KIP-848 assignments whose topic the log never names). Names come from Metadata and
    ConsumerGroupDescribe ids; a recorded capture without ids names a topic only where the
    broker's description of a lake member matches it unambiguously."""
    from pipelines.state.topics import names_from_described_members, store_cluster_names

    names = dict(snapshot.topic_names)
    described = [(m.group_id, m.member_id, m.assignment) for m in snapshot.members]
    for topic_id, name in names_from_described_members(engine, cluster_id, described).items():
        names.setdefault(topic_id, name)
    if not names:
        return {}
    return store_cluster_names(engine, {(cluster_id, i): n for i, n in names.items()},
                               f"offsetlake-topics:{cluster_id}:{snapshot.snapshot_id}", now)


#: snapshot_runs columns added after lakes existed (issue 14): nullable, added in place.
_ADDED_RUNS_COLUMNS = (("partial", "BOOLEAN"), ("not_authorized", "ARRAY<STRING>"))


#: snapshot_lag's flag for commits past the log end (issue 12), then the time lag and the
#: catch-up estimate (issue 11), added the same way.
_ADDED_LAG_COLUMNS = (("committed_past_end", "BOOLEAN"), ("committed_timestamp", "TIMESTAMP"),
                      ("newest_offset", "BIGINT"), ("newest_timestamp", "TIMESTAMP"),
                      ("time_lag_ms", "BIGINT"), ("time_lag_reason", "STRING"),
                      ("commit_rate", "DOUBLE"), ("est_catch_up_s", "DOUBLE"),
                      ("produce_rate", "DOUBLE"))
#: snapshot_log_end_offsets' log start offset (issue 11).
_ADDED_END_COLUMNS = (("log_start_offset", "BIGINT"),)
#: the epochs the broker described (issue 12: share/streams/consumer groups reconciled)
_ADDED_GROUP_COLUMNS = (("group_epoch", "INT"), ("assignment_epoch", "INT"))

#: How far back the commit rate behind ``est_catch_up_s`` looks (from captured_at).
CATCH_UP_WINDOW = timedelta(seconds=RATE_WINDOW_S)


def commit_rates(engine: DeltaEngine, cluster_id: str, until: datetime,
                 window: timedelta = CATCH_UP_WINDOW) -> dict[tuple[str, str, int], float]:
    """Offsets per second each (group, topic, partition) committed over ``window`` up to
    ``until``, from the lake's ``offset_commits``: (last - first committed offset) / (last -
    first commit time). Absent with fewer than two commits at distinct times, or when the
    offset went backwards in between (a rewind says nothing about the pace)."""
    if not engine.exists("offset_commits"):
        return {}
    columns = ["group_id", "topic", "partition", "committed_offset", "commit_timestamp",
               "is_tombstone", "offsets_partition", "offset"]
    spark = getattr(engine, "spark", None)
    if spark is not None:  # delta-spark: filter in the scan, not after reading the history
        from pyspark.sql import functions as F

        frame = (spark.read.format("delta")
                 .load(engine.spark_path("offset_commits"))  # type: ignore[attr-defined]
                 .where((F.col("cluster_id") == F.lit(cluster_id))
                        & F.col("commit_timestamp").between(F.lit(until - window), F.lit(until)))
                 .select(*columns))
        rows = frame.toArrow().to_pylist()
    else:
        ts = pa.timestamp("us", tz="UTC")
        where = ((string_field("cluster_id") == cluster_id)
                 & (pc.field("commit_timestamp") >= pa.scalar(until - window, ts))
                 & (pc.field("commit_timestamp") <= pa.scalar(until, ts)))
        rows = engine.read("offset_commits", columns=columns, filter_expr=where).to_pylist()
    spans: dict[tuple[str, str, int], list[tuple[datetime, int]]] = {}
    for r in sorted(rows, key=lambda r: (r["commit_timestamp"], r["offsets_partition"],
                                         r["offset"])):
        if r["is_tombstone"] or r["committed_offset"] is None:
            continue
        key = (r["group_id"], r["topic"], int(r["partition"]))
        spans.setdefault(key, []).append((r["commit_timestamp"], int(r["committed_offset"])))
    rates: dict[tuple[str, str, int], float] = {}
    for key, points in spans.items():
        (t0, o0), (t1, o1) = points[0], points[-1]
        seconds = (t1 - t0).total_seconds()
        if seconds > 0 and all(b[1] >= a[1] for a, b in pairwise(points)):
            rates[key] = (o1 - o0) / seconds
    return rates


def with_catch_up_estimates(engine: DeltaEngine, snapshot: ClusterSnapshot, cluster_id: str,
                            window: timedelta = CATCH_UP_WINDOW) -> ClusterSnapshot:
    """The snapshot with ``commit_rate`` / ``est_catch_up_s`` filled in its lag rows: an
    ESTIMATE, lag / (recent commit rate - the producers' rate over the same window when the
    capture measured it), documented as such in the contract; None when the group is not
    gaining on the producers."""
    if not snapshot.lag:
        return snapshot
    rates = commit_rates(engine, cluster_id, snapshot.captured_at, window)
    rows = []
    for r in snapshot.lag:
        rate = rates.get((r.group_id, r.topic, r.partition))
        if r.lag == 0:
            eta: float | None = 0.0
        elif r.lag is not None and rate and rate > (r.produce_rate or 0.0):
            eta = r.lag / (rate - (r.produce_rate or 0.0))
        else:
            eta = None
        rows.append(replace(r, commit_rate=rate, est_catch_up_s=eta))
    return replace(snapshot, lag=rows)


def _upgrade_runs_table(engine: DeltaEngine, table: str = RUNS_TABLE,
                        added: tuple[tuple[str, str], ...] = _ADDED_RUNS_COLUMNS) -> None:
    """Add the nullable ``partial`` / ``not_authorized`` columns to a ``snapshot_runs`` table
    (or ``added`` to ``table``) written before they existed (Delta appends refuse a wider
    schema); old rows read null."""
    if not engine.exists(table):
        return
    missing = [(n, t) for n, t in added
               if n not in engine.read(table, columns=None).schema.names]
    if not missing:
        return
    spark = getattr(engine, "spark", None)
    if spark is not None:  # delta-spark engine
        columns = ", ".join(f"{n} {t}" for n, t in missing)
        spark.sql(f"ALTER TABLE delta.`{engine.spark_path(table)}` "  # type: ignore[attr-defined]
                  f"ADD COLUMNS ({columns})")
    else:
        from deltalake import Field
        from deltalake.schema import ArrayType, PrimitiveType

        types = {"BOOLEAN": PrimitiveType("boolean"), "BIGINT": PrimitiveType("long"),
                 "INT": PrimitiveType("integer"),
                 "DOUBLE": PrimitiveType("double"), "STRING": PrimitiveType("string"),
                 "TIMESTAMP": PrimitiveType("timestamp"),
                 "ARRAY<STRING>": ArrayType(PrimitiveType("string"), contains_null=True)}
        engine._table(table).alter.add_columns(  # type: ignore[attr-defined]
            [Field(n, types[t], nullable=True) for n, t in missing])
    log.info("%s: added columns %s", table, ", ".join(n for n, _ in missing))


def _typed_defaults() -> dict[str, Any]:
    """Defaults of the capture's own knobs and of kafka-python's admin client settings."""
    from kafka.admin import KafkaAdminClient

    from pipelines.reconcile.cluster.live import capture_snapshot

    own = {name: p.default for name, p in inspect.signature(capture_snapshot).parameters.items()
           if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "expected_offsets"}
    return {**KafkaAdminClient.DEFAULT_CONFIG, **own}  # expected_offsets: from the lake only


def _client_config(options: dict[str, Any]) -> dict[str, Any]:
    """CLI ``KEY=VALUE`` options -> capture/kafka-python keyword arguments, through the one
    strict normaliser ingest uses too (:func:`pipelines.kafka_options.normalize`): known keys
    only (dotted, kafka-python or Java spellings), typed by their defaults, booleans strictly
    parsed, SASL/SSL settings refused without a protocol using them. A password or principal
    that looks numeric stays a string."""
    return normalize(options, _typed_defaults())


def take_snapshot(lake: str | Path, bootstrap_servers: str, *, cluster_id: str = "default",
                  require_stable: bool = False, kafka_config: dict[str, Any] | None = None,
                  engine: DeltaEngine | None = None) -> dict[str, Any]:
    """Capture the live cluster (:func:`capture_snapshot`) and store it in the lake.

    ``kafka_config`` passes through to the capture: its own knobs (``timeout_s``,
    ``request_timeout_ms``, ``max_retries``, ...) and kafka-python client settings
    (``security_protocol``, ``sasl_mechanism``, ...; dotted Java-style keys are accepted and
    turned into kafka-python's underscores). Returns a JSON-able summary for the CLI.
    Raises :class:`~pipelines.reconcile.cluster.errors.ClusterUnreachable` like the capture.
    """
    from pipelines.reconcile.cluster.live import capture_snapshot  # the Kafka client: only here

    config = _client_config(kafka_config or {})
    engine = engine or DeltaRsEngine(lake)
    snapshot = capture_snapshot(bootstrap_servers, require_stable=require_stable,
                                expected_offsets=lake_offsets(engine, cluster_id), **config)
    written = store_snapshot(engine, snapshot, cluster_id)
    return snapshot_summary(snapshot, engine, cluster_id, written)


def lake_offsets(engine: DeltaEngine, cluster_id: str) -> dict[str, set[tuple[str, int]]]:
    """(group -> partitions) the lake holds committed offsets for, plus groups it knows
    without offsets: what the capture asks for by name when the broker's broad answers (which
    silently drop what a principal may not describe) leave them out."""
    expected: dict[str, set[tuple[str, int]]] = {}
    where = string_field("cluster_id") == cluster_id
    if engine.exists("committed_offsets"):
        for r in engine.read("committed_offsets", columns=["group_id", "topic", "partition"],
                             filter_expr=where).to_pylist():
            expected.setdefault(r["group_id"], set()).add((r["topic"], int(r["partition"])))
    if engine.exists("consumer_groups"):
        for r in engine.read("consumer_groups", columns=["group_id"], filter_expr=where).to_pylist():
            expected.setdefault(r["group_id"], set())
    return expected


def snapshot_summary(snapshot: ClusterSnapshot, engine: DeltaEngine, cluster_id: str,
                     written: dict[str, int]) -> dict[str, Any]:
    """What a stored snapshot holds, for the CLI's JSON output."""
    lags = [r.lag for r in snapshot.lag if r.lag is not None]
    return {
        "cluster_id": cluster_id,
        "snapshot_id": snapshot.snapshot_id,
        "captured_at": snapshot.captured_at.isoformat(),
        "source": snapshot.source,
        "require_stable": snapshot.require_stable,
        "lake": str(engine.root),
        "groups": len(snapshot.groups),
        "groups_by_type_state": dict(Counter(f"{g.group_type}/{g.group_state}"
                                             for g in snapshot.groups)),
        "members": len(snapshot.members),
        "offsets": sum(1 for r in snapshot.offsets if r.topic is not None),
        "offset_errors": dict(Counter(r.error_name for r in snapshot.offsets if r.error_code)),
        "offsets_partitions": len(snapshot.points),
        "total_lag": sum(lags),
        # commits past the log end are legal; they are counted here, never as negative lag
        "committed_past_end": sum(1 for r in snapshot.lag if r.committed_past_end),
        # exact time lag read from the log (null rows say why in snapshot_lag.time_lag_reason)
        "max_time_lag_ms": max((r.time_lag_ms for r in snapshot.lag
                                if r.time_lag_ms is not None), default=None),
        "time_lag_unknown": dict(Counter(r.time_lag_reason for r in snapshot.lag
                                         if r.time_lag_reason)),
        "rows_written": written,
        "already_stored": not any(written.values()),
        "errors": list(snapshot.errors),
        "partial": snapshot.partial,
        "not_authorized": list(snapshot.not_authorized),
        # share/streams groups whose coordinator offers no ShareGroupDescribe /
        # StreamsGroupDescribe: listed, epochs and members not compared
        "not_described": list(snapshot.not_described),
    }


def _info(row: dict[str, Any]) -> SnapshotInfo:
    return SnapshotInfo(
        snapshot_id=row["snapshot_id"], cluster_id=row["cluster_id"],
        captured_at=row["captured_at"], source=row["source"],
        require_stable=bool(row["require_stable"]),
        num_offsets_partitions=int(row["num_offsets_partitions"] or 0),
        errors=tuple(row["errors"] or ()),
        partial=bool(row.get("partial")) or bool(row["errors"]) or bool(row.get("not_authorized")),
        not_authorized=tuple(row.get("not_authorized") or ()),
        stored_at=row.get("stored_at"))


def _runs(engine: DeltaEngine, cluster_id: str, snapshot_id: str | None = None
          ) -> list[SnapshotInfo]:
    if not engine.exists(RUNS_TABLE):
        return []
    expr = string_field("cluster_id") == cluster_id
    if snapshot_id is not None:
        expr = expr & (string_field("snapshot_id") == snapshot_id)
    rows = engine.read(RUNS_TABLE, filter_expr=expr).to_pylist()
    return [_info(r) for r in rows]


def latest_snapshot(engine: DeltaEngine, cluster_id: str = "default") -> SnapshotInfo | None:
    """The cluster's most recently *captured* complete snapshot (None when there is none).

    Ordered by ``captured_at``, not by when it was stored: a recorded capture stored late
    must not shadow a newer live one. Snapshots captured at the same instant are ordered
    the way they were stored (``stored_at``; the snapshot id only breaks an exact tie), so
    the one stored last wins, never an accident of id spelling.
    """
    runs = _runs(engine, cluster_id)
    if not runs:
        return None
    floor = datetime.min.replace(tzinfo=timezone.utc)
    return max(runs, key=lambda r: (r.captured_at, r.stored_at or floor, r.snapshot_id))


def find_snapshot(engine: DeltaEngine, snapshot_id: str, cluster_id: str = "default"
                  ) -> SnapshotInfo | None:
    """One stored snapshot by id (None when it is not -- or not completely -- stored)."""
    found = _runs(engine, cluster_id, snapshot_id)
    return found[0] if found else None


def read_snapshot(engine: DeltaEngine, snapshot_id: str, cluster_id: str = "default"
                  ) -> dict[str, pa.Table]:
    """The six tables of one snapshot, filtered to it (empty tables where nothing was stored)."""
    expr = (string_field("cluster_id") == cluster_id) & (string_field("snapshot_id") == snapshot_id)
    out: dict[str, pa.Table] = {}
    for name in SNAPSHOT_TABLES:
        table = engine.read(name, filter_expr=expr) if engine.exists(name) \
            else contract(name).arrow_schema.empty_table()
        out[name] = table
    return out


__all__ = [
    "CATCH_UP_WINDOW",
    "RUNS_TABLE",
    "SNAPSHOT_TABLES",
    "SnapshotInfo",
    "commit_rates",
    "find_snapshot",
    "latest_snapshot",
    "read_snapshot",
    "store_snapshot",
    "string_field",
    "take_snapshot",
    "with_catch_up_estimates",
]
