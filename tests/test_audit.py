"""Commit attribution and offset anomalies (pipelines.state.audit).

On data the project writes itself: the demo generator's audit-trail story (a rewind by the
owner, a zombie commit after a rebalance, an admin reset while Empty, a commit past the log
end) must be found exactly, against the generator's manifest, and nothing else anywhere in
the demo; hand-built logs cover the other kinds; every micro-batch split gives the same
tables. On the real corpus (when present) every anomaly and every ownerless commit carries
a stated reason.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.decode.records import encode_key, encode_value
from pipelines.demo import DemoManifest, generate_cluster
from pipelines.ingest import IngestReport, ensure_tables, ingest_segments_local, process_batch
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.quality import run_quality_gate
from pipelines.reconcile.snapshot import store_snapshot
from pipelines.sources.record_batches.writer import SegmentWriter
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import cluster_of, read_range
from pipelines.state.anomalies import KINDS
from pipelines.state.attribution import REASONS
from tests.conftest import table_rows
from tests.test_state_exact import ingest_split

log = logging.getLogger(__name__)
T0 = 1_795_000_000_000  # ms


def raw_records(data: Path) -> pa.Table:
    """Every record of a segment directory, per-partition log order (empty partitions skipped)."""
    batches = [b for plog in find_segments(data)
               for b in read_range(plog, 0, 1 << 62, cluster_of(plog, "default"))]
    return pa.Table.from_batches(batches)


def _anomalies(lake: Path) -> set[tuple]:
    return {(r["kind"], r["group_id"], r["topic"], r["partition"], r["committed_offset"])
            for r in table_rows(lake, "offset_anomalies")}


# ------------------------------------------------------------------ the demo against its manifest


@pytest.fixture(scope="module")
def demo_lakes(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoManifest, Path, Path]:
    """The demo ingested twice (one batch; batches of 613 records), its live capture stored."""
    root = tmp_path_factory.mktemp("audit-demo")
    manifest = generate_cluster(root / "data")
    one = root / "one"
    ingest_segments_local(root / "data", one)
    raw = raw_records(root / "data")
    many = root / "many"
    ingest_split(raw, many, list(range(613, raw.num_rows, 613)))
    for lake in (one, many):
        store_snapshot(DeltaRsEngine(lake), snapshot_from_recorded(root / "data" / "live"))
    return manifest, one, many


def test_demo_anomalies_are_exactly_the_manifests(demo_lakes: tuple[DemoManifest, Path, Path]) -> None:
    manifest, one, _ = demo_lakes
    expected = {(a["kind"], a["group"], a["topic"], a["partition"], a["committed_offset"])
                for a in manifest.audit["anomalies"]}
    # what the story wrote: one owner rewind, four rewinds by the admin reset, one zombie,
    # one commit past the log end
    assert Counter(k for k, *_ in expected) == {"offset_rewind": 5, "zombie_commit": 1, "past_log_end": 1}
    assert _anomalies(one) == expected
    rows = {(r["kind"], r["topic"], r["partition"], r["committed_offset"]): r
            for r in table_rows(one, "offset_anomalies")}
    past = next(r for k, r in rows.items() if k[0] == "past_log_end")
    floor = manifest.audit["log_end_floor"][0]["offset"]
    assert past["detected_by"] == "snapshot" and floor <= past["log_end_offset"] < past["committed_offset"]
    assert past["severity"] == "critical" and past["snapshot_id"]
    zombie = next(r for k, r in rows.items() if k[0] == "zombie_commit")
    assert (zombie["severity"], zombie["attribution"], zombie["member_id"]) == ("critical", "zombie", None)
    for (kind, _t, _p, _o), r in rows.items():
        if kind == "offset_rewind":  # evidence: the previous offset, above the new one
            assert r["previous_offset"] is not None and r["previous_offset"] > r["committed_offset"]
            assert r["severity"] == ("warning" if r["attribution"] == "owner" else "info")


def test_demo_attribution_matches_the_manifest(demo_lakes: tuple[DemoManifest, Path, Path]) -> None:
    manifest, one, _ = demo_lakes
    rows = table_rows(one, "commit_attribution")
    story = Counter((r["topic"], r["partition"], r["committed_offset"], r["attribution"], r["client_id"])
                    for r in rows if r["group_id"] == "audit-trail")
    expected = Counter((a["topic"], a["partition"], a["committed_offset"], a["attribution"], a["client_id"])
                       for a in manifest.audit["attribution"])
    assert story == expected
    (zombie,) = [r for r in rows if r["attribution"] == "zombie"]
    assert zombie["last_owner_client_id"] == "audit-consumer-a" and zombie["reason"] == REASONS["zombie"]
    simple = {g for g, v in manifest.groups.items() if v["group_type"] == "simple"}
    assert simple == {"spark-ingest", "flink-checkpoints", "txn-standalone"}
    for r in rows:
        if r["group_id"] == "audit-trail":
            continue
        # every other story's commits: by their owner, or (simple groups) by nobody ever
        assert r["attribution"] == ("no_membership" if r["group_id"] in simple else "owner"), r
        assert (r["member_id"] is None) == (r["group_id"] in simple)
        assert (r["reason"] is None) == (r["attribution"] == "owner")
    commits = [r for r in table_rows(one, "offset_commits") if not r["is_tombstone"]]
    assert len(rows) == len(commits)


def test_demo_audit_tables_do_not_depend_on_batch_boundaries(
        demo_lakes: tuple[DemoManifest, Path, Path]) -> None:
    _, one, many = demo_lakes
    assert table_rows(one, "commit_attribution") == table_rows(many, "commit_attribution")
    assert table_rows(one, "offset_anomalies", drop=("detected_at",)) == \
        table_rows(many, "offset_anomalies", drop=("detected_at",))


def test_quality_gate_counts_anomalies_and_fails_only_on_request(
        demo_lakes: tuple[DemoManifest, Path, Path]) -> None:
    manifest, one, _ = demo_lakes
    engine = DeltaRsEngine(one)
    expected = dict.fromkeys(KINDS, 0) | Counter(a["kind"] for a in manifest.audit["anomalies"])
    report = run_quality_gate(engine, num_partitions=manifest.num_partitions, data_docs=False)
    assert report.anomalies == expected
    assert not [o for o in report.outcomes if o.table == "offset_anomalies"]  # warnings only
    assert report.summary()["anomalies"]["warnings"] == {k: n for k, n in expected.items() if n}
    strict = run_quality_gate(engine, num_partitions=manifest.num_partitions, data_docs=False,
                              fail_on_anomalies=("zombie_commit", "leader_epoch_regression"))
    (outcome,) = [o for o in strict.outcomes if o.table == "offset_anomalies"]
    assert not outcome.success and outcome.unexpected_count == 1 and not strict.passed
    fine = run_quality_gate(engine, num_partitions=manifest.num_partitions, data_docs=False,
                            fail_on_anomalies=("leader_epoch_regression",))
    assert [o.success for o in fine.outcomes if o.table == "offset_anomalies"] == [True]
    with pytest.raises(ValueError, match="unknown anomaly kind"):
        run_quality_gate(engine, num_partitions=manifest.num_partitions, data_docs=False,
                         fail_on_anomalies=("rewinds",))


# ------------------------------------------------------------------ hand-built logs, every split


def _offset(group: str, partition: int, offset: int | None, epoch: int = -1) -> tuple[bytes, bytes | None]:
    key = encode_key(1, {"group": group, "topic": "t", "partition": partition})
    if offset is None:
        return key, None
    return key, encode_value(1, 3, {"offset": offset, "leader_epoch": epoch, "metadata": "",
                                    "commit_timestamp": T0})


def _group_tombstone(group: str) -> tuple[bytes, None]:
    return encode_key(2, {"group": group}), None


def test_sequence_kinds_on_any_split(tmp_path: Path) -> None:
    """Rewind and leader-epoch regression against the previous commit (forgotten after an
    offset tombstone); a commit after DeleteGroups (offset tombstones, then the group
    tombstone) is flagged once; a lone group tombstone (classic -> consumer conversion) is not."""
    records = [
        _offset("g", 0, 10, 5), _offset("g", 0, 12, 4), _offset("g", 0, 8, 5),  # regression, rewind
        _offset("g", 0, None), _offset("g", 0, 3, 1),  # after a tombstone: nothing to compare
        _offset("d", 0, 5), _offset("d", 0, None), _group_tombstone("d"),  # DeleteGroups
        _offset("d", 0, 7), _offset("d", 0, 9),  # the first recreates the group
        _offset("c", 0, 5), _group_tombstone("c"), _offset("c", 0, 6),  # conversion: no anomaly
    ]
    with SegmentWriter(tmp_path / "data", 0) as w:
        for i, rec in enumerate(records):
            w.append([rec], timestamp=T0 + i)
    raw = raw_records(tmp_path / "data")
    expected = {("leader_epoch_regression", "g", "t", 0, 12), ("offset_rewind", "g", "t", 0, 8),
                ("commit_after_group_deleted", "d", "t", 0, 7)}
    for cuts in ([], [1], [2], [6], [7], [8], [3, 9, 11], list(range(1, len(records)))):
        lake = tmp_path / f"lake-{'-'.join(map(str, cuts))}"
        ingest_split(raw, lake, cuts)
        assert _anomalies(lake) == expected, cuts
        rows = {r["kind"]: r for r in table_rows(lake, "offset_anomalies")}
        assert rows["offset_rewind"]["previous_offset"] == 12
        assert rows["leader_epoch_regression"]["previous_leader_epoch"] == 5
        # where the previous commit lies (log offsets 1 and 0), in this batch or an earlier one
        assert rows["offset_rewind"]["previous_position"] == 1, cuts
        assert rows["leader_epoch_regression"]["previous_position"] == 0, cuts
        recreated = rows["commit_after_group_deleted"]
        assert (recreated["committed_offset"], recreated["offset"], recreated["attribution"]) == \
            (7, 8, "no_membership")
        assert recreated["reason"].endswith("(tombstone at offset 7)")
        attribution = {r["attribution"] for r in table_rows(lake, "commit_attribution")}
        assert attribution == {"no_membership"}  # no group ever had a member here


def test_flagged_commits_carry_their_own_attribution() -> None:
    """The rows of an anomaly carry its commit's own attribution row, with offset tombstones
    (which have none) interleaved before it: the attribution holds one row per live commit,
    in order, and a commit's row there is its rank among them. A misaligned one is refused."""
    from datetime import datetime, timezone

    from pipelines.state.anomalies import sequence_anomalies

    # (group, committed offset or None for a tombstone): rewinds at positions 2 and 8
    plan = [("g", 10), ("h", 4), ("g", 8), ("g", None), ("h", None), ("h", 1), ("g", 7), ("h", 9), ("h", 2)]
    commits = pa.table({
        "cluster_id": ["c"] * len(plan), "group_id": [g for g, _ in plan], "topic": ["t"] * len(plan),
        "partition": pa.array([0] * len(plan), pa.int32()),
        "committed_offset": pa.array([o for _, o in plan], pa.int64()),
        "leader_epoch": pa.array([None] * len(plan), pa.int32()),
        "commit_timestamp": pa.array([None] * len(plan), pa.timestamp("us", tz="UTC")),
        "is_tombstone": [o is None for _, o in plan],
        "offsets_partition": pa.array([0] * len(plan), pa.int32()),
        "offset": pa.array(range(len(plan)), pa.int64()),
        "record_timestamp": pa.array([None] * len(plan), pa.timestamp("us", tz="UTC"))})
    live = [i for i, (_, o) in enumerate(plan) if o is not None]
    attribution = pa.table({"attribution": [f"a{i}" for i in live], "member_id": [f"m{i}" for i in live]})
    now = datetime(2026, 11, 28, tzinfo=timezone.utc)
    found, _ = sequence_anomalies(commits, [], [], attribution, now)
    assert sorted((a["offset"], a["attribution"], a["member_id"]) for a in found) == [
        (2, "a2", "m2"), (8, "a8", "m8")]  # position 5 follows h's tombstone: nothing to compare
    with pytest.raises(ValueError, match="attribution rows"):
        sequence_anomalies(commits, [], [], attribution.slice(1), now)


def test_attribute_names_the_owner_or_the_reason_of_each_commit() -> None:
    """Each attribution outcome on hand-built ownership rows (classic and KIP-848), the
    expected values written out: an owner, a zombie (its last owner named), an unassigned
    partition, an empty group, no membership, and a topic still named by its id."""
    from datetime import datetime, timezone

    from pipelines.state.attribution import attribute

    topic_id = "AAAAAAAAAAAAAAAAAAAAAA"  # 22 base64url characters, as the decoder writes an id
    gens = [  # group, type, generation, member, topic, partition, from, to
        ("g1", "classic", 1, "m1", "t", 0, 10, 20), ("g1", "classic", 1, "m2", "t", 1, 10, None),
        ("g2", "classic", 3, "m3", "t", 0, 10, 20),
        ("g4", "consumer", 7, "m4", topic_id, 0, 10, None),
    ]
    gens = pa.table({
        "cluster_id": ["c"] * len(gens), "group_id": [g[0] for g in gens], "group_type": [g[1] for g in gens],
        "generation": pa.array([g[2] for g in gens], pa.int32()), "member_id": [g[3] for g in gens],
        "group_instance_id": pa.array([None] * len(gens), pa.string()),
        "client_id": [f"client-{g[3]}" for g in gens], "client_host": [f"/10.0.0.{i}" for i in range(len(gens))],
        "topic": [g[4] for g in gens], "partition": pa.array([g[5] for g in gens], pa.int32()),
        "valid_from_offset": pa.array([g[6] for g in gens], pa.int64()),
        "valid_to_offset": pa.array([g[7] for g in gens], pa.int64())})
    commits = [("g1", "t", 0, 15), ("g1", "t", 0, 25), ("g1", "t", 5, 25), ("g2", "t", 0, 30),
               ("g3", "t", 0, 30), ("g4", "orders", 0, 30), ("g1", "t", 1, 5)]
    ts = pa.timestamp("us", tz="UTC")
    commits = pa.table({
        "cluster_id": ["c"] * len(commits), "group_id": [c[0] for c in commits], "topic": [c[1] for c in commits],
        "partition": pa.array([c[2] for c in commits], pa.int32()),
        "committed_offset": pa.array([100] * len(commits), pa.int64()),
        "leader_epoch": pa.array([None] * len(commits), pa.int32()),
        "commit_timestamp": pa.array([None] * len(commits), ts),
        "offsets_partition": pa.array([0] * len(commits), pa.int32()),
        "offset": pa.array([c[3] for c in commits], pa.int64()), "record_timestamp": pa.array([None] * len(commits), ts)})
    got = attribute(commits, gens, datetime(2026, 11, 28, tzinfo=timezone.utc)).to_pylist()
    assert [(r["attribution"], r["member_id"], r["client_id"], r["generation"], r["last_owner_member_id"],
             r["last_owner_lost_at_offset"]) for r in got] == [
        ("owner", "m1", "client-m1", 1, None, None),
        ("zombie", None, None, None, "m1", 20),  # m2 still active: the partition's owner left
        ("unassigned", None, None, None, None, None),
        ("group_empty", None, None, None, "m3", 20),
        ("no_membership", None, None, None, None, None),
        ("topic_unresolved", None, None, None, None, None),
        ("no_membership", None, None, None, None, None),  # before the group's first generation
    ]
    assert [r["reason"] is None for r in got] == [True] + [False] * 6


# ------------------------------------------------------------------ the real corpus


def test_every_anomaly_on_the_real_corpus_has_a_reason(corpus: Path, tmp_path: Path) -> None:
    """Golden recordings and every public data directory: each anomaly has a known kind, a
    severity and a reason; each commit without an owner says why. Counts go to the log."""
    lake = tmp_path / "lake"
    # every data directory of the corpus (golden recordings, public ones), each its own
    # cluster (several public ones share a quickstart cluster.id), in one batch
    batches = [b for plog in find_segments(corpus)
               for b in read_range(plog, 0, 1 << 62, str(plog.directory.parent.relative_to(corpus)))]
    engine = DeltaRsEngine(lake)
    ensure_tables(engine)
    process_batch(engine, pa.Table.from_batches(batches), 0, "corpus", IngestReport())
    clusters = {r["cluster_id"] for r in table_rows(lake, "commit_attribution")}
    assert len(clusters) >= 10
    kinds: Counter = Counter()
    attributions: Counter = Counter()
    for r in table_rows(lake, "offset_anomalies"):
        assert r["kind"] in KINDS and r["severity"] in ("info", "warning", "critical") and r["reason"], r
        kinds[(r["kind"], r["attribution"])] += 1
    for r in table_rows(lake, "commit_attribution"):
        attributions[r["attribution"]] += 1
        assert (r["reason"] is None) == (r["attribution"] == "owner"), r
        assert r["reason"] is None or r["reason"] == REASONS[r["attribution"]]
    log.warning("real corpus: %d clusters, attribution %s, anomalies %s", len(clusters),
                dict(attributions), dict(kinds))
    # golden scenario-d's kafka-streams-groups.sh --reset-offsets --shift-by -5: rewinds of 5
    rewinds = [r for r in table_rows(lake, "offset_anomalies")
               if r["group_id"] == "d-streams-reset" and r["kind"] == "offset_rewind"]
    assert rewinds and all(r["previous_offset"] - r["committed_offset"] == 5 for r in rewinds)
    # ... run while the streams group had no member: an admin action, severity info
    assert {(r["attribution"], r["severity"]) for r in rewinds} == {("group_empty", "info")}


@pytest.fixture
def corpus() -> Path:
    from tests.conftest import corpus_path

    return corpus_path()


def test_attribution_schema_is_documented() -> None:
    """Every column of the two analyst-facing tables carries a comment."""
    from pipelines.lake.contracts import contract

    for name in ("commit_attribution", "offset_anomalies"):
        schema = contract(name).arrow_schema
        assert all(f.metadata and f.metadata.get(b"comment") for f in schema), name
        assert pa.types.is_timestamp(schema.field("commit_timestamp").type)


def test_batch_read_back_filter_is_the_same_for_both_engines() -> None:
    """The batch's positions as a Spark SQL predicate (delta-spark pushes it into Delta's
    file skipping) and as a pyarrow expression (delta-rs) select the same rows."""
    from pipelines.state.audit import PositionRanges

    f = PositionRanges.of_ranges(pa.table({"cluster_id": ["a", "o'b"], "offsets_partition": [1, 2],
                                           "min_offset": [3, 4], "max_offset": [9, 10]}))
    assert f.to_sql() == ("((`cluster_id` = 'a' AND `offsets_partition` = 1 AND `offset` BETWEEN 3 AND 9) OR "
                          "(`cluster_id` = 'o\\'b' AND `offsets_partition` = 2 AND `offset` BETWEEN 4 AND 10))")
    rows = pa.table({"cluster_id": ["a", "a", "a", "o'b", "o'b", "b"],
                     "offsets_partition": pa.array([1, 1, 2, 2, 2, 2], pa.int32()),
                     "offset": pa.array([3, 10, 5, 4, 11, 5], pa.int64())})
    assert rows.filter(f.to_arrow()).to_pylist() == [
        {"cluster_id": "a", "offsets_partition": 1, "offset": 3},
        {"cluster_id": "o'b", "offsets_partition": 2, "offset": 4}]


def test_kip848_commits_find_their_owner_once_a_snapshot_names_the_topics(tmp_path: Path) -> None:
    """Golden scenario-d (Kafka 4.x, no partition-metadata names for d-bulk): KIP-848
    assignments name topics by id only, so d-bulk's commits wait as topic_unresolved (not
    "unassigned"); the snapshot's topic names attribute them to their members."""
    from tests.conftest import corpus_path

    scenario = corpus_path("golden", "scenario-d")
    lake = tmp_path / "lake"
    ingest_segments_local(scenario / "segments", lake, cluster_id="d")
    before = [r for r in table_rows(lake, "commit_attribution") if r["group_id"] == "d-bulk"]
    assert before and {r["attribution"] for r in before} == {"topic_unresolved"}
    assert not [r for r in table_rows(lake, "offset_anomalies") if r["kind"] == "unassigned_partition"]
    store_snapshot(DeltaRsEngine(lake), snapshot_from_recorded(scenario / "live"), "d")
    after = [r for r in table_rows(lake, "commit_attribution") if r["group_id"] == "d-bulk"]
    assert len(after) == len(before)
    assert {r["attribution"] for r in after} == {"owner"}
    # the log kept (compaction) only d-bulk-2's commits: the member active through the capture
    assert {(r["client_id"], r["group_type"]) for r in after} == {("d-bulk-2", "consumer")}


def test_reconcile_command_fails_on_requested_anomaly_kinds(
        demo_lakes: tuple[DemoManifest, Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``offsetlake reconcile`` passes the demo with its anomalies as warnings and exits 1
    when ``--fail-on-anomalies`` names a kind the lake holds."""
    import json

    from pipelines.cli import main

    _, one, _ = demo_lakes
    assert main(["reconcile", "--lake", str(one)]) == 0
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate["anomalies"]["warnings"] == {"offset_rewind": 5, "zombie_commit": 1, "past_log_end": 1}
    assert main(["reconcile", "--lake", str(one), "--fail-on-anomalies", "past_log_end,offset_rewind"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["gate"]["anomalies"]["fail_on"] == ["past_log_end", "offset_rewind"]
    assert [f["table"] for f in summary["gate"]["failed"]] == ["offset_anomalies"]


def test_commits_below_the_log_start_at_a_snapshot(demo_lakes: tuple[DemoManifest, Path, Path],
                                                   tmp_path: Path) -> None:
    """A snapshot whose log start of one partition lies above some groups' committed offsets
    (retention deleted records they had not read): exactly those commits are below_log_start,
    with the snapshot's bounds as evidence; the gate then says the check ran."""
    import dataclasses
    import shutil

    manifest, one, _ = demo_lakes
    lake = tmp_path / "lake"
    shutil.copytree(one, lake)
    # the partition held by most groups, its log start just above the median committed offset
    by_tp: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for (g, t, p), c in manifest.committed.items():
        by_tp.setdefault((t, p), []).append((g, c.offset))
    (topic, partition), held = max(by_tp.items(), key=lambda kv: (len(kv[1]), kv[0]))
    start = sorted(o for _, o in held)[len(held) // 2] + 1
    expected = {("below_log_start", g, topic, partition, o) for g, o in held if o < start}
    assert expected
    snap = snapshot_from_recorded(manifest.out_dir + "/live")
    ends = [dataclasses.replace(e, log_start_offset=start) if (e.topic, e.partition) == (topic, partition)
            else e for e in snap.log_end_offsets]
    snap = dataclasses.replace(snap, snapshot_id=snap.snapshot_id + "-retention", log_end_offsets=ends)
    engine = DeltaRsEngine(lake)
    store_snapshot(engine, snap)
    found = {a for a in _anomalies(lake) if a[0] == "below_log_start"}
    assert found == expected
    rows = [r for r in table_rows(lake, "offset_anomalies") if r["kind"] == "below_log_start"]
    assert {(r["log_start_offset"], r["snapshot_id"], r["detected_by"]) for r in rows} == {
        (start, snap.snapshot_id, "snapshot")}
    report = run_quality_gate(engine, num_partitions=manifest.num_partitions, data_docs=False)
    assert report.anomalies["below_log_start"] == len(expected)
    assert report.summary()["anomalies"]["below_log_start"] == "checked"


def _streams(record_type: int, key: dict, value: dict | None) -> tuple[bytes, bytes | None]:
    return encode_key(record_type, key), None if value is None else encode_value(record_type, 0, value)


def test_streams_commits_are_attributed_through_the_topology(tmp_path: Path) -> None:
    """KIP-1071: a streams member's active task (subtopology s, partition p) reads partition p
    of s's source and repartition-source topics (topology record 23): the commits of those
    partitions are the member's, with its client id and host (member record 19), on any split;
    after the member's tasks move away, a commit of its old partition is a zombie commit."""
    topology = {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": ["in"], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": ["rp"], "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [], "repartition_source_topics": [
             {"name": "rp", "partitions": 0, "replication_factor": -1, "topic_configs": []}],
         "copartition_groups": []}]}

    def member(client: str) -> dict:
        return {"instance_id": None, "rack_id": None, "client_id": client, "client_host": f"/{client}",
                "rebalance_timeout_ms": 300000, "topology_epoch": 0, "process_id": "p",
                "user_endpoint": None, "client_tags": []}

    def tasks(epoch: int, partitions: list[int]) -> dict:
        return {"member_epoch": epoch, "previous_member_epoch": epoch - 1, "state": 0,
                "active_tasks": [{"subtopology_id": s, "partitions": partitions,
                                  "assignment_epochs": [epoch] * len(partitions)} for s in ("0", "1")],
                "standby_tasks": [], "warmup_tasks": [], "active_tasks_pending_revocation": [],
                "standby_tasks_pending_revocation": [], "warmup_tasks_pending_revocation": []}

    def commit(topic: str, partition: int, offset: int) -> tuple[bytes, bytes]:
        return (encode_key(1, {"group": "s", "topic": topic, "partition": partition}),
                encode_value(1, 3, {"offset": offset, "leader_epoch": -1, "metadata": "", "commit_timestamp": T0}))

    records = [
        _streams(23, {"group_id": "s"}, topology),
        _streams(19, {"group_id": "s", "member_id": "m1"}, member("c1")),
        _streams(22, {"group_id": "s", "member_id": "m1"}, tasks(1, [0, 1])),
        commit("in", 0, 5), commit("rp", 1, 7),  # m1's
        _streams(22, {"group_id": "s", "member_id": "m1"}, tasks(2, [0])),  # task 1 leaves m1
        commit("in", 1, 9),  # nobody's now: m1 lost it
        _streams(19, {"group_id": "s", "member_id": "m2"}, member("c2")),
        _streams(22, {"group_id": "s", "member_id": "m2"}, tasks(2, [1])),
        commit("rp", 1, 11),  # m2's
    ]
    with SegmentWriter(tmp_path / "data", 0) as w:
        for i, rec in enumerate(records):
            w.append([rec], timestamp=T0 + i)
    raw = raw_records(tmp_path / "data")
    expected = {("in", 0, 5, "owner", "c1", "streams"), ("rp", 1, 7, "owner", "c1", "streams"),
                ("in", 1, 9, "zombie", None, None), ("rp", 1, 11, "owner", "c2", "streams")}
    for cuts in ([], [3], [5], [6], [8], list(range(1, len(records)))):
        lake = tmp_path / f"lake-{'-'.join(map(str, cuts))}"
        ingest_split(raw, lake, cuts)
        rows = table_rows(lake, "commit_attribution")
        assert {(r["topic"], r["partition"], r["committed_offset"], r["attribution"], r["client_id"],
                 r["group_type"]) for r in rows} == expected, cuts
        (zombie,) = [r for r in rows if r["attribution"] == "zombie"]
        assert zombie["last_owner_client_id"] == "c1"
        assert _anomalies(lake) == {("zombie_commit", "s", "in", 1, 9)}


def test_a_batch_read_back_comes_in_log_order_one_row_per_position() -> None:
    """Rows from several files (any order, a position twice where files overlap) come back
    sorted by (cluster, offsets partition, position) without the duplicate; sorted input
    comes back as it was."""
    from pipelines.state.audit import _dedupe_positions

    rows = pa.table({"cluster_id": ["b", "a", "a", "b", "a", "a"],
                     "offsets_partition": pa.array([0, 1, 0, 0, 0, 1], pa.int32()),
                     "offset": pa.array([5, 2, 9, 5, 3, 1], pa.int64()),
                     "n": [1, 2, 3, 4, 5, 6]})
    got = _dedupe_positions(rows)
    keys = list(zip(*(got.column(c).to_pylist() for c in ("cluster_id", "offsets_partition", "offset")),
                    strict=True))
    # each cluster's rows together (clusters in the order first seen), then by partition and position
    assert keys == [("b", 0, 5), ("a", 0, 3), ("a", 0, 9), ("a", 1, 1), ("a", 1, 2)]
    assert got.column("n").to_pylist()[1:] == [5, 3, 6, 2]
    ordered = rows.take([1, 4, 2, 5, 0]).sort_by([("cluster_id", "ascending"), ("offsets_partition", "ascending"),
                                                   ("offset", "ascending")])
    assert _dedupe_positions(ordered) is ordered


def test_a_batch_read_back_from_files_in_any_order_comes_in_log_order() -> None:
    """Each task's file holds its ranges in log order, the files come in any order: the result
    is the same as for one unordered table (files put in order, the rows themselves when the
    files overlap or interleave)."""
    from pipelines.state.audit import _dedupe_positions

    def table(*files: list[tuple]) -> pa.Table:
        schema = pa.schema([("cluster_id", pa.string()), ("offsets_partition", pa.int32()), ("offset", pa.int64())])
        return pa.Table.from_batches([pa.RecordBatch.from_pylist(
            [dict(zip(schema.names, r, strict=True)) for r in f], schema=schema) for f in files], schema=schema)

    def keys(t: pa.Table) -> list[tuple]:
        return list(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))

    a1, a0, b0 = [("a", 1, 7), ("a", 1, 8)], [("a", 0, 3), ("a", 0, 9)], [("b", 0, 1)]
    # clusters in the order first seen, as for one table
    assert keys(_dedupe_positions(table(b0, a1, a0))) == [*b0, *a0, *a1]
    assert keys(_dedupe_positions(table(a1, [("a", 0, 9), ("a", 1, 8)], a0))) == [*a0, *a1]  # overlap
    assert keys(_dedupe_positions(table(a1, [("a", 0, 4), ("a", 1, 2)], a0))) == [
        ("a", 0, 3), ("a", 0, 4), ("a", 0, 9), ("a", 1, 2), *a1]  # interleaved: rows sorted


def test_task_files_whose_partitions_ascend_across_files_are_put_in_order_without_a_sort() -> None:
    """Two tasks' files as a 10M-record batch wrote them: the first ends with partition 3,
    the second starts with partition 6 and ends with 4. Ordering the files' runs alone
    (no row sort) already gives log order: the first file's last run and the second's first
    are two runs, though the rows ascend from one to the other."""
    import numpy as np

    from pipelines.state.audit import _in_order, _runs_in_order

    p = np.array([1, 1, 3, 3, 6, 6, 4, 4], np.int32)
    o = np.array([5, 6, 2, 9, 1, 4, 7, 8], np.int64)
    c = np.zeros(len(p), np.int64)
    table = pa.table({"offsets_partition": p, "offset": o})
    got, c2, p2, o2 = _runs_in_order(table, c, p, o)
    assert _in_order(c2, p2, o2)
    assert list(zip(p2.tolist(), o2.tolist(), strict=True)) == [(1, 5), (1, 6), (3, 2), (3, 9), (4, 7), (4, 8),
                                                                (6, 1), (6, 4)]
    assert got.column("offset").to_pylist() == o2.tolist()


@pytest.mark.parametrize("keys", [50, 70_000])  # radix-sorted keys, and keys past 16 bits
def test_rows_by_key_and_position_equal_a_lexsort(keys: int) -> None:
    """The sequence checks' row order: as ``np.lexsort((position, key))`` whether each
    key's positions come in order (a batch in log order) or not (a key spread over
    partitions), ties kept in row order."""
    import numpy as np

    from pipelines.state.anomalies import _by_key_and_position

    rng = np.random.default_rng(keys)
    kid = rng.integers(0, keys, 200_000)
    in_log_order = np.r_[np.full(1000, -1), np.arange(199_000)]
    shuffled = rng.integers(-1, 500, 200_000)  # out of order, with ties
    for pos in (in_log_order, shuffled):
        assert (_by_key_and_position(kid, pos) == np.lexsort((pos, kid))).all()
    assert len(_by_key_and_position(kid[:0], in_log_order[:0])) == 0


def test_is_in_answers_for_dictionary_rows_as_for_their_strings() -> None:
    """The anomalies' group lookups on a batch read back as dictionaries (each chunk its own
    dictionary, nulls in the indices) answer as the same strings do, nulls never in."""
    import pyarrow.compute as pc

    from pipelines.state.anomalies import _is_in

    values = [["g1", None, "g2", "g3"], ["g3", "g4", None, "g1"]]
    plain = pa.chunked_array([pa.array(v, pa.string()) for v in values])
    coded = pa.chunked_array([pc.dictionary_encode(pa.array(v, pa.string())) for v in values])
    wanted = pa.array(["g1", "g3", "absent"])
    expected = [v in ("g1", "g3") for chunk in values for v in chunk]
    assert _is_in(plain, wanted).to_pylist() == expected
    assert _is_in(coded, wanted).to_pylist() == expected


def test_commits_already_audited_are_cut_per_key_as_the_cursor_says() -> None:
    """A replayed batch (a fresh checkpoint, or after a backfill): each commit at or before
    its key's last audited position is cut, whatever the batch's columns look like
    (dictionary-encoded as read back, or plain); keys the cursor lacks, and a cursor row
    without a position or with a group-level partition (-1), cut nothing. Checked against
    a per-row reading of the cursor written here."""
    import random

    from pipelines.state.audit import _not_yet_audited

    rng = random.Random(5)
    keys = [(c, g, t, p) for c in ("x", "y") for g in ("g1", "g2", "g\x1fh") for t in ("t", "u") for p in (0, 1, 2)]
    rows = [(*rng.choice(keys), rng.randrange(0, 60)) for _ in range(400)]
    cursor = [{"cluster_id": c, "group_id": g, "topic": t, "partition": p, "last_position": rng.randrange(0, 60)}
              for c, g, t, p in rng.sample(keys, 20)]
    cursor += [{"cluster_id": "x", "group_id": "g1", "topic": "", "partition": -1, "last_position": 59},
               {"cluster_id": "y", "group_id": "g2", "topic": "v", "partition": 0, "last_position": None}]
    last = {(r["cluster_id"], r["group_id"], r["topic"], r["partition"]): r["last_position"]
            for r in cursor if r["partition"] >= 0 and r["last_position"] is not None}
    expected = [r for r in rows if r[4] > last.get(r[:4], -1)]
    assert 0 < len(expected) < len(rows)
    names = ("cluster_id", "group_id", "topic", "partition", "offset")
    plain = pa.table([pa.array([r[i] for r in rows], pa.int32() if n == "partition" else None)
                      for i, n in enumerate(names)], names=list(names))
    coded = plain.set_column(0, "cluster_id", plain.column("cluster_id").dictionary_encode()) \
                 .set_column(1, "group_id", plain.column("group_id").dictionary_encode())
    for commits in (plain, coded):
        kept, _ = _not_yet_audited(commits, [], cursor)
        got = list(zip(*(kept.column(n).cast(pa.string()).to_pylist() if n in ("cluster_id", "group_id")
                         else kept.column(n).to_pylist() for n in names), strict=True))
        assert got == expected
