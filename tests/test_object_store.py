"""Lakes on object storage: the same guarantees on S3 (moto's server) and Azure Blob (Azurite).

The servers are real HTTP servers on loopback started by the tests (tests/support/servers.py);
nothing is mocked. Every expectation comes from outside the code under test: the demo
generator's own account of the coordinator state, the golden recording's live OffsetFetch,
or the same data ingested into a local lake.
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
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyarrow.fs import FileSelector, FileType

from pipelines.ingest import CheckpointError, IngestConfig, ingest_segments_local, run_ingest
from pipelines.lake.location import (
    OPTIONS_ENV,
    LakeLocation,
    StorageOptionError,
    lake_location,
    parse_options,
)
from tests.conftest import REPO
from tests.support.servers import ObjectStore, azurite, moto_s3  # noqa: F401 (fixtures)
from tests.test_ingest import ALL_TABLES, live_offsets

SECRET = "s3cr3t-value-never-shown"
VOLATILE = {"ingested_at", "updated_at", "ingest_batch_id", "detected_at"}


# ----------------------------------------------------------------------------- no server


def test_lake_uris_are_joined_as_text_never_through_pathlib(tmp_path: Path) -> None:
    s3 = lake_location("s3://bucket/lake/", {"AWS_REGION": "eu-west-1"}, environ={})
    assert s3.uri == "s3://bucket/lake" and s3.join("offsets_raw") == "s3://bucket/lake/offsets_raw"
    assert s3.fs_path(s3.join("t", "f.parquet")) == "bucket/lake/t/f.parquet"
    assert lake_location("s3a://bucket/lake", environ={}).uri == "s3://bucket/lake"
    abfss = lake_location("abfss://box@acct.dfs.core.windows.net/lake", environ={})
    assert abfss.join("t") == "abfss://box@acct.dfs.core.windows.net/lake/t"
    assert abfss.fs_path(abfss.join("t")) == "box/lake/t"
    assert lake_location("az://box/lake", environ={}).fs_path() == "box/lake"
    assert lake_location("gs://bkt/a/b", environ={}).join("t") == "gs://bkt/a/b/t"
    local = lake_location(f"file://{tmp_path}/lake")
    assert local.is_local and local.local_path == tmp_path / "lake"
    assert lake_location("rel/lake").uri == os.path.abspath("rel/lake")
    with pytest.raises(StorageOptionError, match="unsupported lake URI scheme 'ftp'"):
        lake_location("ftp://host/lake")


def test_storage_options_come_from_env_then_json_env_then_flags() -> None:
    env = {"AWS_REGION": "from-env", "AWS_ENDPOINT_URL": "http://env:1", "AZURE_X": "not-s3",
           OPTIONS_ENV: json.dumps({"AWS_ENDPOINT_URL": "http://json:2", "AWS_ALLOW_HTTP": "true"})}
    loc = lake_location("s3://b/l", {"AWS_ALLOW_HTTP": "false"}, environ=env)
    assert loc.storage_options == {"AWS_REGION": "from-env", "AWS_ENDPOINT_URL": "http://json:2",
                                   "AWS_ALLOW_HTTP": "false", "aws_conditional_put": "etag"}
    # a user's own concurrency choice is kept, never overridden by the default ...
    unsafe = lake_location("s3://b/l", {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}, environ={})
    assert "aws_conditional_put" not in unsafe.storage_options
    own = lake_location("s3://b/l", {"AWS_CONDITIONAL_PUT": "etag"}, environ={})
    assert own.storage_options == {"AWS_CONDITIONAL_PUT": "etag"}
    # ... but delta-rs 1.x ignores a DynamoDB lock, so conditional writes still protect commits
    locked = lake_location("s3://b/l", {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}, environ={})
    assert locked.storage_options["aws_conditional_put"] == "etag"
    assert "aws_conditional_put" not in lake_location("az://c/l", environ={}).storage_options


def test_secrets_never_appear_in_reprs_or_errors(capsys) -> None:
    from pipelines.cli import main

    loc = lake_location("s3://b/l", {"AWS_SECRET_ACCESS_KEY": SECRET}, environ={})
    assert SECRET not in repr(loc) and SECRET not in str(loc)
    with pytest.raises(StorageOptionError) as bad:
        parse_options([SECRET])
    assert SECRET not in str(bad.value)
    with pytest.raises(StorageOptionError) as bad_json:
        lake_location("s3://b/l", environ={OPTIONS_ENV: "{" + SECRET})
    assert SECRET not in str(bad_json.value)
    assert main(["maintain", "--lake", "s3://b/l", "--storage-option", SECRET]) == 2
    assert SECRET not in capsys.readouterr().err


def test_a_lake_at_a_uri_needs_a_checkpoint_location(tmp_path: Path, capsys) -> None:
    from pipelines.cli import main

    with pytest.raises(CheckpointError, match="give --checkpoint"):
        IngestConfig(source="segments", lake="s3://b/lake").checkpoint_dir  # noqa: B018
    assert IngestConfig(source="segments", lake="s3://b/lake",
                        checkpoint=f"file://{tmp_path}/cp").checkpoint_dir == tmp_path / "cp"
    code = main(["ingest", "--source", "segments", "--path", str(tmp_path), "--lake", "s3://b/lake"])
    assert code == 2 and "give --checkpoint" in capsys.readouterr().err


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module", params=["moto_s3", "azurite"])
def store(request) -> ObjectStore:
    return request.getfixturevalue(request.param)


def rows(lake: LakeLocation | Path, table: str) -> list[str]:
    """A table's rows as sorted JSON, without the columns that differ per run."""
    where = lake_location(lake)
    dt = DeltaTable(where.join(table), storage_options=where.delta_options())
    return sorted(json.dumps({k: v for k, v in r.items() if k not in VOLATILE}, sort_keys=True,
                             default=repr) for r in dt.to_pyarrow_table().to_pylist())


def expected_offsets(manifest: dict) -> dict[tuple, tuple]:
    return {(c["group"], c["topic"], c["partition"]): (c["offset"], c["leader_epoch"], c["metadata"])
            for c in manifest["committed_offsets"]}


def lake_offsets(lake: LakeLocation) -> dict[tuple, tuple]:
    dt = DeltaTable(lake.join("committed_offsets"), storage_options=lake.delta_options())
    return {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["leader_epoch"],
                                                          r["metadata"])
            for r in dt.to_pyarrow_table().to_pylist()}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, dict]:
    """Generated cluster history (10 partitions) and the generator's expected state."""
    from pipelines.demo import generate_cluster

    data = tmp_path_factory.mktemp("demo-data")
    manifest = generate_cluster(data, scale=1)
    manifest.write_manifest(data / "demo-manifest.json")
    return data, json.loads((data / "demo-manifest.json").read_text())


@pytest.fixture(scope="module")
def local_demo_lake(demo, tmp_path_factory) -> Path:
    """The same history ingested into a local lake: what the store's lake must equal."""
    lake = tmp_path_factory.mktemp("local") / "lake"
    ingest_segments_local(demo[0], lake, cluster_id="demo")
    return lake


@pytest.fixture(scope="module")
def store_lake(spark, store: ObjectStore, demo, tmp_path_factory) -> LakeLocation:
    """The demo history streamed by Spark into a lake on the store (tasks write the files)."""
    lake = lake_location(store.lake_uri("demo"), store.storage_options)
    checkpoint = tmp_path_factory.mktemp("checkpoint")
    report = run_ingest(spark, IngestConfig(source="segments", lake=lake, path=str(demo[0]),
                                            cluster_id="demo", checkpoint=checkpoint,
                                            max_records_per_batch=2000))
    assert report.batches >= 2 and report.records > 0
    assert (checkpoint / "offsetlake_app_id").exists() or any(checkpoint.rglob("offsetlake_app_id"))
    return lake


# ----------------------------------------------------------------------------- on each store


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_ingest_on_the_store_equals_the_generator_and_a_local_lake(
        store_lake: LakeLocation, demo, local_demo_lake: Path) -> None:
    assert lake_offsets(store_lake) == expected_offsets(demo[1])
    for table in ALL_TABLES:
        assert rows(store_lake, table) == rows(local_demo_lake, table), table
    # the history files really are objects in the store, named by the log
    fs = store_lake.filesystem()
    listed = [i for i in fs.get_file_info(FileSelector(store_lake.fs_path(store_lake.join(
        "offsets_raw")))) if i.type == FileType.File and i.path.endswith(".parquet")]
    dt = DeltaTable(store_lake.join("offsets_raw"), storage_options=store_lake.delta_options())
    assert {store_lake.fs_path(u) for u in dt.file_uris()} <= {i.path for i in listed}


@pytest.mark.spark
@pytest.mark.slow
def test_golden_scenario_a_on_the_store_equals_live_offset_fetch(
        spark, store: ObjectStore, scenario_a: Path, tmp_path: Path) -> None:
    lake = lake_location(store.lake_uri("golden"), store.storage_options)
    run_ingest(spark, IngestConfig(source="segments", lake=lake, path=str(scenario_a / "segments"),
                                   checkpoint=tmp_path / "cp", max_records_per_batch=5000))
    live = live_offsets(scenario_a)
    assert len(live) == 59
    assert lake_offsets(lake) == live


def _age_removals(table: LakeLocation, days: float) -> None:
    """Back-date the newest commit's remove actions: weeks passing, as vacuum sees it."""
    fs = table.filesystem()
    dt = DeltaTable(table.uri, storage_options=table.delta_options())
    commit = table.fs_path(table.join("_delta_log", f"{dt.version():020d}.json"))
    with fs.open_input_stream(commit) as f:
        actions = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
    stamp = int((time.time() - days * 86_400) * 1000)
    for action in actions:
        if "remove" in action:
            action["remove"]["deletionTimestamp"] = stamp
    with fs.open_output_stream(commit) as out:
        out.write("".join(json.dumps(a) + "\n" for a in actions).encode())


@pytest.mark.spark
@pytest.mark.slow
def test_snapshot_reconcile_report_queries_and_maintain_work_on_the_store(
        store_lake: LakeLocation, store: ObjectStore, demo, local_demo_lake: Path, tmp_path: Path,
        monkeypatch, capsys) -> None:
    from pipelines.cli import main
    from pipelines.queries import run_duckdb

    # a snapshot writes into the lake (snapshot_*, topic_names, offset_anomalies): work on a
    # copy so the shared local lake stays the plain ingest the other tests compare with
    local_demo_lake = Path(shutil.copytree(local_demo_lake, tmp_path / "local"))
    # the CLI gets the store's options the way a job does: from the environment, not argv
    monkeypatch.setenv(OPTIONS_ENV, store.env()[OPTIONS_ENV])
    lake = store_lake.uri
    live = str(demo[0] / "live")
    assert main(["snapshot", "--lake", lake, "--recorded", live, "--cluster-id", "demo"]) == 0
    assert main(["snapshot", "--lake", str(local_demo_lake), "--recorded", live,
                 "--cluster-id", "demo"]) == 0
    capsys.readouterr()
    assert main(["reconcile", "--lake", lake, "--cluster-id", "demo"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["passed"] and summary["unexplained_count"] == 0 and summary["rows"] > 0
    out = tmp_path / "report.html"
    assert main(["report", "--lake", lake, "--out", str(out)]) == 0
    html = out.read_text()
    assert lake in html and f"{demo[1]['counts']['records']:,}" in html

    queries = ("lag_by_group", "rebalance_timeline", "revoked_without_commit")
    before = {q: run_duckdb(store_lake, q).to_pylist() for q in queries}
    for q in queries:
        assert before[q] == run_duckdb(local_demo_lake, q).to_pylist(), q
    assert before["lag_by_group"]

    # weeks ago, offsets_raw was compacted: the files it replaced are past the retention
    raw = store_lake.child("offsets_raw")
    dt = DeltaTable(raw.uri, storage_options=raw.delta_options())
    replaced = [store_lake.fs_path(u) for u in dt.file_uris()]
    dt.optimize.compact()
    _age_removals(raw, days=40)
    capsys.readouterr()
    assert main(["maintain", "--lake", lake]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not report["errors"] and report["totals"]["compacted_tables"] >= 2
    assert report["tables"]["offsets_raw"]["vacuum"]["removed"] == len(replaced) > 1
    assert all(i.type == FileType.NotFound for i in store_lake.filesystem().get_file_info(replaced))
    assert report["tables"]["offsets_raw"]["checkpoint"]["created"]
    for table in ALL_TABLES:
        assert rows(store_lake, table) == rows(local_demo_lake, table), table
    assert {q: run_duckdb(store_lake, q).to_pylist() for q in queries} == before


def _ingest_cmd(data: Path, lake: str, checkpoint: Path, batch: int) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "ingest", "--source", "segments",
            "--path", str(data), "--lake", lake, "--checkpoint", str(checkpoint),
            "--cluster-id", "demo", "--max-records-per-batch", str(batch)]


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_on_the_store_is_exactly_once(
        store: ObjectStore, demo, local_demo_lake: Path, tmp_path: Path) -> None:
    """Kill -9 the ingest while it commits small batches to the store; the rerun (same
    checkpoint) leaves no duplicates and no gaps: every table equals the local lake."""
    lake = lake_location(store.lake_uri("killed"), store.storage_options)
    checkpoint = tmp_path / "checkpoint"
    env = {**os.environ, "PYTHONPATH": str(REPO), **store.env()}
    cmd = _ingest_cmd(demo[0], lake.uri, checkpoint, 1000)  # ~5 batches
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    raw = lake.join("offsets_raw")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # wait until some, but not all, batches are in
            if DeltaTable.is_deltatable(raw, storage_options=lake.delta_options()) and \
                    DeltaTable(raw, storage_options=lake.delta_options()).version() >= 2:
                break
            if proc.poll() is not None:
                pytest.fail("ingest finished before it could be killed: make batches smaller")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    partial = DeltaTable(raw, storage_options=lake.delta_options()).to_pyarrow_table().num_rows
    assert 0 < partial < demo[1]["counts"]["records"]
    rerun = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    for value in store.storage_options.values():  # secrets stay out of the job's output
        if len(value) > 8 and "://" not in value:
            assert value not in rerun.stderr + rerun.stdout
    for table in ALL_TABLES:
        assert rows(lake, table) == rows(local_demo_lake, table), table


# ----------------------------------------------------------------------------- S3 commits

_APPENDER = """
import json, os, sys
from deltalake import write_deltalake
import pyarrow as pa
from pipelines.lake.location import lake_location
lake = lake_location(sys.argv[1])
for i in range(int(sys.argv[3])):
    write_deltalake(lake.join("t"), pa.table({"writer": [sys.argv[2]], "n": [i]}), mode="append",
                    storage_options=lake.delta_options())
"""


def test_concurrent_committers_on_s3_lose_no_commit(moto_s3: ObjectStore) -> None:  # noqa: F811
    """Two processes append to one table at once; with the default conditional put every
    commit lands in its own version (an overwritten log entry would lose rows)."""
    lake = lake_location(moto_s3.lake_uri("concurrent"), moto_s3.storage_options)
    assert lake.storage_options["aws_conditional_put"] == "etag"
    write_deltalake(lake.join("t"), pa.table({"writer": ["init"], "n": [-1]}),
                    storage_options=lake.delta_options())
    env = {**os.environ, "PYTHONPATH": str(REPO), **moto_s3.env()}
    n = 15
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, lake.uri, w, str(n)], env=env,
                              stderr=subprocess.PIPE, text=True) for w in ("a", "b")]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    dt = DeltaTable(lake.join("t"), storage_options=lake.delta_options())
    got: dict[str, Any] = {}
    for r in dt.to_pyarrow_table().to_pylist():
        got.setdefault(r["writer"], []).append(r["n"])
    assert {w: sorted(v) for w, v in got.items()} == {"init": [-1], "a": list(range(n)),
                                                      "b": list(range(n))}
    assert dt.version() == 2 * n  # version 0 + one version per commit, none overwritten


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", [13])  # mid-run: batch 2, after a state merge
def test_replay_after_a_crash_at_a_write_point_on_the_store(
        store: ObjectStore, demo, local_demo_lake: Path, crash_at: int) -> None:
    """test_exactly_once's crash-and-replay on the store: dies just before its N-th write
    (a history commit or a state merge), then the same app id replays the whole run."""
    from tests.test_exactly_once import Crash, CrashingEngine

    lake = lake_location(store.lake_uri("crash"), store.storage_options)
    with pytest.raises(Crash):
        ingest_segments_local(demo[0], lake, cluster_id="demo", engine=CrashingEngine(lake, crash_at),
                              max_records_per_batch=1)
    ingest_segments_local(demo[0], lake, cluster_id="demo", max_records_per_batch=1)
    for table in ALL_TABLES:
        assert rows(lake, table) == rows(local_demo_lake, table), table


def test_a_location_travels_to_spark_tasks_with_its_options() -> None:
    """Spark pickles the task closure: the location must arrive whole (options included)."""
    import pickle

    loc = lake_location("s3://b/l", {"AWS_SECRET_ACCESS_KEY": SECRET}, environ={})
    back = pickle.loads(pickle.dumps(loc))
    assert back == loc and dict(back.storage_options) == dict(loc.storage_options)


def test_azurite_through_the_emulator_flag(azurite: ObjectStore, monkeypatch) -> None:  # noqa: F811
    """``azure_storage_use_emulator`` (object_store's switch, account and key implied; the
    URL from AZURITE_BLOB_STORAGE_URL) reaches the same objects as the explicit options."""
    base = azurite.endpoint.rsplit("/", 1)[0]
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", base)
    uri = azurite.lake_uri("emulator")
    emulated = lake_location(uri, {"azure_storage_use_emulator": "true"}, environ={})
    write_deltalake(emulated.join("t"), pa.table({"n": [1, 2]}),
                    storage_options=emulated.delta_options())
    explicit = lake_location(uri, azurite.storage_options, environ={})
    dt = DeltaTable(explicit.join("t"), storage_options=explicit.delta_options())
    assert dt.to_pyarrow_table().column("n").to_pylist() == [1, 2]
    files = {explicit.fs_path(u) for u in dt.file_uris()}
    infos = emulated.filesystem().get_file_info(sorted(files))
    assert files and all(i.type == FileType.File and i.size > 0 for i in infos)


@pytest.mark.slow
def test_replay_after_a_crash_on_golden_scenario_a_on_the_store(
        store: ObjectStore, scenario_a: Path, tmp_path: Path) -> None:
    """The same crash-and-replay on the real broker's recording (skips without ../shared)."""
    from tests.test_exactly_once import Crash, CrashingEngine, ingest

    clean = tmp_path / "clean"
    ingest(scenario_a, clean)
    lake = lake_location(store.lake_uri("golden-crash"), store.storage_options)
    with pytest.raises(Crash):
        ingest(scenario_a, lake, CrashingEngine(lake, 23))  # inside the third of five batches
    ingest(scenario_a, lake)
    for table in ALL_TABLES:
        assert rows(lake, table) == rows(clean, table), table
