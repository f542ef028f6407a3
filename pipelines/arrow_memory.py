"""Arrow's memory pool for the processes that run offsetlake's work: the C library's malloc,
unless the user chose a pool (``ARROW_DEFAULT_MEMORY_POOL``, Arrow's own setting).

Why: pyarrow's wheels default to mimalloc, the slowest of Arrow's three pools on this
workload, where every micro-batch allocates its columns afresh (a million rows of strings per
table). A profile points at fresh pages faulted in: one ``take`` of 1.5M rows cost 258 ms in
the run and 91 ms in a warm loop. Measured on 2
cores (2026-11-27, 10M generated records, ``offsetlake ingest`` in a fresh process, the pool
set for every process by the environment, runs alternated; the run's own seconds): mimalloc
23.8-24.6 s, jemalloc 21.4-22.5 s, malloc 20.5-21.1 s. Without Spark, the driver's commit
audit of 2.34M records took 2.6-3.0 s with mimalloc, 2.0-2.2 s with either other pool.

Called where offsetlake's own work starts: the command line (the driver), and each Spark task
and worker start-up job of offsetlake's (executors: a Python worker is Spark's process, not
ours). Switching is safe at any time: a buffer is freed by the pool it came from.
"""

from __future__ import annotations

import os

import pyarrow as pa

#: Arrow's own setting: when it is given, its pool stands
USER_SETTING = "ARROW_DEFAULT_MEMORY_POOL"


def use_offsetlake_pool() -> str:
    """Make malloc Arrow's default pool unless the user chose one; the backend in use."""
    if not os.environ.get(USER_SETTING):
        pa.set_memory_pool(pa.system_memory_pool())
    return pa.default_memory_pool().backend_name
