"""A group id of one cluster id in two ``__consumer_offsets`` partitions is reported, never
silent (pipelines/state/split_groups.py): two generated clusters' partition directories
under one segment root share group ids; one cluster (generated, or a real broker's
recording) never gives a report. The groups expected are read from the history tables
(every record's group and offsets partition), not from the driver's rows the check uses.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.cli import main
from pipelines.demo import generate_cluster
from pipelines.ingest import IngestReport, ensure_tables, process_batch
from pipelines.lake.engines import DeltaRsEngine
from tests.conftest import corpus_path
from tests.test_batch_independence import fair_batches, partitions_of


@pytest.fixture(scope="module")
def two_clusters(tmp_path_factory) -> Path:
    """Cluster a's partitions 0-1 and cluster b's 0-2 (as 2-4) under one root."""
    root = tmp_path_factory.mktemp("two-clusters")
    generate_cluster(root / "a", num_partitions=2, seed=12, live=False)
    generate_cluster(root / "b", num_partitions=3, seed=13, live=False)
    data = root / "data"
    for name, shift in (("a", 0), ("b", 2)):
        for d in sorted((root / name).glob("__consumer_offsets-*")):
            shutil.copytree(d, data / f"__consumer_offsets-{int(d.name.rsplit('-', 1)[1]) + shift}")
    return data


def _ingest(data: Path, lake: Path, budget: int) -> IngestReport:
    engine = DeltaRsEngine(lake)
    ensure_tables(engine)
    report = IngestReport()
    for i, raw in enumerate(fair_batches(partitions_of(data), budget)):
        process_batch(engine, raw, i, "split-groups-test", report)
    return report


def _partitions_in_history(lake: Path) -> dict[tuple[str, str], set[int]]:
    """(cluster, group) -> the offsets partitions of its records, from every history row."""
    out: dict[tuple[str, str], set[int]] = {}
    for table in ("offset_commits", "group_metadata"):
        rows = DeltaTable(str(lake / table)).to_pyarrow_table(
            columns=["cluster_id", "group_id", "offsets_partition"])
        for c, g, p in zip(*(rows.column(n).to_pylist() for n in rows.column_names), strict=True):
            out.setdefault((c, g), set()).add(p)
    return out


def test_two_clusters_under_one_id_are_reported_with_their_partitions(two_clusters: Path,
                                                                      tmp_path: Path) -> None:
    report = _ingest(two_clusters, tmp_path / "one", 1 << 40)
    assert report.batches == 1
    expected = {k: p for k, p in _partitions_in_history(tmp_path / "one").items() if len(p) > 1}
    assert len(expected) >= 10  # the two generated clusters share most group names
    assert report.split_groups == expected
    summary = report.summary()
    assert summary["groups_in_several_offsets_partitions"] == len(expected)
    first = sorted(expected)[:10]
    assert summary["groups_in_several_offsets_partitions_first"] == [
        {"cluster_id": c, "group_id": g, "offsets_partitions": sorted(expected[(c, g)])} for c, g in first]


def _deleted_groups(lake: Path) -> set[tuple[str, str]]:
    """Groups deleted (or converted) at some point: a group-level tombstone in the history."""
    rows = DeltaTable(str(lake / "group_metadata")).to_pyarrow_table(
        columns=["cluster_id", "group_id", "record_type", "is_tombstone"]).to_pylist()
    return {(r["cluster_id"], r["group_id"]) for r in rows
            if r["is_tombstone"] and r["record_type"] in (2, 3, 11, 17)}


def test_two_clusters_cut_into_batches_are_reported_too(two_clusters: Path, tmp_path: Path, caplog) -> None:
    """Across batches the check compares with the partitions group_records_latest holds,
    which keeps a deleted group's rows: every expected group is found, deleted ones too (the
    generated clusters delete some before the other cluster's records of their name come),
    with its partitions, and nothing else. Each is logged when first found (a continuous
    run has no end to report at)."""
    with caplog.at_level(logging.WARNING, logger="pipelines.micro_batch"):
        report = _ingest(two_clusters, tmp_path / "split", 400)
    logged = [re.match(r"batch \d+: (\d+) group id\(s\) with records in more than one", r.getMessage())
              for r in caplog.records if r.name == "pipelines.micro_batch" and r.levelno == logging.WARNING]
    assert logged and all(logged) and sum(int(m.group(1)) for m in logged) == len(report.split_groups)
    assert report.batches > 10
    lake = tmp_path / "split"
    expected = {k: p for k, p in _partitions_in_history(lake).items() if len(p) > 1}
    assert len(set(expected) & _deleted_groups(lake)) >= 2
    assert report.split_groups == expected


@pytest.mark.parametrize("budget", [1 << 40, 400])
def test_one_generated_cluster_is_never_reported(tmp_path: Path, budget: int) -> None:
    generate_cluster(tmp_path / "data", num_partitions=4, seed=12, live=False)
    report = _ingest(tmp_path / "data", tmp_path / "lake", budget)
    assert report.records > 1000 and report.split_groups == {}


@pytest.mark.parametrize("name", ["scenario-a", "scenario-d"])
def test_a_real_brokers_log_is_never_reported(tmp_path: Path, name: str) -> None:
    data = corpus_path("golden", name, "segments")
    report = _ingest(data, tmp_path / "lake", 1500)
    assert report.records > 1000 and report.batches > 1 and report.split_groups == {}


def test_state_rows_keep_each_partitions_last_commit_of_a_group() -> None:
    """The driver sees a group id in every offsets partition a task read it from, one that
    holds only offset tombstones of a key committed in another partition too."""
    from pipelines.model import state_rows

    commits = pa.table({
        "cluster_id": ["c"] * 6, "group_id": ["g"] * 6, "topic": ["t"] * 6, "partition": [0] * 6,
        "is_tombstone": [True, True, False, False, False, False], "topic_id": pa.array([None] * 6, pa.string()),
        "offsets_partition": pa.array([0, 0, 1, 1, 3, 3], pa.int32()),
        "offset": pa.array([7, 8, 5, 6, 2, 3], pa.int64())})
    kept = state_rows(commits)
    assert sorted(zip(kept.column("offsets_partition").to_pylist(), kept.column("offset").to_pylist(),
                      strict=True)) == [(0, 8), (1, 6), (3, 3)]


@pytest.mark.spark
def test_the_ingest_command_warns_and_strict_fails(spark, two_clusters: Path, tmp_path: Path,
                                                   capsys, caplog) -> None:
    args = ["ingest", "--source", "segments", "--path", str(two_clusters), "--lake", str(tmp_path / "lake"),
            "--strict"]
    assert main(args) == 3
    out, err = capsys.readouterr()
    summary = json.loads(out)
    expected = {k for k, p in _partitions_in_history(tmp_path / "lake").items() if len(p) > 1}
    assert summary["groups_in_several_offsets_partitions"] == len(expected) > 0
    (c, g), = [sorted(expected)[0]]
    assert f"{len(expected)} group id(s) with records in more than one __consumer_offsets partition" in err
    assert f"e.g. {g!r} of {c!r}" in err and "--cluster-id" in err
    # each cluster in its own data dir, named by it: nothing to report
    auto = tmp_path / "auto"
    for name in ("a", "b"):
        shutil.copytree(two_clusters.parent / name, auto / name,
                        ignore=shutil.ignore_patterns("live", "capture_log.json"))
    assert main(["ingest", "--source", "segments", "--path", str(auto), "--lake", str(tmp_path / "lake2"),
                 "--cluster-id", "auto", "--strict"]) == 0
    assert json.loads(capsys.readouterr().out)["groups_in_several_offsets_partitions"] == 0
