"""Apply one micro-batch's history to the current-state tables, touching only changed keys.

Order matters for exactly-once: each table's update is a function of that table's own
previous content (or of ``group_records_latest``, updated first) plus the batch, and is
committed with the batch's Delta transaction id, so a replay after a crash at any
point skips what was committed and redoes the rest with identical results.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode.jsonify import dumps
from pipelines.history.tables import StateInput
from pipelines.lake.contracts import contract
from pipelines.lake.engines import OP, DeltaEngine
from pipelines.state.generations import generation_changes
from pipelines.state.groups import OFFSET_ACTIVITY, LatestRecord, derive_group
from pipelines.state.offsets import last_per_key, offset_changes

log = logging.getLogger(__name__)
TS = pa.timestamp("us", tz="UTC")


def _with_ops(rows: list[dict], table: str, ops: list[str]) -> pa.Table:
    data = pa.Table.from_pylist(rows, schema=contract(table).arrow_schema) if rows \
        else contract(table).arrow_schema.empty_table()
    return data.append_column(OP, pa.array(ops, pa.string()))


def _group_filter(groups: set[tuple[str, str]]):
    """Rows of the touched groups' ids (any cluster; callers keep exact (cluster, group) pairs).

    delta-rs datasets prune on string_view statistics, which literal strings cannot be
    compared with: cast the column in the expression (the filter still runs in the scan).
    """
    ids = sorted({g for _, g in groups})
    return pc.is_in(pc.field("group_id").cast(pa.string()), value_set=pa.array(ids, pa.string()))


def apply_state(engine: DeltaEngine, batch: StateInput, app_id: str, batch_id: int,
                now: datetime) -> dict[str, int]:
    """Update every state table for one batch (all clusters in it); rows changed per table."""
    changed: dict[str, int] = {}
    oc_changes = offset_changes(batch.offset_commits, now)
    if oc_changes.num_rows and engine.merge(contract("committed_offsets"), oc_changes, app_id, batch_id):
        changed["committed_offsets"] = oc_changes.num_rows

    latest = _latest_group_record_changes(batch, now)
    if latest.num_rows and engine.merge(contract("group_records_latest"), latest, app_id, batch_id):
        changed["group_records_latest"] = latest.num_rows
    touched = set(zip(latest.column("cluster_id").to_pylist(), latest.column("group_id").to_pylist(),
                      strict=True))
    # offset deletions can remove an offset-only group: its groups are touched too
    touched |= set(zip(oc_changes.column("cluster_id").to_pylist(),
                       oc_changes.column("group_id").to_pylist(), strict=True))
    if not touched:
        return changed

    records = _latest_records(engine, touched)
    with_offsets = _groups_with_offsets(engine, touched)
    group_rows, member_rows, group_delete = [], [], []
    for cluster_id, group_id in sorted(touched):
        group, members = derive_group(group_id, records.get((cluster_id, group_id), []),
                                      has_offsets=(cluster_id, group_id) in with_offsets)
        if group is None:
            group_delete.append({"cluster_id": cluster_id, "group_id": group_id, "group_type": "",
                                 "group_state": "", "num_members": 0, "offsets_partition": 0,
                                 "last_record_offset": 0, "updated_at": now})
        else:
            group_rows.append({**group, "cluster_id": cluster_id, "updated_at": now})
        member_rows.extend({**m, "cluster_id": cluster_id, "updated_at": now} for m in members)
    groups = _with_ops(group_rows + group_delete, "consumer_groups",
                       ["upsert"] * len(group_rows) + ["delete"] * len(group_delete))
    if engine.merge(contract("consumer_groups"), groups, app_id, batch_id):
        changed["consumer_groups"] = groups.num_rows

    current = engine.read("group_members", ["cluster_id", "group_id", "member_id"], _group_filter(touched))
    keep = {(r["cluster_id"], r["group_id"], r["member_id"]) for r in member_rows}
    gone = [{"cluster_id": c, "group_id": g, "member_id": m, "group_type": "", "updated_at": now}
            for c, g, m in zip(current.column("cluster_id").to_pylist(), current.column("group_id").to_pylist(),
                               current.column("member_id").to_pylist(), strict=True)
            if (c, g) in touched and (c, g, m) not in keep]
    members = _with_ops(member_rows + gone, "group_members",
                        ["upsert"] * len(member_rows) + ["delete"] * len(gone))
    if members.num_rows and engine.merge(contract("group_members"), members, app_id, batch_id):
        changed["group_members"] = members.num_rows

    events: dict[str, list] = {}
    for g in batch.group_records:
        if g.record.record_type in (2, 3, 8):
            events.setdefault(g.cluster_id, []).append((g.group_id, g.record))
    if events:
        ev_groups = {(c, g) for c, evs in events.items() for g, _ in evs}
        open_rows = engine.read("group_generations", None,
                                _group_filter(ev_groups) & pc.field("valid_to").is_null()).to_pylist()
        names = _topic_names(records, batch)
        rows = []
        for cluster_id, evs in sorted(events.items()):
            mine = [r for r in open_rows if r["cluster_id"] == cluster_id]
            rows.extend(generation_changes(mine, evs, names, cluster_id, now,
                                           _member_metadata(records, cluster_id, batch)))
        gens = _with_ops(rows, "group_generations", ["upsert"] * len(rows))
        if rows and engine.merge(contract("group_generations"), gens, app_id, batch_id):
            changed["group_generations"] = len(rows)
    return changed


def _latest_group_record_changes(batch: StateInput, now: datetime) -> pa.Table:
    rows = [{
        "cluster_id": g.cluster_id, "group_id": g.group_id, "record_type": g.record.record_type,
        "subkey": g.record.subkey, "is_tombstone": g.record.is_tombstone,
        "value_version": g.record.value_version,
        "value_json": None if g.record.value is None else dumps(g.record.value),
        "offsets_partition": g.record.offsets_partition, "offset": g.record.offset,
        "record_timestamp": g.record.record_timestamp, "updated_at": now,
    } for g in batch.group_records]
    table = pa.Table.from_pylist(rows, schema=contract("group_records_latest").arrow_schema) if rows \
        else contract("group_records_latest").arrow_schema.empty_table()
    commits = batch.offset_commits.filter(pc.invert(batch.offset_commits.column("is_tombstone")))
    if commits.num_rows:
        last = last_per_key(commits.select(["cluster_id", "group_id", "offsets_partition", "offset",
                                            "record_timestamp"]), ["cluster_id", "group_id"])
        n = last.num_rows
        activity = pa.table({
            "cluster_id": last.column("cluster_id"), "group_id": last.column("group_id"),
            "record_type": pa.array([OFFSET_ACTIVITY] * n, pa.int16()),
            "subkey": pa.array([""] * n), "is_tombstone": pa.array([False] * n),
            "value_version": pa.nulls(n, pa.int16()), "value_json": pa.nulls(n, pa.string()),
            "offsets_partition": last.column("offsets_partition"), "offset": last.column("offset"),
            "record_timestamp": last.column("record_timestamp").cast(TS),
            "updated_at": pa.array([now] * n, TS),
        })
        table = pa.concat_tables([table, activity.cast(table.schema)])
    table = last_per_key(table, ["cluster_id", "group_id", "record_type", "subkey"])
    return table.append_column(OP, pa.array(["upsert"] * table.num_rows, pa.string()))


def _groups_with_offsets(engine: DeltaEngine, groups: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The groups (of ``groups``) holding at least one live committed offset."""
    table = engine.read("committed_offsets", ["cluster_id", "group_id"], _group_filter(groups))
    return set(zip(table.column("cluster_id").to_pylist(), table.column("group_id").to_pylist(),
                   strict=True)) & groups


def _latest_records(engine: DeltaEngine, groups: set[tuple[str, str]]
                    ) -> dict[tuple[str, str], list[LatestRecord]]:
    table = engine.read("group_records_latest", None, _group_filter(groups))
    out: dict[tuple[str, str], list[LatestRecord]] = {}
    for r in table.to_pylist():
        key = (r["cluster_id"], r["group_id"])
        if key not in groups:
            continue
        value = json.loads(r["value_json"]) if r["value_json"] else None
        out.setdefault(key, []).append(LatestRecord(
            r["record_type"], r["subkey"], r["is_tombstone"], value,
            r["offsets_partition"], r["offset"], r["record_timestamp"], r["value_version"]))
    return out


def _member_metadata(records: dict[tuple[str, str], list[LatestRecord]], cluster_id: str,
                     batch: StateInput) -> dict[tuple[str, str], dict]:
    """KIP-848 member metadata (type 5) by (group, member): from state, then this batch."""
    out = {(g, r.subkey): r.value for (c, g), recs in records.items() if c == cluster_id
           for r in recs if r.record_type == 5 and r.value}
    out.update({(g.group_id, g.record.subkey): g.record.value for g in batch.group_records
                if g.cluster_id == cluster_id and g.record.record_type == 5 and g.record.value})
    return out


def _topic_names(records: dict[tuple[str, str], list[LatestRecord]], batch: StateInput) -> dict[str, str]:
    """Topic id -> name from partition-metadata records (state and this batch, which may
    tombstone them) and from 4.1+ offset commits, which carry both."""
    names = {}
    latest = [r for recs in records.values() for r in recs] + [g.record for g in batch.group_records]
    for r in latest:
        if r.record_type in (4, 9, 18) and r.value:
            names.update({t["topic_id"]: t["topic_name"] for t in r.value.get("topics") or ()})
    commits = batch.offset_commits.select(["topic_id", "topic"]).filter(
        pc.is_valid(batch.offset_commits.column("topic_id")))
    names.update(zip(commits.column("topic_id").to_pylist(), commits.column("topic").to_pylist(), strict=True))
    return names
