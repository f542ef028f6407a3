"""offsetlake's fork server (pipelines.spark_fork_server) and its client, through the installed
``offsetlake-spark-python`` as Spark runs it: a ``-m`` command forked from the server behaves
as ``python -m`` run fresh (output, input, arguments, directory, environment, path, exit
status, signals), and where the server cannot serve, Python runs as before.

Why: a local session starts five Python processes one after the other before a run's first
record is read, each importing pyspark again; forked from one process that imported it
once they start in milliseconds (the real workload: ~0.5 s less per run). Spark must not see
a difference. The whole path, a real local session whose processes come from the server,
is tests/test_own_workers.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines import spark_fork_server, spark_python
from tests.conftest import REPO

PROBE = """
import json, os, sys, time
if os.environ.get("PROBE_WAIT"):
    print(json.dumps({"pid": os.getpid()}), flush=True)
    for _ in range(1200):  # short sleeps: a signal caught just before a sleep's system call
        time.sleep(0.05)  # does not interrupt it (CPython), and a long one would hide it
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                  "stdin": sys.stdin.read(), "main": __name__, "spec": __spec__.name,
                  "path_has_probe_dir": os.environ["PROBE_DIR"] in sys.path,
                  "hash_seed": os.environ.get("PYTHONHASHSEED"), "pid": os.getpid()}))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture
def server(tmp_path: Path):
    """A running server (as ``start`` runs it for a session) and the environment that the JVM
    would give ``offsetlake-spark-python``: the launcher's variables, Spark's settings, the
    starter's PYTHONPATH (here with a directory of probe modules)."""
    launcher = spark_python.launcher()
    assert launcher is not None, "offsetlake-spark-python is installed with the package"
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "probe_mod.py").write_text(PROBE)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETLAKE_SPARK")}
    base["PYTHONPATH"] = os.pathsep.join([str(modules), *filter(None, [os.environ.get("PYTHONPATH")])])
    served = spark_fork_server.start(base)
    assert set(served) == {spark_fork_server.SERVER_ENV, spark_fork_server.CLIENT_ENV}
    env = {**base, **served, "OFFSETLAKE_SPARK_PYTHON": sys.executable, "PYTHONHASHSEED": "0",
           "PYTHONUNBUFFERED": "YES", "PROBE_DIR": str(modules)}
    deadline = time.monotonic() + 60  # the server binds its socket at once, then imports
    while not Path(served[spark_fork_server.SERVER_ENV]).exists():
        assert time.monotonic() < deadline, "the fork server never bound its socket"
        time.sleep(0.05)
    yield launcher, env, spark_fork_server._started[-1].pid
    spark_fork_server.stop()


def _run(command: list[str], env: dict[str, str], cwd: Path, **extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run(command, env={**env, **extra}, cwd=cwd, input="what Spark writes",
                          capture_output=True, text=True, timeout=120)
    return done, json.loads(done.stdout)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_module_forked_by_the_server_runs_as_python_m_would(server, tmp_path: Path) -> None:
    launcher, env, server_pid = server
    args = ["-m", "probe_mod", "pyspark.sql.worker.lookup_data_sources", "x y"]
    forked, seen = _run([launcher, *args], env, tmp_path, PROBE="secret-free value", PROBE_EXIT="3")
    fresh, expected = _run([sys.executable, *args], env, tmp_path, PROBE="secret-free value", PROBE_EXIT="3")
    assert forked.returncode == fresh.returncode == 3
    assert forked.stderr == fresh.stderr == "to stderr\n"
    assert seen.pop("pid") != expected.pop("pid")
    assert seen == expected == {
        "argv": ["pyspark.sql.worker.lookup_data_sources", "x y"], "cwd": str(tmp_path),
        "probe": "secret-free value", "stdin": "what Spark writes", "main": "__main__",
        "spec": "probe_mod", "path_has_probe_dir": True, "hash_seed": "0"}
    assert _forked_by(launcher, env, tmp_path) == server_pid


def _forked_by(launcher: str, env: dict[str, str], cwd: Path, **extra: str) -> int | None:
    """The parent of the probe's process, asked while it runs; None when the probe runs in
    the very process the launcher started (it ran Python itself)."""
    proc = subprocess.Popen([launcher, "-m", "probe_mod"], env={**env, "PROBE_WAIT": "1", **extra}, cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        pid = json.loads(proc.stdout.readline())["pid"]
        return None if pid == proc.pid else _parent(pid)
    finally:
        proc.kill()
        proc.wait(timeout=60)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_reach_the_child_and_its_end_is_the_clients(server, tmp_path: Path, signum: int) -> None:
    """SIGTERM as Process.destroy() sends it; SIGINT as a terminal's Ctrl-C (the server
    itself ignores it and serves on)."""
    launcher, env, server_pid = server
    ends = {}
    for how, command in (("fresh", [sys.executable, "-m", "probe_mod"]), ("forked", [launcher, "-m", "probe_mod"])):
        proc = subprocess.Popen(command, env={**env, "PROBE_WAIT": "1"}, cwd=tmp_path, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        child = json.loads(proc.stdout.readline())["pid"]
        assert (child != proc.pid) == (how == "forked")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        ends[how] = (proc.returncode, err.strip().splitlines()[-1:] if err.strip() else [])
        assert not _still_running(child)
    assert ends["forked"] == ends["fresh"]
    assert ends["fresh"][0] == -signum  # `python -m` ends by the signal (after KeyboardInterrupt's traceback)
    if signum == signal.SIGINT:
        os.kill(server_pid, signal.SIGINT)
        assert _forked_by(launcher, env, tmp_path) == server_pid


def test_a_terminals_ctrl_c_ends_a_child_once(server, tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches a forked child twice: from the terminal (the whole
    process group) and forwarded by its client. The child must end as a fresh process
    given one SIGINT does (one KeyboardInterrupt traceback, then by the signal), however
    close the two come; a second traceback, printed while the first unwound, was the noise
    of one interrupted run in three."""
    launcher, env, _ = server
    for delay in (0, 0.001, 0.002, 0.005, 0.01, 0.02) * 3:
        proc = subprocess.Popen([launcher, "-m", "probe_mod"], env={**env, "PROBE_WAIT": "1"}, cwd=tmp_path,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        child = json.loads(proc.stdout.readline())["pid"]
        os.kill(child, signal.SIGINT)  # the terminal's
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)  # the client's, forwarded
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGINT, (delay, err)
        assert err.count("Traceback") == 1 and err.strip().splitlines()[-1] == "KeyboardInterrupt", (delay, err)


def _still_running(pid: int) -> bool:
    """Whether ``pid`` still runs after a while (gone, or a zombie its parent has yet to
    reap, is not running)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
            return False
        if state == "Z":
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("server_ends_next", [False, True])
def test_a_killed_client_takes_its_child_with_it(server, tmp_path: Path, server_ends_next: bool) -> None:
    """Also when the server's own end is seen at the same time (the CLI's process ended just
    after the JVM's): the child lived on, a minute here, and wrote to a closed pipe."""
    launcher, env, server_pid = server
    proc = subprocess.Popen([launcher, "-m", "probe_mod"], env={**env, "PROBE_WAIT": "1"}, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    child = json.loads(proc.stdout.readline())["pid"]
    assert _parent(child) == server_pid
    proc.kill()  # SIGKILL: nothing to forward; the server sees the client's end
    proc.wait(timeout=60)
    if server_ends_next:
        spark_fork_server.stop()
    assert not _still_running(child)


def test_where_the_server_cannot_serve_python_runs_as_before(server, tmp_path: Path) -> None:
    launcher, env, server_pid = server
    # other interpreter settings than the server's: a fork could not honour them
    assert _forked_by(launcher, env, tmp_path, PYTHONHASHSEED="7") is None
    done, seen = _run([launcher, "-m", "probe_mod"], env, tmp_path, PYTHONHASHSEED="7")
    assert done.returncode == 0 and seen["hash_seed"] == "7" and seen["stdin"] == "what Spark writes"
    # a PYTHONPATH entry the server does not have (a Spark's own pyspark zip, --py-files):
    # modules it imported could be other ones than a fresh interpreter would find
    other = tmp_path / "other"
    other.mkdir()
    (other / "probe_mod.py").write_text(PROBE.replace("to stderr", "other probe"))
    elsewhere = {**env, "PYTHONPATH": os.pathsep.join([str(other), env["PYTHONPATH"]])}
    assert _forked_by(launcher, elsewhere, tmp_path) is None
    done = subprocess.run([launcher, "-m", "probe_mod"], env=elsewhere, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "other probe\n"
    # no server at the path: the launcher runs Python itself, the same process
    gone = {**env, spark_fork_server.SERVER_ENV: str(tmp_path / "no-server")}
    assert _forked_by(launcher, gone, tmp_path) is None
    done, seen = _run([launcher, "-m", "probe_mod", "a"], gone, tmp_path, PROBE_EXIT="2")
    assert done.returncode == 2 and seen["argv"] == ["a"]
    # not a `-m` command: never sent to the server
    done = subprocess.run([launcher, "-c", "import os; print(os.getppid())"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and int(done.stdout) != server_pid


def test_the_server_ends_with_the_process_that_started_it(server) -> None:
    _, env, server_pid = server
    socket_path = Path(env[spark_fork_server.SERVER_ENV])
    spark_fork_server.stop()  # its standard input closes, as when the CLI's process ends
    assert not _still_running(server_pid)
    assert not socket_path.parent.exists()


def test_a_schedulers_sigterm_ends_the_server_and_its_directory(server) -> None:
    """Airflow stops a task with SIGTERM to its process group: the server ends by it, its
    socket's directory removed (one was left behind per stopped run)."""
    _, env, server_pid = server
    socket_path = Path(env[spark_fork_server.SERVER_ENV])
    started = spark_fork_server._started[-1]
    os.kill(server_pid, signal.SIGTERM)
    assert started.wait(timeout=60) == -signal.SIGTERM
    assert not socket_path.parent.exists()


_SIGTERM_AT_BIND = """
import os, signal, socket, sys
from pipelines import spark_fork_server

class Socket(socket.socket):
    def bind(self, address):  # SIGTERM lands as bind returns: the handler runs right there
        super().bind(address)
        os.kill(os.getpid(), signal.SIGTERM)

spark_fork_server.socket.socket = Socket
spark_fork_server.main(sys.argv[1])
"""


def test_a_sigterm_as_the_server_binds_its_socket_ends_it_cleanly(tmp_path: Path) -> None:
    """A scheduler's SIGTERM that lands as the server has just bound its socket (a caller
    sees the socket and stops the run: CI, once under load) raised outside the server's
    cleanup: a traceback, exit status 1 and the socket's directory left behind. It ends the
    server as a SIGTERM anywhere else does."""
    folder = tmp_path / "forks"
    folder.mkdir()
    probe = tmp_path / "probe.py"
    probe.write_text(_SIGTERM_AT_BIND)
    done = subprocess.run([sys.executable, str(probe), str(folder / "socket")], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert not folder.exists()  # its socket and the socket's directory removed


def _imported(line: str) -> str | None:
    """The module an ``-X importtime`` line reports imported."""
    return line.rsplit("|", 1)[-1].strip() if line.startswith("import time:") else None


def test_a_sigterm_during_the_servers_imports_ends_it_too(tmp_path: Path) -> None:
    """SIGTERM most often lands while the server imports pyspark and pyarrow ahead: the
    preload's ``except Exception`` (and libraries' around their optional imports) took it
    for a failed import, and the server served on until its caller ended (CI: a 60 s wait,
    then a failure). Sent here once Python reports (``-X importtime``) the module naming the
    preload's list imported: the preload's imports still to come, as a run without the
    signal shows."""
    ends: dict[str, tuple[int | None, set[str]]] = {}
    for run in ("unsignalled", "signalled"):
        folder = tmp_path / run
        folder.mkdir()
        server = subprocess.Popen([sys.executable, "-m", spark_fork_server.__name__, str(folder / "socket")],
                                  env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
                                  stdin=subprocess.DEVNULL if run == "unsignalled" else subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(60, server.kill)  # whatever happens, the reads below end
        watchdog.start()
        try:
            assert "pipelines.spark_workers" in map(_imported, server.stderr)  # read up to it
            if run == "signalled":
                os.kill(server.pid, signal.SIGTERM)
            rest = server.stderr.read()
            ends[run] = (server.wait(timeout=60), {_imported(ln) for ln in rest.splitlines()} - {None})
        finally:
            watchdog.cancel()
            if server.poll() is None:
                server.kill()
                server.wait()
        assert "could not import" not in rest
        assert not folder.exists()  # its socket and the socket's directory removed
    (code, preloaded), (signalled_code, reported) = ends["unsignalled"], ends["signalled"]
    assert code == 0 and "pyspark.worker_util" in preloaded  # preloaded, then its lifeline ended
    assert signalled_code == -signal.SIGTERM
    assert preloaded - reported, "the preload had ended when the signal came: this test proved nothing"
