"""The "commit after the group was deleted" check, vectorized, against the Python walk it
replaced (tests/support/deletion_oracle.py), on random logs: groups deleted, recreated,
converted and deleted again, spread over two clusters and several offsets partitions, with
pending deletions and tombstoned offsets carried in from the cursor. The anomalies (in
order, every field) and the cursor rows must be the same."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pytest

from pipelines.model import LatestRecord
from pipelines.state.anomalies import LiveAttribution, _after_deletion
from tests.support.deletion_oracle import after_deletion

NOW = datetime(2026, 11, 28, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")


def _random_batch(seed: int) -> tuple[pa.Table, list[tuple[str, str, Any]], list[dict[str, Any]], pa.Table]:
    """(commits, group-level records, cursor, attribution) of one random batch."""
    rng = random.Random(seed)
    groups = [(c, g) for c in ("c1", "c2") for g in ("a", "b", "d", "e\x1fx", "e")[: rng.randint(1, 5)]]
    groups += [("c1", f"g{i}") for i in range(rng.choice((0, 40)))]
    home = {k: rng.randrange(3) for k in groups}  # a group's offsets partition
    nexts = dict.fromkeys([(c, p) for c in ("c1", "c2") for p in range(4)], 0)
    commits: list[dict[str, Any]] = []
    events: list[tuple[str, str, Any]] = []
    deletion_heavy = rng.random()  # how often a record is a tombstone
    for _ in range(rng.randint(0, 400)):
        c, g = rng.choice(groups)
        p = home[(c, g)] if rng.random() < 0.95 else 3  # a few after a partition-count change
        o = nexts[(c, p)] = nexts[(c, p)] + rng.randint(1, 3)
        if rng.random() < 0.7:
            tombstone = rng.random() < deletion_heavy * 0.6
            commits.append({
                "cluster_id": c, "group_id": g, "topic": rng.choice("tu"), "partition": rng.randrange(2),
                "committed_offset": None if tombstone else rng.randrange(100),
                "leader_epoch": None, "commit_timestamp": None, "is_tombstone": tombstone,
                "offsets_partition": p, "offset": o, "record_timestamp": None})
        else:
            tombstone = rng.random() < deletion_heavy
            events.append((c, g, LatestRecord(rng.choice((2, 3, 11, 17)), "", tombstone,
                                              None if tombstone else {}, p, o)))
    cursor = []
    for c, g in groups:
        if rng.random() < 0.5:
            cursor.append({"cluster_id": c, "group_id": g, "topic": "", "partition": -1,
                           "last_offset": None, "last_leader_epoch": None, "last_position": None,
                           "group_deleted_at": rng.choice((None, None, rng.randrange(5))),
                           "offsets_deleted": rng.choice((True, False, None))})
        if rng.random() < 0.3:  # an offset key's row: not the group's
            cursor.append({"cluster_id": c, "group_id": g, "topic": "t", "partition": 0,
                           "last_offset": 3, "last_leader_epoch": None, "last_position": 1,
                           "group_deleted_at": None, "offsets_deleted": None})
    rng.shuffle(commits)  # rows need not come in log order
    schema = pa.schema([("cluster_id", pa.string()), ("group_id", pa.string()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("committed_offset", pa.int64()),
                        ("leader_epoch", pa.int32()), ("commit_timestamp", TS), ("is_tombstone", pa.bool_()),
                        ("offsets_partition", pa.int32()), ("offset", pa.int64()), ("record_timestamp", TS)])
    table = pa.Table.from_pylist(commits, schema=schema)
    if seed % 2:  # as a batch is read back: strings as dictionaries
        for name in ("cluster_id", "group_id"):
            table = table.set_column(table.schema.get_field_index(name), name,
                                     table.column(name).dictionary_encode())
    live = [i for i, r in enumerate(commits) if not r["is_tombstone"]]
    attribution = pa.table({"attribution": [f"a{i}" for i in live], "member_id": [f"m{i}" for i in live]})
    return table, events, cursor, attribution


@pytest.mark.parametrize("seed", range(300))
def test_vectorized_deletion_check_equals_the_walk(seed: int) -> None:
    commits, events, cursor, attribution = _random_batch(seed)
    expected_cursor: list[dict[str, Any]] = []
    expected = after_deletion(commits, events, cursor, LiveAttribution(attribution, commits), NOW,
                              expected_cursor)
    got_cursor: list[dict[str, Any]] = []
    got = _after_deletion(commits, events, cursor, LiveAttribution(attribution, commits), NOW, got_cursor)
    assert got == expected
    assert got_cursor == expected_cursor


def test_the_random_logs_hold_every_case() -> None:
    """The generator is not idle: across the seeds, recreated groups are flagged, pending
    deletions are carried out to the cursor, and both come in from the cursor too."""
    flagged = pending_out = 0
    for seed in range(300):
        commits, events, cursor, attribution = _random_batch(seed)
        out: list[dict[str, Any]] = []
        flagged += len(after_deletion(commits, events, cursor, LiveAttribution(attribution, commits), NOW, out))
        pending_out += sum(r["group_deleted_at"] is not None for r in out)
    assert flagged > 300 and pending_out > 100, (flagged, pending_out)
