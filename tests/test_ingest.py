"""The streaming ingest: the coordinator's state, exactly once, incremental.

On data the project generates (always; its ``live/`` holds the brokers' answers at the end
of the history) and on the golden scenario-a recording of a real broker (when ../shared is
there).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from pipelines.ingest import IngestConfig, ingest_segments_local, run_ingest
from tests.conftest import REPO, corpus_path, table_rows
from tests.support.generated import generated_scenario, manifest

pytestmark = pytest.mark.spark

ALL_TABLES = ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets",
              "consumer_groups", "group_members", "group_generations", "group_records_latest",
              "topic_names", "commit_attribution", "offset_anomalies", "offset_audit_cursor",
              "ingest_progress", "ownership_last_ended")


def live_offsets(scenario: Path) -> dict[tuple[str, str, int], tuple[int, int, str]]:
    fetch = json.loads((scenario / "live" / "offset_fetch.json").read_text())
    out = {}
    for group in fetch["groups"]:
        assert group["error_code"] == 0
        for topic in group["topics"]:
            for p in topic["partitions"]:
                assert p["error_code"] == 0
                out[group["group_id"], topic["name"], p["partition_index"]] = (
                    p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
    return out


def lake_offsets(lake: Path) -> dict[tuple[str, str, int], tuple[int, int, str]]:
    rows = DeltaTable(str(lake / "committed_offsets")).to_pyarrow_table().to_pylist()
    return {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["leader_epoch"], r["metadata"])
            for r in rows}


@pytest.fixture(scope="module", params=["generated", "scenario-a"])
def scenario(request, tmp_path_factory) -> Path:
    """Generated (demo generator: 5 partitions, none/gzip/zstd, transactions with aborts,
    KIP-848 groups, deletions) or golden scenario-a (skipped when ../shared is absent)."""
    if request.param == "scenario-a":
        return corpus_path("golden", "scenario-a")
    return generated_scenario(tmp_path_factory.mktemp("generated"))


@pytest.fixture(scope="module")
def golden_lake(spark, scenario: Path, tmp_path_factory) -> Path:
    lake = tmp_path_factory.mktemp("golden") / "lake"
    generated = (scenario / "manifest.json").exists()  # 5,152 records, scenario-a 16,358
    report = run_ingest(spark, IngestConfig(source="segments", lake=lake,
                                            path=str(scenario / "segments"),
                                            max_records_per_batch=1500 if generated else 5000))
    assert report.batches >= 3  # bounded micro-batches under availableNow
    return lake


def test_committed_offsets_equal_live_offset_fetch(golden_lake: Path, scenario: Path) -> None:
    """Every group, topic and partition, same offset, leader epoch and metadata; no extras."""
    assert lake_offsets(golden_lake) == live_offsets(scenario)


def test_group_types_and_states_equal_list_groups(golden_lake: Path, scenario: Path) -> None:
    listed = json.loads((scenario / "live" / "list_groups.json").read_text())["groups"]
    ours = {r["group_id"]: r for r in DeltaTable(str(golden_lake / "consumer_groups")).to_pyarrow_table().to_pylist()}
    assert set(ours) == {g["group_id"] for g in listed}
    for g in listed:
        row = ours[g["group_id"]]
        broker_type = "classic" if row["group_type"] == "simple" else row["group_type"]
        assert (broker_type, row["group_state"], row["protocol_type"]) == (
            g["group_type"], g["group_state"], g["protocol_type"]), g["group_id"]


def test_members_equal_describe_groups(golden_lake: Path, scenario: Path) -> None:
    described = json.loads((scenario / "live" / "describe_groups.json").read_text())["groups"]
    members = DeltaTable(str(golden_lake / "group_members")).to_pyarrow_table().to_pylist()
    for g in described:
        if g["error_code"] != 0:
            continue
        ours = {m["member_id"]: m for m in members if m["group_id"] == g["group_id"]}
        assert set(ours) == {m["member_id"] for m in g["members"]}, g["group_id"]
        for m in g["members"]:
            mine = ours[m["member_id"]]
            assert (mine["group_instance_id"], mine["client_id"], mine["client_host"]) == (
                m["group_instance_id"], m["client_id"], m["client_host"])


def test_history_keeps_every_record(golden_lake: Path, scenario: Path) -> None:
    raw = DeltaTable(str(golden_lake / "offsets_raw")).to_pyarrow_table()
    data = raw.filter(pc.invert(raw.column("is_control")))
    if (scenario / "manifest.json").exists():  # generated: the generator's own counts
        counts = manifest(scenario)
        assert data.num_rows == counts["counts"]["data_records"] - len(counts["aborted_commits"])
        assert raw.num_rows - data.num_rows == counts["counts"]["control_records"]
        offsets = list(zip(data.column("offsets_partition").to_pylist(),
                           data.column("offset").to_pylist(), strict=True))
        assert len(set(offsets)) == len(offsets)
    else:
        committed = [json.loads(line) for line in (scenario / "consumed_read_committed.jsonl").open()]
        assert sorted(zip(data.column("offsets_partition").to_pylist(), data.column("offset").to_pylist(),
                          strict=True)) == sorted((r["partition"], r["offset"]) for r in committed)
        assert raw.num_rows - data.num_rows == 7  # the COMMIT/ABORT markers the MANIFEST counts
    statuses = set(raw.column("decode_status").to_pylist())
    assert statuses <= {"ok", "tombstone", "control"}


def test_local_and_streaming_paths_agree(golden_lake: Path, scenario: Path, tmp_path: Path) -> None:
    local = tmp_path / "local"
    ingest_segments_local(scenario / "segments", local)
    for table in ALL_TABLES:
        assert table_rows(local, table) == table_rows(golden_lake, table), table


def test_second_run_without_new_data_writes_nothing(spark, golden_lake: Path, scenario: Path) -> None:
    versions = {t: DeltaTable(str(golden_lake / t)).version() for t in ALL_TABLES}
    started = time.perf_counter()
    report = run_ingest(spark, IngestConfig(source="segments", lake=golden_lake,
                                            path=str(scenario / "segments")))
    elapsed = time.perf_counter() - started
    assert report.records == 0 and report.batches == 0
    assert {t: DeltaTable(str(golden_lake / t)).version() for t in ALL_TABLES} == versions
    print(f"incremental run with no new data: {elapsed:.2f}s")


def _ingest_cmd(data: Path, lake: Path, batch: int) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "ingest", "--source", "segments", "--path", str(data),
            "--lake", str(lake), "--max-records-per-batch", str(batch)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["generated", "scenario-a"])
def test_sigkill_mid_run_then_rerun_is_exactly_once(name: str, tmp_path: Path) -> None:
    """Kill -9 the ingest while it writes small batches; the rerun leaves no duplicates or gaps."""
    if name == "scenario-a":
        source, total, batch = corpus_path("golden", "scenario-a"), 16358, 1500
    else:
        source = generated_scenario(tmp_path / "generated")
        total, batch = manifest(source)["counts"]["records"], 400
    data = tmp_path / "segments"
    shutil.copytree(source / "segments", data)
    lake = tmp_path / "lake"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(_ingest_cmd(data, lake, batch), cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # wait until some, but not all, batches are in
            if (lake / "offsets_raw" / "_delta_log").exists() and \
                    DeltaTable(str(lake / "offsets_raw")).version() >= 3:
                break
            if proc.poll() is not None:
                pytest.fail("ingest finished before it could be killed: make batches smaller")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    partial = DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table().num_rows
    assert 0 < partial < total
    rerun = subprocess.run(_ingest_cmd(data, lake, batch), cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    clean = tmp_path / "clean"
    ingest_segments_local(data, clean)
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(clean, table), table
