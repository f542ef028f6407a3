"""A lake ingested before the commit audit existed gets the audit of its whole history.

On the generated scenario (demo generator, seed 7, 5 partitions): an "older lake" is a
lake ingested, then stripped of the three audit tables' directories. The next ingest (with
or without new data) backfills them; they must equal those of a lake audited batch by batch
from scratch. A crash anywhere in the backfill, then a rerun, gives the same tables; and
``offsetlake maintain --rebuild-audit`` rebuilds them on request.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines import cli
from pipelines.ingest import ensure_tables, ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.sources.segments.files import find_segments
from pipelines.state import audit
from tests.conftest import table_rows
from tests.support.generated import generated_scenario
from tests.test_exactly_once import Crash, CrashingEngine

CHUNK = 500  # commits per backfill chunk: the generated history (~5,000) takes ~11


def ingest(segments: Path, lake: Path, engine: DeltaRsEngine | None = None):
    return ingest_segments_local(segments, lake, engine=engine, max_records_per_batch=1)


def strip_audit(lake: Path) -> None:
    """What a lake written before the audit existed looks like."""
    for name in audit.TABLES:
        shutil.rmtree(lake / name)


def commit_positions(lake: Path) -> int:
    """Offset commits in the history (one per log position), counted from the table itself."""
    table = DeltaTable(str(lake / "offset_commits")).to_pyarrow_table(
        columns=["cluster_id", "offsets_partition", "offset"])
    return len(set(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)))


def assert_audit_equal(lake: Path, clean: Path) -> None:
    for name in audit.TABLES:
        rows = table_rows(lake, name)
        assert rows == table_rows(clean, name), name
    assert table_rows(clean, audit.ATTRIBUTION)  # the comparison is not between empty tables


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "BACKFILL_CHUNK", CHUNK)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generated_scenario(tmp_path_factory.mktemp("backfill"))


@pytest.fixture(scope="module")
def clean(scenario: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Audited batch by batch from the first ingest."""
    lake = tmp_path_factory.mktemp("clean")
    ingest(scenario / "segments", lake)
    return lake


@pytest.fixture(scope="module")
def older(scenario: Path, clean: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole history ingested, the audit tables absent (copy it before changing it)."""
    lake = tmp_path_factory.mktemp("older") / "lake"
    shutil.copytree(clean, lake)
    strip_audit(lake)
    return lake


def test_older_lake_is_backfilled_by_the_next_ingest(older: Path, clean: Path, scenario: Path,
                                                     tmp_path: Path, caplog) -> None:
    lake = tmp_path / "lake"
    shutil.copytree(older, lake)
    assert audit.backfill_clusters(DeltaRsEngine(lake)) == ["default"]
    with caplog.at_level(logging.INFO, logger="pipelines.state.audit"):
        ingest(scenario / "segments", lake)  # no new data: every batch is a replay
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("audit backfill")]
    assert len(lines) == 1
    assert f": {commit_positions(lake)} offset commits of 1 cluster(s)" in lines[0]
    assert_audit_equal(lake, clean)
    # done once: the next ingest neither backfills again nor writes anything
    assert audit.backfill_clusters(DeltaRsEngine(lake)) == []
    versions = {t: DeltaTable(str(lake / t)).version() for t in audit.TABLES}
    ingest(scenario / "segments", lake)
    assert {t: DeltaTable(str(lake / t)).version() for t in audit.TABLES} == versions


def test_backfill_then_new_batches(scenario: Path, clean: Path, tmp_path: Path) -> None:
    """History of the first partitions ingested before the audit; the rest arrives after
    the upgrade: backfilled first, then audited batch by batch from the backfill's cursor."""
    plogs = find_segments(scenario / "segments")
    first = tmp_path / "first"
    first.mkdir()
    for plog in plogs[:2]:  # the same batch ids as the full run's first two batches
        shutil.copytree(plog.directory, first / plog.directory.name)
    lake = tmp_path / "lake"
    ingest(first, lake)
    strip_audit(lake)
    report = ingest(scenario / "segments", lake)
    assert 0 < report.skipped_batches < report.batches
    assert_audit_equal(lake, clean)
    # and every commit of the history is attributed exactly once
    attributed = table_rows(lake, audit.ATTRIBUTION)
    assert len({(r["offsets_partition"], r["offset"]) for r in attributed}) == len(attributed)


def _backfill_writes(older: Path, tmp_path: Path) -> int:
    lake = tmp_path / "count"
    shutil.copytree(older, lake)
    counting = CrashingEngine(lake, crash_at=0)
    ensure_tables(counting)  # what an ingest does first
    return counting.writes


def test_crash_in_backfill_then_rerun_equals_clean(older: Path, clean: Path, scenario: Path,
                                                   tmp_path: Path) -> None:
    total = _backfill_writes(older, tmp_path)
    assert total > 6  # start marker, several chunks' writes, the done marker
    for crash_at in sorted({1, 2, 3, 4, total // 2, total - 1, total}):
        lake = tmp_path / f"lake-{crash_at}"
        shutil.copytree(older, lake)
        with pytest.raises(Crash):
            ingest(scenario / "segments", lake, CrashingEngine(lake, crash_at))
        # the interrupted backfill is recognised (the audit tables exist now) and finished
        assert audit.backfill_clusters(DeltaRsEngine(lake)) == ["default"], crash_at
        ingest(scenario / "segments", lake)
        assert_audit_equal(lake, clean)
        assert audit.backfill_clusters(DeltaRsEngine(lake)) == [], crash_at


def test_maintain_rebuild_audit(older: Path, clean: Path, tmp_path: Path, capsys) -> None:
    lake = tmp_path / "lake"
    shutil.copytree(clean, lake)
    # an audit that lost rows (e.g. written by a faulty version): the rebuild restores it
    engine = DeltaRsEngine(lake)
    attribution = engine.read(audit.ATTRIBUTION)
    engine.overwrite(audit.contract(audit.ATTRIBUTION), attribution.slice(0, attribution.num_rows // 2))
    assert table_rows(lake, audit.ATTRIBUTION) != table_rows(clean, audit.ATTRIBUTION)
    assert cli.main(["maintain", "--lake", str(lake), "--rebuild-audit"]) == 0
    assert '"audit_rebuilt"' in capsys.readouterr().out
    assert_audit_equal(lake, clean)
    # and on an older lake with no audit tables at all
    bare = tmp_path / "bare"
    shutil.copytree(older, bare)
    assert cli.main(["maintain", "--lake", str(bare), "--rebuild-audit"]) == 0
    assert_audit_equal(bare, clean)
