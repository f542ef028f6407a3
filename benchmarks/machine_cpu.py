"""CPU seconds the whole machine has spent busy, from ``/proc/stat``; and one fresh process's
wall and CPU seconds, from ``wait4`` (:func:`process_seconds`).

Why beside ``RUSAGE_CHILDREN``: Spark's Python daemons (``pyspark.daemon``) ignore SIGCHLD,
so the kernel reaps the workers they fork and their CPU time reaches no parent's rusage. The
decoding an ``offsetlake ingest`` runs on its executors was missing from the rusage figure
(the 20-file real workload, same runs: 6.4 s by rusage, 7.9 s by the machine). This figure
counts every process, so it is right only on a machine otherwise idle.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any


def busy_seconds() -> float:
    """user + nice + system + irq + softirq + steal of every core, in seconds, so far."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_seconds(cmd: list[str], out: Path, **popen: Any) -> tuple[float, float, int]:
    """``(wall seconds, CPU seconds, exit status)`` of one fresh process run to its end, its
    standard output in ``out``. CPU is the process's own and its waited-for children's
    (``wait4``: a script that execs a JVM counts every JVM thread)."""
    with out.open("wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=sink, **popen)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode
