"""The analyst queries (``pipelines/queries/*.sql``) in DuckDB and Spark SQL over the demo lake.

Answers are checked against what the demo generator bookkept independently of the lake: its
manifest (final committed offsets, groups and members, aborted commits, deleted groups) and
its recorded broker answers (``data/live``) when present, never against a query's own
output. Where a check needs a moment in time (when a known commit was written) it takes it
from the history tables, then asserts the answer against the manifest. Every query also runs
once in each engine over the same lake, and both engines must return the same rows.
"""

from __future__ import annotations

import bisect
import itertools
import json
import shutil
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.demo import DemoManifest, generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaRsEngine
from pipelines.queries import (
    Param,
    Query,
    bound_sql,
    load,
    names,
    parameters,
    run_bound_duckdb,
    run_bound_spark,
    run_duckdb,
    run_spark,
)
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.cluster.rows import ClusterSnapshot, LogEndOffsetRow
from pipelines.reconcile.snapshot import store_snapshot

CLUSTER = "demo"
MS = timedelta(milliseconds=1)
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Demo:
    manifest: DemoManifest
    lake: Path
    ends: dict[tuple[str, int], int | None]  # log end offsets of the latest snapshot
    old_ends: dict[tuple[str, int], int]  # ... of an older, LEO-only snapshot
    old_snapshot: str
    latest_snapshot: str

    def ts(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)

    @property
    def end(self) -> datetime:
        return self.ts(self.manifest.end_ms)

    @property
    def start(self) -> datetime:
        return self.ts(self.manifest.start_ms)


def _latest_snapshot(data: Path, manifest: DemoManifest, engine: DeltaRsEngine
                     ) -> tuple[str, dict[tuple[str, int], int | None]]:
    """Store the cluster's answers after the history: the generator's recorded capture when it
    wrote one, else hand-made end offsets. Returns its id and the end offsets it holds."""
    live = data / "live"
    if (live / "log_end_offsets.json").exists():
        snapshot = snapshot_from_recorded(live)
        recorded = json.loads((live / "log_end_offsets.json").read_text())
        ends = {(t, int(p)): marks.get("log_end_offset")
                for t, parts in recorded.items() for p, marks in parts.items()}
    else:
        ends = {(t, p): c.offset + 10 * p + 3 for (_, t, p), c in manifest.committed.items()}
        snapshot = ClusterSnapshot(
            snapshot_id="hand-made-latest", captured_at=datetime.fromtimestamp(
                manifest.end_ms / 1000 + 5, tz=timezone.utc), source="tests/test_queries.py",
            log_end_offsets=[LogEndOffsetRow(t, p, leo, leo) for (t, p), leo in sorted(ends.items())])
    store_snapshot(engine, snapshot, CLUSTER)
    return snapshot.snapshot_id, ends


def _old_snapshot(manifest: DemoManifest, engine: DeltaRsEngine) -> tuple[str, dict]:
    """An older snapshot holding only end offsets (no snapshot_runs row), some of them below
    the final committed offsets: the lag query must prefer the newer one by captured_at."""
    snapshot_id = "2026-01-01T00:01:00.000000Z-old"
    captured = datetime.fromtimestamp(manifest.start_ms / 1000 + 60, tz=timezone.utc)
    ends = {(t, p): max(c.offset - 5, 0) for (_, t, p), c in manifest.committed.items()}
    rows = [{"cluster_id": CLUSTER, "snapshot_id": snapshot_id, "captured_at": captured,
             "topic": t, "partition": p, "log_end_offset": leo, "last_stable_offset": leo}
            for (t, p), leo in sorted(ends.items())]
    spec = contract("snapshot_log_end_offsets")
    engine.append(spec, pa.Table.from_pylist(rows, schema=spec.arrow_schema), "tests-old", 0)
    return snapshot_id, ends


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    root = tmp_path_factory.mktemp("queries")
    manifest = generate_cluster(root / "data", scale=1)
    ingest_segments_local(root / "data", root / "lake", cluster_id=CLUSTER)
    engine = DeltaRsEngine(root / "lake")
    old_id, old_ends = _old_snapshot(manifest, engine)
    latest_id, ends = _latest_snapshot(root / "data", manifest, engine)
    yield Demo(manifest, root / "lake", ends, old_ends, old_id, latest_id)
    shutil.rmtree(root, ignore_errors=True)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with timestamps as aware UTC datetimes, so DuckDB and Spark rows compare equal."""
    out = []
    for row in table.to_pylist():
        out.append({k: v.astimezone(timezone.utc) if isinstance(v, datetime) else v
                    for k, v in row.items()})
    return out


def _duck(demo: Demo, name: str, **params: Any) -> list[dict[str, Any]]:
    return _rows(run_duckdb(demo.lake, name, cluster_id=CLUSTER, **params))


def _effective_commits(lake: Path) -> list[dict[str, Any]]:
    """An independent Python replay of when each commit took effect: its record time, or for
    a transactional one the COMMIT marker that ends it (None when aborted or still open)."""
    from deltalake import DeltaTable

    commits = DeltaTable(str(lake / "offset_commits")).to_pyarrow_table().to_pylist()
    raw = DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table(
        columns=["offsets_partition", "offset", "producer_id", "is_control", "control_type",
                 "timestamp"]).to_pylist()
    markers: dict[tuple[int, int], list[tuple[int, str, datetime]]] = defaultdict(list)
    for r in raw:
        if r["is_control"]:
            markers[(r["offsets_partition"], r["producer_id"])].append(
                (r["offset"], r["control_type"], r["timestamp"]))
    for found in markers.values():
        found.sort()
    for c in commits:
        c["effective_at"] = c["record_timestamp"]
        if c["is_transactional"]:
            found = markers[(c["offsets_partition"], c["producer_id"])]
            i = bisect.bisect_right([m[0] for m in found], c["offset"])
            c["effective_at"] = found[i][2] if i < len(found) and found[i][1] == "COMMIT" else None
    return commits


# ------------------------------------------------------------------------------ the runner


def test_every_query_declares_its_parameters_and_tables() -> None:
    assert set(names()) >= {"offsets_as_of", "lag_by_group", "lag_by_partition",
                            "stalled_groups", "rebalance_timeline", "revoked_without_commit"}
    for name in names():
        q = load(name)
        assert q.title and q.tables, name
        assert all(t in ("offsets_raw", "offset_commits", "group_metadata", "group_generations",
                         "committed_offsets", "consumer_groups", "snapshot_log_end_offsets",
                         "snapshot_lag")
                   for t in q.tables), (name, q.tables)


def test_docs_show_every_query_as_it_is() -> None:
    docs = (REPO / "docs" / "queries.md").read_text()
    for name in names():
        assert f"\n## {name}\n" in docs, f"docs/queries.md has no section for {name}"
        assert load(name).sql.rstrip() in docs, f"docs/queries.md shows an old {name}.sql"


def test_parameters_are_checked_and_only_replaced_in_code() -> None:
    with pytest.raises(TypeError, match="needs parameter"):
        parameters(load("offsets_as_of"))
    with pytest.raises(TypeError, match="no parameter"):
        parameters(load("offsets_as_of"), as_of=0, grop_id="x")
    with pytest.raises(TypeError):
        parameters(load("offsets_as_of"), as_of=0, partition="3")
    with pytest.raises(TypeError):
        parameters(load("stalled_groups"), include_deleted="yes")
    with pytest.raises(TypeError, match="needs parameter"):
        run_duckdb(REPO / "no-such-lake", "offsets_as_of")
    sql = "SELECT ':x' AS s, a::INT -- :x\n, :x /* :x */ FROM t WHERE b = :x"
    assert bound_sql(sql, "duckdb") == \
        "SELECT ':x' AS s, a::INT -- :x\n, $x /* :x */ FROM t WHERE b = $x"
    assert bound_sql(sql, "spark") == sql


# Values the old hand-rendered literals had to escape, bound by each engine instead. The
# query declares the types, as a pipelines/queries/*.sql header does.
_BIND_TYPES = {"s": "string", "t": "timestamp", "n": "string", "nt": "timestamp", "d": "double",
               "i": "int", "b": "boolean"}
BIND = Query("bind", REPO / "bind.sql", "bound values",
             {k: Param(k, v, False, None, "") for k, v in _BIND_TYPES.items()}, (),
             "SELECT " + ", ".join(f":{k} AS {k}" for k in _BIND_TYPES))
TRICKY = "it's a \\'group\\' -- with ; quotes \\n :s $s \u00e9\u00df\u6f22 \U0001f600 ''"
INSTANT = datetime(2026, 1, 1, 0, 0, 12, 31000, tzinfo=timezone.utc)
SAME_INSTANT = [INSTANT, INSTANT.astimezone(timezone(timedelta(hours=-5))), INSTANT.replace(tzinfo=None),
                "2026-01-01T00:00:12.031Z", "2026-01-01 02:00:12.031+02:00", 1767225612031]
BOUND_ROW = {"s": TRICKY, "t": INSTANT, "n": None, "nt": None, "d": 2.5, "i": 2**40, "b": True}


def test_values_are_bound_by_duckdb_whatever_its_time_zone() -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'America/New_York'")  # results must not depend on it
    for when in SAME_INSTANT:
        got = _rows(run_bound_duckdb(con, BIND, s=TRICKY, t=when, d=2.5, i=2**40, b=True))
        assert got == [BOUND_ROW], when


@pytest.mark.spark
def test_values_are_bound_by_spark_whatever_its_time_zone(spark) -> None:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # must not matter
    try:
        frames = [run_bound_spark(spark, BIND, s=TRICKY, t=when, d=2.5, i=2**40, b=True)
                  for when in SAME_INSTANT]
        got = [_rows(df.toArrow()) for df in frames]
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert got == [[BOUND_ROW]] * len(SAME_INSTANT)


# ------------------------------------------------------------------------- both engines

# One Spark run per query (Spark is the slow side); each case has rows to compare.
ENGINE_CASES: dict[str, dict[str, Any]] = {
    "offsets_as_of": {"as_of": "2026-01-01T00:02:00Z"},
    "lag_by_partition": {},
    "lag_by_group": {},
    "stalled_groups": {"idle_hours": 0.01, "include_deleted": True},
    "rebalance_timeline": {},
    "revoked_without_commit": {},
}


def test_every_query_has_an_engine_case() -> None:
    assert set(ENGINE_CASES) == set(names())


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(ENGINE_CASES))
def test_duckdb_and_spark_give_the_same_rows(spark, demo: Demo, name: str) -> None:
    params = {"cluster_id": CLUSTER, **ENGINE_CASES[name]}
    duck = _rows(run_duckdb(demo.lake, name, **params))
    sparks = _rows(run_spark(spark, demo.lake, name, **params).toArrow())
    assert duck, f"{name}: no rows to compare"
    assert sparks == duck


# ------------------------------------------------------------------------------- as of


def _as_of(demo: Demo, when: datetime, **params: Any) -> dict[tuple[str, str, int], dict]:
    rows = _duck(demo, "offsets_as_of", as_of=when, **params)
    return {(r["group_id"], r["topic"], r["partition"]): r for r in rows}


def test_as_of_the_end_is_the_coordinators_final_state(demo: Demo) -> None:
    got = _as_of(demo, demo.end)
    want = {k: (c.offset, c.leader_epoch, c.metadata) for k, c in demo.manifest.committed.items()}
    assert {k: (r["committed_offset"], r["leader_epoch"], r["metadata"])
            for k, r in got.items()} == want
    assert _as_of(demo, demo.start - MS) == {}
    one = _as_of(demo, demo.end, topic="orders", partition=0)
    assert {k: r["committed_offset"] for k, r in one.items()} == {
        k: c.offset for k, c in demo.manifest.committed.items() if k[1:] == ("orders", 0)}


def _first_commit_of(demo: Demo, key: tuple[str, str, int], offset: int, metadata: str) -> dict:
    rows = [c for c in _effective_commits(demo.lake)
            if (c["group_id"], c["topic"], c["partition"]) == key
            and c["committed_offset"] == offset and c["metadata"] == metadata]
    return min(rows, key=lambda c: c["offset"])


def test_as_of_just_before_and_at_a_known_commit(demo: Demo) -> None:
    # orders-processor ends in generation 5; its members commit '<client>@gen5' metadata.
    gen = demo.manifest.groups["orders-processor"]["generation"]
    key, final = next((k, c) for k, c in sorted(demo.manifest.committed.items())
                      if k[0] == "orders-processor" and c.metadata.endswith(f"@gen{gen}"))
    first = _first_commit_of(demo, key, final.offset, final.metadata)
    at = _as_of(demo, first["record_timestamp"], topic=key[1], partition=key[2])
    assert (at[key]["committed_offset"], at[key]["metadata"]) == (final.offset, final.metadata)
    before = _as_of(demo, first["record_timestamp"] - MS, topic=key[1], partition=key[2])
    assert (before[key]["committed_offset"], before[key]["metadata"]) != (final.offset,
                                                                           final.metadata)


def test_as_of_transactions_count_from_their_commit_marker_and_aborts_never(demo: Demo) -> None:
    m = demo.manifest
    # txn-pipeline's last transaction (T-d) wins orders-4 after a plain commit just before it.
    key = ("txn-pipeline", "orders", 4)
    assert m.committed[key].metadata == "txn-d"
    txn = _first_commit_of(demo, key, m.committed[key].offset, "txn-d")
    pending = _as_of(demo, txn["record_timestamp"], group_id="txn-pipeline", topic="orders")
    assert pending[key]["metadata"] == "sync-before-txn-d"
    done = _as_of(demo, txn["effective_at"], group_id="txn-pipeline", topic="orders")
    assert done[key]["metadata"] == "txn-d" and done[key]["is_transactional"]
    # No aborted commit is ever served: not when its ABORT marker was written, not at the end.
    # (The segment source drops aborted data like a read_committed consumer; a source that
    # kept it would still be safe, as the query skips commits their marker aborted.)
    assert m.aborted
    times = {when for a in m.aborted for when in _abort_markers(demo, a.producer_id)}
    for when in sorted(times | {demo.end}):
        served = _as_of(demo, when)
        for a in m.aborted:
            k = (a.group, a.topic, a.partition)
            assert k not in served or served[k]["metadata"] != a.metadata, (a, when)
            if k not in m.committed:  # txn-standalone's aborted partitions never had an offset
                assert k not in served, (a, when)


def _abort_markers(demo: Demo, producer_id: int) -> list[datetime]:
    from deltalake import DeltaTable

    raw = DeltaTable(str(demo.lake / "offsets_raw")).to_pyarrow_table(
        columns=["producer_id", "control_type", "timestamp"]).to_pylist()
    found = [r["timestamp"] for r in raw
             if r["producer_id"] == producer_id and r["control_type"] == "ABORT"]
    assert found, f"no ABORT marker of producer {producer_id}"
    return found


def test_as_of_a_tombstone_removes_the_groups_offset(demo: Demo) -> None:
    # reporting-offdel still exists but OffsetDelete removed payments-0..3 and orders-0.
    group = "reporting-offdel"
    assert group in demo.manifest.groups
    deleted = {("payments", p) for p in range(4)} | {("orders", 0)}
    assert not any((group, *tp) in demo.manifest.committed for tp in deleted)
    tomb = min((c for c in _effective_commits(demo.lake) if c["group_id"] == group
                and c["is_tombstone"]), key=lambda c: c["offset"])
    before = _as_of(demo, tomb["record_timestamp"] - MS, group_id=group)
    after = _as_of(demo, tomb["record_timestamp"], group_id=group)
    assert all((group, *tp) in before for tp in deleted)
    assert not any((group, *tp) in after for tp in deleted)
    assert set(after) == {k for k in demo.manifest.committed if k[0] == group}


# --------------------------------------------------------------------------------- lag


def test_lag_per_partition_and_group_against_the_latest_snapshot(demo: Demo) -> None:
    m = demo.manifest
    want = {}
    for (g, t, p), c in m.committed.items():
        leo = demo.ends.get((t, p))
        want[(g, t, p)] = None if leo is None else max(leo - c.offset, 0)
    rows = _duck(demo, "lag_by_partition")
    assert {(r["group_id"], r["topic"], r["partition"]): r["lag"] for r in rows} == want
    assert {r["snapshot_id"] for r in rows} == {demo.latest_snapshot}
    assert any(v for v in want.values()), "the snapshot should show some lag"
    lags = [r["lag"] for r in rows]
    assert lags == sorted(lags, key=lambda v: (v is None, -(v or 0)))  # largest first

    groups = {r["group_id"]: r for r in _duck(demo, "lag_by_group")}
    assert set(groups) == {g for g, _, _ in m.committed}
    for g, r in groups.items():
        mine = [v for k, v in want.items() if k[0] == g]
        assert r["partitions"] == len(mine)
        assert r["total_lag"] == sum(v for v in mine if v is not None)
        assert r["max_lag"] == max((v for v in mine if v is not None), default=None)
        assert r["group_state"] == m.groups[g]["state"]


def test_lag_against_a_chosen_or_missing_snapshot(demo: Demo) -> None:
    rows = _duck(demo, "lag_by_partition", snapshot_id=demo.old_snapshot, group_id="spark-ingest")
    assert rows and all(r["snapshot_id"] == demo.old_snapshot for r in rows)
    for r in rows:  # the old end offsets are below the final commits: lag clamps at 0
        assert r["log_end_offset"] == demo.old_ends[(r["topic"], r["partition"])]
        assert r["lag"] == 0 and r["committed_after_snapshot"] is True
    none = _duck(demo, "lag_by_group", snapshot_id="no-such-snapshot")
    assert none and all(r["total_lag"] is None and r["partitions_with_lag"] == 0 for r in none)


# ----------------------------------------------------------------------- stalled groups


def test_stalled_groups_against_independent_last_commit_times(demo: Demo) -> None:
    m = demo.manifest
    last: dict[str, datetime] = {}
    for c in _effective_commits(demo.lake):
        if not c["is_tombstone"] and c["effective_at"] is not None:
            last[c["group_id"]] = max(last.get(c["group_id"], c["effective_at"]), c["effective_at"])
    cutoff = demo.start + (demo.end - demo.start) * 0.6
    want = {g for g, t in last.items() if t < cutoff}
    assert set(m.deleted_groups) <= want, "the deleted groups stopped early"

    rows = _duck(demo, "stalled_groups", cutoff=cutoff)
    assert {r["group_id"] for r in rows} == want - set(m.deleted_groups)
    everything = _duck(demo, "stalled_groups", cutoff=cutoff, include_deleted=True)
    assert {r["group_id"] for r in everything} == want
    for r in everything:
        assert r["last_commit_at"] == last[r["group_id"]]
        assert r["as_of"] == demo.end  # default: the lake's newest record
        assert r["idle_seconds"] == int((demo.end - r["last_commit_at"]).total_seconds())
        assert (r["group_state"] is None) == (r["group_id"] in m.deleted_groups)
        if r["group_state"] is not None:
            assert r["group_state"] == m.groups[r["group_id"]]["state"]
    hours = (demo.end - cutoff).total_seconds() / 3600
    assert {r["group_id"] for r in _duck(demo, "stalled_groups", idle_hours=hours)} == \
        want - set(m.deleted_groups)
    # Past the end, every group with a commit has stopped.
    after = _duck(demo, "stalled_groups", as_of=demo.end + MS, idle_hours=0.0,
                  include_deleted=True)
    assert {r["group_id"] for r in after} == set(m.groups) | set(m.deleted_groups)


def test_stalled_groups_ignore_aborted_commits(demo: Demo) -> None:
    # txn-standalone: one committed transaction, then one aborted: its last commit is the first.
    aborted = [a for a in demo.manifest.aborted if a.group == "txn-standalone"]
    assert aborted
    (aborted_at,) = _abort_markers(demo, aborted[0].producer_id)
    row = next(r for r in _duck(demo, "stalled_groups", idle_hours=0.0)
               if r["group_id"] == "txn-standalone")
    assert row["last_commit_at"] < aborted_at


# --------------------------------------------------------------------- rebalance timeline


def _timeline(demo: Demo, group: str, **params: Any) -> list[dict[str, Any]]:
    return _duck(demo, "rebalance_timeline", group_id=group, **params)


def test_rebalance_timeline_of_a_classic_group(demo: Demo) -> None:
    g = demo.manifest.groups["orders-processor"]
    members = {mm["member_id"]: mm for mm in g["members"]}
    rows = _timeline(demo, "orders-processor")
    # m1 alone, m2 joins, m3 joins, m1 leaves, m1 restarts with a new member id (stories).
    assert [r["generation"] for r in rows] == list(range(g["generation"] + 1))
    assert [r["members_after"] for r in rows] == [0, 1, 2, 3, 2, 3]
    assert [r["event"] for r in rows] == ["group created"] + ["rebalance"] * g["generation"]
    assert set(rows[-1]["members"]) == set(members)
    assert rows[-1]["leader"] == g["leader"]
    restarted = [mid for mid, mm in members.items()
                 if mm["client_id"] == "consumer-orders-processor-1"]
    assert rows[-1]["members_joined"] == restarted and rows[-1]["members_left"] is None
    (left,) = rows[-2]["members_left"]
    assert left.startswith("consumer-orders-processor-1-") and left not in members
    assert all(r["event_time"] <= s["event_time"] for r, s in itertools.pairwise(rows))
    first_two = _timeline(demo, "orders-processor", until=rows[1]["event_time"])
    assert first_two == rows[:2]


def test_rebalance_timeline_static_member_and_empty_group(demo: Demo) -> None:
    g = demo.manifest.groups["payments-static"]
    rows = _timeline(demo, "payments-static")
    last = rows[-1]
    assert last["event"] == "member replaced" and last["generation"] == g["generation"]
    assert last["members_joined"] == [mm["member_id"] for mm in g["members"]
                                      if mm["group_instance_id"] == "payments-static-1"]
    assert set(last["members"]) == {mm["member_id"] for mm in g["members"]}
    assert last["partitions_assigned"] == last["partitions_revoked"]  # same partitions, new id

    billing = demo.manifest.groups["billing-batch"]
    rows = _timeline(demo, "billing-batch")
    assert rows[-1]["generation"] == billing["generation"]
    assert rows[-1]["event"] == "group empty" and rows[-1]["members_after"] == 0


def test_rebalance_timeline_conversion_and_deletion(demo: Demo) -> None:
    # legacy-upgrade went from classic to a KIP-848 consumer group; doomed-classic was deleted.
    assert demo.manifest.groups["legacy-upgrade"]["group_type"] == "consumer"
    events = [r["event"] for r in _timeline(demo, "legacy-upgrade")]
    converted = events.index("group converted")
    assert "rebalance" in events[:converted] and "member joined" in events[converted:]
    assert "group deleted" not in events
    assert "doomed-classic" in demo.manifest.deleted_groups
    assert _timeline(demo, "doomed-classic")[-1]["event"] == "group deleted"


def test_rebalance_timeline_of_a_kip848_group(demo: Demo) -> None:
    g = demo.manifest.groups["clicks-848"]
    rows = _timeline(demo, "clicks-848")
    epochs = [r["generation"] for r in rows if r["event"] == "group epoch bump"]
    assert epochs == list(range(1, g["group_epoch"] + 1))
    assert sum(r["event"] == "member joined" for r in rows) == len(g["members"])
    assert rows[-1]["members_after"] == len(g["members"])
    assert set(rows[-1]["members"]) == {mm["member_id"] for mm in g["members"]}
    assert all(r["members_left"] is None for r in rows)  # nobody left; revocations are not leaving
    assert any(r["partitions_revoked"] for r in rows)


# ------------------------------------------------------------- revoked without a commit


def test_revoked_without_commit_finds_the_static_groups_first_generation(demo: Demo) -> None:
    g = demo.manifest.groups["payments-static"]
    by_instance = {mm["group_instance_id"]: mm for mm in g["members"]}
    rows = _duck(demo, "revoked_without_commit", group_id="payments-static")
    # Generation 1 (the first static member alone) lasted < 1 s and committed nothing.
    gen1 = [r for r in rows if r["generation"] == 1]
    assert {(r["topic"], r["partition"]) for r in gen1} == {
        ("payments", p) for p in range(demo.manifest.topics["payments"]["partitions"])}
    assert {r["member_id"] for r in gen1} == {by_instance["payments-static-0"]["member_id"]}
    assert all(r["last_committed_offset"] is None and r["last_commit_at"] is None for r in gen1)
    # Sticky assignment: what went to the second member moved, the rest stayed.
    moved = {r["partition"] for r in gen1 if r["moved"]}
    assert moved == set(by_instance["payments-static-1"]["assignment"]["payments"])
    only_moved = _duck(demo, "revoked_without_commit", group_id="payments-static",
                       moved_only=True)
    assert {r["partition"] for r in only_moved if r["generation"] == 1} == moved


def test_revoked_without_commit_ignores_ownerships_that_committed(demo: Demo) -> None:
    # These groups commit every owned partition in every generation (stories).
    rows = _duck(demo, "revoked_without_commit")
    flagged = {r["group_id"] for r in rows}
    assert flagged.isdisjoint({"orders-processor", "events-etl", "kip70-analytics",
                               "billing-batch", "clicks-848"})
    assert all(r["valid_to"] is not None and r["topic"] for r in rows)
    window = _duck(demo, "revoked_without_commit", since=demo.end)
    assert window == []
