"""Run a process of ours without pandas: pyarrow's first question imports it for nothing.

pyarrow asks its lazy pandas shim whether an input is a pandas object on ``pa.array``,
``pa.scalar`` and many compute calls, and that first question imports pandas (~0.17 s of
CPU), though decoding and planning never hold a pandas object. pandas is optional for
pyarrow: without it those questions answer "no". Only for a process that is entirely ours
and ends with our work: the shim remembers the answer, so a later ``pa.array(pandas
object)`` in the same process would convert differently.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

#: the process Spark starts for a Python streaming source: it runs only that source's
#: planning (offsets, partitions), one after the other on the path of a run's start
SPARK_STREAMING_SOURCE_RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
#: Set (to "1") in the environment of a JVM whose Python workers only ever run offsetlake's
#: own code: the CLI's local session (``pipelines.spark.spark_session(own_workers=True)``).
WORKERS_WITHOUT_PANDAS = "OFFSETLAKE_SPARK_WORKERS_WITHOUT_PANDAS"
#: how Spark starts its Python workers and planners: forked by ``-m pyspark.daemon``, or
#: each as ``-m pyspark.worker`` (``spark.python.use.daemon=false``)
SPARK_WORKER_MAINS = ("pyspark.daemon", "pyspark.worker")


class NotInstalled(importlib.abc.MetaPathFinder):
    """Makes importing ``names`` (and their submodules) fail, as where they are not
    installed; ``why`` ends the error's message. Here for pandas; the quality gate hides
    GX's unused integrations with it too."""

    def __init__(self, names: tuple[str, ...], why: str) -> None:
        self.names, self.why = names, why

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if any(name == hidden or name.startswith(hidden + ".") for hidden in self.names):
            raise ModuleNotFoundError(f"No module named {name!r} ({self.why})", name=name)


def block_pandas() -> None:
    """From now on, this process runs as if pandas were not installed (unless it already
    imported pandas, which then stays)."""
    if "pandas" not in sys.modules and not any(
            isinstance(f, NotInstalled) and "pandas" in f.names for f in sys.meta_path):
        sys.meta_path.insert(0, NotInstalled(("pandas",), "not needed in this process"))


def block_pandas_in_own_workers(main: str | None = None) -> None:
    """In a Spark Python worker of a session that runs only offsetlake's code, run without
    pandas: the data source's reader and the decoding task each imported it for nothing
    (~0.2 s each, on the path of a short run's first batch). Called when ``pipelines`` is
    first imported, i.e. before any of its code asks pyarrow anything; ``main``: the module
    the process is about to run as ``python -m`` (the fork server's child), else it is asked
    of ``__main__``."""
    worker = main in SPARK_WORKER_MAINS if main else any(running_as(m) for m in SPARK_WORKER_MAINS)
    if os.environ.get(WORKERS_WITHOUT_PANDAS) == "1" and worker:
        block_pandas()


def running_as(module: str) -> bool:
    """Whether this process was started as ``python -m module``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == module
