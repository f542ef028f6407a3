"""The CLI's own local session runs its Python workers without pandas, forked from a daemon
that imported the decoding tasks' modules; any other session's workers keep pandas and
Spark's own daemon.

Why: pyarrow's first question (``pa.array``) imports pandas when it is installed, and the
segment reader's and the decoding task's workers each paid ~0.2 s for it on the path of a
short run's first batch, and each worker imported the decoder again (~0.45 s; forked from
``pipelines.spark_daemon`` it starts with them). The CLI's session runs only offsetlake's
code, so
``spark_session(own_workers=True)`` tells the JVM it launches; a session a user builds (or
reuses) is left alone, since their own pandas UDFs may run in the same workers.

Each case is a fresh process that starts a real local Spark, as the CLI does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import json, os, sys
from pipelines.spark import spark_session
from pipelines.without_pandas import WORKERS_WITHOUT_PANDAS

def task(batches):
    import importlib, os, sys
    preloaded = "pipelines.history.parts" in sys.modules  # before this task imports anything
    daemon = sys.modules["__main__"].__spec__.name  # forked from `python -m <daemon module>`
    with open(f"/proc/{os.getppid()}/stat") as fh:  # the daemon's own parent
        daemon_parent = int(fh.read().rsplit(")", 1)[1].split()[1])
    with open(f"/proc/{daemon_parent}/cmdline", "rb") as fh:
        daemon_parent = fh.read().split(b"\\0")[2].decode()  # the JVM's: -cp; the fork server's: -m
    import pipelines  # as unpickling any of offsetlake's task code does, first
    import pyarrow as pa
    values = pa.array([1, 2, 3], pa.int64())  # pyarrow's first question, as the decoder asks it
    try:
        importlib.import_module("pandas")
        importable = True
    except ImportError:
        importable = False
    for b in batches:
        yield pa.RecordBatch.from_pydict({"pandas_loaded": ["pandas" in sys.modules],
                                          "pandas_importable": [importable],
                                          "sum": [sum(values.to_pylist())],
                                          "preloaded": [preloaded], "daemon": [daemon],
                                          "daemon_parent": [daemon_parent],
                                          "blas_threads": [os.environ.get("OPENBLAS_NUM_THREADS")]})

spark = spark_session("probe", master="local[1]", own_workers=sys.argv[1] == "own")
row = spark.range(1, numPartitions=1).mapInArrow(
    task, "pandas_loaded boolean, pandas_importable boolean, sum long, preloaded boolean, daemon string, "
          "daemon_parent string, blas_threads string").collect()[0]
print(json.dumps({"worker": row.asDict(), "driver_env": WORKERS_WITHOUT_PANDAS in os.environ,
                  "driver_pandas_importable": __import__("importlib").util.find_spec("pandas") is not None}))
spark.stop()
"""


def _probe(how: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, how], capture_output=True, text=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["own", "user"])
def test_only_the_clis_own_session_runs_its_workers_without_pandas(how: str) -> None:
    seen = _probe(how)
    assert seen["worker"]["sum"] == 6  # pyarrow answers either way
    if how == "own":
        assert seen["worker"]["pandas_loaded"] is False
        assert seen["worker"]["pandas_importable"] is False
        assert seen["worker"]["daemon"] == "pipelines.spark_daemon"
        assert seen["worker"]["daemon_parent"] == "pipelines.spark_fork_server"
        assert seen["worker"]["preloaded"] is True
        assert seen["worker"]["blas_threads"] == "1"
    else:
        assert seen["worker"]["pandas_importable"] is True
        assert seen["worker"]["daemon"] == "pyspark.daemon"
        assert seen["worker"]["daemon_parent"] != "pipelines.spark_fork_server"
        assert seen["worker"]["preloaded"] is False
    # the flag reaches only the JVM launched for the session, never this process' own children
    assert seen["driver_env"] is False
    assert seen["driver_pandas_importable"] is True


def test_a_daemon_module_the_user_chose_stands() -> None:
    """``spark.python.daemon.module`` given by the user (here through spark-submit's
    arguments) is theirs: the CLI's session keeps it, and its workers still run without
    pandas."""
    seen = _probe("own", {"PYSPARK_SUBMIT_ARGS": "--conf spark.python.daemon.module=pyspark.daemon pyspark-shell"})
    assert seen["worker"]["daemon"] == "pyspark.daemon"
    assert seen["worker"]["preloaded"] is False
    assert seen["worker"]["pandas_loaded"] is False


def test_the_daemon_serves_even_when_an_import_ahead_fails(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A module the daemon cannot import ahead does not stop it: it says so on its standard
    error (Spark's log) and serves its workers, whose tasks import the module themselves and
    fail with their own traceback, as without the daemon."""
    import pyspark.daemon

    from pipelines import spark_daemon, spark_workers
    from pipelines.without_pandas import WORKERS_WITHOUT_PANDAS

    served: list[bool] = []
    monkeypatch.setattr(spark_workers, "TASK_MODULES", ("pipelines.no_such_module",))
    monkeypatch.setattr(pyspark.daemon, "manager", lambda: served.append(True))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")  # the user's setting stands
    monkeypatch.delenv(WORKERS_WITHOUT_PANDAS, raising=False)  # this process keeps its pandas
    spark_daemon.main()
    assert served == [True]
    assert "could not import pipelines.no_such_module ahead" in capsys.readouterr().err
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
