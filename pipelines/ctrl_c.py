"""Ctrl-C while a Spark session starts: kept until the start is cut short, then raised.

Why: Python raises a Ctrl-C's KeyboardInterrupt at whatever line the main thread is on,
and three places in a session's start are not safe for it (the first two hung ``offsetlake
ingest`` for good, in CI and in a loop of Ctrl-Cs 0.4-2 s into the command, ~1 run in 40):

* pyspark launches the JVM with a ``preexec_fn``, so Python's at-fork hooks run around
  that fork, logging's among them. An interrupt that arrives during the fork is raised in
  logging's hook, where Python prints "Exception ignored" and drops it, and logging's lock
  stays taken: the next thread to look a logger up waits for good, the command with it.
* the start imports much (pyspark, pandas) while the index-ahead thread imports too. An
  interrupt that arrives while the main thread waits for the import lock is raised just
  after it got the lock, before the ``with`` that frees it: the other thread then waits
  for the lock for good, and the main thread for that thread's module.
* once pyspark's context started, its own handler cancels every job through py4j; while
  the JVM made the session (~0.5 s) that call came from inside the main thread's read of
  py4j's socket: "reentrant call", an ERROR with a traceback, exit 1
  (:meth:`Deferral.rearm`, between the context and the session).

Within :func:`ctrl_c_deferred` a Ctrl-C is recorded, never raised where the main thread
happens to be; a thread of ours calls ``cut_short`` (ending the JVM being launched) until
the block ends, and the block's end raises KeyboardInterrupt from our own line. A second
Ctrl-C is raised at once, as the user insists.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: how often a recorded Ctrl-C's ``cut_short`` is called while the block lasts
POLL_S = 0.02

#: the Ctrl-Cs recorded by the block under way (appended by its handler only: no lock the
#: main thread could hold when the handler runs)
_pressed: list[int] = []


def pressed() -> bool:
    """Whether a Ctrl-C came within the block under way (its failure is then that Ctrl-C's)."""
    return bool(_pressed)


class Deferral:
    """The block's hold on SIGINT (see :func:`ctrl_c_deferred`)."""

    def __init__(self, handler: Callable[[int, object], None] | None = None) -> None:
        self.handler = handler  # None: not deferring (another thread, SIG_IGN, an outer block)
        self.after: object = None  # the handler the block's end leaves in place (None: the one before)

    def rearm(self) -> None:
        """Take SIGINT back from a handler set within the block (pyspark's, set as its
        context starts, while the session is still to be made); that one is then what the
        block's end leaves in place."""
        if self.handler is not None and signal.getsignal(signal.SIGINT) is not self.handler:
            self.after = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self.handler)


@contextmanager
def ctrl_c_deferred(cut_short: Callable[[], None]) -> Iterator[Deferral]:
    """Ctrl-C within the block: recorded, ``cut_short`` called from a thread of ours every
    :data:`POLL_S` until the block ends, KeyboardInterrupt raised at its end (a failure of
    the block itself is then that Ctrl-C's echo: the JVM it ended).

    Only in the main thread, where SIGINT has a Python handler (with SIG_DFL or SIG_IGN no
    interrupt is raised anywhere), and not within another such block (the outer one keeps
    it). A handler set within the block (pyspark's) stays at its end; until
    :meth:`Deferral.rearm`, a Ctrl-C goes to it."""
    previous = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread() or not callable(previous)
            or getattr(previous, "deferring", False)):
        yield Deferral()
        return
    _pressed.clear()

    def on_sigint(signum: int, frame: object) -> None:
        if _pressed:  # the second one: at once
            previous(signum, frame)
        _pressed.append(signum)

    on_sigint.deferring = True  # type: ignore[attr-defined]
    deferral = Deferral(on_sigint)
    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL_S):
            if _pressed:
                try:
                    cut_short()
                except Exception:  # tried again at the next look; the Ctrl-C is raised anyway
                    log.debug("cutting the block short failed", exc_info=True)

    signal.signal(signal.SIGINT, on_sigint)
    watcher = threading.Thread(target=watch, name="offsetlake-ctrl-c", daemon=True)
    watcher.start()
    try:
        yield deferral
    except BaseException:
        if not _pressed:
            raise
        log.debug("cut short by Ctrl-C", exc_info=True)
    finally:
        done.set()
        watcher.join()
        if signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, previous if deferral.after is None else deferral.after)
    if _pressed:
        raise KeyboardInterrupt
