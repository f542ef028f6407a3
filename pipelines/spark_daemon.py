"""The daemon Spark forks its Python workers from, for a local master this process launches.

Spark puts its own source zips (``SPARK_HOME/python/lib/pyspark.zip`` and py4j's) first on
every Python worker's path. With pyspark installed from PyPI those zips hold the very code
of the installed packages, but a zip carries no bytecode cache: every daemon Spark starts
(one per kind of worker: data source lookup, creation, streaming source, read planning,
tasks), and every worker it forks, compiles pyspark from source again: ~0.5 s of CPU per
process, on the critical path of every short run (``benchmarks/real_workload.py``).

This module drops a zip from the path when an installed package holds byte for byte the same
``version.py``, then runs pyspark's own daemon. Otherwise (Spark from a distribution, a
different pyspark installed) it drops nothing. Used through ``spark.python.daemon.module``,
set only for a local master and only where the user did not set it (``pipelines.spark``).
"""

from __future__ import annotations

import os
import runpy
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


def main() -> None:
    dropped = set(redundant_zips(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in dropped]
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
