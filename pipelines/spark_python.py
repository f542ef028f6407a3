"""The Python that Spark runs its Python processes with, for a local master this process launches.

Spark puts its own source zips (``SPARK_HOME/python/lib/pyspark.zip`` and py4j's) first on
the path of every Python process it starts. With pyspark installed from PyPI those zips
hold the very code of the installed packages, but a zip carries no bytecode cache: every
process Spark starts (the data source lookup, the source's creation, the streaming source,
read planning, the task daemon) and every worker it forks compiles pyspark from source
again: ~0.5 s of CPU each, one after the other on the path of every short run
(``benchmarks/real_workload.py``).

``offsetlake-spark-python`` (``pipelines/bin``, a shell script installed beside the
interpreter) drops from ``PYTHONPATH`` the entries :func:`launcher_env` lists: each zip whose
package is installed at the same version (``version.py`` byte for byte), checked once here
in the driver; then it runs this very interpreter with the same arguments. Anything else
(Spark from a distribution, another pyspark installed) is left as it is. ``pipelines.spark``
uses it only for a local master it launches, and only where the user chose no other Python.
"""

from __future__ import annotations

import os
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


def launcher_env(spark_home: str | os.PathLike[str], path: list[str] | None = None) -> dict[str, str]:
    """What the launcher needs in the environment of the JVM that starts it: the interpreter
    to run, and Spark's zips under ``spark_home`` that hold a package installed on ``path``
    (``sys.path`` by default) at the same version. Each zip is listed as found and resolved
    (pyspark gives the JVM a ``SPARK_HOME`` with links resolved): the launcher compares
    strings."""
    lib = os.path.join(os.fspath(spark_home), "python", "lib")
    zips = sorted(os.path.join(lib, n) for n in os.listdir(lib)) if os.path.isdir(lib) else []
    found = redundant_zips([*zips, *(sys.path if path is None else path)])
    drop = list(dict.fromkeys(p for z in found for p in (z, os.path.realpath(z))))
    return {"OFFSETLAKE_SPARK_PYTHON": sys.executable, "OFFSETLAKE_SPARK_PYTHON_DROP": os.pathsep.join(drop)}


def launcher() -> str | None:
    """The installed ``offsetlake-spark-python`` beside this interpreter, if there is one."""
    path = os.path.join(os.path.dirname(sys.executable), "offsetlake-spark-python")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
