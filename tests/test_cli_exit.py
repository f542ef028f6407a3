"""The CLI's exit after a Spark command (pipelines.cli.run): the driver's accumulator server is
let go instead of waited for (its handler polls once a second), and nothing of it stays behind.
The whole path, a real ingest process ending with status 0 and nothing but its summary, is
tests/test_quiet.py::test_ingest_prints_only_its_summary. Before the command, run() gives BLAS one
thread unless the user chose (a fresh process: numpy must not be imported before that), and
``ingest`` launches its JVM before pyarrow loads pandas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.accumulators import _start_update_server

from pipelines.cli.common import _release_accumulator_server


def test_a_unix_socket_accumulator_server_is_released_and_its_socket_removed() -> None:
    # a short path: Unix socket paths are limited to ~100 bytes
    path = Path(tempfile.mkdtemp(prefix="ol-")) / "acc.sock"
    server = _start_update_server("token", is_unix_domain_sock=True, socket_path=str(path))
    try:
        assert path.exists()
        context = SimpleNamespace(_accumulatorServer=server)
        _release_accumulator_server(context)
        assert context._accumulatorServer is None  # SparkContext.stop skips its shutdown
        assert server.server_shutdown  # a connected handler stops at its next poll
        assert not path.exists()
    finally:
        server.shutdown()
        server.server_close()
        os.rmdir(path.parent)


def test_a_tcp_accumulator_server_is_released() -> None:
    server = _start_update_server("token", is_unix_domain_sock=False)
    try:
        context = SimpleNamespace(_accumulatorServer=server)
        _release_accumulator_server(context)
        assert context._accumulatorServer is None and server.server_shutdown
    finally:
        server.shutdown()
        server.server_close()


def test_a_context_without_a_server_is_left_alone() -> None:
    context = SimpleNamespace(_accumulatorServer=None)
    _release_accumulator_server(context)
    assert context._accumulatorServer is None


REPO = Path(__file__).resolve().parents[1]
# run() ends the process with os._exit: the probe's main records what the command would see
_BLAS_PROBE = """
import json, os, sys
import pipelines.cli as cli
seen = {"numpy_imported_by_the_cli_module": "numpy" in sys.modules}
def main(argv, standalone=False):
    seen["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS")
    seen["numpy_imported_before_the_command"] = "numpy" in sys.modules
    return 0
cli.main = main
real_exit = os._exit
def report(code):
    sys.stdout.write(json.dumps(seen))
    sys.stdout.flush()
    real_exit(code)
os._exit = report
cli.run(["decode", "--stats", "."])
"""


@pytest.mark.parametrize(("user", "expected"), [(None, "1"), ("4", "4")])
def test_run_gives_blas_one_thread_before_numpy_unless_the_user_chose(user: str | None,
                                                                      expected: str) -> None:
    """numpy's OpenBLAS starts a thread per core at import that spins ~0.1 s of CPU; the
    setting reaches the command and the local JVM's Python processes only if it is made
    before numpy's first import."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(REPO)
    if user is not None:
        env["OPENBLAS_NUM_THREADS"] = user
    proc = subprocess.run([sys.executable, "-c", _BLAS_PROBE], capture_output=True, env=env,
                          cwd=REPO, timeout=120, check=True)
    assert json.loads(proc.stdout) == {"numpy_imported_by_the_cli_module": False,
                                       "blas_threads": expected,
                                       "numpy_imported_before_the_command": False}


def test_the_ingest_command_starts_its_jvm_before_pyarrow_loads_pandas() -> None:
    """pyarrow's first ``pa.array`` imports pandas (~0.2 s; pyspark's ``mapInArrow`` needs
    it later): the modules ``offsetlake ingest`` loads before it launches its JVM must not
    ask, so that the import happens beside the JVM's start, not before it."""
    probe = ("import sys\n"
             "import pipelines.cli\n"
             "from pipelines.cli.common import check_schemas\n"
             "from pipelines.arrow_memory import use_offsetlake_pool\n"
             "check_schemas(); use_offsetlake_pool()\n"
             "import pipelines.cli.ingest, pipelines.ingest, pipelines.spark\n"
             "print('pandas' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=True)
    assert proc.stdout.strip() == "False"


_GATEWAY_PROBE = """
import json, socket, sys, time
from pipelines.cli import stop_spark
from pipelines.spark import spark_session
spark = spark_session("offsetlake-test-exit", master="local[1]")
gateway = spark.sparkContext._gateway
port = gateway.gateway_parameters.port
launched = gateway.proc is not None
stop_spark()
accepting = True
deadline = time.monotonic() + 30  # py4j sends the shutdown and does not wait for the JVM
while accepting and time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        time.sleep(0.01)
    except ConnectionRefusedError:
        accepting = False
sys.stdout.write(json.dumps({"launched": launched, "accepting": accepting,
                             "jvm_running": gateway.proc.poll() is None}))
"""


def test_stop_spark_closes_the_gateway_of_a_jvm_it_launched() -> None:
    """A JVM exits when its Python ends, but Java 17 first waits up to 300 ms for threads
    blocked in native calls: py4j's server thread in ``accept`` is one until its socket
    closes. After :func:`stop_spark` the gateway stops accepting (the JVM itself still runs:
    it ends with this process, or writes its class archive first). Without it, the gateway
    accepts until the process ends."""
    proc = subprocess.run([sys.executable, "-c", _GATEWAY_PROBE], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "launched": True, "accepting": False, "jvm_running": True}


def test_stop_spark_leaves_the_gateway_of_a_jvm_it_did_not_launch(monkeypatch) -> None:
    """Under spark-submit the JVM started Python (the gateway has no process of ours): the
    session is stopped, the gateway is spark-submit's to end."""
    from pyspark.sql import SparkSession

    from pipelines.cli import stop_spark

    calls: list[str] = []
    gateway = SimpleNamespace(shutdown=lambda: calls.append("gateway.shutdown"))
    context = SimpleNamespace(_gateway=gateway, _accumulatorServer=None)
    session = SimpleNamespace(sparkContext=context, stop=lambda: calls.append("session.stop"))
    monkeypatch.setattr(SparkSession, "getActiveSession", staticmethod(lambda: session))
    stop_spark()
    assert calls == ["session.stop"]
    gateway.proc = object()  # launched by this process
    stop_spark()
    assert calls == ["session.stop", "session.stop", "gateway.shutdown"]


def test_py4j_closing_a_connection_a_ctrl_c_cut_is_its_echo_only_after_a_ctrl_c(monkeypatch) -> None:
    """py4j's ERROR when it closes the connection a Ctrl-C cut (the JVM's end already gone:
    BrokenPipeError) came above "interrupted" one run in ~10 with a Ctrl-C ~3.7 s into an
    ingest; without a Ctrl-C the same line is a real failure and is kept."""
    import logging
    import threading

    from pipelines import cli

    record = logging.LogRecord("py4j.clientserver", logging.ERROR, __file__, 1,
                               "Exception occurred while shutting down connection", None, None)
    monkeypatch.setattr(cli, "INTERRUPTED", threading.Event())
    assert cli._not_an_echo(record)
    cli.INTERRUPTED.set()
    assert not cli._not_an_echo(record)
