"""CPU seconds the whole machine has spent busy, from ``/proc/stat``.

Why beside ``RUSAGE_CHILDREN``: Spark's Python daemons (``pyspark.daemon``) ignore SIGCHLD,
so the kernel reaps the workers they fork and their CPU time reaches no parent's rusage. The
decoding an ``offsetlake ingest`` runs on its executors was missing from the rusage figure
(the 20-file real workload, same runs: 6.4 s by rusage, 7.9 s by the machine). This figure
counts every process, so it is right only on a machine otherwise idle.
"""

from __future__ import annotations

import os


def busy_seconds() -> float:
    """user + nice + system + irq + softirq + steal of every core, in seconds, so far."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
