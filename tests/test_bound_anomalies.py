"""Commits past a snapshot's log end or below its log start (pipelines.state.anomalies
.bound_anomalies), vectorized, against the per-row rule it replaced
(tests/support/bounds_oracle.py) on random batches: several snapshots per partition, equal
capture times, commits before, between and after them, unknown bounds, null times and
offsets, partitions with no snapshot; both for ingest (each commit's own time) and for a
snapshot (the current offsets, ``at`` None)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from pipelines.state.anomalies import bound_anomalies
from tests.support.bounds_oracle import bound_rows

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
NOW = datetime(2026, 11, 27, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")


def _case(seed: int) -> tuple[list[dict], list[dict]]:
    rnd = random.Random(seed)
    partitions = [(c, t, p) for c in ("c1", "c2") for t in ("orders", "pay") for p in range(3)]
    times = [T0 + timedelta(minutes=rnd.randrange(6)) for _ in range(4)]  # few: many ties
    snapshots = []
    for n in range(rnd.randrange(0, 12)):
        c, t, p = rnd.choice(partitions)
        start = rnd.choice([None, rnd.randrange(0, 50)])
        snapshots.append({"cluster_id": c, "snapshot_id": f"s{n}", "captured_at": rnd.choice(times),
                          "topic": t, "partition": p, "log_start_offset": start,
                          "log_end_offset": rnd.choice([None, rnd.randrange(40, 120)]),
                          "last_stable_offset": None})
    rows = []
    for i in range(rnd.randrange(0, 60)):
        c, t, p = rnd.choice(partitions)
        at = rnd.choice([None, T0 + timedelta(minutes=rnd.randrange(-1, 8))])
        rows.append({"cluster_id": c, "group_id": f"g{i % 3}", "topic": t, "partition": p,
                     "committed_offset": rnd.choice([None, *range(0, 140, 7)]), "leader_epoch": None,
                     "offsets_partition": i % 2, "offset": i, "commit_timestamp": at, "record_timestamp": at,
                     "attribution": None, "member_id": None})
    return rows, snapshots


def _table(rows: list[dict], schema: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({k: pa.array([r[k] for r in rows], t) for k, t in schema.items()})


ROWS = {"cluster_id": pa.string(), "group_id": pa.string(), "topic": pa.string(), "partition": pa.int32(),
        "committed_offset": pa.int64(), "leader_epoch": pa.int32(), "offsets_partition": pa.int32(),
        "offset": pa.int64(), "commit_timestamp": TS, "record_timestamp": TS}
BOUNDS = {"cluster_id": pa.string(), "snapshot_id": pa.string(), "captured_at": TS, "topic": pa.string(),
          "partition": pa.int32(), "log_end_offset": pa.int64(), "last_stable_offset": pa.int64(),
          "log_start_offset": pa.int64()}


def _who(flagged: pa.Table, numbers) -> tuple[list[str], list[str]]:
    """A stand-in attribution that names each flagged row by its position (a row's position
    is its number in the case's rows, which the lookup is handed beside the rows)."""
    offsets = flagged.column("offset").to_pylist()
    assert list(numbers) == offsets
    return [f"a{o}" for o in offsets], [f"m{o}" for o in offsets]


@pytest.mark.parametrize("snapshot", [False, True], ids=["ingest", "snapshot"])
def test_bound_anomalies_equal_the_per_row_rule(snapshot: bool) -> None:
    found_any = set()
    for seed in range(300):
        rows, snapshots = _case(seed)
        at = None if snapshot else [r["commit_timestamp"] for r in rows]
        expected = bound_rows(rows, snapshots, at)
        table = _table(rows, ROWS)
        got = bound_anomalies(table, _table(snapshots, BOUNDS),
                              None if snapshot else table.column("commit_timestamp"), NOW,
                              "snapshot" if snapshot else "ingest", _who)
        assert [(a["kind"], a["offset"], a["snapshot_id"]) for a in got] == expected, seed
        by_id = {s["snapshot_id"]: s for s in snapshots}
        for a in got:
            s, r = by_id[a["snapshot_id"]], rows[a["offset"]]
            assert (a["log_end_offset"], a["log_start_offset"], a["snapshot_captured_at"]) == \
                (s["log_end_offset"], s["log_start_offset"], s["captured_at"])
            assert (a["group_id"], a["committed_offset"], a["commit_timestamp"]) == \
                (r["group_id"], r["committed_offset"], r["commit_timestamp"])
            assert (a["attribution"], a["member_id"], a["detected_by"]) == \
                (f"a{r['offset']}", f"m{r['offset']}", "snapshot" if snapshot else "ingest")
        found_any |= {k for k, *_ in expected}
    assert found_any == {"past_log_end", "below_log_start"}  # the cases exercise both kinds
