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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode.jsonify import dumps
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine
from pipelines.lake.keys import KeyFilter, distinct_keys
from pipelines.model import OP, GroupColumns, LatestRecord, StateInput, last_by_position, micros_of
from pipelines.state import topics
from pipelines.state.generations import (
    REPLAYED_TYPES,
    generation_changes,
    no_changes,
    stored_change_set,
)
from pipelines.state.groups import OFFSET_ACTIVITY, derive_group
from pipelines.state.key_ids import key_ids
from pipelines.state.offsets import last_per_key, offset_changes

log = logging.getLogger(__name__)
TS = pa.timestamp("us", tz="UTC")


def _group_filter(groups: set[tuple[str, str]], null_columns: tuple[str, ...] = (),
                  true_columns: tuple[str, ...] = ()) -> KeyFilter:
    """Rows of exactly the touched (cluster, group) pairs, as a filter both engines push
    into their scans (delta-rs: a pyarrow expression; delta-spark: a SQL predicate)."""
    return KeyFilter.of(("cluster_id", "group_id"), groups, null_columns, true_columns)


def apply_state(engine: DeltaEngine, batch: StateInput, app_id: str, batch_id: int,
                now: datetime) -> tuple[dict[str, int], pa.Table | None]:
    """Update every state table for one batch (all clusters in it): rows changed per table,
    and the ``group_generations`` change set when this call replayed the batch (None when
    an earlier attempt merged it), which the commit audit and ``ownership_last_ended`` take."""
    changed: dict[str, int] = {}
    replayed: pa.Table | None = None
    oc_changes = offset_changes(batch.offset_commits, now)
    if oc_changes.num_rows and engine.merge(contract("committed_offsets"), oc_changes, app_id, batch_id):
        changed["committed_offsets"] = oc_changes.num_rows

    latest = _latest_group_record_changes(batch, now)
    clusters = {c for c, in distinct_keys(latest, ("cluster_id",)) | distinct_keys(batch.offset_commits,
                                                                                  ("cluster_id",))}
    known = topics.known_names(engine, clusters)
    names = {**known, **topics.batch_names(batch)}
    # Ownership history replays this batch on the state *before* it (member metadata as
    # of each record), so it is computed and merged before group_records_latest changes.
    if not engine.committed("group_generations", app_id, batch_id):
        replayed = gens = _generation_changes(engine, batch, names, known, now)
        if gens.num_rows and engine.merge(contract("group_generations"), gens, app_id, batch_id):
            changed["group_generations"] = gens.num_rows

    if latest.num_rows and engine.merge(contract("group_records_latest"), latest, app_id, batch_id):
        changed["group_records_latest"] = latest.num_rows
    new_names = {k: v for k, v in names.items() if k not in known}
    if new_names:
        engine.ensure(contract(topics.TABLE))
        if engine.merge(contract(topics.TABLE), topics.name_rows(new_names, "log", now), app_id, batch_id):
            changed[topics.TABLE] = len(new_names)
    touched = distinct_keys(latest, ("cluster_id", "group_id"))
    # offset deletions can remove an offset-only group: its groups are touched too
    touched |= distinct_keys(oc_changes, ("cluster_id", "group_id"))
    # members holding a topic id whose name is now known are derived again
    touched |= topics.unresolved_member_groups(engine, names)
    if not touched:
        return changed, replayed

    records = _latest_records(engine, touched)
    with_offsets = _groups_with_offsets(engine, touched, oc_changes)
    group_rows, member_rows, group_delete = [], [], []
    for cluster_id, group_id in sorted(touched):
        mine = {i: n for (c, i), n in names.items() if c == cluster_id}
        group, members = derive_group(group_id, records.get((cluster_id, group_id), []), mine,
                                      has_offsets=(cluster_id, group_id) in with_offsets)
        if group is None:
            group_delete.append({"cluster_id": cluster_id, "group_id": group_id, "group_type": "",
                                 "group_state": "", "num_members": 0, "offsets_partition": 0,
                                 "last_record_offset": 0, "updated_at": now})
        else:
            group_rows.append({**group, "cluster_id": cluster_id, "updated_at": now})
        member_rows.extend({**m, "cluster_id": cluster_id, "updated_at": now} for m in members)
    groups = contract("consumer_groups").change_set(
        group_rows + group_delete, ["upsert"] * len(group_rows) + ["delete"] * len(group_delete))
    if engine.merge(contract("consumer_groups"), groups, app_id, batch_id):
        changed["consumer_groups"] = groups.num_rows

    current = engine.read("group_members", ["cluster_id", "group_id", "member_id"], _group_filter(touched))
    keep = {(r["cluster_id"], r["group_id"], r["member_id"]) for r in member_rows}
    gone = [{"cluster_id": c, "group_id": g, "member_id": m, "group_type": "", "updated_at": now}
            for c, g, m in zip(current.column("cluster_id").to_pylist(), current.column("group_id").to_pylist(),
                               current.column("member_id").to_pylist(), strict=True)
            if (c, g) in touched and (c, g, m) not in keep]
    members = contract("group_members").change_set(
        member_rows + gone, ["upsert"] * len(member_rows) + ["delete"] * len(gone))
    if members.num_rows and engine.merge(contract("group_members"), members, app_id, batch_id):
        changed["group_members"] = members.num_rows

    return changed, replayed


def _generation_changes(engine: DeltaEngine, batch: StateInput, names: topics.Names,
                        known: topics.Names, now: datetime) -> pa.Table:
    """Change set for ``group_generations``: rows still naming a topic by an id this batch
    names (renamed: old key deleted), then the batch's classic/KIP-848 events replayed."""
    engine.ensure(contract("group_generations"))  # laid out before its rows are read back
    renames = _Renames({k: v for k, v in names.items() if k not in known}, now)
    renames.resolve(topics.renamed_generation_rows(engine, renames.names))
    replayable = batch.groups.take(batch.groups.rows_of(REPLAYED_TYPES))
    events = _events_by_cluster(replayable)
    replayed = []
    if events:
        ev_groups = distinct_keys(replayable.table, ("cluster_id", "group_id"))
        # the open partition alone: no file of closed rows is read
        open_rows = renames.resolve(engine.read("group_generations", None,
                                                _group_filter(ev_groups, ("valid_to",), ("is_open",))))
        unfilled = renames.resolve(engine.read("group_generations", None, _group_filter(ev_groups, ("client_id",))))
        before = _latest_records(engine, ev_groups, record_types=(5, 19, 23))
        for cluster_id, evs in sorted(events.items()):
            members = {(g, r.subkey): r.value for (c, g), recs in before.items() if c == cluster_id
                       for r in recs if r.record_type in (5, 19) and r.value}
            topologies = {g: r.value for (c, g), recs in before.items() if c == cluster_id
                          for r in recs if r.record_type == 23 and r.value}
            replayed.append(generation_changes(
                _of_cluster(open_rows, cluster_id), evs, {i: n for (c, i), n in names.items() if c == cluster_id},
                cluster_id, now, members, _of_cluster(unfilled, cluster_id), topologies))
    return renames.change_set(replayed)


def _events_by_cluster(groups: GroupColumns) -> dict[str, GroupColumns]:
    """Per cluster, its group records, in order."""
    if not len(groups):
        return {}
    clusters = pc.dictionary_encode(groups.table.column("cluster_id").combine_chunks())
    if len(clusters.dictionary) == 1:
        return {clusters.dictionary[0].as_py(): groups}
    code = clusters.indices.to_numpy()
    return {cluster_id: groups.take(np.flatnonzero(code == i))
            for i, cluster_id in enumerate(clusters.dictionary.to_pylist())}


def _of_cluster(table: pa.Table, cluster_id: str) -> pa.Table:
    return table.filter(pc.equal(table.column("cluster_id"), cluster_id))


class _Renames:
    """Stored ``group_generations`` rows whose topic id the batch names: each is keyed by the
    name from now on (its old key deleted), unless the replay writes the new key itself."""

    def __init__(self, names: topics.Names, now: datetime) -> None:
        self.names, self.now = names, now
        self.upserts: dict[tuple, dict] = {}
        self.deletes: dict[tuple, dict] = {}

    def resolve(self, rows: pa.Table | list[dict]) -> pa.Table:
        """``rows`` with the named topic ids replaced; the renamed ones are remembered."""
        table = rows if isinstance(rows, pa.Table) else contract("group_generations").from_rows(rows)
        if not self.names or not table.num_rows:
            return table
        old = table.column("topic").to_pylist()
        fixed = [self.names.get((c, t), t) for c, t in zip(table.column("cluster_id").to_pylist(), old, strict=True)]
        for i in (i for i, (a, b) in enumerate(zip(old, fixed, strict=True)) if a != b):
            row = table.slice(i, 1).to_pylist()[0]
            self.deletes[_gen_key(row)] = row
            resolved = {**row, "topic": fixed[i], "updated_at": self.now}
            self.upserts[_gen_key(resolved)] = resolved
        return table.set_column(table.schema.get_field_index("topic"), "topic", pa.array(fixed, pa.string()))

    def change_set(self, replayed: list[pa.Table]) -> pa.Table:
        """The replayed rows upserted, then the renamed rows the replay did not write."""
        spec = contract("group_generations")
        table = pa.concat_tables(replayed) if replayed else no_changes()
        table = table.append_column(OP, pa.array(["upsert"] * table.num_rows, pa.string()))
        if not self.deletes:
            return table
        written = {_gen_key(r) for r in table.select(list(spec.key)).to_pylist()}
        upserts = [r for k, r in self.upserts.items() if k not in written]
        written |= {_gen_key(r) for r in upserts}
        deletes = [r for k, r in self.deletes.items() if k not in written]
        extra = stored_change_set(upserts + deletes, ["upsert"] * len(upserts) + ["delete"] * len(deletes))
        return pa.concat_tables([table, extra.select(table.column_names).cast(table.schema)])


def _last_per_key(groups: GroupColumns) -> np.ndarray:
    """The rows of the last record per (cluster, group, type, member) by log position (of
    two at one position, the later row), in row order."""
    t = groups.table
    key = key_ids([t.column(n) for n in ("cluster_id", "group_id", "record_type", "subkey")])[0]
    return last_by_position(key, t.column("offsets_partition").to_numpy(), t.column("offset").to_numpy())


def _gen_key(r: dict) -> tuple:
    return tuple(r[k] for k in contract("group_generations").key)


def _latest_group_record_changes(batch: StateInput, now: datetime) -> pa.Table:
    """Change set for ``group_records_latest``: the last record per key, and per group its
    last non-tombstone offset commit (record type 1).

    Built column by column and ranked before any value is written as JSON: a group-heavy
    batch holds many records per key (a member's every epoch), and only the winners' values
    are stored, so only they are encoded."""
    schema = contract("group_records_latest").arrow_schema
    # the winners first (a group-heavy batch holds hundreds of records per key), then columns
    won = batch.groups.take(_last_per_key(batch.groups))
    t, n = won.table, len(won)
    table = pa.table({
        **{name: t.column(name) for name in ("cluster_id", "group_id", "record_type", "subkey",
                                             "is_tombstone", "value_version")},
        "value_json": pa.nulls(n, pa.string()),
        "offsets_partition": t.column("offsets_partition"), "offset": t.column("offset"),
        "record_timestamp": t.column("record_timestamp").cast(TS),
        "updated_at": pa.array([now] * n, TS),
        "_record": pa.array(np.arange(n, dtype=np.int64)),
    })
    commits = batch.offset_commits.filter(pc.invert(batch.offset_commits.column("is_tombstone")))
    if commits.num_rows:
        last = last_per_key(commits.select(["cluster_id", "group_id", "offsets_partition", "offset",
                                            "record_timestamp"]), ["cluster_id", "group_id"])
        k = last.num_rows
        activity = pa.table({
            "cluster_id": last.column("cluster_id"), "group_id": last.column("group_id"),
            "record_type": pa.array([OFFSET_ACTIVITY] * k, pa.int16()),
            "subkey": pa.array([""] * k), "is_tombstone": pa.array([False] * k),
            "value_version": pa.nulls(k, pa.int16()), "value_json": pa.nulls(k, pa.string()),
            "offsets_partition": last.column("offsets_partition"), "offset": last.column("offset"),
            "record_timestamp": last.column("record_timestamp").cast(TS),
            "updated_at": pa.array([now] * k, TS),
            "_record": pa.nulls(k, pa.int64()),
        })
        table = pa.concat_tables([table, activity.cast(table.schema)])
    table = last_per_key(table, ["cluster_id", "group_id", "record_type", "subkey"])
    values = [None if i is None or won.values[i] is None else dumps(won.values[i])
              for i in table.column("_record").to_pylist()]
    table = table.set_column(schema.get_field_index("value_json"), "value_json",
                             pa.array(values, pa.string())).drop_columns(["_record"])
    return table.cast(schema).append_column(OP, pa.array(["upsert"] * table.num_rows, pa.string()))


def _groups_with_offsets(engine: DeltaEngine, groups: set[tuple[str, str]],
                         oc_changes: pa.Table) -> set[tuple[str, str]]:
    """The groups (of ``groups``) holding at least one live committed offset.

    A group this batch upserts an offset of holds that offset now (the change set has one
    row per key, merged before this is asked): only the other groups are looked up in
    ``committed_offsets``, so a batch of commits does not scan the million-key table."""
    upserts = oc_changes.filter(pc.equal(oc_changes.column(OP), "upsert"))
    live = distinct_keys(upserts, ("cluster_id", "group_id")) & groups
    rest = groups - live
    if not rest:
        return live
    table = engine.read("committed_offsets", ["cluster_id", "group_id"], _group_filter(rest))
    return live | (distinct_keys(table, ("cluster_id", "group_id")) & rest)


def _latest_records(engine: DeltaEngine, groups: set[tuple[str, str]],
                    record_types: tuple[int, ...] | None = None
                    ) -> dict[tuple[str, str], list[LatestRecord]]:
    table = engine.read("group_records_latest", None, _group_filter(groups))
    stamps = table.schema.get_field_index("record_timestamp")
    table = table.set_column(stamps, "record_timestamp", micros_of(table.column(stamps)))
    if record_types is not None:
        table = table.filter(pc.field("record_type").isin(list(record_types)))
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
