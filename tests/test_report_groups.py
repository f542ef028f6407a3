"""The report's page per group (pipelines/report/group_page.py) on a generated lake.

The lake is the demo generator's history, ingested (which builds ``commit_attribution`` and
``offset_anomalies``), plus three snapshots whose lag rows carry hand-made offset and time
lag values. Every value the pages must show is taken from what the test stored or from the
lake's tables, aggregated here, never from the report's own code. A copy of the lake shaped
like an older one (no audit tables, a ``snapshot_lag`` without time-lag columns) must say
"not available in this lake" for exactly those parts and still plot the offset lag.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.demo import DemoManifest, generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.queries.state_as_of import state_as_of_duckdb
from pipelines.reconcile.cluster.rows import ClusterSnapshot, LagRow, LogEndOffsetRow
from pipelines.reconcile.snapshot import store_snapshot
from pipelines.report.html import write_report

CLUSTER = "demo"
FRACTIONS = (0.3, 0.6, 0.9)
OLD_LAG_COLUMNS = ["cluster_id", "snapshot_id", "captured_at", "group_id", "topic", "partition",
                   "committed_offset", "log_end_offset", "lag", "committed_past_end"]


def _lag_row(group: str, topic: str, partition: int, committed: int, n: int) -> LagRow:
    """Known lag values: offset lag and time lag are functions of the key and snapshot."""
    behind = (partition * 31 + n * 47 + len(group) * 7) % 300 + 1
    return LagRow(group, topic, partition, committed, committed + behind, behind,
                  time_lag_ms=behind * 1000 + n * 7 + partition)


def _snapshot(lake: Path, manifest: DemoManifest, n: int) -> ClusterSnapshot:
    at = datetime.fromtimestamp(
        (manifest.start_ms + FRACTIONS[n] * (manifest.end_ms - manifest.start_ms)) / 1000,
        tz=timezone.utc)
    rows = state_as_of_duckdb(lake, at, cluster_id=CLUSTER).offsets.to_pylist()
    lag = [_lag_row(r["group_id"], r["topic"], r["partition"], r["committed_offset"], n) for r in rows]
    ends = {}
    for r in lag:
        ends[(r.topic, r.partition)] = max(ends.get((r.topic, r.partition), 0), r.log_end_offset)
    return ClusterSnapshot(
        snapshot_id=f"{at:%Y-%m-%dT%H:%M:%S.%fZ}-groups{n}", captured_at=at,
        source="tests/test_report_groups.py",
        log_end_offsets=[LogEndOffsetRow(t, p, e, e) for (t, p), e in sorted(ends.items())], lag=lag)


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("report-groups")
    manifest = generate_cluster(root / "data", scale=1)
    ingest_segments_local(root / "data", root / "lake", cluster_id=CLUSTER)
    engine = DeltaRsEngine(root / "lake")
    snapshots = [_snapshot(root / "lake", manifest, n) for n in range(len(FRACTIONS))]
    for snap in snapshots:
        store_snapshot(engine, snap, CLUSTER)
    old = root / "old"
    shutil.copytree(root / "lake", old)
    for table in ("commit_attribution", "offset_anomalies", "snapshot_lag"):
        shutil.rmtree(old / table, ignore_errors=True)
    lag = DeltaTable(str(root / "lake" / "snapshot_lag")).to_pyarrow_table(columns=OLD_LAG_COLUMNS)
    write_deltalake(str(old / "snapshot_lag"), lag)
    yield root / "lake", old, manifest, snapshots
    shutil.rmtree(root, ignore_errors=True)


def _pages(text: str) -> dict[str, str]:
    """Group id -> the HTML of its page."""
    out = {}
    for chunk in text.split('<div class="group-page"')[1:]:
        m = re.search(r"<h3>(.*?)</h3>", chunk)
        assert m
        out[html.unescape(m.group(1))] = chunk
    return out


def _cells(page: str, summary: str) -> list[list[str]]:
    """The rows of the table under the ``<details>`` whose summary starts with ``summary``,
    or of the first table after the heading ``summary``."""
    start = page.index(summary)
    table = page[start:page.index("</table>", start)]
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]


def _figure_data(page: str, div_suffix: str) -> list[dict]:
    m = re.search(r'Plotly\.newPlot\(\s*"(plot-group-[\w-]+-' + div_suffix + r')",\s*', page)
    assert m, div_suffix
    data, _ = json.JSONDecoder().raw_decode(page[m.end():])
    return data


def test_every_group_has_a_page_with_lag_over_snapshots(lakes, tmp_path: Path) -> None:
    lake, _, manifest, snapshots = lakes
    pages = _pages(write_report(lake, tmp_path / "r.html").read_text())
    assert set(manifest.groups) <= set(pages)
    latest = snapshots[-1]
    for group in manifest.groups:
        page = pages[group]
        want = sorted((r for r in latest.lag if r.group_id == group), key=lambda r: (r.topic, r.partition))
        if not want:
            continue
        rows = _cells(page, "Lag at the latest snapshot")
        assert [(r[0], int(r[1].replace(",", "")), int(r[3].replace(",", ""))) for r in rows] == \
            [(f"{r.topic}-{r.partition}", r.committed_offset, r.lag) for r in want], group
        data = _figure_data(page, "lag")
        by_name = {t["name"]: t for t in data if t.get("yaxis", "y") == "y"}
        timed = {t["legendgroup"]: t for t in data if t.get("yaxis") == "y2"}
        for r in want:
            name = f"{r.topic}-{r.partition}"
            series = [next((x.lag for x in s.lag if (x.group_id, x.topic, x.partition) ==
                            (group, r.topic, r.partition)), None) for s in snapshots]
            assert [v for v in by_name[name]["y"] if v is not None] == [v for v in series if v is not None]
            assert timed[name]["y"][-1] == pytest.approx(r.time_lag_ms / 1000)


def test_commits_attributed_to_members_over_time(lakes, tmp_path: Path) -> None:
    lake, _, _, _ = lakes
    pages = _pages(write_report(lake, tmp_path / "r.html").read_text())
    attribution = DeltaTable(str(lake / "commit_attribution")).to_pyarrow_table().to_pylist()
    for group in ("orders-processor", "events-etl", "spark-ingest"):
        mine = [r for r in attribution if r["group_id"] == group]
        assert mine, group
        want = Counter((r["client_id"] if r["attribution"] == "owner" else None, r["attribution"])
                       for r in mine)
        rows = _cells(pages[group], "<h4>Commits attributed to members over time</h4>")
        got = Counter()
        for label, attr, *_rest, commits, _first, _last in rows:
            client = label.split(" [")[0] if attr == "owner" else None
            got[(client, attr)] += int(commits.replace(",", ""))
        assert got == want, group
        bars = _figure_data(pages[group], "commits")
        assert sum(sum(t["y"]) for t in bars) == len(mine)


def test_anomalies_on_the_timeline(lakes, tmp_path: Path) -> None:
    lake, _, _, _ = lakes
    pages = _pages(write_report(lake, tmp_path / "r.html").read_text())
    anomalies = DeltaTable(str(lake / "offset_anomalies")).to_pyarrow_table().to_pylist()
    assert anomalies, "the generator's stories produce anomalies"
    for group in {a["group_id"] for a in anomalies}:
        mine = [a for a in anomalies if a["group_id"] == group]
        page = pages[group]
        assert f"{len(mine):,} anomalies:" in page
        points = _figure_data(page, "anomalies")
        assert Counter((t["name"], y) for t in points for y in t["y"]) == \
            Counter((a["severity"], a["kind"]) for a in mine)
        rows = _cells(page, "<h4>Anomalies on the timeline</h4>")
        assert Counter((r[1], r[4].replace(",", "")) for r in rows) == \
            Counter((a["kind"], str(a["committed_offset"])) for a in mine)
    quiet = next(g for g in pages if g not in {a["group_id"] for a in anomalies})
    assert "No offset anomalies recorded for this group." in pages[quiet]


def test_older_lake_says_not_available_for_exactly_the_missing_parts(lakes, tmp_path: Path) -> None:
    _, old, manifest, snapshots = lakes
    pages = _pages(write_report(old, tmp_path / "old.html").read_text())
    for group in manifest.groups:
        page = pages[group]
        assert "Commits attributed to members: not available in this lake" in page
        assert "Anomalies: not available in this lake" in page
        if any(r.group_id == group for r in snapshots[-1].lag):
            assert "Time lag: not available in this lake" in page
            data = _figure_data(page, "lag")
            assert data and all(t.get("yaxis", "y") == "y" for t in data)  # offset lag only


def test_one_group_report_has_only_its_page(lakes, tmp_path: Path) -> None:
    lake, _, _, _ = lakes
    pages = _pages(write_report(lake, tmp_path / "one.html", group="orders-processor").read_text())
    assert list(pages) == ["orders-processor"]
    assert "offsetlake state --group orders-processor --as-of" in pages["orders-processor"]
