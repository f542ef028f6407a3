"""Reconciliation: the lake's coordinator state against the cluster's latest snapshot.

Why: the state tables are rebuilt from ``__consumer_offsets`` by our own replay; the only
independent check is what the brokers answer. Only what OffsetFetch returns is compared
1:1 (spec 3.3): committed offset, leader epoch, metadata -- never commit timestamps or
topic ids. Group type/state/members are compared where the log can derive them (spec
2.5, 3.4). Every difference is *classified*, because many are expected (spec 5 item 5);
the classes, and which are explained, are listed in :mod:`pipelines.reconcile.classes`.
The two sides are read by :mod:`pipelines.reconcile.inputs`.

:func:`run_reconcile` (the CLI's ``reconcile``) runs :func:`reconcile` and then the
quality gate (:mod:`pipelines.reconcile.quality`).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipelines.decode import partition_for as _partition_for
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine, DeltaRsEngine
from pipelines.reconcile.classes import (
    EXPLAINED,
    METADATA_STATES,
    STATE_COMPARABLE_TYPES,
    TRANSIENT_STATES,
)
from pipelines.reconcile.cluster.errors import UNSTABLE_OFFSET_COMMIT
from pipelines.reconcile.inputs import (
    LakeState,
    SnapshotState,
    load_lake_state,
    load_snapshot_state,
)
from pipelines.reconcile.quality import run_quality_gate
from pipelines.reconcile.snapshot import (
    SnapshotInfo,
    find_snapshot,
    latest_snapshot,
)

log = logging.getLogger(__name__)

TABLE = "reconciliation"
DEFAULT_NUM_PARTITIONS = 50  # offsets.topic.num.partitions default (spec 3.5); never guessed
_GROUP_AUTHORIZATION_FAILED = 30
_TOPIC_AUTHORIZATION_FAILED = 29
_REFUSED = (_GROUP_AUTHORIZATION_FAILED, _TOPIC_AUTHORIZATION_FAILED)


class NoSnapshotError(LookupError):
    """The lake holds no snapshot of the cluster: run ``offsetlake snapshot`` first."""


def resolve_num_partitions(info: SnapshotInfo | None, flag: int | None
                           ) -> tuple[int | None, str]:
    """N for ``partition_for``: the snapshot's ``__consumer_offsets`` partition count when it
    saw the topic, else the ``--num-partitions`` flag, else unknown (``None``, "unknown"):
    never Kafka's default 50 guessed, which produced false partition_for failures when the
    principal could not see the topic (spec 3.5: the real topic's count is the truth)."""
    seen = info.num_offsets_partitions if info is not None else 0
    if seen > 0:
        if flag is not None and flag != seen:
            log.warning("--num-partitions %d ignored: the snapshot saw %d __consumer_offsets "
                        "partitions", flag, seen)
        return seen, "snapshot"
    if flag is not None:
        return flag, "flag"
    return None, "unknown"


# ------------------------------------------------------------------------------ classification


@dataclass
class _Position:
    """Where the lake stands in one ``__consumer_offsets`` partition vs the snapshot point."""

    lake_end: int | None
    hw: int | None
    lso: int | None

    @property
    def behind(self) -> bool:
        """Evidence only: the lake's ingested position in this partition is known and lies
        below the snapshot point. A partition the lake holds nothing of proves nothing."""
        return self.hw is not None and self.lake_end is not None and self.lake_end < self.hw

    def behind_detail(self) -> str:
        if self.lso is not None and self.hw is not None and self.lso < self.hw \
                and (self.lake_end or 0) >= self.lso:
            return (f"the lake stopped at the last stable offset {self.lso} (high watermark "
                    f"{self.hw}): an open transaction blocks read_committed readers")
        return (f"the lake has ingested this __consumer_offsets partition up to "
                f"{self.lake_end or 0}, the snapshot point is {self.hw}")

    def ahead_of(self, record_offset: int | None) -> bool:
        return self.hw is not None and record_offset is not None and record_offset >= self.hw


def _compare_values(lake: dict[str, Any], broker: dict[str, Any]) -> tuple[str, str]:
    """Class and detail of two present offsets; the most significant difference wins."""
    diffs = []
    for name, lk, bk in (("committed offset", lake["committed_offset"], broker["committed_offset"]),
                         ("leader epoch", lake["leader_epoch"], broker["leader_epoch"]),
                         ("metadata", lake["metadata"], broker["metadata"])):
        if _norm(lk, name) != _norm(bk, name):
            diffs.append(f"{name}: lake {lk!r} vs broker {bk!r}")
    if not diffs:
        return "match", ""
    first = diffs[0].split(":")[0]
    cls = {"committed offset": "offset_mismatch", "leader epoch": "leader_epoch_mismatch",
           "metadata": "metadata_mismatch"}[first]
    return cls, "; ".join(diffs)


def _norm(value: Any, name: str) -> Any:
    """Both sides use -1 for 'no epoch' and '' for 'no metadata' (spec 3.3)."""
    if value is None:
        return -1 if name == "leader epoch" else ("" if name == "metadata" else None)
    return value


def _base_row(level: str, group_id: str, topic: str | None, partition: int | None,
              offsets_partition: int | None, pos: _Position | None) -> dict[str, Any]:
    return {"level": level, "group_id": group_id, "topic": topic, "partition": partition,
            "offsets_partition": offsets_partition,
            "lake_log_end": pos.lake_end if pos else None,
            "snapshot_high_watermark": pos.hw if pos else None,
            "snapshot_last_stable_offset": pos.lso if pos else None}


def _finish(row: dict[str, Any], cls: str, detail: str) -> dict[str, Any]:
    row["classification"] = cls
    row["explained"] = EXPLAINED[cls]
    row["detail"] = detail or None
    return row


def _timing(cls: str, detail: str, pos: _Position, record_offset: int | None
            ) -> tuple[str, str]:
    """Turn a difference into lake_ahead / lake_behind when the snapshot point explains it."""
    if cls in ("match", "fetch_error", "open_transaction", "state_transient"):
        return cls, detail
    if pos.ahead_of(record_offset):
        return "lake_ahead", (f"{cls}: the lake's record at offset {record_offset} is at or "
                              f"after the snapshot point {pos.hw}, the broker's answer may "
                              f"predate it; {detail}")
    if pos.behind:
        return "lake_behind", f"{cls}: {pos.behind_detail()}; {detail}"
    return cls, detail


def classify(lake: LakeState, snap: SnapshotState, num_partitions: int | None
             ) -> list[dict[str, Any]]:
    """Every offset row and group row, classified (no I/O; the unit under test).
    ``num_partitions`` None: rows only the broker has get no ``offsets_partition``."""

    def partition_for(group_id: str, n: int | None) -> int | None:
        return None if n is None else _partition_for(group_id, n)

    def position(offsets_partition: int | None) -> _Position:
        hw, lso = snap.points.get(offsets_partition, (None, None)) \
            if offsets_partition is not None else (None, None)
        return _Position(lake.log_end.get(offsets_partition), hw, lso)

    rows: list[dict[str, Any]] = []
    lake_by_group: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for key in lake.offsets:
        lake_by_group[key[0]].append(key)

    for key in sorted(set(lake.offsets) | set(snap.offsets)):
        group_id, topic, partition = key
        lk, bk = lake.offsets.get(key), snap.offsets.get(key)
        op = lk["offsets_partition"] if lk else partition_for(group_id, num_partitions)
        pos = position(op)
        row = _base_row("offset", group_id, topic, partition, op, pos)
        if lk:
            row.update(lake_committed_offset=lk["committed_offset"],
                       lake_leader_epoch=lk["leader_epoch"], lake_metadata=lk["metadata"],
                       lake_record_offset=lk["offset"])
        if bk:
            row.update(broker_committed_offset=bk["committed_offset"],
                       broker_leader_epoch=bk["leader_epoch"], broker_metadata=bk["metadata"],
                       broker_error_code=bk["error_code"], broker_error_name=bk["error_name"])
        elif group_id in snap.group_errors:
            row.update(broker_error_code=snap.group_errors[group_id][0],
                       broker_error_name=snap.group_errors[group_id][1])
        rows.append(_finish(row, *_classify_offset(lake, snap, key, lk, bk, pos)))

    for group_id, (code, name) in sorted(snap.group_errors.items()):
        if lake_by_group.get(group_id):
            continue  # each lake offset of the group already got its fetch_error row
        op = partition_for(group_id, num_partitions)
        row = _base_row("offset", group_id, None, None, op, position(op))
        row.update(broker_error_code=code, broker_error_name=name)
        cls = "not_authorized" if code in _REFUSED else "fetch_error"
        rows.append(_finish(row, cls,
                            f"OffsetFetch answered {name} for the group; nothing to compare"))

    for group_id in sorted(set(lake.groups) | set(snap.groups)):
        lg, bg = lake.groups.get(group_id), snap.groups.get(group_id)
        op = lg["offsets_partition"] if lg else partition_for(group_id, num_partitions)
        pos = position(op)
        row = _base_row("group", group_id, None, None, op, pos)
        if lg:
            row.update(lake_group_type=lg["group_type"], lake_group_state=lg["group_state"],
                       lake_protocol_type=lg["protocol_type"],
                       lake_num_members=len(lake.members.get(group_id, ())),
                       lake_record_offset=lg["last_record_offset"])
        if bg:
            row.update(broker_group_type=bg["group_type"], broker_group_state=bg["group_state"],
                       broker_protocol_type=bg["protocol_type"],
                       broker_num_members=len(snap.members.get(group_id, ())),
                       broker_error_code=bg["error_code"], broker_error_name=bg["error_name"])
        rows.append(_finish(row, *_classify_group(lake, snap, group_id, lg, bg, pos)))
    return rows


def _classify_offset(lake: LakeState, snap: SnapshotState, key: tuple[str, str, int],
                     lk: dict[str, Any] | None, bk: dict[str, Any] | None, pos: _Position
                     ) -> tuple[str, str]:
    group_id = key[0]
    if group_id in snap.group_errors:
        code, name = snap.group_errors[group_id]
        if code in _REFUSED:
            return "not_authorized", (f"OffsetFetch answered {name} ({code}) for the group: the "
                                      "snapshot's principal may not describe it")
        return "fetch_error", f"OffsetFetch answered {name} ({code}) for the group"
    if bk and bk["error_code"] == UNSTABLE_OFFSET_COMMIT:
        where = "" if lk is None else f"; the lake holds {lk['committed_offset']}"
        return "open_transaction", ("UNSTABLE_OFFSET_COMMIT: a transactional offset commit is "
                                    f"pending for this partition{where}")
    if bk and bk["error_code"] in _REFUSED:
        return "not_authorized", (f"OffsetFetch answered {bk['error_name']} "
                                  f"({bk['error_code']}): the snapshot's principal may not "
                                  "describe the topic")
    if bk and bk["error_code"]:
        return "fetch_error", f"OffsetFetch answered {bk['error_name']} ({bk['error_code']})"
    on_broker = bk is not None and bk["committed_offset"] is not None and bk["committed_offset"] >= 0
    record_offset = lk["offset"] if lk else None
    if lk and on_broker:
        cls, detail = _compare_values(lk, bk)
    elif lk:
        if group_id not in lake.groups:
            why = ("the group's latest group record is a tombstone" if group_id in lake.tombstoned
                   else "the group is absent from consumer_groups")
            return "group_tombstoned", (f"{why} but its offsets live; OffsetFetch of the Java "
                                        "coordinator returns nothing for them (spec 2.5)")
        cls = "missing_on_broker"
        detail = ("the broker listed the group without this partition" if group_id in snap.groups
                  else "the broker did not list the group")
    elif on_broker:
        cls, detail = "missing_in_lake", "the lake has no committed offset for this partition"
    else:
        return "match", "both sides have no committed offset"
    return _timing(cls, detail, pos, record_offset)


def _classify_group(lake: LakeState, snap: SnapshotState, group_id: str,
                    lg: dict[str, Any] | None, bg: dict[str, Any] | None, pos: _Position
                    ) -> tuple[str, str]:
    if bg and bg["error_code"] in _REFUSED:
        return "not_authorized", (f"describing the group answered {bg['error_name']} "
                                  f"({bg['error_code']})")
    if bg and bg["error_code"]:
        return "fetch_error", f"describing the group answered {bg['error_name']} ({bg['error_code']})"
    record_offset = lg["last_record_offset"] if lg else None
    if lg is None:
        if group_id in lake.tombstoned:
            return "group_tombstoned", ("the lake's latest group record is a tombstone; the "
                                        "broker still lists the group (an offset commit the lake "
                                        "has not seen, or a <=3.9 coordinator)")
        return _timing("missing_in_lake", "the broker lists a group the lake does not hold",
                       pos, record_offset)
    if bg is None:
        code, name = snap.group_errors.get(group_id, (0, None))
        if code in _REFUSED:
            return "not_authorized", (f"the broker did not list the group; asked by name it "
                                      f"answered {name}")
        return _timing("missing_on_broker", "the broker did not list the group", pos,
                       record_offset)
    lake_type = "classic" if lg["group_type"] in ("classic", "simple") else lg["group_type"]
    broker_type, broker_state = bg["group_type"], bg["group_state"]
    notes = []
    if lg["group_type"] == "simple":
        # offset-only group: 'simple' in the lake is ListGroups' classic, protocol type '',
        # Empty; the checks below compare exactly that
        notes.append("offset-only group: lake 'simple' = broker classic with protocol type ''")
    if broker_type not in (None, "unknown") and lake_type != broker_type:
        return _timing("type_mismatch", f"type: lake {lg['group_type']} vs broker {broker_type}",
                       pos, record_offset)
    if lg["protocol_type"] is not None and bg["protocol_type"] is not None \
            and lg["protocol_type"] != bg["protocol_type"]:
        return _timing("type_mismatch", (f"protocol type: lake {lg['protocol_type']!r} vs "
                                         f"broker {bg['protocol_type']!r}"), pos, record_offset)
    if broker_state in TRANSIENT_STATES:
        return "state_transient", (f"the broker's {broker_state} is an in-memory state; the log "
                                   f"shows {lg['group_state']}")
    if broker_state in (None, "Unknown"):
        notes.append("the broker gave no state; state not compared")
    elif lake_type not in STATE_COMPARABLE_TYPES:
        notes.append(f"{lake_type} group states are not derivable from the log; not compared")
    elif broker_state in METADATA_STATES:
        notes.append(f"the broker's {broker_state} depends on topic metadata, not the log "
                     f"(the log shows {lg['group_state']}); not compared")
    elif broker_state != lg["group_state"]:
        return _timing("state_mismatch", f"state: lake {lg['group_state']} vs broker {broker_state}",
                       pos, record_offset)
    epochs = [(name, lg.get(lake_col), bg.get(broker_col))
              for name, lake_col, broker_col in (("group epoch", "generation", "group_epoch"),
                                                 ("assignment epoch", "assignment_epoch",
                                                  "assignment_epoch"))
              if lake_type in ("consumer", "share", "streams") and bg.get(broker_col) is not None
              and lg.get(lake_col) is not None]  # None: the log kept no epoch record
    differ = [f"{name}: lake {lk} vs broker {bk}" for name, lk, bk in epochs if lk != bk]
    if differ:
        return _timing("state_mismatch", "; ".join(differ), pos, record_offset)
    lake_members, broker_members = lake.members.get(group_id, set()), snap.members.get(group_id)
    if broker_members is not None and lake_members != broker_members:
        only_lake = sorted(lake_members - broker_members)
        only_broker = sorted(broker_members - lake_members)
        return _timing("member_mismatch", (f"members only in the lake: {only_lake}; only on the "
                                           f"broker: {only_broker}"), pos, record_offset)
    if broker_members is None and lake_members and broker_state == "Stable":
        notes.append("the broker described no members; members not compared")
    return "match", "; ".join(notes)


# ------------------------------------------------------------------------------ run


@dataclass
class Reconciliation:
    """One reconciliation run: its rows (as written) and where they came from."""

    reconcile_id: str
    cluster_id: str
    snapshot: SnapshotInfo
    reconciled_at: datetime
    num_partitions: int | None
    num_partitions_source: str
    table: pa.Table
    lake_log_end: dict[int, int] = field(default_factory=dict)  # what the lake holds of the cluster

    def counts(self, level: str | None = None) -> dict[str, int]:
        rows = self.table.to_pylist() if level is None else [
            r for r in self.table.to_pylist() if r["level"] == level]
        return dict(sorted(Counter(r["classification"] for r in rows).items()))

    def unexplained(self) -> list[dict[str, Any]]:
        return [r for r in self.table.to_pylist() if not r["explained"]]


def reconcile(engine: DeltaEngine, *, cluster_id: str = "default",
              num_partitions: int | None = None, snapshot_id: str | None = None,
              reconciled_at: datetime | None = None, allow_partial: bool = False
              ) -> Reconciliation:
    """Compare the lake with the cluster's latest snapshot (or ``snapshot_id``) and append
    the classified rows to ``reconciliation``. Raises :class:`NoSnapshotError` without one."""
    info = (latest_snapshot(engine, cluster_id) if snapshot_id is None
            else find_snapshot(engine, snapshot_id, cluster_id))
    if info is None and snapshot_id is not None:
        raise NoSnapshotError(f"no complete snapshot {snapshot_id!r} of cluster {cluster_id!r} in "
                              f"{engine.root} (see the snapshot_runs table)")
    if info is None:
        raise NoSnapshotError(
            f"no snapshot of cluster {cluster_id!r} in {engine.root}: run `offsetlake snapshot` first")
    n, source = resolve_num_partitions(info, num_partitions)
    reconciled_at = reconciled_at or datetime.now(timezone.utc)
    reconcile_id = f"{reconciled_at.strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid.uuid4().hex[:8]}"
    lake = load_lake_state(engine, cluster_id)
    rows = classify(lake, load_snapshot_state(engine, info), n)
    if allow_partial:  # the user accepted what the ACLs hide; the rows still say so
        for r in rows:
            if r["classification"] == "not_authorized":
                r["explained"] = True
                r["detail"] = f"{r['detail']} (accepted: --allow-partial)"
    common = {"cluster_id": cluster_id, "reconcile_id": reconcile_id,
              "snapshot_id": info.snapshot_id, "reconciled_at": reconciled_at}
    spec = contract(TABLE)
    table = spec.conform(pa.Table.from_pylist([{**common, **r} for r in rows],
                                              schema=_loose(spec.arrow_schema)))
    engine.append(spec, table, f"offsetlake-reconcile:{cluster_id}:{reconcile_id}", 0)
    result = Reconciliation(reconcile_id, cluster_id, info, reconciled_at, n, source, table,
                            dict(lake.log_end))
    log.info("reconciliation %s of cluster %s vs snapshot %s: %s", reconcile_id, cluster_id,
             info.snapshot_id, result.counts())
    return result


def _loose(schema: pa.Schema) -> pa.Schema:
    """from_pylist with every column nullable (missing keys become nulls), conformed after."""
    return pa.schema([f.with_nullable(True) for f in schema])


@dataclass
class ReconcileResult:
    """What the CLI prints (``summary``) and its exit status (``passed``)."""

    summary: dict[str, Any]
    passed: bool
    reconciliation: Reconciliation
    quality: Any = None  # pipelines.reconcile.quality.QualityReport when the gate ran


def _describe(rows: Iterable[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        out.append({"level": r["level"], "group": r["group_id"], "topic": r["topic"],
                    "partition": r["partition"], "class": r["classification"],
                    "detail": r["detail"]})
        if len(out) >= limit:
            break
    return out


def run_reconcile(lake: str | Path, *, cluster_id: str = "default", gate: bool = True,
                  num_partitions: int | None = None, engine: DeltaEngine | None = None,
                  data_docs: bool = True, max_listed: int = 100,
                  allow_partial: bool = False, snapshot_id: str | None = None,
                  fail_on_anomalies: tuple[str, ...] = ()) -> ReconcileResult:
    """Reconcile, then (``gate``) run the Great Expectations suite over the lake and the new
    reconciliation. ``passed`` is False when any expectation fails; without the gate, when
    any row is unexplained. The summary names every failing row (group, topic, partition,
    class), up to ``max_listed``, and every failed expectation.

    Never passes silently on less than a full check (``blocked_by`` in the summary names
    why): a partial snapshot (ACL refusals, offsets topic not visible, capture errors) unless
    ``allow_partial``; nothing compared (0 rows); an unknown ``__consumer_offsets``
    partition count (never guessed: pass ``num_partitions``), which also keeps the gate from
    running its partition_for checks.
    """
    engine = engine or DeltaRsEngine(lake)
    rec = reconcile(engine, cluster_id=cluster_id, num_partitions=num_partitions,
                    allow_partial=allow_partial, snapshot_id=snapshot_id)
    blockers = _blockers(rec, allow_partial)
    unexplained = rec.unexplained()
    summary: dict[str, Any] = {
        "cluster_id": cluster_id,
        "reconcile_id": rec.reconcile_id,
        "snapshot_id": rec.snapshot.snapshot_id,
        "snapshot_captured_at": rec.snapshot.captured_at.isoformat(),
        "require_stable": rec.snapshot.require_stable,
        "num_partitions": rec.num_partitions,
        "num_partitions_source": rec.num_partitions_source,
        "rows": rec.table.num_rows,
        "classes": rec.counts(),
        "offset_classes": rec.counts("offset"),
        "group_classes": rec.counts("group"),
        "unexplained_count": len(unexplained),
        "unexplained": _describe(unexplained, max_listed),
    }
    passed = not unexplained
    quality = None
    if gate and rec.num_partitions is None:
        summary["gate"] = {"ran": False, "why": "__consumer_offsets partition count unknown"}
        passed = False
    elif gate:
        quality = run_quality_gate(
            engine, cluster_id=cluster_id, reconciliation=rec.table,
            reconcile_id=rec.reconcile_id, snapshot_id=rec.snapshot.snapshot_id,
            num_partitions=rec.num_partitions, data_docs=data_docs,
            fail_on_anomalies=fail_on_anomalies)
        passed = quality.passed
        summary["gate"] = quality.summary()
    else:
        summary["gate"] = {"ran": False}
    summary["partial_snapshot"] = rec.snapshot.partial
    summary["not_authorized"] = list(rec.snapshot.not_authorized)
    summary["blocked_by"] = blockers
    passed = passed and not blockers
    for reason in blockers:
        log.warning("reconcile %s: %s", rec.reconcile_id, reason)
    summary["passed"] = passed
    log.log(logging.INFO if passed else logging.WARNING,
            "reconcile %s: %s (%d unexplained rows)", rec.reconcile_id,
            "passed" if passed else "FAILED", len(unexplained))
    return ReconcileResult(summary, passed, rec, quality)


def _blockers(rec: Reconciliation, allow_partial: bool) -> list[str]:
    """Why this reconciliation cannot pass, whatever its rows say (one line each)."""
    out: list[str] = []
    info = rec.snapshot
    if info.partial and not allow_partial:
        parts = []
        if info.not_authorized:
            parts.append(f"not authorized: {', '.join(info.not_authorized)}")
        parts.extend(info.errors)
        out.append(f"snapshot {info.snapshot_id} is partial ({'; '.join(parts) or 'marked'}): "
                   "grant the snapshot's principal DESCRIBE on the groups and topics and READ + "
                   "DESCRIBE on __consumer_offsets (README \"Security\"), or pass "
                   "--allow-partial to accept it")
    if not rec.lake_log_end:
        out.append(f"the lake holds no data of cluster {rec.cluster_id!r} (no ingested "
                   f"__consumer_offsets record): ingest with --cluster-id {rec.cluster_id}, or "
                   "reconcile the cluster the lake holds with its --cluster-id")
    if rec.table.num_rows == 0:
        out.append(f"nothing compared: neither the lake nor snapshot {info.snapshot_id} holds "
                   f"any group or offset of cluster {rec.cluster_id!r}")
    if rec.num_partitions is None:
        out.append("__consumer_offsets partition count unknown (the snapshot did not see the "
                   "topic): pass --num-partitions N, it is never guessed")
    return out


__all__ = ["NoSnapshotError", "ReconcileResult", "Reconciliation", "classify", "reconcile",
           "resolve_num_partitions", "run_reconcile"]
