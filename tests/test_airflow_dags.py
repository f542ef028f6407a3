"""The Airflow DAGs: they import cleanly from clusters.json, have the right shape and commands,
and the demo DAG runs end to end with ``airflow dags test`` (SQLite, everything in tmp).

Airflow reads AIRFLOW_HOME when it is first imported, so the module points it at a temp
directory before any test imports Airflow (no ~/airflow is created).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO

if importlib.util.find_spec("airflow") is None:  # not importorskip: importing it reads AIRFLOW_HOME
    pytest.skip("apache-airflow is an optional extra (pip install -e .[airflow])",
                allow_module_level=True)

DAGS = REPO / "airflow_dags"
CONFIG = DAGS / "clusters.json"
PIPELINE = ["demo_data", "ingest", "snapshot", "reconcile", "maintain"]
AIRFLOW = Path(sys.executable).with_name("airflow")
LAKE_TABLES = ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets",
               "consumer_groups", "group_members", "group_generations", "snapshot_groups",
               "snapshot_members", "snapshot_offsets", "snapshot_log_end_offsets", "snapshot_lag",
               "snapshot_points", "snapshot_runs", "reconciliation", "quality_results")


@pytest.fixture(scope="module", autouse=True)
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("airflow-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_HOME", str(home))
        mp.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        mp.delenv("OFFSETLAKE_CLUSTERS_FILE", raising=False)
        yield home


def dagbag(config: Path | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    if config is not None:
        assert monkeypatch is not None
        monkeypatch.setenv("OFFSETLAKE_CLUSTERS_FILE", str(config))
    return DagBag(dag_folder=str(DAGS))


def dags_module() -> ModuleType:
    """The DAG file as a module, for its command builders."""
    name = "offsetlake_dags_under_test"
    spec = importlib.util.spec_from_file_location(name, DAGS / "offsetlake_dags.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def write_config(path: Path, clusters: list[dict[str, Any]], defaults: dict[str, Any] | None = None) -> Path:
    shipped = json.loads(CONFIG.read_text())
    path.write_text(json.dumps({"defaults": {**shipped["defaults"], **(defaults or {})},
                                "clusters": clusters}))
    return path


# ----------------------------------------------------------------------------- DagBag


def test_shipped_config_builds_the_demo_dag() -> None:
    bag = dagbag()
    assert bag.import_errors == {}
    assert set(bag.dags) == {"offsetlake_demo"}  # the example prod cluster is disabled
    dag = bag.dags["offsetlake_demo"]
    assert [t.task_id for t in dag.topological_sort()] == PIPELINE
    for upstream, downstream in itertools.pairwise(PIPELINE):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    dag.check_cycle()  # the DagBag ran it too; no exception = no cycle
    assert (dag.max_active_runs, dag.catchup) == (1, False)
    assert dag.dagrun_timeout is not None and dag.start_date is not None
    assert {t.task_id: t.retries for t in dag.tasks} == {
        "demo_data": 1, "ingest": 2, "snapshot": 3, "reconcile": 0, "maintain": 1}
    assert all(t.execution_timeout is not None and t.retry_delay.total_seconds() > 0
               for t in dag.tasks)
    params = dag.params.dump()
    demo_home = os.environ.get("OFFSETLAKE_DEMO_HOME") or "/tmp/offsetlake-demo"
    assert params == {
        "cluster_id": "demo", "lake": f"{demo_home}/lake", "source": "segments",
        "segments_path": f"{demo_home}/demo-data", "bootstrap_servers": None,
        "delta_engine": "delta-rs", "recorded": f"{demo_home}/demo-data/live",
        "retention_hours": 720, "strict": True}
    assert dag.get_task("ingest").env["OFFSETLAKE_STRICT"].startswith("{{ params.strict")
    ingest = dag.get_task("ingest").bash_command
    assert " -m pipelines.cli ingest " in ingest and "--trigger available-now" in ingest
    assert '--recorded "$OFFSETLAKE_SNAPSHOT_RECORDED"' in dag.get_task("snapshot").bash_command
    assert "-m pipelines.demo" in dag.get_task("demo_data").bash_command
    assert dag.get_task("ingest").env["OFFSETLAKE_LAKE"].startswith("{{ params.lake")


def test_config_file_override_and_spark_submit_runner(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFSETLAKE_TEST_LAKES", str(tmp_path / "lakes"))
    config = write_config(tmp_path / "clusters.json", [
        {"cluster_id": "prod-1", "source": "kafka", "bootstrap_servers": "b1:9092,b2:9092",
         "lake": "${OFFSETLAKE_TEST_LAKES}/prod-1", "runner": "spark-submit",
         "schedule": "*/30 * * * *", "kafka_options": {"security.protocol": "SSL"},
         "spark": {"master": "yarn", "deploy_mode": "client", "spark_submit": "/opt/spark/bin/spark-submit",
                   "conf": {"spark.executor.memory": "2g"}},
         "tasks": {"ingest": {"timeout_minutes": 90, "retries": 4}}},
        {"cluster_id": "audit", "source": "segments", "segments_path": "data/segments",
         "recorded": "data/live", "lake": "${OFFSETLAKE_UNSET_VAR:-lakes}/audit"},
        {"cluster_id": "off", "enabled": False, "source": "nope"},
    ])
    bag = dagbag(config, monkeypatch)
    assert bag.import_errors == {}
    assert set(bag.dags) == {"offsetlake_prod-1", "offsetlake_audit"}

    prod = bag.dags["offsetlake_prod-1"]
    assert [t.task_id for t in prod.topological_sort()] == PIPELINE[1:]
    ingest = prod.get_task("ingest")
    assert (ingest.retries, ingest.execution_timeout.total_seconds()) == (4, 90 * 60)
    assert ingest.bash_command.startswith(
        "/opt/spark/bin/spark-submit --master yarn --deploy-mode client --name offsetlake-ingest-prod-1 "
        f"--conf spark.executor.memory=2g {REPO}/jobs/ingest.py --source \"$OFFSETLAKE_SOURCE\"")
    assert "--kafka-option security.protocol=SSL" in ingest.bash_command
    snapshot = prod.get_task("snapshot").bash_command
    assert f"{REPO}/jobs/snapshot.py" in snapshot and "--recorded" not in snapshot
    assert '--bootstrap-servers "$OFFSETLAKE_BOOTSTRAP_SERVERS"' in snapshot
    assert prod.params.dump()["lake"] == f"{tmp_path}/lakes/prod-1"
    assert "PYSPARK_PYTHON" not in ingest.env  # the cluster's Python is not this worker's

    audit = bag.dags["offsetlake_audit"].params.dump()  # relative paths: the config's folder
    assert (audit["segments_path"], audit["recorded"], audit["lake"]) == (
        f"{tmp_path}/data/segments", f"{tmp_path}/data/live", f"{tmp_path}/lakes/audit")

    module = dags_module()
    cluster = next(c for c in module.load_clusters(config) if c.cluster_id == "prod-1")
    kwargs = module.operator_kwargs(cluster, "ingest")  # SparkSubmitOperator(**kwargs)
    assert kwargs["application"] == f"{REPO}/jobs/ingest.py"
    assert kwargs["application_args"][:2] == ["--source", "{{ params.source }}"]
    assert "--path" not in kwargs["application_args"]  # optional flag, unset for kafka
    assert kwargs["conf"] == {"spark.executor.memory": "2g"} and kwargs["deploy_mode"] == "client"

    local = module.load_clusters(write_config(tmp_path / "local.json", [
        {"cluster_id": "l", "source": "segments", "segments_path": "s", "recorded": "r",
         "lake": "l", "runner": "spark-submit"}]))[0]
    command = module.task_command(local, "maintain")  # pip's pyspark ships spark-submit
    assert command.startswith(f"{Path(sys.executable).with_name('spark-submit')} --master 'local[2]' ")
    assert command.endswith(f'{REPO}/jobs/maintain.py --lake "$OFFSETLAKE_LAKE" '
                            '--retention-hours "$OFFSETLAKE_RETENTION_HOURS"')
    assert module.task_env(local)["PYSPARK_PYTHON"] == sys.executable


def test_task_arguments_split_like_the_cli_expects(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Param values arrive as env vars: spaces and shell metacharacters stay data."""
    monkeypatch.delenv("OFFSETLAKE_CLUSTERS_FILE", raising=False)
    module = dags_module()
    demo = next(c for c in module.load_clusters(CONFIG) if c.cluster_id == "demo")
    env = {**os.environ, "OFFSETLAKE_SOURCE": "segments", "OFFSETLAKE_LAKE": "/tmp/a lake; rm -rf x",
           "OFFSETLAKE_CLUSTER_ID": "demo", "OFFSETLAKE_DELTA_ENGINE": "delta-rs",
           "OFFSETLAKE_SEGMENTS_PATH": "/tmp/demo data", "OFFSETLAKE_BOOTSTRAP_SERVERS": ""}
    out = subprocess.run(["bash", "-c", "printf '%s\\n' " + module.cli_args(demo, "ingest")],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["--source", "segments", "--lake", "/tmp/a lake; rm -rf x",
                                "--cluster-id", "demo", "--delta-engine", "delta-rs",
                                "--path", "/tmp/demo data", "--trigger", "available-now"]


def test_bad_config_is_an_import_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path / "bad.json", [
        {"cluster_id": "x", "source": "kafka", "lake": "l", "runner": "spark-submit"}])
    bag = dagbag(config, monkeypatch)
    assert not bag.dags
    (error,) = bag.import_errors.values()
    assert "clusters[0]: source kafka needs bootstrap_servers" in error


DAG_PASSWORD = "Dag-Pw-5e1b77-unguessable"


def _sasl_cluster(**extra: Any) -> dict[str, Any]:
    return {"cluster_id": "sasl", "source": "kafka", "lake": "lake", "runner": "bash",
            "bootstrap_servers": "127.0.0.1:1",
            "kafka_options": {"security.protocol": "SASL_PLAINTEXT",
                              "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.plain.username": "auditor"}, **extra}


def test_dag_passes_secret_references_never_values(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14: with the password in the worker's environment at parse time, no rendered
    command or task environment of any task holds it; the command holds a reference the
    task's shell resolves at run time (checked by running it); ``${VAR}`` or a secret key in
    kafka_options/env is refused instead of being expanded into the DAG."""
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", DAG_PASSWORD)
    config = write_config(tmp_path / "clusters.json", [_sasl_cluster(
        kafka_secrets={"sasl.plain.password": "KAFKA_SASL_PASSWORD"},
        kafka_options_file=str(tmp_path / "client.properties"))])
    bag = dagbag(config, monkeypatch)
    assert bag.import_errors == {}
    dag = bag.dags["offsetlake_sasl"]
    context = {"params": dag.params.dump()}
    rendered: list[str] = []
    for task in dag.tasks:
        for name in task.template_fields:
            value = getattr(task, name, None)
            if value is not None:
                rendered.append(json.dumps(task.render_template(value, context), default=str))
    assert rendered and all(DAG_PASSWORD not in text for text in rendered)
    command = dag.get_task("snapshot").bash_command
    assert ('OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD="${KAFKA_SASL_PASSWORD:?'
            in command)
    assert f"--kafka-options-file {tmp_path / 'client.properties'}" in command
    # the reference is resolved by the task's shell, at run time, into the CLI's env only
    probe = command.split(" " + sys.executable, 1)[0] + " env"
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ}).stdout
    assert f"OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD={DAG_PASSWORD}" in out.splitlines()
    missing = subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                             env={"PATH": os.environ["PATH"]})
    assert missing.returncode != 0 and "KAFKA_SASL_PASSWORD is not set" in missing.stderr

    for bad, why in (({"kafka_options": {"sasl.plain.password": DAG_PASSWORD}},
                      "secrets do not belong in clusters.json"),
                     ({"kafka_options": {"sasl.plain.username": "${KAFKA_SASL_PASSWORD}"}},
                      "'$' references are not expanded here"),
                     ({"env": {"KAFKA_PASSWORD": "${KAFKA_SASL_PASSWORD}"}},
                      "secrets do not belong in clusters.json"),
                     ({"kafka_secrets": {"sasl.plain.password": DAG_PASSWORD}},
                      "expected the NAME of an environment variable")):
        cluster = _sasl_cluster()
        cluster.update({k: {**cluster.get(k, {}), **v} for k, v in bad.items()})
        bag = dagbag(write_config(tmp_path / "bad.json", [cluster]), monkeypatch)
        (error,) = bag.import_errors.values()
        assert why in error and DAG_PASSWORD not in error


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
@pytest.mark.spark
def test_demo_dag_runs_end_to_end(tmp_path: Path) -> None:
    """``airflow dags test offsetlake_demo``: demo data generated, ingested on local Spark,
    snapshot from the recorded answers, reconciled with a passing gate, maintained.

    Runs the shipped demo entry with retries off (so a failure fails fast instead of
    waiting for retry delays), through OFFSETLAKE_CLUSTERS_FILE; the demo's paths are the
    entry's own ``${OFFSETLAKE_DEMO_HOME}`` ones, pointed at tmp.
    """
    from deltalake import DeltaTable

    shipped = json.loads(CONFIG.read_text())
    (demo,) = [c for c in shipped["clusters"] if c["cluster_id"] == "demo"]
    demo["tasks"] = {t: {"retries": 0} for t in PIPELINE}
    config = write_config(tmp_path / "clusters.json", [demo])
    home = tmp_path / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS), "OFFSETLAKE_CLUSTERS_FILE": str(config),
           "OFFSETLAKE_DEMO_HOME": str(tmp_path / "demo"), "OFFSETLAKE_SPARK_LOG_LEVEL": "ERROR"}
    log = tmp_path / "dags-test.log"
    started = time.monotonic()
    with log.open("w") as out:
        subprocess.run([str(AIRFLOW), "db", "migrate"], env=env, stdout=out,
                       stderr=subprocess.STDOUT, timeout=120, check=True)
        try:
            run = subprocess.run([str(AIRFLOW), "dags", "test", "offsetlake_demo", "2026-01-02"],
                                 env=env, stdout=out, stderr=subprocess.STDOUT, timeout=170)
        except subprocess.TimeoutExpired:
            pytest.fail("airflow dags test timed out; log tail:\n" + log.read_text()[-4000:])
    text = log.read_text()
    finished = [line for line in text.splitlines() if "DagRun Finished" in line]
    assert run.returncode == 0 and finished and "state=success" in finished[-1], text[-4000:]
    elapsed = time.monotonic() - started

    lake = tmp_path / "demo" / "lake"
    assert (tmp_path / "demo" / "demo-data" / "live" / "offset_fetch.json").exists()
    for table in LAKE_TABLES:
        assert DeltaTable.is_deltatable(str(lake / table)), table
    reconciliation = DeltaTable(str(lake / "reconciliation")).to_pyarrow_table().to_pylist()
    assert reconciliation and {r["classification"] for r in reconciliation} == {"match"}
    assert {r["cluster_id"] for r in reconciliation} == {"demo"}
    quality = DeltaTable(str(lake / "quality_results")).to_pyarrow_table().to_pylist()
    assert quality and all(q["success"] for q in quality)
    assert {q["reconcile_id"] for q in quality} == {reconciliation[0]["reconcile_id"]}
    assert (lake / "offsets_raw" / "_delta_log" / "_last_checkpoint").exists()  # maintained
    assert elapsed < 180, f"end-to-end run took {elapsed:.0f} s"
