"""Topic id -> name: the ``topic_names`` table and the revisits that fill names in later.

Why: KIP-848 assignments (records 7, 8) name topics by id only; names come from other
records (partition metadata, 4.1+ offset commits) that may lie anywhere in the log, or
from the cluster's metadata at snapshot time. An id never changes its name (a recreated
topic gets a new id), so a name learned later is filled into every row written before it
was known: the state tables then do not depend on where a micro-batch boundary fell.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine
from pipelines.lake.keys import KeyFilter
from pipelines.model import StateInput
from pipelines.state import last_ended
from pipelines.state.generations import stored_change_set

TABLE = "topic_names"
Names = dict[tuple[str, str], str]  # (cluster_id, topic_id) -> topic name


#: partition-metadata records: each names the topic ids of its group's subscriptions
NAMING_TYPES = (4, 9, 18)


def batch_names(batch: StateInput) -> Names:
    """Names a batch carries: partition-metadata records (types 4, 9, 18) and offset
    commits with a topic id (4.1+ brokers write both)."""
    names: Names = {}
    naming = batch.groups.take(batch.groups.rows_of(NAMING_TYPES))
    for cluster_id, value in zip(naming.table.column("cluster_id").to_pylist(), naming.values, strict=True):
        if value:
            names.update({(cluster_id, t["topic_id"]): t["topic_name"]
                          for t in value.get("topics") or () if t.get("topic_id")})
    commits = batch.offset_commits
    commits = commits.filter(pc.is_valid(commits.column("topic_id")))
    names.update(zip(zip(commits.column("cluster_id").to_pylist(),
                         commits.column("topic_id").to_pylist(), strict=True),
                     commits.column("topic").to_pylist(), strict=True))
    return names


def known_names(engine: DeltaEngine, clusters: Iterable[str]) -> Names:
    """Every name the lake already holds for these clusters."""
    keys = {(c,) for c in clusters}
    if not keys or not engine.exists(TABLE):
        return {}
    table = engine.read(TABLE, ["cluster_id", "topic_id", "topic_name"],
                        KeyFilter.of(("cluster_id",), keys))
    return dict(zip(zip(table.column("cluster_id").to_pylist(), table.column("topic_id").to_pylist(),
                        strict=True), table.column("topic_name").to_pylist(), strict=True))


def name_rows(new: Names, source: str, now: datetime) -> pa.Table:
    """Change set inserting ``new`` names into ``topic_names``."""
    rows = [{"cluster_id": c, "topic_id": i, "topic_name": n, "source": source, "updated_at": now}
            for (c, i), n in sorted(new.items())]
    return contract(TABLE).change_set(rows)


def renamed_generation_rows(engine: DeltaEngine, new: Names) -> list[dict[str, Any]]:
    """``group_generations`` rows that still carry one of ``new``'s ids as their topic."""
    if not new or not engine.exists("group_generations"):
        return []
    # they go back through a MERGE: the table laid out as its contract says first
    engine.ensure(contract("group_generations"))
    return engine.read("group_generations", None,
                       KeyFilter.of(("cluster_id", "topic"), set(new))).to_pylist()


def resolve_row(row: dict[str, Any], names: Names) -> dict[str, Any]:
    """A generation row with its topic id replaced by the name (a copy; same row if known)."""
    name = names.get((row["cluster_id"], row["topic"]))
    return row if name is None else {**row, "topic": name}


def unresolved_member_groups(engine: DeltaEngine, names: Names) -> set[tuple[str, str]]:
    """Groups with a current member whose assignment holds a topic id ``names`` can name."""
    clusters = {(c,) for c, _ in names}
    if not clusters or not engine.exists("group_members"):
        return set()
    table = engine.read("group_members", ["cluster_id", "group_id", "assigned_partitions",
                                          "partitions_pending_revocation"],
                        KeyFilter.of(("cluster_id",), clusters))
    out = set()
    for r in table.to_pylist():
        for tps in (r["assigned_partitions"], r["partitions_pending_revocation"]):
            if any(tp["topic"] is None and (r["cluster_id"], tp["topic_id"]) in names
                   for tp in tps or ()):
                out.add((r["cluster_id"], r["group_id"]))
    return out


def fill_member_rows(engine: DeltaEngine, names: Names, now: datetime) -> list[dict[str, Any]]:
    """Current members whose assignments hold ids ``names`` can name, with names filled in."""
    groups = unresolved_member_groups(engine, names)
    if not groups:
        return []
    rows = engine.read("group_members", None,
                       KeyFilter.of(("cluster_id", "group_id"), groups)).to_pylist()

    def fill(cluster: str, tps: list[dict] | None) -> list[dict] | None:
        if tps is None:
            return None
        return [{**tp, "topic": tp["topic"] if tp["topic"] is not None
                 else names.get((cluster, tp["topic_id"]))} for tp in tps]

    return [{**r, "assigned_partitions": fill(r["cluster_id"], r["assigned_partitions"]),
             "partitions_pending_revocation": fill(r["cluster_id"], r["partitions_pending_revocation"]),
             "updated_at": now} for r in rows]


def store_cluster_names(engine: DeltaEngine, names: Names, app_id: str, now: datetime
                        ) -> dict[str, int]:
    """Names from the cluster's metadata (snapshot time): add the unknown ones to
    ``topic_names`` and fill them into ``group_generations`` and ``group_members``.

    Each table's write carries ``(app_id, 0)``, so a retried snapshot changes nothing twice.
    """
    known = known_names(engine, {c for c, _ in names})
    new = {k: v for k, v in names.items() if k not in known}
    written: dict[str, int] = {}
    stale = renamed_generation_rows(engine, new)
    if stale:
        upserts = [{**resolve_row(r, new), "updated_at": now} for r in stale]
        gens = stored_change_set(stale + upserts, ["delete"] * len(stale) + ["upsert"] * len(upserts))
        # first: a retry finds the same stale rows until group_generations has them renamed
        if ended := last_ended.update(engine, gens, app_id, 0, now):
            written[last_ended.TABLE] = ended
        if engine.merge(contract("group_generations"), gens, app_id, 0):
            written["group_generations"] = len(upserts)
    members = fill_member_rows(engine, {**known, **new}, now)
    if members:
        table = contract("group_members").change_set(members)
        if engine.merge(contract("group_members"), table, app_id, 0):
            written["group_members"] = len(members)
    if new:
        engine.ensure(contract(TABLE))
        if engine.merge(contract(TABLE), name_rows(new, "cluster_metadata", now), app_id, 0):
            written[TABLE] = len(new)
    return written


def names_from_described_members(engine: DeltaEngine, cluster_id: str,
                                 described: Iterable[tuple[str, str, list[dict] | None]]) -> dict[str, str]:
    """Topic id -> name read off the broker's description of the lake's own members.

    ``described`` is (group, member, [{"topic": name, "partitions": [...]}]) as the broker
    answered (e.g. a recorded ConsumerGroupDescribe that kept names only). For a member the
    lake holds with the same assignment, the id whose partition list is the one partition
    list of a single named topic is that topic. Only unambiguous, agreeing matches count:
    two topics with equal partition lists in one member name nothing.
    """
    answers = {(g, m): parts for g, m, parts in described if parts}
    if not answers or not engine.exists("group_members"):
        return {}
    table = engine.read("group_members", ["group_id", "member_id", "assigned_partitions"],
                        KeyFilter.of(("cluster_id", "group_id"), {(cluster_id, g) for g, _ in answers}))
    votes: dict[str, set[str]] = {}
    for r in table.to_pylist():
        named = answers.get((r["group_id"], r["member_id"]))
        mine = r["assigned_partitions"] or []
        if not named or len(named) != len(mine):
            continue
        by_parts: dict[tuple[int, ...], list[str]] = {}
        for tp in named:
            by_parts.setdefault(tuple(sorted(tp["partitions"])), []).append(tp["topic"])
        for tp in mine:
            if tp["topic"] is not None or not tp["topic_id"]:
                continue
            candidates = by_parts.get(tuple(sorted(tp["partitions"])), [])
            if len(candidates) == 1:
                votes.setdefault(tp["topic_id"], set()).add(candidates[0])
    return {i: next(iter(n)) for i, n in votes.items() if len(n) == 1}
