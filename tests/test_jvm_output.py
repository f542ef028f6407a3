"""The JVM's stdout and stderr come through pipes of the launching process
(pipelines.jvm_output): the JDK's notice for Spark's own incubator module is dropped, once,
and nothing else is lost, held back or reordered; a JVM that outlives the command never holds
the caller's pipes. The JVM is played by child processes started inside the block, as
pyspark starts its JVM; tests/test_quiet.py runs the real one."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pipelines.jvm_output import SPARK_MODULE_NOTICE, LineDropper
from tests.conftest import REPO

NOTICE = SPARK_MODULE_NOTICE


def _through(chunks: list[bytes]) -> bytes:
    dropper = LineDropper(NOTICE)
    return b"".join(dropper.feed(c) for c in chunks) + dropper.end()


@pytest.mark.parametrize("cut", range(len(NOTICE) + 8))
def test_the_notice_is_dropped_wherever_the_chunks_split_it(cut: int) -> None:
    stream = NOTICE + b"26/11/30 WARN Something: a real warning\n"
    assert _through([stream[:cut], stream[cut:]]) == b"26/11/30 WARN Something: a real warning\n"
    assert _through([bytes([b]) for b in stream]) == b"26/11/30 WARN Something: a real warning\n"


def test_only_that_line_only_once_only_whole() -> None:
    other = b"WARNING: Using incubator modules: jdk.incubator.foreign, jdk.incubator.vector\n"
    assert _through([other + NOTICE]) == other  # a user's own module is reported
    assert _through([NOTICE + NOTICE]) == NOTICE  # the JDK prints it once; a second is not its
    assert _through([b"[0.01s][warning][cds] mapped\n", NOTICE, b"x\n"]) == b"[0.01s][warning][cds] mapped\nx\n"
    mid = b"log: " + NOTICE  # not at a line's start: somebody's text
    assert _through([mid[:7], mid[7:]]) == mid
    assert _through([NOTICE[:-1]]) == NOTICE[:-1]  # never completed: given back at the end
    assert _through([NOTICE[:20], b"!\n"]) == NOTICE[:20] + b"!\n"
    assert _through([b"", b"progress\r", b"progress\r", NOTICE]) == b"progress\rprogress\r" + NOTICE


def test_nothing_is_held_that_cannot_be_the_notice() -> None:
    dropper = LineDropper(NOTICE)
    assert dropper.feed(b"[Stage 0:>   (0 + 2) / 2]\r") == b"[Stage 0:>   (0 + 2) / 2]\r"
    assert dropper.feed(b"W") == b"W"  # not at a line's start
    dropper = LineDropper(NOTICE)
    assert dropper.feed(b"WARNING: Using") == b""  # may still be it
    assert dropper.feed(b" something else\n") == b"WARNING: Using something else\n"


# A process that launches a "JVM" (a child that inherits stdout and stderr) inside the block,
# as pyspark launches its gateway, then does what the scenario says; its own stdout and
# stderr are captured by the test.
_LAUNCHER = textwrap.dedent("""
    import contextlib, os, subprocess, sys, time
    from pipelines import jvm_output
    from pipelines.jvm_output import SPARK_MODULE_NOTICE
    scenario = sys.argv[1]
    if sys.argv[2:] == ["debug"]:
        import logging
        logging.basicConfig(level=logging.DEBUG)
    jvm = {
        "quiet": "import sys; sys.stderr.buffer.write(NOTICE); sys.stderr.flush(); "
                 "print('jvm out', flush=True); sys.stderr.write('jvm err\\\\n')",
        "flood": "import sys; sys.stderr.buffer.write(NOTICE + b'e' * 2_000_000 + b'\\\\n'); "
                 "sys.stdout.write('o' * 2_000_000 + '\\\\n')",
        "lingers": "import sys, time; sys.stderr.buffer.write(NOTICE); sys.stderr.flush(); "
                   "sys.stdin.read(); print('last words', flush=True); time.sleep(30)",
        # says each line of its input on stderr, then acknowledges it on descriptor ACK
        "says": "import os, sys\\nfor line in sys.stdin:\\n    sys.stderr.write(line); sys.stderr.flush(); "
                "os.write(ACK, b'.')",
    }[scenario]
    ack_r, ack_w = os.pipe()
    with jvm_output.forwarded():
        prelude = f"NOTICE = {SPARK_MODULE_NOTICE!r}; ACK = {ack_w}; "
        child = subprocess.Popen([sys.executable, "-c", prelude + jvm],
                                 stdin=subprocess.PIPE, pass_fds=(ack_w,) if scenario == "says" else (),
                                 text=True)
        print("ours inside", flush=True)
        if scenario not in ("lingers", "says"):
            child.wait()  # pyspark waits for the gateway inside the block
    print("ours after", flush=True)
    if scenario == "says":  # what the JVM says while the caller stops it is dropped
        for line, hush in (("said before\\n", False), ("its echo\\n", True), ("said after\\n", False)):
            with jvm_output.hushed() if hush else contextlib.nullcontext():
                child.stdin.write(line)
                child.stdin.flush()
                os.read(ack_r, 1)
            time.sleep(0.2)  # the forwarder's turn
        child.stdin.close()
        child.wait()
    if scenario == "lingers":  # the JVM's last words as this process ends, then it stays on
        child.stdin.close()
        time.sleep(0.5)
    jvm_output.drain()
    sys.stdout.flush()
    os._exit(0)
""")


def _launch(scenario: str, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LAUNCHER, scenario, *extra], cwd=REPO, capture_output=True,
                          timeout=timeout, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_the_jvms_output_is_forwarded_without_the_notice() -> None:
    done = _launch("quiet")
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"jvm err\n"
    assert done.stdout.splitlines() == [b"ours inside", b"jvm out", b"ours after"]


def test_a_jvm_that_writes_much_while_launched_never_blocks() -> None:
    done = _launch("flood")  # 2 MB on each pipe before the block ends: nothing waits on a full pipe
    assert done.returncode == 0, done.stderr[-300:]
    assert done.stderr == b"e" * 2_000_000 + b"\n"
    assert done.stdout == b"ours inside\n" + b"o" * 2_000_000 + b"\nours after\n"


def test_a_jvm_that_outlives_the_command_keeps_no_pipe_of_the_caller() -> None:
    # the child sleeps 30 s after its last words: the caller gets its end of file when the
    # command ends, with those words in it (drained before os._exit)
    done = _launch("lingers", timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    assert done.stdout.splitlines() == [b"ours inside", b"ours after", b"last words"]


def test_what_the_jvm_says_while_hushed_is_dropped_and_only_that() -> None:
    done = _launch("says")
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"said before\nsaid after\n"
    done = _launch("says", "debug")  # the details are wanted then
    assert done.returncode == 0, done.stderr
    assert b"said before\nits echo\nsaid after\n" in done.stderr
