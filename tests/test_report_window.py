"""``offsetlake report --since``: the report's history window (issue 9: cost follows new data).

On the demo generator's lake whose history tables are laid out by time (delta-rs
``optimize.z_order`` on ``record_timestamp``, as scheduled ingests lay them out: each run's
commits in new files): with a window the report opens only the files that can hold a commit
from then on, and what it plots equals the old code (tests/support/report_oracle.py) run on
the rows the test itself keeps (a pyarrow filter on the whole table). A window older than
the history gives the whole-history report, byte for byte apart from the window's note. The
header's counts, now from the Delta log and ``ingest_progress``, equal a scan of
``offsets_raw``.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest
from deltalake import DeltaTable

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.queries import duckdb_connection
from pipelines.report.group_page import (
    attributed_commits_html,
    attribution_summary,
    read_group_rows,
)
from pipelines.report.html import write_report
from pipelines.report.render import query_rows
from pipelines.report.sections import OFFSET_SERIES_SQL
from pipelines.report.window import history_source, history_span, parse_since, register_history
from tests.support import report_oracle

ATTRIBUTION_COLUMNS = ["record_timestamp", "commit_timestamp", "attribution", "member_id",
                       "client_id", "client_host", "group_instance_id"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("report-window")
    generate_cluster(root / "data", scale=1)
    ingest_segments_local(root / "data", root / "lake", cluster_id="demo")
    for table in ("offset_commits", "commit_attribution"):
        DeltaTable(str(root / "lake" / table)).optimize.z_order(["record_timestamp"],
                                                                target_size=16 << 10)
    yield root / "lake"
    shutil.rmtree(root, ignore_errors=True)


def _whole(lake: Path, table: str, columns: list[str] | None = None) -> pa.Table:
    return DeltaTable(str(lake / table)).to_pyarrow_table(columns=columns)


def _kept(table: pa.Table, since: datetime) -> pa.Table:
    """The test's own window: rows whose record time, else commit time, is >= since."""
    table = table.cast(pa.schema([pa.field(f.name, pa.string()) if f.type == pa.string_view()
                                  else f for f in table.schema]))
    ts = pc.coalesce(table.column("record_timestamp"), table.column("commit_timestamp"))
    return table.filter(pc.fill_null(pc.greater_equal(ts, pa.scalar(since, ts.type)), False))


def _since(lake: Path, fraction: float) -> datetime:
    ts = _whole(lake, "offset_commits", ["record_timestamp"]).column("record_timestamp")
    first, last = pc.min(ts).as_py(), pc.max(ts).as_py()
    return first + (last - first) * fraction


def test_header_counts_come_from_the_log_and_equal_a_scan(lake: Path) -> None:
    raw = _whole(lake, "offsets_raw", ["cluster_id", "timestamp"])
    ts = raw.column("timestamp")
    expected = [{"cluster_id": "demo", "records": raw.num_rows, "first": pc.min(ts).as_py(),
                 "last": pc.max(ts).as_py()}]
    assert set(raw.column("cluster_id").to_pylist()) == {"demo"} and raw.num_rows > 1000
    assert history_span(lake) == expected


def test_a_window_opens_only_the_files_that_can_hold_its_commits(lake: Path) -> None:
    since = _since(lake, 0.8)
    whole = pads.dataset([u.removeprefix("file://") for u in
                          DeltaTable(str(lake / "offset_commits")).file_uris()], format="parquet")
    windowed = history_source(lake, "offset_commits", since)
    assert isinstance(windowed, pads.FileSystemDataset)
    assert len(whole.files) >= 4, "the fixture should lay the history out in several files"
    assert 0 < len(windowed.files) < len(whole.files) / 2
    key = ["group_id", "topic", "partition", "offset"]
    got = _kept(windowed.to_table(), since).select(key).sort_by([(k, "ascending") for k in key])
    want = _kept(_whole(lake, "offset_commits"), since).select(key).sort_by(
        [(k, "ascending") for k in key])
    assert got.num_rows > 0 and got.to_pylist() == want.to_pylist()


@pytest.mark.parametrize("fraction", [0.5, 0.9])
def test_windowed_offset_series_equals_the_old_query_on_the_windows_rows(lake: Path,
                                                                         fraction: float) -> None:
    since = _since(lake, fraction)
    con = duckdb_connection(lake, [])
    register_history(con, lake, since)
    oracle = duckdb.connect()
    oracle.execute("SET TimeZone = 'UTC'")
    oracle.register("offset_commits", _kept(_whole(lake, "offset_commits"), since))
    try:
        groups = [r["group_id"] for r in query_rows(oracle, "SELECT DISTINCT group_id FROM offset_commits")]
        for bucket in (1, 60_000):
            expected = query_rows(oracle, report_oracle.OFFSET_SERIES_SQL, groups=groups, bucket=bucket)
            assert expected
            assert query_rows(con, OFFSET_SERIES_SQL, groups=groups, bucket=bucket) == expected
    finally:
        con.close()
        oracle.close()


def test_windowed_attribution_equals_the_old_count_on_the_windows_rows(lake: Path) -> None:
    since = _since(lake, 0.7)
    whole = _kept(_whole(lake, "commit_attribution", ["group_id", *ATTRIBUTION_COLUMNS]), since)
    groups = sorted(set(whole.column("group_id").to_pylist()))
    windowed = read_group_rows(lake, "commit_attribution", groups, ATTRIBUTION_COLUMNS, since=since)
    assert windowed.num_rows == whole.num_rows > 0
    # the same rows, though not in the same order: compare the old per-row page on the
    # test's rows with the new page on the window's rows, after sorting both alike
    order = [(c, "ascending") for c in ["group_id", *ATTRIBUTION_COLUMNS]]
    old = report_oracle.by_group(whole.sort_by(order))
    new = attribution_summary(windowed.select(whole.schema.names).sort_by(order))
    for i, group in enumerate(groups):
        assert attributed_commits_html(group, str(i), new[group], True) == \
            report_oracle.attributed_commits(group, str(i), old[group], True)


def _without_window_and_clock(text: str) -> str:
    text = re.sub(r'<p class="note">History window:.*?</p>', "", text)
    return re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "generated", text)


def test_a_window_before_the_history_gives_the_whole_report(lake: Path, tmp_path: Path) -> None:
    whole = write_report(lake, tmp_path / "whole.html").read_text()
    early = write_report(lake, tmp_path / "early.html", since=_since(lake, 0) - timedelta(days=1))
    early_text = early.read_text()
    assert "History window: the plots" in early_text
    assert _without_window_and_clock(early_text) == _without_window_and_clock(whole)


def test_a_recent_window_plots_less_and_says_so(lake: Path, tmp_path: Path) -> None:
    from pipelines.cli import main

    out = tmp_path / "cli.html"
    assert main(["report", "--lake", str(lake), "--out", str(out), "--since", "30m"]) == 0
    text = out.read_text()
    assert "History window: the plots and group pages show the commits from" in text
    assert main(["report", "--lake", str(lake), "--out", str(out), "--since", "yesterday"]) == 2


def test_parse_since() -> None:
    last = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert parse_since("90m", last) == last - timedelta(minutes=90)
    assert parse_since("7d", last) == last - timedelta(days=7)
    assert parse_since(" 24h ", last) == last - timedelta(hours=24)
    assert parse_since("2026-01-01T00:00:00Z", last) == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_since("1767225600000", None) == datetime(2026, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(ValueError):
        parse_since("yesterday", last)
