"""The report's vectorized parts equal the per-row code they replaced (issue 9).

The oracle is the old code, kept in tests/support/report_oracle.py: the attributed-commits
chart and table counted row by row over Python dicts, and the offsets plot's ROW_NUMBER
window query. Compared on the demo generator's lake (every group it writes, tombstones
included) and on hand-made rows for the edges: commits with no record time (the commit
time is used), with no time at all, a group none of whose commits has a time, a NULL host
on an owner's first row, attribution NULL and "unknown" (the same label), sub-millisecond
times (the bucket arithmetic), and an older lake's table without the optional columns.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.queries import duckdb_connection
from pipelines.report.group_page import attributed_commits_html, attribution_summary
from pipelines.report.render import query_rows
from pipelines.report.sections import OFFSET_SERIES_SQL
from tests.support import report_oracle

ATTRIBUTION_COLUMNS = ["group_id", "record_timestamp", "commit_timestamp", "attribution",
                       "member_id", "client_id", "client_host", "group_instance_id"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("report-vectorized")
    generate_cluster(root / "data", scale=1)
    ingest_segments_local(root / "data", root / "lake", cluster_id="demo")
    yield root / "lake"
    shutil.rmtree(root, ignore_errors=True)


def _assert_same_pages(table: pa.Table, expect_groups: int) -> None:
    old = report_oracle.by_group(table)
    new = attribution_summary(table)
    assert sorted(new) == sorted(old) and len(old) == expect_groups
    for i, group in enumerate(sorted(old)):
        expected = report_oracle.attributed_commits(group, f"{i}-g", old[group], True)
        assert attributed_commits_html(group, f"{i}-g", new[group], True) == expected, group
    assert attributed_commits_html("absent", "x", new.get("absent"), True) == \
        report_oracle.attributed_commits("absent", "x", [], True)
    assert attributed_commits_html("absent", "x", None, False) == \
        report_oracle.attributed_commits("absent", "x", [], False)


def test_attributed_commits_equal_the_per_row_count_on_a_generated_lake(lake: Path) -> None:
    table = DeltaTable(str(lake / "commit_attribution")).to_pyarrow_table(columns=ATTRIBUTION_COLUMNS)
    assert table.num_rows > 1000
    groups = set(table.column("group_id").to_pylist())
    _assert_same_pages(table, len(groups))


def _edge_rows() -> pa.Table:
    t0 = datetime(2026, 3, 1, 12, 0, 0, 123, tzinfo=timezone.utc)
    rows = []
    for i in range(500):  # odd microseconds: bucket boundaries fall between rows
        at = t0 + timedelta(microseconds=i * 7_777_777 + (i % 3) * 999)
        rows.append({"group_id": "g1", "record_timestamp": None if i % 11 == 0 else at,
                     "commit_timestamp": None if i % 22 == 0 else at + timedelta(milliseconds=3),
                     "attribution": [None, "unknown", "owner", "owner", "zombie"][i % 5],
                     "member_id": f"consumer-{i % 4}-0d2c7e4a-6b1e-4bb8-9c55-{i % 4:012d}",
                     "client_id": None if i % 4 == 1 else f"client-{i % 4}",
                     "client_host": None if i < 5 else f"/10.0.0.{i % 4}",
                     "group_instance_id": "static-1" if i % 8 == 3 else None})
    rows += [{"group_id": "no-times", "record_timestamp": None, "commit_timestamp": None,
              "attribution": "owner", "member_id": "m", "client_id": "c", "client_host": None,
              "group_instance_id": None}] * 3
    rows.append({"group_id": "one-row", "record_timestamp": t0, "commit_timestamp": None,
                 "attribution": "owner", "member_id": None, "client_id": None,
                 "client_host": "/h", "group_instance_id": None})
    schema = pa.schema([("group_id", pa.string()), ("record_timestamp", pa.timestamp("us", "UTC")),
                        ("commit_timestamp", pa.timestamp("us", "UTC")),
                        *[(c, pa.string()) for c in ATTRIBUTION_COLUMNS[3:]]])
    return pa.Table.from_pylist(rows, schema)


def test_attributed_commits_equal_the_per_row_count_on_edge_rows() -> None:
    table = _edge_rows()
    _assert_same_pages(table, 3)
    summary = attribution_summary(table)
    assert summary["no-times"].first is None and summary["no-times"].rows == 3
    assert summary["g1"].per_label["(unknown)"]["n"] == 200  # NULL and "unknown" together


def test_attributed_commits_equal_on_an_older_lakes_columns() -> None:
    table = _edge_rows().drop_columns(["commit_timestamp", "client_host", "group_instance_id"])
    _assert_same_pages(table, 3)


def test_attribution_of_an_empty_table() -> None:
    assert attribution_summary(_edge_rows().slice(0, 0)) == {}
    assert attribution_summary(None) == {}


def test_offset_series_equals_the_row_number_query(lake: Path) -> None:
    con = duckdb_connection(lake, ["offset_commits"])
    try:
        groups = [r["group_id"] for r in query_rows(con, "SELECT DISTINCT group_id FROM offset_commits")]
        tombstones = query_rows(con, "SELECT COUNT(*) AS n FROM offset_commits WHERE is_tombstone")
        assert tombstones[0]["n"] > 0, "the demo lake should delete offsets (tombstones in the series)"
        for bucket in (1, 997, 60_000, 3_600_000):
            expected = query_rows(con, report_oracle.OFFSET_SERIES_SQL, groups=groups, bucket=bucket)
            assert expected
            assert query_rows(con, OFFSET_SERIES_SQL, groups=groups, bucket=bucket) == expected
        some = groups[:2]
        assert query_rows(con, OFFSET_SERIES_SQL, groups=some, bucket=1000) == \
            query_rows(con, report_oracle.OFFSET_SERIES_SQL, groups=some, bucket=1000)
    finally:
        con.close()
