"""A Ctrl-C while a Spark session starts is raised once the start is cut short, never at
a line where Python would lose it or leave a lock taken (pipelines.ctrl_c).

Each case runs in its own interpreter, the Ctrl-C arriving at the very moment that hung
``offsetlake ingest`` (CI, 2026-12-01, and a loop of Ctrl-Cs): during a fork with a
``preexec_fn`` (pyspark's launch of the JVM), and while the main thread waits for the import
lock another thread holds. Each also runs bare, to show the case is that moment: there
Python loses the interrupt or leaves a lock taken (should a later Python stop doing so, the
bare case fails and the deferral may go).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

PRELUDE = textwrap.dedent("""
    import _imp, _thread, contextlib, os, signal, subprocess, sys, threading, time
    assert "logging" not in sys.modules
    if sys.argv[1] == "during-fork":  # tripped after the fork, before logging's own hook runs
        os.register_at_fork(after_in_parent=_thread.interrupt_main)
    import logging
    from pipelines.ctrl_c import ctrl_c_deferred
    cut = threading.Event()
    def block_():
        return ctrl_c_deferred(cut.set) if sys.argv[2] == "deferred" else contextlib.nullcontext()
    block = block_()
    began = time.monotonic()

    def wait_until_cut():  # pyspark's wait for the JVM's port, which ending the JVM ends
        while not cut.is_set() and time.monotonic() < began + 2:
            time.sleep(0.005)

    def free(lock_user):
        other = threading.Thread(target=lock_user, daemon=True)
        other.start()
        other.join(2)
        return "taken" if other.is_alive() else "free"
""")

ENDING = textwrap.dedent("""
    print("handler restored:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    print("logging lock:", free(lambda: logging.getLogger("other")))
    print("import lock:", free(lambda: __import__("json.decoder")))
""")


def _run(body: str, when: str, mode: str) -> tuple[list[str], str]:
    code = PRELUDE + textwrap.dedent("""
        try:
            with block:
        {body}
            print("not interrupted")
        except KeyboardInterrupt:
            print(f"interrupted after {{time.monotonic() - began:.3f}} s, cut short: {{cut.is_set()}}")
    """).format(body=textwrap.indent(textwrap.dedent(body), " " * 8)) + ENDING
    done = subprocess.run([sys.executable, "-c", code, when, mode], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines(), done.stderr


FORK = """
    subprocess.Popen(["true"], preexec_fn=lambda: None).wait()
    wait_until_cut()
"""

IMPORT_LOCK = """
    held = threading.Event()
    def hold_the_import_lock():
        _imp.acquire_lock()
        held.set()
        time.sleep(0.2)  # the main thread now waits for it
        _thread.interrupt_main()  # the Ctrl-C
        time.sleep(0.1)
        _imp.release_lock()
    threading.Thread(target=hold_the_import_lock).start()
    held.wait()
    import csv  # not imported yet: the import lock is needed
    wait_until_cut()
"""

RESTORED = ["handler restored: True", "logging lock: free", "import lock: free"]


def _elapsed(line: str) -> float:
    return float(line.split()[2])


@pytest.mark.parametrize("body", [FORK, IMPORT_LOCK], ids=["during-fork", "waiting-for-the-import-lock"])
def test_a_ctrl_c_at_a_hazardous_moment_is_raised_once_the_block_is_cut_short(body: str) -> None:
    out, err = _run(body, "during-fork" if body is FORK else "-", "deferred")
    assert out[0].startswith("interrupted after ") and out[0].endswith("cut short: True"), out
    assert _elapsed(out[0]) < 1.0  # at the watcher's first look, not at the wait's 2 s end
    assert out[1:] == RESTORED
    assert "Exception ignored" not in err, err


def test_bare_python_loses_a_ctrl_c_during_a_fork_and_keeps_logging_locked() -> None:
    out, err = _run(FORK, "during-fork", "bare")
    assert out == ["not interrupted", "handler restored: True", "logging lock: taken", "import lock: free"]
    assert "Exception ignored in: <function _releaseLock" in err, err


def test_bare_python_leaves_the_import_lock_taken_when_interrupted_waiting_for_it() -> None:
    out, _ = _run(IMPORT_LOCK, "-", "bare")
    assert out[0].startswith("interrupted after ") and out[0].endswith("cut short: False"), out
    assert out[1:] == ["handler restored: True", "logging lock: free", "import lock: taken"]


def test_a_second_ctrl_c_is_raised_at_once() -> None:
    out, _ = _run("""
        _thread.interrupt_main()
        time.sleep(0.1)  # the first: recorded, cut_short called; the block goes on
        print("cut short, going on:", cut.is_set())
        _thread.interrupt_main()
        time.sleep(5)  # the second ends this at once
    """, "-", "deferred")
    assert out[0] == "cut short, going on: True"
    assert out[1].startswith("interrupted after ") and _elapsed(out[1]) < 1.0, out
    assert out[2:] == RESTORED


def test_the_blocks_own_failure_after_a_ctrl_c_is_that_ctrl_c() -> None:
    out, err = _run("""
        _thread.interrupt_main()
        wait_until_cut()
        raise RuntimeError("Java gateway process exited before sending its port number")
    """, "-", "deferred")
    assert out[0].startswith("interrupted after ") and out[0].endswith("cut short: True"), out
    assert out[1:] == RESTORED
    assert err == ""


def test_without_a_ctrl_c_the_block_is_untouched() -> None:
    code = PRELUDE + textwrap.dedent("""
        with block_():
            time.sleep(0.1)
        try:
            with block_():
                raise ValueError("its own")
        except ValueError as exc:
            print("raised:", exc)
        print("cut short:", cut.is_set())
    """) + ENDING
    done = subprocess.run([sys.executable, "-c", code, "-", "deferred"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.splitlines() == ["raised: its own", "cut short: False", *RESTORED], done.stderr


def test_a_handler_set_within_stays_and_other_threads_are_left_alone() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import signal, threading
        from pipelines.ctrl_c import ctrl_c_deferred
        def theirs(signum, frame): pass
        with ctrl_c_deferred(lambda: None):
            signal.signal(signal.SIGINT, theirs)  # pyspark's context, set during the start
        print(signal.getsignal(signal.SIGINT) is theirs)
        seen = []
        def elsewhere():
            with ctrl_c_deferred(lambda: None):
                seen.append(signal.getsignal(signal.SIGINT) is theirs)
        t = threading.Thread(target=elsewhere); t.start(); t.join()
        print(seen == [True])
    """)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_a_failing_cut_short_is_tried_again_and_the_ctrl_c_still_raised() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import _thread, time
        from pipelines.ctrl_c import ctrl_c_deferred
        tries = []
        def cut_short():
            tries.append(1)
            raise AttributeError("partially initialized module")  # pyspark mid-import
        try:
            with ctrl_c_deferred(cut_short):
                _thread.interrupt_main()
                time.sleep(0.3)
        except KeyboardInterrupt:
            print("interrupted", len(tries) > 1)
    """)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["interrupted", "True"], done.stderr
    assert done.stderr == ""  # no thread's traceback


def test_ending_the_launch_while_pyspark_is_mid_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher looks at pyspark's context module while the main thread may still be
    importing it: a module without its SparkContext yet means no gateway yet."""
    import types

    from pipelines import spark

    ended = []
    monkeypatch.setattr(spark, "_end_failed_launch", lambda began, reap=True: ended.append((began, reap)))
    monkeypatch.setitem(sys.modules, "pyspark.core.context", types.ModuleType("pyspark.core.context"))
    spark._end_launch_unless_up(123)
    assert ended == [(123, False)]  # not reaped: pyspark's own wait must see the end
    up = types.ModuleType("pyspark.core.context")
    up.SparkContext = type("SparkContext", (), {"_gateway": object()})
    monkeypatch.setitem(sys.modules, "pyspark.core.context", up)
    spark._end_launch_unless_up(124)
    assert ended == [(123, False)]  # a gateway that answers: its start is not cut


def test_rearm_takes_a_ctrl_c_back_from_pyspark_and_leaves_its_handler_at_the_end() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import _thread, signal, time
        from pipelines.ctrl_c import ctrl_c_deferred
        calls = []
        def pysparks(signum, frame):  # cancels every job through py4j: not inside a py4j call
            calls.append(signum)
        try:
            with ctrl_c_deferred(lambda: None) as deferral:
                signal.signal(signal.SIGINT, pysparks)  # its context started
                deferral.rearm()
                _thread.interrupt_main()  # while the session is made
                time.sleep(0.2)
                print("held", calls == [])
        except KeyboardInterrupt:
            print("raised at the end", signal.getsignal(signal.SIGINT) is pysparks)
    """)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["held", "True", "raised", "at", "the", "end", "True"], done.stderr
