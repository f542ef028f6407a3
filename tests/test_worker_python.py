"""A ``PYSPARK_PYTHON`` that cannot run offsetlake's tasks is said at the run's start, in one
line that names the variable and the cause, not ~15 s in as Spark's "Failed to create Python
data source instance: Traceback ..." with the cause cut off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pipelines import __version__, spark
from pipelines.demo import generate_cluster
from pipelines.spark_python import WorkerPythonError, WorkerPythonProbe, probe_failure
from tests.support.wheel import installed_wheel, new_virtualenv

SPARK_HOME = spark._spark_home({})


def _bare_interpreter(where: Path) -> Path:
    """A virtualenv of this Python with nothing installed: no pyarrow, no offsetlake."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    return where / "bin" / "python"


def _env_without_checkout() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_this_interpreter_passes_the_probe() -> None:
    WorkerPythonProbe(sys.executable, SPARK_HOME, os.environ).check()  # raises if not


def test_an_interpreter_without_pyarrow_fails_the_probe_naming_the_module(tmp_path: Path) -> None:
    python = _bare_interpreter(tmp_path / "bare")
    with pytest.raises(WorkerPythonError) as caught:
        WorkerPythonProbe(str(python), SPARK_HOME, os.environ).check()
    message = str(caught.value)
    assert message.startswith(f"PYSPARK_PYTHON={python}: ")
    assert "No module named" in message and sys.executable in message


def test_no_such_interpreter_fails_the_probe(tmp_path: Path) -> None:
    with pytest.raises(WorkerPythonError, match="cannot be run"):
        WorkerPythonProbe(str(tmp_path / "no-python"), SPARK_HOME, os.environ).check()


@pytest.mark.slow
def test_py_files_bring_offsetlake_to_an_interpreter_that_has_only_the_dependencies(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dependencies but no offsetlake: the probe fails on ``pipelines``; with the wheel
    given to ``--py-files`` (which Spark puts on its workers' path) it passes. (Run outside
    the checkout: the probe, as Spark's workers, finds packages in the working directory.)"""
    where = tmp_path_factory.mktemp("deps")
    monkeypatch.chdir(where)
    python, _ = new_virtualenv(where / "venv")
    env = _env_without_checkout()
    with pytest.raises(WorkerPythonError, match="No module named 'pipelines'"):
        WorkerPythonProbe(str(python), SPARK_HOME, env).check()
    wheel = installed_wheel(tmp_path_factory.getbasetemp() / "wheel-install").wheel
    WorkerPythonProbe(str(python), SPARK_HOME, env, [str(wheel)]).check()


def test_the_probes_answer_is_read_as_spark_would_refuse_it() -> None:
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    fine = {"python": here, "offsetlake": __version__}
    assert probe_failure(json.dumps(fine), 0) is None
    assert "Python 3.9, not" in probe_failure(json.dumps({**fine, "python": "3.9"}), 0)
    assert "offsetlake 0.0.1, not" in probe_failure(json.dumps({**fine, "offsetlake": "0.0.1"}), 0)
    broken = {"python": here, "error": "ImportError: numpy.core.multiarray failed to import"}
    assert "numpy.core.multiarray" in probe_failure(json.dumps(broken), 0)
    assert "exit status 1" in probe_failure("", 1)


def test_only_another_interpreter_is_probed(tmp_path: Path) -> None:
    assert spark._worker_python_probe({}, None) is None
    assert spark._worker_python_probe({}, sys.executable) is None
    remote = {"spark.submit.pyFiles": "s3a://bucket/offsetlake.whl"}  # fetched by Spark: not seen here
    assert spark._worker_python_probe(remote, str(tmp_path / "other")) is None
    probe = spark._worker_python_probe({"spark.submit.pyFiles": "file:/x.whl"}, str(tmp_path / "other"))
    with pytest.raises(WorkerPythonError, match="cannot be run"):
        probe.check()


def test_submit_args_py_files_are_read() -> None:
    conf = spark.submit_conf({"PYSPARK_SUBMIT_ARGS": "--py-files a.whl,b.zip pyspark-shell"})
    assert conf["spark.submit.pyFiles"] == "a.whl,b.zip"


@pytest.mark.slow
def test_ingest_with_a_python_without_the_dependencies_fails_at_its_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=2, scale=1)
    python = _bare_interpreter(tmp_path / "bare")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK"))}
    env["PYSPARK_PYTHON"] = str(python)
    env["PYTHONPATH"] = str(Path(spark.__file__).parents[1])  # offsetlake found there, pyarrow not
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "ingest", "--source", "segments",
                          "--path", str(data), "--lake", str(tmp_path / "lake"), "--cluster-id", "c"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.strip().splitlines() == [
        f"offsetlake ingest: error: WorkerPythonError: PYSPARK_PYTHON={python}: Spark's Python workers "
        "run that interpreter, and it cannot load what offsetlake's tasks need (ModuleNotFoundError: "
        f"No module named 'pyarrow'); install offsetlake in its environment, or unset PYSPARK_PYTHON "
        f"for the workers to run this one ({sys.executable})"]
    assert not list(tmp_path.rglob("_delta_log"))  # no table written
