"""The coordinator's state as of a wall-clock instant, rebuilt from the history tables.

Why a fold over history and not Delta time travel: time travel gives the lake as of an
ingest, auditors ask what the group coordinator served at 03:12 on the 14th. This module is
the state fold of :mod:`pipelines.state.offsets` and :mod:`pipelines.state.groups` applied
to the history rows written by then, so its semantics are the coordinator's replay (spec
2.2-2.5), not a second implementation:

* offsets: the last record per (cluster, group, topic, partition) by log position among the
  records that had *taken effect* by the instant wins; a winning tombstone means no offset.
  A non-transactional record takes effect at its record time. A transactional commit
  (TxnOffsetCommit) takes effect at the time of its transaction's COMMIT marker (the next
  COMMIT/ABORT control record of its producer in its ``__consumer_offsets`` partition); an
  aborted or still open one never does. Ranking by the commit record's own position is the
  coordinator's rule 3 of spec 2.4 (a committed transactional offset only replaces a
  committed offset written before it), and a tombstone written while a transaction was open
  drops it (rule 5) because the tombstone is later in the log.
* groups: the latest record per (record type, member/regex) written by then, plus the
  group's last offset commit written by then (a pending transactional value creates the
  "simple" group too, rule 6), handed to :func:`~pipelines.state.groups.derive_group`.

The instant is compared with the record timestamps the broker wrote (CreateTime set by the
coordinator's clock). Input tables carry the history tables' columns; the caller chooses
how to read them (DuckDB or Spark, see :mod:`pipelines.queries.state_as_of`).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.model import OFFSET_KEY, LatestRecord
from pipelines.state.groups import OFFSET_ACTIVITY, derive_group
from pipelines.state.offsets import last_per_key

TS = pa.timestamp("us", tz="UTC")

#: Columns of the offsets answer, in order.
OFFSET_COLUMNS = ["cluster_id", "group_id", "topic", "partition", "committed_offset",
                  "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "topic_id",
                  "effective_at", "is_transactional", "offsets_partition", "offset",
                  "record_timestamp"]
#: Schema of the groups answer: consumer_groups' columns (without updated_at).
GROUP_SCHEMA = pa.schema([
    ("cluster_id", pa.string()), ("group_id", pa.string()), ("group_type", pa.string()),
    ("group_state", pa.string()), ("protocol_type", pa.string()), ("protocol", pa.string()),
    ("generation", pa.int32()), ("assignment_epoch", pa.int32()), ("leader", pa.string()),
    ("num_members", pa.int32()), ("current_state_timestamp", TS), ("offsets_partition", pa.int32()),
    ("last_record_offset", pa.int64()), ("last_record_timestamp", TS),
    ("last_commit_offset", pa.int64()),
])


@dataclass
class StateAsOf:
    """The answer: committed offsets and groups as the coordinator held them at ``as_of``."""

    as_of: datetime
    offsets: pa.Table
    groups: pa.Table


def record_time(commits: pa.Table) -> pa.ChunkedArray:
    """A commit record's time: the record timestamp, else (never seen) its commit timestamp."""
    return pc.coalesce(commits.column("record_timestamp").cast(TS),
                       commits.column("commit_timestamp").cast(TS))


def _transaction_ends(commits: pa.Table, markers: pa.Table) -> list[tuple[str, Any] | None]:
    """Per commit: (control type, time) of the COMMIT/ABORT marker ending its transaction (the
    next one of its producer in its partition), None for a non-transactional commit or an
    open transaction. ``markers``: control rows of ``offsets_raw`` (cluster_id,
    offsets_partition, offset, producer_id, control_type, timestamp)."""
    out: list[tuple[str, Any] | None] = [None] * commits.num_rows
    txn = pc.fill_null(commits.column("is_transactional"), False).to_numpy(zero_copy_only=False)
    if not txn.any():
        return out
    ends: dict[tuple[str, int, int], list[tuple[int, str, Any]]] = defaultdict(list)
    for m in markers.select(["cluster_id", "offsets_partition", "offset", "producer_id",
                             "control_type", "timestamp"]).to_pylist():
        if m["control_type"] in ("COMMIT", "ABORT"):
            ends[(m["cluster_id"], m["offsets_partition"], m["producer_id"])].append(
                (m["offset"], m["control_type"], m["timestamp"]))
    positions = {}
    for key, found in ends.items():
        found.sort(key=lambda e: e[0])
        positions[key] = [e[0] for e in found]
    cols = commits.select(["cluster_id", "offsets_partition", "offset", "producer_id"]).to_pydict()
    for i in txn.nonzero()[0]:
        key = (cols["cluster_id"][i], cols["offsets_partition"][i], cols["producer_id"][i])
        found = ends.get(key, [])
        j = bisect.bisect_right(positions.get(key, []), cols["offset"][i])
        if j < len(found):
            out[i] = (found[j][1], found[j][2])
    return out


def effective_times(commits: pa.Table, markers: pa.Table) -> pa.Array:
    """When each commit took effect: its record time; for a transactional commit the time of
    the COMMIT marker ending its transaction (null when the transaction was aborted or has
    no marker yet)."""
    times = record_time(commits).combine_chunks()
    txn = pc.fill_null(commits.column("is_transactional"), False).to_pylist()
    if not any(txn):
        return times
    out = times.to_pylist()
    for i, end in enumerate(_transaction_ends(commits, markers)):
        if txn[i]:
            out[i] = end[1] if end is not None and end[0] == "COMMIT" else None
    return pa.array(out, TS)


def offsets_as_of(commits: pa.Table, markers: pa.Table, as_of: datetime) -> pa.Table:
    """Committed offsets at ``as_of`` (columns :data:`OFFSET_COLUMNS`), in key order."""
    with_time = commits.append_column("effective_at", effective_times(commits, markers))
    effective = with_time.filter(pc.fill_null(
        pc.less_equal(with_time.column("effective_at"), pa.scalar(as_of, TS)), False))
    latest = last_per_key(effective, OFFSET_KEY)
    live = latest.filter(pc.invert(pc.fill_null(latest.column("is_tombstone"), False)))
    live = live.set_column(live.schema.get_field_index("is_transactional"), "is_transactional",
                           pc.fill_null(live.column("is_transactional"), False))
    out = live.select(OFFSET_COLUMNS)
    return out.sort_by([(c, "ascending") for c in OFFSET_KEY])


def groups_as_of(group_records: pa.Table, commits: pa.Table, markers: pa.Table,
                 offsets: pa.Table, as_of: datetime,
                 topic_names: dict[tuple[str, str], str] | None = None) -> pa.Table:
    """Groups at ``as_of`` (schema :data:`GROUP_SCHEMA`): type, state, generation/epoch.

    ``group_records``: rows of the ``group_metadata`` history table; ``commits``: rows of
    ``offset_commits``; ``offsets``: the answer of :func:`offsets_as_of` for the same instant
    (whether a group still holds an offset); ``topic_names``: (cluster, topic id) -> name.
    """
    at = pa.scalar(as_of, TS)
    recs = group_records.filter(pc.fill_null(
        pc.less_equal(group_records.column("record_timestamp").cast(TS), at), False))
    recs = recs.append_column("_subkey", pc.fill_null(recs.column("member_id"), ""))
    latest = last_per_key(recs, ["cluster_id", "group_id", "record_type", "_subkey"])
    by_group: dict[tuple[str, str], list[LatestRecord]] = defaultdict(list)
    for r in latest.select(["cluster_id", "group_id", "record_type", "_subkey", "is_tombstone",
                            "value_json", "offsets_partition", "offset", "record_timestamp",
                            "value_version"]).to_pylist():
        value = json.loads(r["value_json"]) if r["value_json"] else None
        by_group[(r["cluster_id"], r["group_id"])].append(LatestRecord(
            r["record_type"], r["_subkey"], bool(r["is_tombstone"]), value,
            r["offsets_partition"], r["offset"], r["record_timestamp"], r["value_version"]))

    # The group's last offset commit written by then (pending transactional values count,
    # aborted ones do not: the coordinator never replays an aborted value as an offset).
    written = commits.append_column("_time", record_time(commits))
    aborted = _ended_by_abort(written, markers, as_of)
    keep = pc.and_(pc.fill_null(pc.less_equal(written.column("_time"), at), False),
                   pc.invert(pc.fill_null(written.column("is_tombstone"), False)))
    written = written.filter(pc.and_(keep, pc.invert(aborted)))
    activity = last_per_key(written.select(["cluster_id", "group_id", "offsets_partition", "offset",
                                            "_time"]), ["cluster_id", "group_id"])
    for r in activity.to_pylist():
        by_group[(r["cluster_id"], r["group_id"])].append(LatestRecord(
            OFFSET_ACTIVITY, "", False, None, r["offsets_partition"], r["offset"], r["_time"]))

    holding = set(zip(offsets.column("cluster_id").to_pylist(), offsets.column("group_id").to_pylist(),
                      strict=True))
    names = topic_names or {}
    rows = []
    for (cluster_id, group_id), records in sorted(by_group.items()):
        mine = {tid: n for (c, tid), n in names.items() if c == cluster_id}
        group, _members = derive_group(group_id, records, mine,
                                       has_offsets=(cluster_id, group_id) in holding)
        if group is not None:
            rows.append({**group, "cluster_id": cluster_id})
    return pa.Table.from_pylist(rows, schema=GROUP_SCHEMA) if rows else GROUP_SCHEMA.empty_table()


def _ended_by_abort(commits: pa.Table, markers: pa.Table, as_of: datetime) -> pa.Array:
    """For each commit: whether an ABORT marker written by ``as_of`` ends its transaction."""
    return pa.array([end is not None and end[0] == "ABORT" and end[1] <= as_of
                     for end in _transaction_ends(commits, markers)], pa.bool_())


def state_as_of(commits: pa.Table, markers: pa.Table, group_records: pa.Table, as_of: datetime,
                topic_names: dict[tuple[str, str], str] | None = None) -> StateAsOf:
    """Offsets and groups at ``as_of`` from history rows (rows written later are ignored)."""
    offsets = offsets_as_of(commits, markers, as_of)
    groups = groups_as_of(group_records, commits, markers, offsets, as_of, topic_names)
    return StateAsOf(as_of, offsets, groups)


def _plain(value: Any) -> Any:
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def state_lines(state: StateAsOf, what: str = "all") -> Iterator[str]:
    """The answer as JSON lines: groups first (``"kind": "group"``), then offsets."""
    parts = [("group", state.groups), ("offset", state.offsets)]
    for kind, table in parts:
        if what in ("all", f"{kind}s"):
            for row in table.to_pylist():
                yield json.dumps({"kind": kind, "as_of": _plain(state.as_of),
                                  **{k: _plain(v) for k, v in row.items()}}, ensure_ascii=False)


_TEXT_COLUMNS = {
    "group": ["cluster_id", "group_id", "group_type", "group_state", "generation",
              "assignment_epoch", "num_members", "protocol"],
    "offset": ["cluster_id", "group_id", "topic", "partition", "committed_offset", "leader_epoch",
               "metadata", "effective_at", "is_transactional"],
}


def state_tables(state: StateAsOf, what: str = "all") -> Iterator[str]:
    """The answer as aligned text tables (groups, then offsets)."""
    yield f"state as of {_plain(state.as_of)}"
    for kind, table in (("group", state.groups), ("offset", state.offsets)):
        if what not in ("all", f"{kind}s"):
            continue
        cols = _TEXT_COLUMNS[kind]
        rows = [["" if r[c] is None else str(_plain(r[c])) for c in cols]
                for r in table.select(cols).to_pylist()]
        widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(cols)]
        yield ""
        yield f"{kind}s: {len(rows)}"
        yield "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
        for r in rows:
            yield "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()


__all__ = ["GROUP_SCHEMA", "OFFSET_COLUMNS", "StateAsOf", "effective_times", "groups_as_of",
           "offsets_as_of", "record_time", "state_as_of", "state_lines", "state_tables"]
