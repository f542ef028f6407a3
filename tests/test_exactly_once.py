"""A crash at every single write point of a batch, then a replay: tables equal a clean run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from tests.conftest import table_rows
from tests.test_ingest import ALL_TABLES


class Crash(Exception):
    pass


class CrashingEngine(DeltaRsEngine):
    """delta-rs, but dies just before its N-th write (history commit or state merge)."""

    def __init__(self, root: Path, crash_at: int) -> None:
        super().__init__(root)
        self.crash_at, self.writes = crash_at, 0

    def _tick(self) -> None:
        self.writes += 1
        if self.writes == self.crash_at:
            raise Crash(f"crash before write {self.crash_at}")

    def append(self, *args, **kwargs) -> bool:
        self._tick()
        return super().append(*args, **kwargs)

    def commit_files(self, *args, **kwargs) -> bool:
        self._tick()
        return super().commit_files(*args, **kwargs)

    def merge(self, *args, **kwargs) -> bool:
        self._tick()
        return super().merge(*args, **kwargs)


def ingest(scenario: Path, lake: Path, engine: DeltaRsEngine | None = None):
    """One batch per partition directory: five batches of ~9 writes each."""
    return ingest_segments_local(scenario / "segments", lake, engine=engine, max_records_per_batch=1)


@pytest.fixture(scope="module")
def clean_lake(scenario_a: Path, tmp_path_factory) -> Path:
    lake = tmp_path_factory.mktemp("clean")
    ingest(scenario_a, lake)
    return lake


# A clean run makes 37 writes (5 batches x history appends + state merges): crash before
# each of the first batch's writes, then at points spread over the later batches.
@pytest.mark.parametrize("crash_at", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14, 19, 23, 31, 37])
def test_replay_after_crash_equals_clean_run(scenario_a: Path, clean_lake: Path, tmp_path: Path,
                                             crash_at: int) -> None:
    lake = tmp_path / "lake"
    with pytest.raises(Crash):
        ingest(scenario_a, lake, CrashingEngine(lake, crash_at))
    # The same app id and batch ids replay the whole run: done writes are skipped, the rest redone.
    ingest(scenario_a, lake)
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(clean_lake, table), table


def test_crash_points_cover_the_whole_run(scenario_a: Path, tmp_path: Path) -> None:
    counting = CrashingEngine(tmp_path, crash_at=0)
    ingest(scenario_a, tmp_path, counting)
    assert counting.writes == 37


def test_full_replay_writes_nothing(scenario_a: Path, clean_lake: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ingest(scenario_a, lake)
    before = {t: DeltaRsEngine(lake)._table(t).version() for t in ALL_TABLES}
    report = ingest(scenario_a, lake)
    assert report.skipped_batches == report.batches > 0
    assert {t: DeltaRsEngine(lake)._table(t).version() for t in ALL_TABLES} == before


class AppendingEngine(DeltaRsEngine):
    """delta-rs used the way delta-spark is: history handed over as Arrow, not as files."""

    commits_files = False


def test_engines_without_file_commits_write_the_same_tables(scenario_a: Path, clean_lake: Path,
                                                            tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ingest(scenario_a, lake, AppendingEngine(lake))
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(clean_lake, table), table
