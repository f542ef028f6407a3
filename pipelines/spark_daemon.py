"""Spark's Python task daemon (``pyspark.daemon``) with the decoding tasks' modules imported
once, before it forks its workers.

Why: every worker Spark forks for a run imported pyarrow, numpy, msgspec and the decoder
itself (~0.45 s of CPU each); a run's tasks hold two workers each (the source's reader and
the decoding task), so a 2-core run forks four or more, on the path of its first batch.
Imported in the daemon, each fork starts with them (copy-on-write pages).

Only for the JVM the CLI launches itself on a local master (``pipelines.spark``), whose
workers run nothing but offsetlake's code: on a cluster, the daemon starts before Spark has
shipped the tasks' Python files, so it could not import them. pyspark imports the worker
module after the fork because an import may start threads that a fork does not copy: here
no BLAS threads are started (``OPENBLAS_NUM_THREADS`` is 1 unless the user set it; no
task calls BLAS), Arrow's jemalloc is forked as its own fork handlers provide (Arrow's pool
is the C library's malloc in every task, :mod:`pipelines.arrow_memory`), and the daemon runs
no Arrow computation, so Arrow's thread pools are not started before the fork.
"""

from __future__ import annotations

import importlib
import os
import sys

#: this module's name, as Spark's ``spark.python.daemon.module`` names it
DAEMON_MODULE = "pipelines.spark_daemon"


def main() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from pipelines.spark_workers import TASK_MODULES
    from pipelines.without_pandas import WORKERS_WITHOUT_PANDAS, block_pandas

    if os.environ.get(WORKERS_WITHOUT_PANDAS) == "1":
        block_pandas()
    try:
        for module in TASK_MODULES:
            importlib.import_module(module)
    except Exception as exc:  # each task imports them again and fails with its own traceback
        print(f"offsetlake: the task daemon could not import {module} ahead ({exc!r}); "
              "its workers import it themselves", file=sys.stderr)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
