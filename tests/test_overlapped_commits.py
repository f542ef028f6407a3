"""The streaming job commits batch N while the executors decode N+1: Spark counts N done
before N's commits land, so N is kept in the checkpoint first. A commit failing at any
batch (the middle one, the last one: nothing comes after it to fail through Spark) fails
the run with that error, and the next run lands every record exactly once.

On data the project generates; the kept files on their own below.
"""

from __future__ import annotations

import pickle
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pipelines.history import pending
from pipelines.ingest import IngestConfig, ingest_segments_local, run_ingest
from pipelines.lake.engines import DeltaRsEngine
from tests.conftest import table_rows
from tests.support.generated import generated_scenario
from tests.test_exactly_once import Crash, CrashingEngine
from tests.test_ingest import ALL_TABLES

BATCH = 500  # records per micro-batch: the generated scenario makes several


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return generated_scenario(tmp_path_factory.mktemp("generated")) / "segments"


@pytest.fixture(scope="module")
def clean(data: Path, tmp_path_factory) -> Path:
    lake = tmp_path_factory.mktemp("clean")
    ingest_segments_local(data, lake)
    return lake


def _config(data: Path, lake: Path) -> IngestConfig:
    return IngestConfig(source="segments", lake=lake, path=str(data), max_records_per_batch=BATCH)


def _after_spark_recorded(lake: Path, batch_id: int) -> None:
    """Wait until Spark's checkpoint says ``batch_id`` is done (its commit log entry): the
    window a crash would lose the batch in, were it not kept."""
    deadline = time.monotonic() + 120
    while not list((lake / "_checkpoints").glob(f"*/ingest/spark/commits/{batch_id}")):
        assert time.monotonic() < deadline, f"Spark never recorded batch {batch_id}"
        time.sleep(0.02)


class FailingEngine(DeltaRsEngine):
    """delta-rs, failing the first write of batch ``fail_batch`` once Spark counts it done."""

    def __init__(self, root: Path, fail_batch: int) -> None:
        super().__init__(root)
        self.fail_batch = fail_batch

    def commit_files(self, contract, files, app_id: str, version: int) -> bool:
        if version == self.fail_batch:
            _after_spark_recorded(Path(self.root), version)
            raise Crash(f"commit of batch {version} failed")
        return super().commit_files(contract, files, app_id, version)


class LateCrashingEngine(CrashingEngine):
    """:class:`CrashingEngine` whose crash comes once Spark counts the batch done."""

    def _late(self, version: int) -> None:
        if self.writes + 1 == self.crash_at:
            _after_spark_recorded(Path(self.root), version)

    def append(self, contract, data, app_id: str, version: int) -> bool:
        self._late(version)
        return super().append(contract, data, app_id, version)

    def commit_files(self, contract, files, app_id: str, version: int) -> bool:
        self._late(version)
        return super().commit_files(contract, files, app_id, version)

    def merge(self, contract, changes, app_id: str, version: int) -> bool:
        self._late(version)
        return super().merge(contract, changes, app_id, version)


@pytest.fixture(scope="module")
def batches(spark, data: Path, tmp_path_factory) -> int:
    """How many micro-batches a clean streaming run makes (it lands what the local one does)."""
    lake = tmp_path_factory.mktemp("streamed")
    return run_ingest(spark, _config(data, lake)).batches


def _assert_lakes_equal(lake: Path, clean: Path) -> None:
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(clean, table), table


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_failed_commit_fails_the_run_and_the_rerun_lands_it_once(
        spark, data: Path, clean: Path, batches: int, tmp_path: Path, where: str) -> None:
    assert batches >= 4, "the scenario must span several batches"
    fail = batches // 2 if where == "middle" else batches - 1
    lake = tmp_path / "lake"
    with pytest.raises(Exception, match=f"commit of batch {fail} failed"):
        run_ingest(spark, _config(data, lake), FailingEngine(lake, fail))
    kept = lake / "_checkpoints"
    kept_files = sorted(p.name for p in kept.rglob("*.batch"))
    # the failed batch is kept (Spark counted it done), the batches before it are not (their
    # commits landed); the next one may be, when it was decoded before the run stopped
    assert kept_files[0] == f"{fail:020d}.batch"
    assert kept_files in ([f"{fail:020d}.batch"], [f"{fail:020d}.batch", f"{fail + 1:020d}.batch"])
    if where == "last":
        assert len(kept_files) == 1
    rerun = run_ingest(spark, _config(data, lake))
    assert not list(kept.rglob("*.batch"))  # committed, then forgotten
    assert rerun.records > 0
    _assert_lakes_equal(lake, clean)
    again = run_ingest(spark, _config(data, lake))
    assert (again.records, again.skipped_batches) == (0, 0)
    _assert_lakes_equal(lake, clean)


def test_a_crash_mid_commit_is_finished_by_the_next_run(spark, data: Path, clean: Path,
                                                        tmp_path: Path) -> None:
    """Dies between two writes of a batch's commit (some tables in, some not): the kept
    batch is finished first, and the tables equal a clean run."""
    lake = tmp_path / "lake"
    with pytest.raises(Crash):
        run_ingest(spark, _config(data, lake), LateCrashingEngine(lake, crash_at=15))
    assert list(lake.rglob("*.batch"))
    run_ingest(spark, _config(data, lake))
    assert not list(lake.rglob("*.batch"))
    _assert_lakes_equal(lake, clean)


# ------------------------------------------------------------------ the kept files


def test_kept_batches_come_back_in_batch_order_and_go_when_dropped(tmp_path: Path) -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    for batch_id in (11, 2, 10):
        pending.keep(tmp_path, batch_id, now, [pickle.dumps({"part": batch_id})])
    (tmp_path / ".00000000000000000012.batch.999.tmp").write_bytes(b"half written")
    assert [(b, t, parts) for b, t, parts in pending.kept(tmp_path)] == [
        (2, now, [{"part": 2}]), (10, now, [{"part": 10}]), (11, now, [{"part": 11}])]
    pending.drop(tmp_path, 10)
    pending.drop(tmp_path, 10)  # twice: a crash between the drop and the next run
    assert [b for b, _, _ in pending.kept(tmp_path)] == [2, 11]
    assert pending.kept(tmp_path / "absent") == []


def test_a_kept_batch_of_another_format_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / f"{3:020d}.batch").write_bytes(pickle.dumps((99, 3, None, [])))
    with pytest.raises(ValueError, match="format 99"):
        pending.kept(tmp_path)
