"""Spark's Python workers started, their imports done, while the first micro-batch is planned.

Why: a short run's first Spark job waited for Spark's task daemon to start and for each
worker it forks to import pyarrow, numpy and the decoder, while the driver only waited for
the streaming query to plan that batch (the 20-file real workload: ~1.1 s of planning, then
a 1.35 s job). A tiny job on a background thread starts them during the planning; Spark
keeps idle workers for the tasks that follow (``spark.python.worker.reuse``, its default).
Measured there (``benchmarks/real_workload.py``, 9 runs each, alternated with the tree
before): median 5.61 vs 5.83 s, best 5.21 vs 5.62 s; ~0.5 s more of the machine's CPU.
"""

from __future__ import annotations

import importlib
import logging
import threading
import uuid
from collections.abc import Callable

from pipelines.arrow_memory import use_offsetlake_pool

log = logging.getLogger(__name__)


#: What a decoding task imports (``pipelines.micro_batch.part_cells_on_executors``; the
#: segments source's reader too: its tasks read their ranges themselves).
TASK_MODULES = ("pipelines.history.parts", "pipelines.sources.raw", "pipelines.sources.segments.index",
                "pipelines.sources.segments.spark_source")


def _imports(batches):
    use_offsetlake_pool()
    for module in TASK_MODULES:
        importlib.import_module(module)
    yield from batches


class WarmWorkers:
    """``tasks`` trivial Python tasks at once, as one Spark job of its own job group, on a
    background thread, if ``worth_it()`` (asked on that thread) says the run has records to
    read: with nothing new, the run ends during the planning, and starting the workers then
    only took CPU from it (the real workload rerun on the same lake: 3.4-4.3 s against
    3.1-3.5 s; with the guess, 3.2-3.3 s). :meth:`stop` cancels the job if it still runs
    and waits for the thread."""

    def __init__(self, spark, tasks: int, worth_it: Callable[[], bool] = lambda: True) -> None:
        self.spark, self.tasks, self.worth_it = spark, tasks, worth_it
        self.group = f"offsetlake-warm-workers-{uuid.uuid4()}"
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="offsetlake-warm-workers", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            if not self.worth_it() or self.stopped.is_set():
                return
            context = self.spark.sparkContext
            context.setJobGroup(self.group, "offsetlake: start the Python workers")
            (self.spark.range(0, self.tasks, numPartitions=self.tasks)
             .mapInArrow(_imports, "id long").collect())
        except Exception as exc:  # only a head start: the real job starts what is missing
            log.debug("starting the Python workers ahead stopped: %s", exc)

    def stop(self) -> None:
        self.stopped.set()  # a job not started yet never starts
        if self.thread.is_alive():
            try:
                self.spark.sparkContext.cancelJobGroup(self.group)
            except Exception as exc:
                log.debug("cancelling the workers' start: %s", exc)
        self.thread.join()
