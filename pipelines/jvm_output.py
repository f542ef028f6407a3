"""The stdout and stderr of a JVM this process launches: pipes of ours, forwarded to our own.

Why not let the JVM inherit them, as pyspark does:

* Spark's launcher adds ``--add-modules=jdk.incubator.vector`` to every JVM it starts, and
  the JDK then prints ``WARNING: Using incubator modules: jdk.incubator.vector`` to stderr.
  No JVM option silences it (it is not a log line), so a scheduler's log showed it on every
  run of a command that is otherwise quiet. The forwarding drops that one line, once; any
  other incubator module (a user's own ``--add-modules``) is still reported.
* A JVM that writes a class archive at exit (:mod:`pipelines.jvm_cache`) outlives the
  command by ~20 s. A caller that reads the command's output to its end (Airflow,
  ``subprocess.run``) would wait for it as long as it held the command's own stdout and
  stderr. Forwarded, its output reads the same while the command runs; once the command is
  gone, its writes go nowhere (the pipe's reader is gone: an error, never a block).
* A command stopping after a failure or Ctrl-C knows what happened and says so in one line;
  what the JVM says while it stops is that failure's echo, dropped (:func:`hushed`).
"""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: the JDK's notice for the module Spark's launcher adds; the whole line, as the JDK prints it
SPARK_MODULE_NOTICE = b"WARNING: Using incubator modules: jdk.incubator.vector\n"


class LineDropper:
    """A byte stream with the first whole line equal to ``line`` taken out (once).

    Bytes that may still begin that line are held until they can be told apart, so at most
    one line's worth is ever held back; everything else passes as it comes."""

    def __init__(self, line: bytes) -> None:
        self.line = line
        self.held = b""
        self.at_line_start = True
        self.dropped = False

    def feed(self, data: bytes) -> bytes:
        """What of ``data`` (after anything held) goes on now."""
        if self.dropped:
            return data
        data, self.held = self.held + data, b""
        out = bytearray()
        i, size = 0, len(self.line)
        while i < len(data):
            if self.at_line_start:
                start = data[i:i + size]
                if start == self.line:
                    self.dropped = True
                    out += data[i + size:]
                    return bytes(out)
                if len(start) < size and self.line.startswith(start):
                    self.held = data[i:]  # may yet be the line: wait for more
                    return bytes(out)
            newline = data.find(b"\n", i)
            if newline < 0:
                out += data[i:]
                self.at_line_start = False
                return bytes(out)
            out += data[i:newline + 1]
            i = newline + 1
            self.at_line_start = True
        return bytes(out)

    def end(self) -> bytes:
        """What was held when the stream ended (a start of the line, never completed)."""
        held, self.held = self.held, b""
        return held


class _Forwarder(threading.Thread):
    """Copies one pipe to one descriptor. Each chunk is read and written under ``lock``, so
    :func:`drain` knows all that was in the pipe went on once it finds the pipe empty."""

    def __init__(self, read_end: int, target: int, dropper: LineDropper | None, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.read_end, self.target, self.dropper = read_end, target, dropper
        self.lock = threading.Lock()
        self.closed = False

    def run(self) -> None:
        waiting = select.poll()  # poll, not select: a busy driver's descriptors pass 1024
        waiting.register(self.read_end, select.POLLIN)
        try:
            while True:
                waiting.poll()
                with self.lock:
                    chunk = os.read(self.read_end, 65536)
                    if not chunk:
                        break
                    if not _hushed.is_set():
                        _write_all(self.target, self.dropper.feed(chunk) if self.dropper else chunk)
            if self.dropper:
                _write_all(self.target, self.dropper.end())
        except OSError:  # our stdout or stderr closed: the JVM's next write fails, never blocks
            pass
        finally:
            with self.lock:
                os.close(self.read_end)
                os.close(self.target)
                self.closed = True

    def empty(self) -> bool:
        """Whether everything written to the pipe so far has been forwarded."""
        with self.lock:
            if self.closed:
                return True
            pending = select.poll()
            pending.register(self.read_end, select.POLLIN)
            return not pending.poll(0)


_forwarders: list[_Forwarder] = []
_hushed = threading.Event()


@contextmanager
def hushed() -> Iterator[None]:
    """The JVM's output within the block is dropped, for a block whose output is only the
    consequence of what the caller already knows and reports: stopping a streaming query
    because a commit failed or Ctrl-C was pressed. (Spark 4.2 then runs a regex of its own
    over the interrupted batch's error, which overflows the stream thread's stack on a
    long one and printed ~1,100 lines of ``java.util.regex`` frames.) What the JVM wrote
    in the block is drained before the block ends, so none of it leaks out after. Never
    with DEBUG logging: the details are wanted then."""
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    _hushed.set()
    try:
        yield
    finally:
        drain()
        _hushed.clear()


def drain(timeout: float = 0.5) -> None:
    """Forward what the JVM has written so far, for a process about to leave with
    ``os._exit`` (whose daemon threads stop wherever they are): its last lines (an error
    while the session stopped) must not be lost. Returns at once when nothing waits."""
    deadline = time.monotonic() + timeout
    while not all(f.empty() for f in _forwarders) and time.monotonic() < deadline:
        time.sleep(0.001)


@contextmanager
def forwarded() -> Iterator[None]:
    """Within the block (where the JVM is launched), this process' stdout and stderr are
    pipes, read from the start by daemon threads (a JVM that logs much at start must never
    fill a pipe nobody reads) and forwarded to where they were, for as long as anything
    holds them open: the JVM, its children, and for the block's length this process."""
    sys.stdout.flush()
    sys.stderr.flush()
    targets: dict[int, int] = {}  # each owned by its thread from here on
    try:
        for fd in (1, 2):
            targets[fd] = os.dup(fd)
    except OSError:  # no stdout or stderr (a daemon's): the JVM inherits what there is
        for target in targets.values():
            os.close(target)
        yield
        return
    write_ends = {}
    for fd, target in targets.items():
        read_end, write_ends[fd] = os.pipe()
        forwarder = _Forwarder(read_end, target, LineDropper(SPARK_MODULE_NOTICE) if fd == 2 else None,
                               f"offsetlake-jvm-output-{fd}")
        forwarder.start()
        _forwarders.append(forwarder)
    try:
        for fd, write_end in write_ends.items():
            os.dup2(write_end, fd)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        drain()  # what the block wrote goes on before what follows it
        for fd, write_end in write_ends.items():
            os.dup2(targets[fd], fd)
            os.close(write_end)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
