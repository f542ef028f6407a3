"""The project as users get it: the built wheel, installed in a virtualenv outside the checkout.

Installing the wheel's 1.3 GB of dependencies again would take minutes, so the fresh
virtualenv gets a ``.pth`` line naming the test interpreter's site-packages: a path in a
``.pth`` file is added to ``sys.path``, but the ``.pth`` files inside it (the editable
install's finder among them) are not processed, so ``pipelines`` imports only from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.conftest import REPO


@dataclass(frozen=True)
class WheelInstall:
    wheel: Path  # the built .whl (also usable as a zip on sys.path / --py-files)
    python: Path  # the fresh virtualenv's interpreter
    bin_dir: Path  # where its console scripts (offsetlake) are
    site_packages: Path  # where the wheel was installed

    @property
    def offsetlake(self) -> Path:
        return self.bin_dir / "offsetlake"


# Not part of a build: the checkout's environments, build leftovers, lakes and caches.
_NOT_SOURCE_TOP = {".venv", ".git", "build", "dist", ".pytest_cache", ".ruff_cache",
                   ".hypothesis", "lake", "demo-data", "spark-warehouse", "metastore_db"}


def _not_source(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == REPO
    return {n for n in names if n in ("__pycache__", "node_modules") or n.endswith(".egg-info")
            or (top and n in _NOT_SOURCE_TOP)}


def build_wheel(out_dir: Path) -> Path:
    """``pip wheel --no-deps`` of the checkout's files, as a user or CI builds it.

    Built from a copy: setuptools keeps ``build/lib`` in the source tree, whose stale files
    would end up in the wheel, and concurrent builds would share it.
    """
    source = out_dir.parent / "source"
    shutil.copytree(REPO, source, ignore=_not_source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out_dir),
                    str(source)], check=True, capture_output=True, text=True, timeout=300)
    wheels = sorted(out_dir.glob("offsetlake-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def new_virtualenv(env_dir: Path, wheel: Path | None = None) -> tuple[Path, Path]:
    """``(python, site-packages)`` of a new virtualenv that sees this interpreter's
    dependencies through a ``.pth`` line, with ``wheel`` installed (or no offsetlake at all)."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    if wheel is not None:
        # pip of the test interpreter installs into the new environment; the .pth comes
        # after, so pip sees no other offsetlake there.
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                        "--no-deps", "--no-index", "-q", str(wheel)],
                       check=True, capture_output=True, text=True, timeout=300)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "offsetlake_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python, site


@cache
def installed_wheel(root: Path) -> WheelInstall:
    """Build the wheel and install it into a new virtualenv under ``root`` (once per run)."""
    wheel = build_wheel(root / "dist")
    python, site = new_virtualenv(root / "venv", wheel)
    return WheelInstall(wheel=wheel, python=python, bin_dir=python.parent, site_packages=site)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything pointing back at the checkout or a Spark session."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
           and not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_"))}
    env.update(extra)
    return env
