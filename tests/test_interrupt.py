"""Ctrl-C in a terminal, on a real local Spark: `offsetlake ingest` ends with one line and
status 130, and the next run ingests every record exactly once.

Why: a terminal's Ctrl-C reaches the whole process group, the JVM's Python processes
included. pyspark's own handler cancels every job, py4j logged the interrupted batch's
page-long traceback, and while the query stopped, Spark 4.2's check of that error (a regex
over its text) overflowed the stream thread's stack: ~1,200 lines of traces above the
command's "interrupted", one run in two (pipelines.jvm_output.hushed, pipelines.cli).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import spark as spark_module
from pipelines.lake.engines import make_engine
from tests.conftest import REPO
from tests.support.generated import generated_scenario


def _ingest(data: Path, lake: Path, *extra: str, env_extra: dict[str, str] | None = None,
            batch_records: int | None = 300, **popen) -> subprocess.Popen:
    """``offsetlake ingest`` of ``data`` into ``lake`` in micro-batches of ``batch_records``
    (many batches: time to interrupt one; None: the default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETLAKE_SPARK_")}
    env.update(PYTHONPATH=str(REPO), **(env_extra or {}))
    batches = ["--max-records-per-batch", str(batch_records)] if batch_records else []
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *extra, "ingest", "--source", "segments",
                             "--path", str(data), "--lake", str(lake), *batches],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _read_until(run: subprocess.Popen, marker: str) -> None:
    """Read the run's standard error up to the first line holding ``marker`` (a batch's
    log line: the moment to send the signal)."""
    seen = []
    for line in run.stderr:
        seen.append(line)
        if marker in line:
            return
    pytest.fail("the run ended before " + marker + ": " + "".join(seen)[-2000:])


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated cluster's segment files, shared by this module's runs (read only)."""
    return generated_scenario(tmp_path_factory.mktemp("gen")) / "segments"


@pytest.fixture(scope="module")
def whole(generated: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lake of one uninterrupted run over :func:`generated`, made once for the module,
    in the default micro-batches (the interrupted runs cut theirs at 300 records: their
    resumed lakes must not depend on where batches were cut either)."""
    lake = tmp_path_factory.mktemp("whole") / "lake"
    straight = _ingest(generated, lake, batch_records=None)
    _, err = straight.communicate(timeout=600)
    assert straight.returncode == 0, err[-3000:]
    return lake


def _rerun_equals_one_whole_run(data: Path, lake: Path, whole: Path) -> None:
    """The next run over the stopped one's lake ends as one uninterrupted run of the same
    files does, and holds no record twice."""
    again = _ingest(data, lake)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    for table in ("offsets_raw", "group_generations", "committed_offsets"):
        resumed = make_engine("delta-rs", str(lake)).read(table)
        expected = make_engine("delta-rs", str(whole)).read(table)
        assert resumed.num_rows == expected.num_rows > 0, table
    raw = make_engine("delta-rs", str(lake)).read("offsets_raw")
    keys = list(zip(raw.column("offsets_partition").to_pylist(), raw.column("offset").to_pylist(), strict=True))
    assert len(keys) == len(set(keys))  # no record twice


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("after", ["batch 1:", "batch 3:"])
def test_ctrl_c_ends_ingest_in_one_line_and_loses_nothing(tmp_path: Path, after: str, generated: Path,
                                                          whole: Path) -> None:
    data, lake = generated, tmp_path / "lake"
    # our batch lines (INFO), to time the key; the JVM as quiet as by default (no progress bar)
    run = _ingest(data, lake, "--log-level", "INFO", start_new_session=True)
    _read_until(run, after)
    os.killpg(run.pid, signal.SIGINT)  # what a terminal does
    _, rest = run.communicate(timeout=300)
    assert run.returncode == 130, rest[-3000:]
    assert rest.splitlines()[-1] == "offsetlake ingest: interrupted"
    noise = [line for line in rest.splitlines() if "Traceback" in line or "Exception" in line
             or line.startswith("\tat ") or "ERROR" in line]
    assert noise == [], rest[-3000:]

    _rerun_equals_one_whole_run(data, lake, whole)


def _in_session(sid: int) -> list[int]:
    """The processes of session ``sid`` (zombies aside)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):  # gone meanwhile
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _assert_session_ends(sid: int) -> None:
    """Every process of session ``sid`` ends within 30 s (any left is killed, not to be left
    to the next test either)."""
    deadline = time.monotonic() + 30
    while _in_session(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _in_session(sid)
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in left]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], commands


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.8, 1.4])
def test_ctrl_c_while_the_jvm_starts_leaves_no_process(tmp_path: Path, delay: float, generated: Path) -> None:
    """Ctrl-C while pyspark waits for the JVM's port: pyspark removes the directory the JVM
    is to write it to, the JVM's main thread dies of it, and py4j's server thread (no
    daemon) kept the JVM alive for good. Now the launch is ended with the command."""
    data = generated
    run = _ingest(data, tmp_path / "lake", start_new_session=True)
    time.sleep(delay)
    os.killpg(run.pid, signal.SIGINT)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 130, err[-3000:]
    assert err == "offsetlake ingest: interrupted\n"
    _assert_session_ends(run.pid)


#: the CLI with a terminal's Ctrl-C sent 50 ms into the JVM's making of the SparkSession
#: (~0.5 s here): after pyspark's context started, so its SIGINT handler was set
CTRL_C_WHILE_THE_SESSION_IS_MADE = """
import os, signal, sys, threading
from pyspark.sql import session
made = session.SparkSession.__init__
def making(self, *args, **kwargs):
    threading.Timer(0.05, os.killpg, (0, signal.SIGINT)).start()
    session.SparkSession.__init__ = made
    return made(self, *args, **kwargs)
session.SparkSession.__init__ = making
from pipelines.cli import run
run(sys.argv[1:])
"""


@pytest.mark.spark
@pytest.mark.slow
def test_ctrl_c_while_the_session_is_made_ends_in_one_line(tmp_path: Path, generated: Path) -> None:
    """pyspark's handler cancelled every job through py4j from inside the main thread's own
    read of py4j's socket: "reentrant call", an ERROR with a traceback, the JVM's connection
    lost and exit 1 (every Ctrl-C 2.9-3.3 s into an ingest here). Now the session is made
    with the Ctrl-C held, and raised after (pipelines.spark._get_or_create)."""
    data = generated
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETLAKE_SPARK_")}
    env.update(PYTHONPATH=str(REPO))
    run = subprocess.Popen([sys.executable, "-c", CTRL_C_WHILE_THE_SESSION_IS_MADE, "ingest", "--source",
                            "segments", "--path", str(data), "--lake", str(tmp_path / "lake"),
                            "--max-records-per-batch", "300"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 130, err[-3000:]
    assert err == "offsetlake ingest: interrupted\n"
    _assert_session_ends(run.pid)


@pytest.mark.spark
@pytest.mark.slow
def test_a_schedulers_sigterm_ends_ingest_and_leaves_nothing(tmp_path: Path, generated: Path,
                                                             whole: Path) -> None:
    """Airflow stops a task (a timeout, "mark failed") with SIGTERM to its process group: the
    run ends by it at once, no process of it lives on and nothing of it stays in the
    temporary directory (the fork server's socket directory did, and a server that got the
    signal while it imported lived on), and the next run finishes exactly once."""
    data = generated
    lake, scratch = tmp_path / "lake", tmp_path / "tmp"
    scratch.mkdir()
    run = _ingest(data, lake, "--log-level", "INFO", start_new_session=True,
                  env_extra={"TMPDIR": str(scratch), "SPARK_LOCAL_DIRS": str(scratch)})  # Spark's too
    _read_until(run, "batch 2:")
    os.killpg(run.pid, signal.SIGTERM)
    run.communicate(timeout=300)
    assert run.returncode == -signal.SIGTERM
    _assert_session_ends(run.pid)
    assert sorted(p.name for p in scratch.iterdir()) == []

    _rerun_equals_one_whole_run(data, lake, whole)


def test_a_failed_launch_ends_only_its_own_processes(tmp_path: Path) -> None:
    """What is killed after a failed launch: this process' children that run Spark's launch
    scripts or its JVM and started since the launch began; a caller's own spark-submit
    started before it is left alone."""
    def launch_like(name: str) -> subprocess.Popen:  # a child whose command line names it
        return subprocess.Popen(["sh", "-c", "sleep 60", f"/opt/spark/bin/{name}"])

    callers = launch_like("spark-submit")
    time.sleep(0.1)
    began = spark_module._ticks_since_boot()
    time.sleep(0.05)
    ours, other = launch_like("spark-class"), subprocess.Popen(["sleep", "60"])
    try:
        spark_module._end_failed_launch(began)
        ours.wait(timeout=10)  # it sleeps 60 s unless killed (and reaped: no status to see)
        assert callers.poll() is None and other.poll() is None
    finally:
        for proc in (callers, ours, other):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("ctrl_c", [True, False])
def test_a_lost_jvm_after_ctrl_c_is_reported_as_the_interrupt(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture, ctrl_c: bool) -> None:
    """A terminal's Ctrl-C reaches the JVM too: when it ends first, the call the main thread
    was in fails with a lost connection. After our Ctrl-C handler ran, that is the
    interrupt (130, one line); without a Ctrl-C the same failure is a failure (1)."""
    from pipelines.cli import common, decode, main

    def lost_jvm(args) -> int:
        if ctrl_c:
            with pytest.raises(KeyboardInterrupt):
                common._interrupt(signal.SIGINT, None)  # what plain_ctrl_c() installs
        try:
            raise ConnectionError("Answer from Java side is empty")
        except ConnectionError:  # py4j logs its retry on the root logger, at INFO (CI, 6d310d0)
            logging.info("Exception while sending command.", exc_info=True)
            raise

    monkeypatch.setattr(decode, "cmd_decode", lost_jvm)
    root = logging.getLogger()
    # as basicConfig would make them (pytest's handlers on the root make it a no-op)
    handler, level = logging.StreamHandler(sys.stderr), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        code = main(["--log-level", "INFO", "decode", str(Path(__file__))])
    finally:
        common.INTERRUPTED.clear()
        root.removeHandler(handler)
        root.setLevel(level)
    err = capsys.readouterr().err.strip().splitlines()
    if ctrl_c:
        assert (code, err) == (130, ["offsetlake decode: interrupted"])
    else:
        assert code == 1  # the retry py4j logs is kept: no Ctrl-C explains it
        assert "Exception while sending command." in "\n".join(err)
        assert err[-1].startswith("offsetlake decode: failed: ConnectionError: Answer from Java side is empty")
