"""A crash at every single write point of a batch, then a replay: tables equal a clean run.

On data the project generates (always) and on the golden scenario-a recording (when
../shared is there).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import index_partition
from tests.conftest import corpus_path, table_rows
from tests.support.generated import generated_scenario
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


SCENARIOS = ("generated", "scenario-a")


@pytest.fixture(scope="module", params=SCENARIOS)
def scenario(request, tmp_path_factory) -> Path:
    """The generated scenario (demo generator, seed 7, 5 partitions, none/gzip/zstd), or
    golden scenario-a (skipped with the reason when ../shared is absent)."""
    return _scenario(request.param, tmp_path_factory)


_made: dict[str, Path] = {}


def _scenario(name: str, tmp_path_factory) -> Path:
    if name == "scenario-a":
        return corpus_path("golden", "scenario-a")
    if name not in _made:
        _made[name] = generated_scenario(tmp_path_factory.mktemp(name))
    return _made[name]


_clean: dict[Path, Path] = {}


def _clean_lake(data: Path, tmp_path_factory) -> Path:
    """One clean (uncrashed) run per scenario, shared by the tests comparing with it."""
    if data not in _clean:
        lake = tmp_path_factory.mktemp("clean")
        ingest(data, lake)
        _clean[data] = lake
    return _clean[data]


@pytest.fixture(scope="module")
def clean_lake(scenario: Path, tmp_path_factory) -> Path:
    return _clean_lake(scenario, tmp_path_factory)


# A clean run of scenario-a makes 61 writes, of the generated one 64 (5 batches x history
# commits, state merges, then the audit: commit_attribution append, offset_anomalies merge when
# a batch finds one, offset_audit_cursor merge; then ownership_last_ended, which takes the
# batch after its audit; ingest_progress merge last). Crash before each of the first batch's
# writes, then at the later batches' topic_names merges (scenario-a 20, 55; generated 19),
# their audit writes (scenario-a 22, 23, 59; generated 22, 23, 24, 62), their
# ownership_last_ended merges (scenario-a 24, 60; generated 25, 38, 63: the replay has no
# change set of the batch, whose group_generations merge landed, and takes every ended row
# again), their ingest_progress merges (scenario-a 25, 61; generated 26, 64) and points in
# between.
TOTAL_WRITES = {"scenario-a": 61, "generated": 64}
CRASH_POINTS = {"scenario-a": [*range(1, 14), 20, 22, 23, 24, 25, 37, 55, 59, 60, 61],
                "generated": [*range(1, 13), 19, 22, 23, 24, 25, 26, 37, 38, 62, 63, 64]}


@pytest.mark.parametrize(("name", "crash_at"),
                         [(name, at) for name in SCENARIOS for at in CRASH_POINTS[name]])
def test_replay_after_crash_equals_clean_run(name: str, crash_at: int, tmp_path: Path,
                                             tmp_path_factory) -> None:
    data = _scenario(name, tmp_path_factory)
    clean = _clean_lake(data, tmp_path_factory)
    lake = tmp_path / "lake"
    with pytest.raises(Crash):
        ingest(data, lake, CrashingEngine(lake, crash_at))
    # The same app id and batch ids replay the whole run: done writes are skipped, the rest redone.
    ingest(data, lake)
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(clean, table), table


@pytest.mark.parametrize("name", SCENARIOS)
def test_crash_points_cover_the_whole_run(name: str, tmp_path: Path, tmp_path_factory) -> None:
    counting = CrashingEngine(tmp_path, crash_at=0)
    ingest(_scenario(name, tmp_path_factory), tmp_path, counting)
    assert counting.writes == TOTAL_WRITES[name]


def test_full_replay_writes_nothing(scenario: Path, clean_lake: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ingest(scenario, lake)
    before = {t: DeltaRsEngine(lake)._table(t).version() for t in ALL_TABLES}
    report = ingest(scenario, lake)
    assert report.skipped_batches == report.batches > 0
    assert not report.already_applied  # its own batches again, not another query's records
    assert {t: DeltaRsEngine(lake)._table(t).version() for t in ALL_TABLES} == before


class AppendingEngine(DeltaRsEngine):
    """delta-rs used the way delta-spark is: history handed over as Arrow, not as files, and
    one table written at a time (the audit's attribution append not on a thread)."""

    commits_files = False
    concurrent_tables = False


def test_engines_without_file_commits_write_the_same_tables(scenario: Path, clean_lake: Path,
                                                            tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    ingest(scenario, lake, AppendingEngine(lake))
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(clean_lake, table), table


#: what a query writes whatever the lake holds: every record it reads, appended again
HISTORY = ("offsets_raw", "offset_commits", "group_metadata")
STATE = tuple(t for t in ALL_TABLES if t not in HISTORY)


def test_another_query_over_the_same_log_leaves_the_state_as_a_clean_run(
        scenario: Path, clean_lake: Path, tmp_path: Path, caplog) -> None:
    """A fresh checkpoint (a new app id, batch ids from 0 again) replays the whole log into a
    lake that holds it: the history takes the records again, the state tables keep what a
    single run left. Before, the ownership replay closed the lake's open intervals at the
    first old record and wrote every earlier interval a second time."""
    lake = tmp_path / "lake"
    ingest(scenario, lake)
    again = ingest_segments_local(scenario / "segments", lake, app_id="another-query",
                                  max_records_per_batch=1)
    assert again.batches > 0 and again.already_applied  # every partition's records were held
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "lake holds already" in r.getMessage()]
    assert len(warned) == 1 and "keep --checkpoint" in warned[0]
    for table in STATE:
        assert table_rows(lake, table) == table_rows(clean_lake, table), table
    for table in HISTORY:
        assert len(table_rows(lake, table)) == 2 * len(table_rows(clean_lake, table)), table


def _log_prefix(segments: Path, into: Path) -> int:
    """A copy of ``segments`` whose busiest partition ends halfway, at a record batch's first
    byte (a log that grew since: the rest is written later); how many of that partition's
    records the copy keeps."""
    shutil.copytree(segments, into)
    plog = max(find_segments(into), key=lambda p: len(index_partition(p).offsets))
    index = index_partition(plog)
    run = len(index.run_row) // 2
    file, cut = int(index.run_file[run]), int(index.run_pos[run])
    for later in plog.segments[file + 1:]:
        later.path.unlink()
    with open(plog.segments[file].path, "r+b") as fh:
        fh.truncate(cut)
    return int(index.run_row[run])


def test_another_query_over_a_grown_log_applies_only_the_new_records(
        scenario: Path, clean_lake: Path, tmp_path: Path) -> None:
    """A first query ingests the log as it was, a second one (its own checkpoint) the log as
    it grew: its batch of the grown partition holds records on both sides of what the state
    took, and the state tables equal a single run over the grown log."""
    kept = _log_prefix(scenario / "segments", tmp_path / "prefix")
    assert kept > 0
    lake = tmp_path / "lake"
    ingest_segments_local(tmp_path / "prefix", lake, app_id="the-first-query", max_records_per_batch=1)
    again = ingest_segments_local(scenario / "segments", lake, app_id="another-query",
                                  max_records_per_batch=1)
    assert again.already_applied  # the partitions the first query read whole, at least
    for table in STATE:
        assert table_rows(lake, table) == table_rows(clean_lake, table), table
