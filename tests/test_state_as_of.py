"""State at any instant (``offsetlake state --as-of``, :mod:`pipelines.queries.state_as_of`).

Expected values never come from the code under test:

* golden recordings (scenario A and D, when ../shared is there): at the capture time the
  answer equals the broker's own OffsetFetch, every row; at earlier times it equals a replay
  of Kafka's own ``kafka-dump-log`` output by :func:`coordinator_replay` below, a plain
  transcription of the coordinator's replay rules (spec 2.3/2.4: pending transactional offsets
  per producer, materialized by COMMIT only over an older committed record, dropped by ABORT
  or by a tombstone) which shares nothing with the fold under test (effective times and
  "last by log position");
* a generated history (pipelines/demo/, always): the generator's manifest at the end, the
  same independent replay over the lake's raw rows at earlier times, transactions visible
  from their COMMIT marker's time and aborted ones never.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.cli import main
from pipelines.demo import DemoManifest, generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.queries import bound_sql, run_duckdb
from pipelines.queries.state_as_of import (
    state_as_of_duckdb,
    state_as_of_frames,
    state_as_of_spark,
)
from tests.conftest import corpus_path
from tests.kafka_dump import parse_dump

CLUSTER = "demo"
MS = timedelta(milliseconds=1)
Key = tuple[str, str, int]


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


@dataclass
class Rec:
    """One record of a ``__consumer_offsets`` partition, in log order."""

    offset: int
    timestamp_ms: int
    producer_id: int
    transactional: bool
    marker: str | None = None  # COMMIT / ABORT
    key: Key | None = None  # offset commit key (types 0 and 1)
    value: tuple[int, int, str] | None = None  # (offset, leader epoch, metadata); None = tombstone


def coordinator_replay(partitions: dict[int, list[Rec]], at_ms: int) -> dict[Key, tuple[int, int, str]]:
    """The coordinator's offset replay (OffsetMetadataManager.replay /
    replayEndTransactionMarker) over every record written at or before ``at_ms``."""
    out: dict[Key, tuple[int, int, str]] = {}
    for records in partitions.values():
        committed: dict[Key, tuple[int, tuple[int, int, str]]] = {}  # key -> (record offset, value)
        pending: dict[int, dict[Key, tuple[int, tuple[int, int, str]]]] = defaultdict(dict)
        for r in sorted(records, key=lambda r: r.offset):
            if r.timestamp_ms > at_ms:
                continue
            if r.marker is not None:
                offsets = pending.pop(r.producer_id, {})
                if r.marker == "COMMIT":
                    for key, (pos, value) in offsets.items():
                        if key not in committed or pos > committed[key][0]:
                            committed[key] = (pos, value)
                continue
            if r.key is None:
                continue
            if r.value is None:  # tombstone: committed and every pending value of the key
                committed.pop(r.key, None)
                for offsets in pending.values():
                    offsets.pop(r.key, None)
            elif r.transactional and r.producer_id >= 0:
                pending[r.producer_id][r.key] = (r.offset, r.value)
            else:
                committed[r.key] = (r.offset, r.value)
        out.update({k: v for k, (_, v) in committed.items()})
    return out


def _answer(state) -> dict[Key, tuple[int, int, str]]:
    return {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["leader_epoch"],
                                                          r["metadata"])
            for r in state.offsets.to_pylist()}


# --------------------------------------------------------------------------- golden recordings


def _dump_records(scenario: Path) -> dict[int, list[Rec]]:
    parts: dict[int, list[Rec]] = defaultdict(list)
    for path in sorted((scenario / "dump").glob("__consumer_offsets-*.txt")):
        for batch in parse_dump(path):
            pid = int(batch.fields["producerId"])
            txn = batch.fields["isTransactional"] == "true"
            for rec in batch.records:
                r = Rec(rec.offset, rec.timestamp, pid, txn, marker=rec.control)
                if rec.key is not None and rec.key["type"] in ("0", "1"):
                    d = rec.key["data"]
                    r.key = (d["group"], d["topic"], int(d["partition"]))
                    if rec.payload is not None:
                        v = rec.payload["data"]
                        r.value = (int(v["offset"]), int(v.get("leaderEpoch", -1)), v["metadata"])
                parts[rec.partition].append(r)
    return parts


def _live_offsets(scenario: Path) -> dict[Key, tuple[int, int, str]]:
    fetched = json.loads((scenario / "live" / "offset_fetch.json").read_text())
    out = {}
    for g in fetched["groups"]:
        assert g["error_code"] == 0, g["group_id"]
        for t in g["topics"]:
            for p in t["partitions"]:
                assert p["error_code"] == 0 and p["committed_offset"] >= 0, (g["group_id"], p)
                out[(g["group_id"], t["name"], p["partition_index"])] = (
                    p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
    return out


@pytest.fixture(scope="module", params=["scenario-a", "scenario-d"])
def golden(request, tmp_path_factory) -> tuple[Path, Path]:
    scenario = corpus_path("golden", request.param)
    lake = tmp_path_factory.mktemp(f"asof-{request.param}") / "lake"
    ingest_segments_local(scenario / "segments", lake)
    yield scenario, lake
    shutil.rmtree(lake, ignore_errors=True)


def test_golden_as_of_capture_time_equals_live_offset_fetch(golden) -> None:
    scenario, lake = golden
    captured_ms = json.loads((scenario / "capture_log.json").read_text())["started_ms"]
    live = _live_offsets(scenario)
    assert live
    assert _answer(state_as_of_duckdb(lake, _ts(captured_ms))) == live


def test_golden_groups_at_capture_time_equal_list_groups(golden) -> None:
    """Type, state and protocol type of every group the broker listed (ListGroups v5; an
    offset-only "simple" group is classic with protocol type '' there), and no other group."""
    scenario, lake = golden
    captured_ms = json.loads((scenario / "capture_log.json").read_text())["started_ms"]
    listed = {g["group_id"]: g for g in json.loads(
        (scenario / "live" / "list_groups.json").read_text())["groups"]}
    got = {r["group_id"]: r for r in state_as_of_duckdb(lake, _ts(captured_ms)).groups.to_pylist()}
    assert set(got) == set(listed)
    for gid, g in listed.items():
        row = got[gid]
        kind = "classic" if row["group_type"] == "simple" else row["group_type"]
        assert (kind, row["group_state"], row["protocol_type"]) == (
            g["group_type"].lower(), g["group_state"], g["protocol_type"]), gid


def test_golden_at_capture_time_equals_the_current_state_tables(golden) -> None:
    """Every column, generation/epoch included, equals the incrementally maintained
    consumer_groups and committed_offsets (whose columns the golden facts tests compare
    with the broker's answers)."""
    scenario, lake = golden
    captured_ms = json.loads((scenario / "capture_log.json").read_text())["started_ms"]
    state = state_as_of_duckdb(lake, _ts(captured_ms))
    groups = DeltaTable(str(lake / "consumer_groups")).to_pyarrow_table().to_pylist()
    cols = state.groups.column_names
    key = lambda r: (r["cluster_id"], r["group_id"])  # noqa: E731
    assert sorted(({c: r[c] for c in cols} for r in groups), key=key) == \
        sorted(state.groups.to_pylist(), key=key)
    offsets = DeltaTable(str(lake / "committed_offsets")).to_pyarrow_table().to_pylist()
    okey = lambda r: (r["group_id"], r["topic"], r["partition"])  # noqa: E731
    same = ["committed_offset", "leader_epoch", "metadata", "commit_timestamp", "topic_id",
            "offsets_partition", "offset"]
    assert sorted(({c: r[c] for c in [*same, "group_id", "topic", "partition"]} for r in offsets),
                  key=okey) == sorted(({c: r[c] for c in [*same, "group_id", "topic", "partition"]}
                                       for r in state.offsets.to_pylist()), key=okey)


def test_golden_earlier_times_equal_a_replay_of_kafkas_dump(golden) -> None:
    scenario, lake = golden
    parts = _dump_records(scenario)
    stamps = sorted(r.timestamp_ms for recs in parts.values() for r in recs)
    markers = sorted(r.timestamp_ms for recs in parts.values() for r in recs if r.marker)
    assert markers, "the recording has transactions"
    # spread over the history, plus just before, at and after every transaction marker
    times = {stamps[int(i * (len(stamps) - 1) / 11)] for i in range(12)}
    times |= {t + d for t in markers for d in (-1, 0, 1)}
    checked = 0
    for at in sorted(times):
        want = coordinator_replay(parts, at)
        assert _answer(state_as_of_duckdb(lake, _ts(at))) == want, _ts(at)
        # the analyst SQL (pipelines/queries/offsets_as_of.sql) answers the same
        sql = run_duckdb(lake, "offsets_as_of", as_of=_ts(at)).to_pylist()
        assert {(r["group_id"], r["topic"], r["partition"]): (
            r["committed_offset"], r["leader_epoch"], r["metadata"]) for r in sql} == want, _ts(at)
        checked += bool(want)
    assert checked >= 10


# --------------------------------------------------------------------------- generated history


@dataclass
class Demo:
    manifest: DemoManifest
    lake: Path


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    root = tmp_path_factory.mktemp("asof-demo")
    manifest = generate_cluster(root / "data", scale=1)
    ingest_segments_local(root / "data", root / "lake", cluster_id=CLUSTER)
    yield Demo(manifest, root / "lake")
    shutil.rmtree(root, ignore_errors=True)


def _lake_records(lake: Path) -> dict[int, list[Rec]]:
    """The lake's raw rows (markers) and decoded commits as replay input."""
    raw = DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table(
        columns=["offsets_partition", "offset", "timestamp", "producer_id", "is_control",
                 "control_type"]).to_pylist()
    commits = DeltaTable(str(lake / "offset_commits")).to_pyarrow_table().to_pylist()
    parts: dict[int, list[Rec]] = defaultdict(list)
    for r in raw:
        if r["is_control"]:
            parts[r["offsets_partition"]].append(Rec(
                r["offset"], int(r["timestamp"].timestamp() * 1000), r["producer_id"], True,
                marker=r["control_type"]))
    for c in commits:
        value = None if c["is_tombstone"] else (c["committed_offset"], c["leader_epoch"], c["metadata"])
        parts[c["offsets_partition"]].append(Rec(
            c["offset"], round(c["record_timestamp"].timestamp() * 1000), c["producer_id"] or -1,
            bool(c["is_transactional"]), key=(c["group_id"], c["topic"], c["partition"]), value=value))
    return parts


def test_generated_end_state_is_the_manifests(demo: Demo) -> None:
    m = demo.manifest
    state = state_as_of_duckdb(demo.lake, _ts(m.end_ms))
    assert _answer(state) == {k: (c.offset, c.leader_epoch, c.metadata) for k, c in m.committed.items()}
    groups = {r["group_id"]: r for r in state.groups.to_pylist()}
    assert set(groups) == set(m.groups)
    assert not set(groups) & set(m.deleted_groups)
    for gid, want in m.groups.items():
        got = groups[gid]
        assert (got["group_type"], got["group_state"]) == (want["group_type"], want["state"]), gid
        if want.get("generation") is not None:
            assert got["generation"] == want["generation"], gid
    assert state_as_of_duckdb(demo.lake, _ts(m.start_ms) - MS).offsets.num_rows == 0


def test_generated_earlier_times_equal_the_coordinators_replay(demo: Demo) -> None:
    m = demo.manifest
    parts = _lake_records(demo.lake)
    markers = sorted(r.timestamp_ms for recs in parts.values() for r in recs if r.marker)
    tombstones = sorted(r.timestamp_ms for recs in parts.values() for r in recs
                        if r.key and r.value is None)
    assert markers and tombstones
    times = {m.start_ms + (m.end_ms - m.start_ms) * i // 9 for i in range(10)}
    times |= {t + d for t in markers + tombstones for d in (-1, 0)}
    for at in sorted(times):
        assert _answer(state_as_of_duckdb(demo.lake, _ts(at), cluster_id=CLUSTER)) == \
            coordinator_replay(parts, at), _ts(at)


def test_generated_transactions_visible_from_their_marker_aborts_never(demo: Demo) -> None:
    m = demo.manifest
    parts = _lake_records(demo.lake)
    key = ("txn-pipeline", "orders", 4)
    assert m.committed[key].metadata == "txn-d"
    txn = min((r for r in parts[m.groups["txn-pipeline"]["offsets_partition"]]
               if r.key == key and r.value and r.value[2] == "txn-d"), key=lambda r: r.offset)
    marker = min((r for r in parts[m.groups["txn-pipeline"]["offsets_partition"]]
                  if r.marker and r.producer_id == txn.producer_id and r.offset > txn.offset),
                 key=lambda r: r.offset)
    assert marker.marker == "COMMIT" and marker.timestamp_ms > txn.timestamp_ms
    before = _answer(state_as_of_duckdb(demo.lake, _ts(marker.timestamp_ms) - MS, group_id=key[0]))
    at = _answer(state_as_of_duckdb(demo.lake, _ts(marker.timestamp_ms), group_id=key[0]))
    assert before[key][2] == "sync-before-txn-d" and at[key][2] == "txn-d"
    aborts = [r.timestamp_ms for recs in parts.values() for r in recs if r.marker == "ABORT"]
    assert m.aborted and aborts
    for at_ms in sorted({*aborts, m.end_ms}):
        served = _answer(state_as_of_duckdb(demo.lake, _ts(at_ms)))
        for a in m.aborted:
            k = (a.group, a.topic, a.partition)
            assert k not in served or served[k][2] != a.metadata, (a, at_ms)


def test_generated_groups_over_time(demo: Demo) -> None:
    """A deleted group exists before its deletion and not after; a classic group's generation
    as of each GroupMetadata record is that record's (read from the history, not the fold)."""
    gm = DeltaTable(str(demo.lake / "group_metadata")).to_pyarrow_table().to_pylist()
    for gid in demo.manifest.deleted_groups:
        recs = sorted((r for r in gm if r["group_id"] == gid), key=lambda r: r["offset"])
        tomb = next(r for r in reversed(recs) if r["is_tombstone"])
        live = [r for r in recs if not r["is_tombstone"]]
        before = state_as_of_duckdb(demo.lake, live[-1]["record_timestamp"], group_id=gid)
        after = state_as_of_duckdb(demo.lake, tomb["record_timestamp"], group_id=gid)
        assert before.groups.column("group_id").to_pylist() == [gid]
        assert after.groups.num_rows == 0 and after.offsets.num_rows == 0
    classic = sorted((r for r in gm if r["group_id"] == "orders-processor" and r["record_type"] == 2
                      and not r["is_tombstone"]), key=lambda r: r["offset"])
    assert len({r["generation"] for r in classic}) >= 3
    for r in classic:
        at = state_as_of_duckdb(demo.lake, r["record_timestamp"], group_id="orders-processor")
        row = at.groups.to_pylist()[0]
        want_state = "Stable" if r["members"] else "Empty"
        assert (row["generation"], row["group_state"], row["num_members"]) == (
            r["generation"], want_state, len(r["members"] or [])), r["offset"]


def test_cli_state_prints_json_lines_and_tables(demo: Demo, capsys) -> None:
    m = demo.manifest
    end = _ts(m.end_ms).isoformat()
    assert main(["state", "--lake", str(demo.lake), "--as-of", end, "--group", "orders-processor"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    offsets = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"]
               for r in lines if r["kind"] == "offset"}
    assert offsets == {k: c.offset for k, c in m.committed.items() if k[0] == "orders-processor"}
    (group,) = [r for r in lines if r["kind"] == "group"]
    assert (group["group_type"], group["generation"]) == ("classic", m.groups["orders-processor"]["generation"])
    assert main(["state", "--lake", str(demo.lake), "--as-of", str(m.end_ms), "--format", "table",
                 "--what", "groups"]) == 0
    text = capsys.readouterr().out
    assert f"groups: {len(m.groups)}" in text and "offsets:" not in text
    assert main(["state", "--lake", str(demo.lake), "--as-of", "not-a-time"]) == 2
    assert "--as-of" in capsys.readouterr().err


def test_parameters_are_bound_by_the_engine(demo: Demo) -> None:
    sql = "SELECT ':x' AS s -- :x\n, :x AS v FROM t WHERE a = :group_id"
    assert bound_sql(sql, "duckdb") == "SELECT ':x' AS s -- :x\n, $x AS v FROM t WHERE a = $group_id"
    assert bound_sql(sql, "spark") == sql
    end = _ts(demo.manifest.end_ms)
    hostile = "orders-processor' OR '1'='1"
    state = state_as_of_duckdb(demo.lake, end, group_id=hostile)
    assert state.offsets.num_rows == 0 and state.groups.num_rows == 0
    with pytest.raises(TypeError):
        state_as_of_duckdb(demo.lake, end, group_id=3)  # type: ignore[arg-type]


@pytest.mark.spark
def test_spark_gives_the_same_answer(spark, demo: Demo) -> None:
    m = demo.manifest
    at = _ts(m.start_ms + (m.end_ms - m.start_ms) * 2 // 3)
    for group in (None, "txn-pipeline", "x' OR '1'='1"):
        duck = state_as_of_duckdb(demo.lake, at, group_id=group)
        sparks = state_as_of_spark(spark, demo.lake, at, group_id=group)
        assert sparks.offsets.to_pylist() == duck.offsets.to_pylist()
        assert sparks.groups.to_pylist() == duck.groups.to_pylist()
        assert bool(duck.offsets.num_rows) == (group != "x' OR '1'='1")
        offsets, groups = state_as_of_frames(spark, demo.lake, at, group_id=group)
        assert offsets.count() == duck.offsets.num_rows and groups.count() == duck.groups.num_rows
        assert spark.sql("SELECT COUNT(*) AS n FROM offsets_at").first()["n"] == duck.offsets.num_rows
