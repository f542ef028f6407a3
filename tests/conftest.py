"""Shared fixtures: the read-only corpus in ../shared and one session-wide SparkSession."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

# A pytest-xdist worker's __main__ (execnet's) has neither a file nor a spec, which
# pyspark.sql.connect takes for a doctest run: it exits the process when great_expectations
# imports it. Named here, the worker's __main__ looks like any script's.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = "<pytest-xdist worker>"

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OFFSETLAKE_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"
# the local JVMs' class archive (pipelines/jvm_cache.py) of test runs: beside, not in, the
# user's own cache, shared by the test run's JVMs and kept between runs on one machine
os.environ.setdefault("OFFSETLAKE_JVM_CACHE",
                      os.path.join(tempfile.gettempdir(), f"offsetlake-tests-jvm-{os.getuid()}"))


def corpus_path(*parts: str) -> Path:
    """Path inside ../shared/corpus, or skip the test with the reason when it is absent."""
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared corpus is only beside CI and developer checkouts")
    return path


@pytest.fixture(scope="session")
def public_corpus() -> Path:
    return corpus_path("public")


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return corpus_path("golden")


@pytest.fixture(scope="session")
def scenario_a() -> Path:
    return corpus_path("golden", "scenario-a")


@pytest.fixture(scope="session")
def spark():
    """The one local SparkSession of the test run (start-up is the expensive part).

    Where delta-spark's jars are given (``PYSPARK_SUBMIT_ARGS="--packages ..."``, ``spark.jars``),
    the session gets Delta's SQL extension and catalog, as users' sessions have them: session
    extensions are fixed at creation, so a first session finds out whether the jars are
    visible and, if they are, is replaced by one configured for Delta.
    """
    from pipelines.spark import has_delta_jars, spark_session

    # C1-only JIT: starts faster, which is what a test run needs (PLATFORM.md); jobs keep C2.
    conf = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
    session = spark_session("offsetlake-tests", master="local[2]", extra_conf=conf)
    if has_delta_jars(session) and "io.delta" not in (session.conf.get("spark.sql.extensions", "") or ""):
        session.stop()
        session = spark_session("offsetlake-tests", master="local[2]", delta_spark=True, extra_conf=conf)
    yield session
    session.stop()


def table_rows(lake: Path, table: str, drop: tuple[str, ...] = ()) -> list[dict]:
    """A Delta table's rows, sorted, without the columns that legitimately differ per run."""
    from deltalake import DeltaTable

    volatile = {"ingested_at", "updated_at", "ingest_batch_id", "detected_at", *drop}
    rows = DeltaTable(str(lake / table)).to_pyarrow_table().to_pylist()
    rows = [{k: v for k, v in r.items() if k not in volatile} for r in rows]
    return sorted(rows, key=lambda r: repr(sorted(r.items())))
