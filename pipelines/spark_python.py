"""The Python that Spark runs its Python processes with, for a local master this process launches.

Spark puts its own source zips (``SPARK_HOME/python/lib/pyspark.zip`` and py4j's) first on
the path of every Python process it starts. With pyspark installed from PyPI those zips
hold the very code of the installed packages, but a zip carries no bytecode cache: every
process Spark starts (the data source lookup, the source's creation, the streaming source,
read planning, the task daemon) and every worker it forks compiles pyspark from source
again: ~0.5 s of CPU each, one after the other on the path of every short run
(``benchmarks/real_workload.py``).

Spark also puts its core jar first on that path (for distributions that packed pyspark into
it). A pip-installed Spark's core jar holds no Python, yet as the first entry of the path its
directory of ~6k classes is read by every process at start, and again at every task (the
worker calls ``importlib.invalidate_caches``): ~30 ms each time.

``offsetlake-spark-python`` (``pipelines/bin``, a shell script installed beside the
interpreter) drops from ``PYTHONPATH`` the entries :func:`launcher_env` lists: each zip whose
package is installed at the same version (``version.py`` byte for byte), and Spark's core jar
if no entry of it can be Python, both checked once here in the driver; then it runs this very
interpreter with the same arguments. Anything else (Spark from a distribution, another
pyspark installed) is left as it is. ``pipelines.spark`` uses it only for a local master it
launches, and only where the user chose no other Python.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from collections.abc import Mapping

#: Spark's source zips on the worker path -> the package each holds
SPARK_ZIPS = {"pyspark.zip": "pyspark", "py4j-": "py4j"}


def _package_of(entry: str) -> str | None:
    name = os.path.basename(entry)
    if not name.endswith(".zip"):
        return None
    for prefix, package in SPARK_ZIPS.items():
        if name == prefix or (prefix.endswith("-") and name.startswith(prefix)):
            return package
    return None


def _installed_version_file(package: str, path: list[str]) -> bytes | None:
    """``<package>/version.py`` of the first directory on ``path`` that holds the package."""
    for entry in path:
        candidate = os.path.join(entry, package, "version.py")
        if os.path.isdir(entry) and os.path.isfile(candidate):
            with open(candidate, "rb") as fh:
                return fh.read()
    return None


def redundant_zips(path: list[str]) -> list[str]:
    """The entries of ``path`` that are Spark source zips of a package installed, at the
    same version, elsewhere on ``path``."""
    redundant = []
    for entry in path:
        package = _package_of(entry)
        if package is None:
            continue
        installed = _installed_version_file(package, path)
        if installed is None:
            continue
        try:
            with zipfile.ZipFile(entry) as archive:
                zipped = archive.read(f"{package}/version.py")
        except (OSError, KeyError, zipfile.BadZipFile):
            continue
        if zipped == installed:
            redundant.append(entry)
    return redundant


def holds_python(archive: str | os.PathLike[str]) -> bool:
    """Whether a zip archive (a jar) may hold something Python imports: an entry whose name
    has ``.py`` in it (``.py``, ``.pyc``; a false yes only keeps the archive on the path).
    Reads the archive's central directory alone (Spark's core jar: ~1 ms, against ~50 ms
    to list it with :mod:`zipfile`); anything it cannot read that way counts as a yes."""
    try:
        with open(archive, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(size - min(size, 65536 + 22))  # the end record, after at most a 64 KiB comment
            tail = fh.read()
            at = tail.rfind(b"PK\x05\x06")  # the end record: its comment reaches the file's end
            while at >= 0 and (len(tail) < at + 22 or at + 22 + struct.unpack_from("<H", tail, at + 20)[0] != len(tail)):
                at = tail.rfind(b"PK\x05\x06", 0, at)
            if at < 0:
                return True
            directory_size, directory_at = struct.unpack_from("<II", tail, at + 12)
            if directory_at == 0xFFFFFFFF or directory_at + directory_size > size:
                return True  # zip64, or not what it says
            fh.seek(directory_at)
            directory = fh.read(directory_size)
    except OSError:
        return True
    return not directory.startswith(b"PK\x01\x02") or b".py" in directory


def pythonless_jars(spark_home: str | os.PathLike[str]) -> list[str]:
    """Spark's core jar under ``spark_home`` (what Spark puts on its Python processes' path)
    when it holds no Python."""
    jars = os.path.join(os.fspath(spark_home), "jars")
    try:
        names = sorted(n for n in os.listdir(jars) if n.startswith("spark-core_") and n.endswith(".jar"))
    except OSError:  # no jars directory here (or none this user may list): nothing dropped
        return []
    return [os.path.join(jars, n) for n in names if not holds_python(os.path.join(jars, n))]


def spark_zips(spark_home: str | os.PathLike[str]) -> list[str]:
    """Spark's source zips under ``spark_home`` (``python/lib``), which its Python processes
    have first on their path."""
    lib = os.path.join(os.fspath(spark_home), "python", "lib")
    try:
        return sorted(os.path.join(lib, n) for n in os.listdir(lib) if n.endswith(".zip"))
    except OSError:  # no such directory here
        return []


def launcher_env(spark_home: str | os.PathLike[str], path: list[str] | None = None) -> dict[str, str]:
    """What the launcher needs in the environment of the JVM that starts it: the interpreter
    to run, Spark's zips under ``spark_home`` that hold a package installed on ``path``
    (``sys.path`` by default) at the same version, and its core jar if it holds no Python.
    Each is listed as found and resolved (pyspark gives the JVM a ``SPARK_HOME`` with links
    resolved): the launcher compares strings."""
    found = [*redundant_zips([*spark_zips(spark_home), *(sys.path if path is None else path)]),
             *pythonless_jars(spark_home)]
    drop = list(dict.fromkeys(p for z in found for p in (z, os.path.realpath(z))))
    return {"OFFSETLAKE_SPARK_PYTHON": sys.executable, "OFFSETLAKE_SPARK_PYTHON_DROP": os.pathsep.join(drop)}


def launcher() -> str | None:
    """The installed ``offsetlake-spark-python`` beside this interpreter, if there is one."""
    path = os.path.join(os.path.dirname(sys.executable), "offsetlake-spark-python")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


class WorkerPythonError(RuntimeError):
    """The interpreter the user chose for Spark's Python processes cannot run offsetlake's."""


#: Run by the chosen interpreter: what a decoding task imports and the schemas it reads. At a
#: low priority (the JVM's start comes first), Spark's source zips last on the path (the
#: workers have them first; an installed pyspark then imports from its bytecode, not compiled
#: again from the zip: ~0.5 s of CPU)
_PROBE = """
import importlib, json, os, sys
os.nice(10)
sys.path.extend(sys.argv[1:])
out = {"python": "%d.%d" % sys.version_info[:2]}
try:
    from pipelines.spark_workers import TASK_MODULES
    for module in TASK_MODULES:
        importlib.import_module(module)
    from pipelines.decode.formats import record_formats
    from pipelines.lake.contracts import contracts
    record_formats(), contracts()
    import pipelines
    out["offsetlake"] = pipelines.__version__
except BaseException as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


class WorkerPythonProbe:
    """The user's ``PYSPARK_PYTHON`` for a local master, tried while the JVM starts: it
    imports what a decoding task imports, on the path Spark gives its Python processes
    (the ``--py-files``, ``PYTHONPATH``, Spark's source zips).

    Why: Spark starts that interpreter only for the query's first Python step; one without
    pyarrow or offsetlake failed the run ~15 s in, as "Failed to create Python data source
    instance: Traceback ..." with the cause cut off."""

    def __init__(self, python: str, spark_home: str | os.PathLike[str], env: Mapping[str, str],
                 py_files: list[str] | None = None) -> None:
        self.python = python
        zips = spark_zips(spark_home)
        shipped = [os.path.abspath(p.removeprefix("file:")) for p in py_files or ()]  # --py-files
        path = os.pathsep.join([*shipped, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
        self.failure: str | None = None
        self.process: subprocess.Popen[str] | None = None
        try:
            self.process = subprocess.Popen([python, "-c", _PROBE, *zips], env={**env, "PYTHONPATH": path},
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, text=True)
        except OSError as exc:  # no such file, not executable
            self.failure = f"it cannot be run ({exc.strerror or exc})"

    def check(self, timeout: float = 120.0) -> None:
        """Raise :class:`WorkerPythonError` when the interpreter cannot run offsetlake's tasks
        (another Python minor version, which Spark refuses; a module it cannot import; another
        offsetlake version). A probe that does not answer in time is left to Spark."""
        if self.process is not None:
            try:
                out, _ = self.process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stop()
                return
            self.failure = probe_failure(out, self.process.returncode)
        if self.failure:
            raise WorkerPythonError(
                f"PYSPARK_PYTHON={self.python}: Spark's Python workers run that interpreter, and "
                f"{self.failure}; install offsetlake in its environment, or unset PYSPARK_PYTHON "
                f"for the workers to run this one ({sys.executable})")

    def stop(self) -> None:
        """End the probe (the session could not start)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def probe_failure(out: str, returncode: int | None) -> str | None:
    """What keeps the interpreter that printed ``out`` from running offsetlake's tasks, if
    anything: the probe's JSON line compared with this interpreter and offsetlake."""
    from pipelines import __version__

    try:
        found = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"it did not run Python code as expected (exit status {returncode})"
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if found.get("python") != ours:
        return f"it is Python {found.get('python')}, not {ours} as here (Spark refuses workers of another version)"
    if found.get("error"):
        return f"it cannot load what offsetlake's tasks need ({found['error']})"
    if found.get("offsetlake") != __version__:
        return f"it imports offsetlake {found.get('offsetlake')}, not {__version__} as here"
    return None
