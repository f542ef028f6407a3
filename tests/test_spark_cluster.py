"""The ingest job on a real Spark standalone cluster, the project shipped as the built wheel.

A master and a worker are started from pyspark's own install (``spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on 127.0.0.1; executors run
in the worker's own work directory. The driver and the executors use an interpreter that
sees the dependencies but neither the checkout nor an installed offsetlake: the job's code
reaches them only as the wheel given to ``spark-submit --py-files``. The lake is on the
S3 server the tests start (moto's): tasks write history files there, the driver commits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.conftest import REPO
from tests.support.servers import ObjectStore, free_port, moto_s3  # noqa: F401 (fixture)
from tests.support.wheel import WheelInstall, clean_env, installed_wheel, new_virtualenv
from tests.test_ingest import live_offsets

pytestmark = pytest.mark.slow


def spark_home() -> Path:
    """The Spark distribution inside the pyspark package (its bin/ and jars/)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop a daemon and everything it started (executors, Python workers): its process group."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


@dataclass
class Cluster:
    master_url: str
    master_ui: str
    work_dir: Path
    env: dict[str, str]  # what spark-submit against this cluster needs (conf dir, local ip)


def _submit(cmd: list, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run spark-submit; (exit status, stdout, stderr), the driver's process group ended after."""
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        _stop_group(proc)
    return proc.returncode, stdout, stderr


def _master_state(ui: str) -> dict:
    with urllib.request.urlopen(f"{ui}/json/", timeout=5) as answer:
        return json.loads(answer.read())


#: set in the environment of the cluster's own ``python3`` (see :func:`cluster`)
NODE_PYTHON_MARK = "CLUSTER_NODE_PYTHON"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, bare_python: Path) -> Iterator[Cluster]:
    """A standalone master and one worker (2 cores, 2 GB), torn down even when a test fails.

    The worker's ``PATH`` has a ``python3`` of its own, as a cluster's nodes do: ``bare_python``
    run with ``NODE_PYTHON_MARK`` set, so that a task can tell it ran the node's Python."""
    home = spark_home()
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime: Spark's master and worker need one (.ci/run installs it)")
    root = tmp_path_factory.mktemp("spark-cluster")
    node_bin = root / "node-bin"
    node_bin.mkdir()
    (node_bin / "python3").write_text(f'#!/bin/sh\n{NODE_PYTHON_MARK}=yes exec "{bare_python}" "$@"\n')
    (node_bin / "python3").chmod(0o755)
    conf_dir = root / "conf"  # no spark-defaults.conf / log4j2 from the machine
    conf_dir.mkdir()
    work_dir = root / "worker-work"
    env = clean_env(SPARK_HOME=str(home), SPARK_CONF_DIR=str(conf_dir), SPARK_LOCAL_IP="127.0.0.1",
                    SPARK_LOCAL_DIRS=str(root / "local"), SPARK_DAEMON_MEMORY="512m",
                    SPARK_LOG_DIR=str(root / "logs"))
    master_port, master_ui_port = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{master_port}"
    master_ui = f"http://127.0.0.1:{master_ui_port}"
    logs = root / "logs"
    logs.mkdir()
    procs: list[subprocess.Popen] = []
    try:
        with open(logs / "master.out", "wb") as out:
            procs.append(subprocess.Popen(
                [home / "bin" / "spark-class", "org.apache.spark.deploy.master.Master",
                 "--host", "127.0.0.1", "--port", str(master_port), "--webui-port",
                 str(master_ui_port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True))
        with open(logs / "worker.out", "wb") as out:
            procs.append(subprocess.Popen(
                [home / "bin" / "spark-class", "org.apache.spark.deploy.worker.Worker", master_url,
                 "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
                 "--cores", "2", "--memory", "2g", "--work-dir", str(work_dir)],
                env={**env, "PATH": f"{node_bin}{os.pathsep}{env['PATH']}"}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 120
        while True:
            for proc, name in zip(procs, ("master", "worker"), strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(f"the Spark {name} exited ({proc.returncode}): "
                                       f"{(logs / f'{name}.out').read_text()[-2000:]}")
            with contextlib.suppress(OSError, ValueError):
                workers = _master_state(master_ui).get("workers", [])
                if any(w.get("state") == "ALIVE" for w in workers):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("no worker registered with the master within 120 s: "
                                   f"{(logs / 'worker.out').read_text()[-2000:]}")
            time.sleep(0.5)
        yield Cluster(master_url, master_ui, work_dir,
                      {k: env[k] for k in ("SPARK_HOME", "SPARK_CONF_DIR", "SPARK_LOCAL_IP",
                                           "SPARK_LOCAL_DIRS")})
    finally:
        for proc in reversed(procs):
            _stop_group(proc)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """An interpreter with the dependencies (through a .pth line) and no offsetlake at all."""
    env_dir = tmp_path_factory.mktemp("bare") / "venv"
    python, _ = new_virtualenv(env_dir)
    probe = subprocess.run([str(python), "-c", "import pyspark, deltalake, pipelines"],
                           capture_output=True, text=True, cwd=env_dir, env=clean_env())
    assert "No module named 'pipelines'" in probe.stderr, probe  # only --py-files can bring it
    return python


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> WheelInstall:
    return installed_wheel(tmp_path_factory.getbasetemp() / "wheel-install")


def test_golden_scenario_a_through_the_cluster(cluster: Cluster, bare_python: Path,
                                              wheel: WheelInstall, scenario_a: Path,
                                              moto_s3: ObjectStore,  # noqa: F811
                                              tmp_path: Path) -> None:
    """spark-submit of the ingest job: committed_offsets = the recording's live OffsetFetch."""
    job = tmp_path / "ingest_job.py"  # the job file as users get it, outside the checkout
    shutil.copy(REPO / "jobs" / "ingest.py", job)
    lake = moto_s3.lake_uri("cluster")
    home = Path(cluster.env["SPARK_HOME"])
    cmd = [home / "bin" / "spark-submit", "--master", cluster.master_url,
           "--py-files", wheel.wheel,
           "--conf", f"spark.pyspark.python={bare_python}",
           "--conf", f"spark.pyspark.driver.python={bare_python}",
           "--conf", "spark.executor.memory=1g", "--conf", "spark.cores.max=2",
           "--conf", "spark.ui.enabled=false",
           job, "--source", "segments", "--path", scenario_a / "segments", "--lake", lake,
           "--checkpoint", tmp_path / "checkpoint", "--cluster-id", "scenario-a",
           "--max-records-per-batch", "5000"]
    began = time.monotonic()
    # storage options by environment (OFFSETLAKE_STORAGE_OPTIONS), never on the command line
    returncode, stdout, stderr = _submit(cmd, tmp_path, clean_env(**cluster.env, **moto_s3.env()), 600)
    (tmp_path / "spark-submit.err").write_text(stderr)
    assert returncode == 0, "\n".join(
        line for line in stderr.splitlines()
        if " INFO " not in line and " WARN " not in line)[-6000:]
    summary = json.loads(stdout[stdout.index("{"):])
    assert summary["batches"] >= 3 and summary["records"] > 0
    assert set(summary["decode_status"]) <= {"ok", "tombstone", "control"}
    rows = DeltaTable(f"{lake}/committed_offsets",
                      storage_options=moto_s3.storage_options).to_pyarrow_table().to_pylist()
    lake_offsets = {(r["group_id"], r["topic"], r["partition"]):
                    (r["committed_offset"], r["leader_epoch"], r["metadata"]) for r in rows}
    assert lake_offsets == live_offsets(scenario_a)
    # The work ran in the worker's executors, in their own directories, not the driver's.
    app_dirs = [p for p in cluster.work_dir.iterdir() if p.name.startswith("app-")]
    assert len(app_dirs) == 1, app_dirs
    executor_logs = "".join(p.read_text(errors="replace") for p in app_dirs[0].rglob("stderr"))
    assert "Running task" in executor_logs
    # ... where spark-submit shipped the wheel: the executors' only source of `pipelines`.
    assert [p.name for p in app_dirs[0].glob("*/*.whl")] == [wheel.wheel.name]
    print(f"scenario-a through the standalone cluster: {time.monotonic() - began:.1f} s")


NODE_PYTHON_JOB = """
import json, sys
from pipelines.spark import spark_session

def where(batches):
    import os, sys
    import pyarrow as pa
    for _ in batches:
        yield pa.RecordBatch.from_pylist([{"python": sys.executable, "node": os.environ.get("NODE_PYTHON_MARK", "")}])

spark = spark_session("offsetlake-node-python")
rows = spark.range(2, numPartitions=2).mapInArrow(where, "python string, node string").collect()
conf = spark.sparkContext.getConf()
print(json.dumps({"driver": sys.executable, "executors": [r.asDict() for r in rows],
                  "name": spark.sparkContext.appName,
                  "conf": {k: conf.get(k) for k in ("spark.sql.shuffle.partitions", "spark.ui.enabled",
                                                    "spark.driver.maxResultSize")}}))
spark.stop()
""".replace("NODE_PYTHON_MARK", NODE_PYTHON_MARK)


def test_executors_run_the_clusters_python_unless_told(cluster: Cluster, bare_python: Path,
                                                        wheel: WheelInstall, tmp_path: Path) -> None:
    """spark-submit to a cluster with no ``spark.pyspark.python``: the executors run the
    nodes' ``python3``, as Spark's default is, not the path of the driver's interpreter (a
    path of the machine that launched the job: an Airflow worker's virtualenv, say). The
    job's name and settings are spark-submit's, and no laptop default is added."""
    job = tmp_path / "node_python_job.py"
    job.write_text(NODE_PYTHON_JOB)
    home = Path(cluster.env["SPARK_HOME"])
    cmd = [home / "bin" / "spark-submit", "--master", cluster.master_url, "--py-files", wheel.wheel,
           "--name", "users-name", "--conf", "spark.sql.shuffle.partitions=7",
           "--conf", f"spark.pyspark.driver.python={wheel.python}",
           "--conf", "spark.executor.memory=1g", "--conf", "spark.cores.max=2",
           "--conf", "spark.ui.enabled=false", job]
    returncode, stdout, stderr = _submit(cmd, tmp_path, clean_env(**cluster.env), 300)
    assert returncode == 0, stderr[-6000:]
    answer = json.loads(stdout[stdout.index("{"):])
    assert answer["driver"] == str(wheel.python)
    assert answer["executors"] == [{"python": str(bare_python), "node": "yes"}] * 2
    assert answer["name"] == "users-name"
    assert answer["conf"] == {"spark.sql.shuffle.partitions": "7", "spark.ui.enabled": "false",
                              "spark.driver.maxResultSize": None}
