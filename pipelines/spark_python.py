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

import os
import struct
import sys
import zipfile

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


def launcher_env(spark_home: str | os.PathLike[str], path: list[str] | None = None) -> dict[str, str]:
    """What the launcher needs in the environment of the JVM that starts it: the interpreter
    to run, Spark's zips under ``spark_home`` that hold a package installed on ``path``
    (``sys.path`` by default) at the same version, and its core jar if it holds no Python.
    Each is listed as found and resolved (pyspark gives the JVM a ``SPARK_HOME`` with links
    resolved): the launcher compares strings."""
    lib = os.path.join(os.fspath(spark_home), "python", "lib")
    zips = sorted(os.path.join(lib, n) for n in os.listdir(lib)) if os.path.isdir(lib) else []
    found = [*redundant_zips([*zips, *(sys.path if path is None else path)]), *pythonless_jars(spark_home)]
    drop = list(dict.fromkeys(p for z in found for p in (z, os.path.realpath(z))))
    return {"OFFSETLAKE_SPARK_PYTHON": sys.executable, "OFFSETLAKE_SPARK_PYTHON_DROP": os.pathsep.join(drop)}


def launcher() -> str | None:
    """The installed ``offsetlake-spark-python`` beside this interpreter, if there is one."""
    path = os.path.join(os.path.dirname(sys.executable), "offsetlake-spark-python")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
