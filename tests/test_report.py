"""The HTML report over the demo lake, rendered in headless Chromium.

The lake gets a few snapshots through the history (end offsets and lag, so the lag plots
have points), the generator's recorded broker answers at the end when it wrote them, and a
reconciliation against the latest snapshot. Chromium loads the file with no network,
the page must run without script errors and render every plot, and a screenshot is kept in
``test-artifacts/report.png`` for people to look at. Without ``/usr/bin/chromium`` the
browser test skips (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pipelines.demo import DemoManifest, generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.queries import run_duckdb
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.cluster.rows import ClusterSnapshot, LagRow, LogEndOffsetRow
from pipelines.reconcile.reconcile import reconcile
from pipelines.reconcile.snapshot import store_snapshot
from pipelines.report.html import write_report

CLUSTER = "demo"
REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path("/usr/bin/chromium")
PLOTS = ("plot-offsets", "plot-lag", "plot-commit-rate", "plot-generations",
         "plot-reconciliation")


def _history_snapshot(lake: Path, manifest: DemoManifest, frac: float, n: int) -> ClusterSnapshot:
    """A snapshot part-way through the history: the committed offsets as of then (from the
    lake) and end offsets some records ahead, so lag changes from snapshot to snapshot."""
    at = datetime.fromtimestamp(
        (manifest.start_ms + frac * (manifest.end_ms - manifest.start_ms)) / 1000, tz=timezone.utc)
    rows = run_duckdb(lake, "offsets_as_of", as_of=at, cluster_id=CLUSTER).to_pylist()
    ends: dict[tuple[str, int], int] = {}
    lag = []
    for r in rows:
        tp = (r["topic"], r["partition"])
        behind = (r["partition"] * 37 + n * 53 + len(r["group_id"]) * 11) % 400
        ends[tp] = max(ends.get(tp, 0), r["committed_offset"] + behind)
    for r in rows:
        leo = ends[(r["topic"], r["partition"])]
        lag.append(LagRow(r["group_id"], r["topic"], r["partition"], r["committed_offset"], leo,
                          max(leo - r["committed_offset"], 0)))
    return ClusterSnapshot(
        snapshot_id=f"{at:%Y-%m-%dT%H:%M:%S.%fZ}-history{n}", captured_at=at,
        source="tests/test_report.py",
        log_end_offsets=[LogEndOffsetRow(t, p, leo, leo) for (t, p), leo in sorted(ends.items())],
        lag=lag)


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, DemoManifest]:
    """(a lake with snapshots and a reconciliation, the same lake without them, manifest)."""
    root = tmp_path_factory.mktemp("report")
    manifest = generate_cluster(root / "data", scale=1)
    ingest_segments_local(root / "data", root / "lake", cluster_id=CLUSTER)
    shutil.copytree(root / "lake", root / "bare")
    engine = DeltaRsEngine(root / "lake")
    for n, frac in enumerate((0.25, 0.5, 0.75)):
        store_snapshot(engine, _history_snapshot(root / "lake", manifest, frac, n), CLUSTER)
    live = root / "data" / "live"
    if (live / "list_groups.json").exists():
        store_snapshot(engine, snapshot_from_recorded(live), CLUSTER)
        reconcile(engine, cluster_id=CLUSTER, reconciled_at=datetime.now(timezone.utc))
    yield root / "lake", root / "bare", manifest
    shutil.rmtree(root, ignore_errors=True)


def _chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="offsetlake-chromium-") as profile:
        cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def test_report_without_snapshots_or_reconciliation(lakes, tmp_path: Path) -> None:
    _, bare, manifest = lakes
    out = write_report(bare, tmp_path / "bare.html")
    text = out.read_text()
    assert "No snapshot" in text and "No reconciliation yet" in text
    for div in ("plot-offsets", "plot-commit-rate", "plot-generations"):
        assert f'id="{div}"' in text
    assert 'id="plot-lag"' not in text and 'id="plot-reconciliation"' not in text
    assert "https://" not in re.sub(r"<script[^>]*>.*?</script>", "", text, flags=re.S), \
        "the page must not load anything from the network"
    for group in manifest.groups:
        assert group in text


def _layouts(page: str) -> dict[str, dict]:
    """Each figure's layout, by its div id, as the page hands it to ``Plotly.newPlot``."""
    decoder, out = json.JSONDecoder(), {}
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([\w-]+)",\s*', page):
        _, end = decoder.raw_decode(page, m.end())  # the traces
        out[m.group(1)] = decoder.raw_decode(page, end + page[end:].index("{"))[0]
    return out


def _figures(page: str) -> dict[str, dict]:
    """Each figure, by its div id, as the page hands it to ``Plotly.newPlot``: its traces and
    its layout."""
    decoder, out = json.JSONDecoder(), {}
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([\w-]+)",\s*', page):
        data, end = decoder.raw_decode(page, m.end())
        out[m.group(1)] = {"data": data,
                           "layout": decoder.raw_decode(page, end + page[end:].index("{"))[0]}
    return out


def test_every_figure_is_what_plotly_graph_objects_make_of_it(lakes, tmp_path: Path) -> None:
    """The report writes its figures as plotly's JSON, unchecked (``render.figure_div``):
    here plotly's graph objects check each one, property by property (an unknown property or
    a value of the wrong kind raises), and must give back the very same figure (nothing
    coerced, nothing added)."""
    import plotly.graph_objects as go
    import plotly.io as pio

    lake, bare, _ = lakes
    figures = {**_figures(write_report(bare, tmp_path / "bare.html").read_text()),
               **_figures(write_report(lake, tmp_path / "checked.html").read_text())}
    assert set(PLOTS) <= set(figures) and len(figures) > len(PLOTS)  # the group pages' too
    assert any(len(f["data"]) > 20 for f in figures.values())
    for div, figure in figures.items():
        checked = go.Figure(data=figure["data"], layout=figure["layout"])
        assert json.loads(pio.to_json(checked, validate=True)) == figure, div


def test_every_figure_has_the_report_look_and_plotly_is_left_as_found(lakes, tmp_path: Path) -> None:
    import plotly.io as pio
    from plotly.utils import PlotlyJSONEncoder

    lake, _, _ = lakes
    before = pio.templates.default
    layouts = _layouts(write_report(lake, tmp_path / "look.html").read_text())
    assert pio.templates.default == before  # plotly's default template is left as it was
    white = json.loads(json.dumps(pio.templates["plotly_white"].to_plotly_json(), cls=PlotlyJSONEncoder))
    assert set(PLOTS) <= set(layouts) and len(layouts) > len(PLOTS)  # the group pages' too
    for div, layout in layouts.items():
        assert layout["template"] == white, div
        assert layout["font"] == {"family": "Inter, system-ui, sans-serif", "size": 12}, div


def test_report_of_one_group_and_of_a_missing_group(lakes, tmp_path: Path) -> None:
    lake, _, _ = lakes
    out = write_report(lake, tmp_path / "one.html", group="orders-processor")
    text = out.read_text()
    assert "offsetlake report — orders-processor" in text
    assert "Offsets of orders-processor" in text and "events-etl" not in text
    with pytest.raises(ValueError, match="does not appear"):
        write_report(lake, tmp_path / "none.html", group="no-such-group")
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "not-a-lake", tmp_path / "x.html")


def test_report_cli(lakes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipelines.cli import main

    lake, _, _ = lakes
    assert main(["report", "--lake", str(lake), "--out", str(tmp_path / "cli.html")]) == 0
    assert Path(capsys.readouterr().out.strip()) == tmp_path / "cli.html"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent: install Debian's "
                    "chromium (`apt-get install chromium`; .ci/run does) to render the report")
def test_report_renders_in_headless_chromium(lakes) -> None:
    lake, _, manifest = lakes
    ARTIFACTS.mkdir(exist_ok=True)
    out = write_report(lake, ARTIFACTS / "report.html")
    text = out.read_text()
    for div in PLOTS:
        assert f'id="{div}"' in text, div
    if (Path(manifest.out_dir) / "live").exists():
        assert "All " in text and "rows matched or were explained" in text

    width = 1440  # lay the page out as wide as the screenshot, so its height carries over
    dom = _chromium("--virtual-time-budget=8000", f"--window-size={width},1000", "--dump-dom",
                    out.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, dom.stdout[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert json.loads(attrs["data-js-errors"].replace("&quot;", '"')) == []
    # the fixed sections' plots, plus the per-group pages' (pipelines/report/group_page.py)
    in_file = re.findall(r'<div id="(plot-[\w-]+)" class="plotly-graph-div', text)
    assert set(PLOTS) <= set(in_file) and any(p.startswith("plot-group-") for p in in_file)
    assert int(attrs["data-plots"]) == len(in_file)
    rendered = re.findall(r'<div id="(plot-[\w-]+)" class="plotly-graph-div js-plotly-plot"',
                          dom.stdout)
    assert sorted(rendered) == sorted(in_file)
    assert dom.stdout.count('class="main-svg"') >= len(in_file)

    png = ARTIFACTS / "report.png"
    png.unlink(missing_ok=True)
    height = min(round(float(attrs["data-height"])), 16_000)  # the whole page at once
    shot = _chromium("--virtual-time-budget=8000", f"--window-size={width},{height}",
                     f"--screenshot={png}", out.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.stat().st_size > 50_000
    assert timedelta(0) <= datetime.now() - datetime.fromtimestamp(png.stat().st_mtime) \
        < timedelta(minutes=5)
