"""The HTML report: one self-contained file an analyst can open or mail, no server, no network.

What it shows, for the whole lake or one group: a header with the lake summary; committed
offsets over time per partition (with the log end offsets the snapshots recorded, and lag
where snapshots exist); the offset-commit rate; generations and rebalances on a timeline
(with the partitions revoked without a commit, the KIP-70 risk); the current lag per group;
the latest reconciliation (class counts and rows); a page per group (lag over snapshots,
commits attributed to members, anomalies: :mod:`pipelines.report.group_page`). Sections
whose data is absent (no snapshot, no reconciliation yet) say so instead of plotting nothing.

How: the lake is read through delta-rs into an in-memory DuckDB (no Spark, no JVM), partly
with the analyst queries of :mod:`pipelines.queries` so the report and the documented SQL
agree. Long histories are bucketed (the last commit per partition per bucket), and the
offsets plot is limited to the busiest groups/partitions (with a note), so the file stays
small enough to open. plotly.js is inlined once; every figure is a div with its data.

Public API: :func:`write_report`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from deltalake import DeltaTable
from plotly.offline import get_plotlyjs

from pipelines.lake.location import LakeLocation, lake_location
from pipelines.queries import duckdb_connection, utc_instant
from pipelines.report.generations import generations_section
from pipelines.report.group_page import group_pages
from pipelines.report.render import esc, fmt_ts, html_note, query_rows
from pipelines.report.sections import (
    commit_rate_section,
    lag_section,
    offsets_section,
    reconciliation_section,
    summary_section,
)
from pipelines.report.window import history_span, parse_since, register_history

_TABLES = ("offsets_raw", "offset_commits", "group_metadata", "group_generations",
           "consumer_groups", "committed_offsets", "snapshot_runs", "snapshot_log_end_offsets",
           "snapshot_lag", "reconciliation")


@dataclass
class _Section:
    title: str
    body: str
    anchor: str



# ------------------------------------------------------------------------------ the page

_CSS = """
:root { --ink:#1f2933; --muted:#6b7785; --line:#e3e8ee; --bg:#f6f8fa; --ok:#2e7d32;
        --bad:#c62828; --accent:#4C78A8; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.5 Inter, system-ui, -apple-system, "Segoe UI", sans-serif;
       color:var(--ink); background:var(--bg); }
header { background:#1f2d3d; color:white; padding:22px 36px 18px; }
header h1 { margin:0; font-size:22px; font-weight:600; letter-spacing:.2px; }
header .meta { color:#b8c4d0; font-size:13px; margin-top:4px; }
nav { background:white; border-bottom:1px solid var(--line); padding:8px 36px; position:sticky;
      top:0; z-index:10; }
nav a { color:var(--accent); text-decoration:none; margin-right:18px; font-size:13px; }
main { padding:20px 36px 48px; max-width:1500px; margin:0 auto; }
section { background:white; border:1px solid var(--line); border-radius:8px;
          padding:18px 22px; margin-bottom:20px; scroll-margin-top:48px; }
section h2 { margin:0 0 10px; font-size:17px; font-weight:600; }
h3 { font-size:14px; margin:18px 0 6px; }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(190px, 1fr)); gap:12px; }
.card { border:1px solid var(--line); border-radius:8px; padding:12px 14px; background:#fbfcfd; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.5px; }
.card .value { font-size:22px; font-weight:600; margin:2px 0; }
.card .sub { color:var(--muted); font-size:12px; }
.card.ok .value { color:var(--ok); } .card.bad .value { color:var(--bad); }
.scope { color:var(--muted); margin:12px 0 4px; }
.note { background:#fff8e1; border-left:3px solid #f2b705; padding:7px 12px; margin:10px 0;
        color:#5d4a00; font-size:13px; border-radius:0 4px 4px 0; }
.verdict { font-weight:600; margin:6px 0; } .verdict.ok { color:var(--ok); }
.verdict.bad { color:var(--bad); }
.table-wrap { overflow:auto; max-height:520px; margin:8px 0; }
table { border-collapse:collapse; font-size:12.5px; width:100%; }
th { position:sticky; top:0; background:#eef2f6; text-align:left; font-weight:600; }
th, td { padding:5px 9px; border-bottom:1px solid var(--line); vertical-align:top; }
td.num { text-align:right; font-variant-numeric:tabular-nums; }
td.ok { color:var(--ok); } td.bad { color:var(--bad); font-weight:600; }
td.muted { color:var(--muted); font-style:italic; }
table.compact td { white-space:nowrap; } table.compact td:last-child { white-space:normal; }
details { margin:8px 0; } summary { cursor:pointer; color:var(--accent); }
.two-col { display:grid; grid-template-columns:1fr 1fr; gap:16px; }
code { background:#eef2f6; padding:1px 5px; border-radius:3px; font-size:12px; }
.group-page { border-top:2px solid var(--line); margin-top:22px; padding-top:4px; }
.group-page h3 { font-size:16px; } h4 { font-size:13px; margin:14px 0 4px; color:var(--muted); }
.group-index a { color:var(--accent); text-decoration:none; } .group-index .bad { color:var(--bad); }
footer { color:var(--muted); font-size:12px; text-align:center; padding:10px; }
"""


# Collects script errors (and console.error) so a headless browser can check the page ran
# clean; records how many plots rendered, and the page height (for a full-page screenshot),
# once the page has loaded.
_PROBE_HEAD = """<script>
window.offsetlakeErrors = [];
window.addEventListener('error', function (e) { window.offsetlakeErrors.push(String(e.message)); });
(function () { var err = console.error; console.error = function () {
  window.offsetlakeErrors.push(Array.prototype.map.call(arguments, String).join(' '));
  return err.apply(console, arguments); }; })();
</script>"""


_PROBE_TAIL = """<script>
window.addEventListener('load', function () { setTimeout(function () {
  document.body.setAttribute('data-plots', document.querySelectorAll('.js-plotly-plot').length);
  document.body.setAttribute('data-js-errors', JSON.stringify(window.offsetlakeErrors));
  document.body.setAttribute('data-height', document.documentElement.scrollHeight);
}, 500); });
</script>"""



def _page(title: str, meta: str, sections: list[_Section]) -> str:
    nav = "".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in sections)
    body = "".join(f'<section id="{s.anchor}"><h2>{esc(s.title)}</h2>{s.body}</section>'
                   for s in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_CSS}</style>{_PROBE_HEAD}"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f"<header><h1>{esc(title)}</h1><div class=\"meta\">{meta}</div></header>"
            f"<nav>{nav}</nav><main>{body}</main>"
            f"<footer>offsetlake · Kafka __consumer_offsets as Delta tables</footer>"
            f"{_PROBE_TAIL}</body></html>\n")


def _window_start(con: object, lake: LakeLocation, since: datetime | str | None) -> datetime | None:
    """The history window's start: ``since`` itself, or parsed against the newest record."""
    if since is None or isinstance(since, datetime):
        return None if since is None else utc_instant(since)
    span = history_span(lake) or query_rows(con, "SELECT MAX(timestamp) AS last FROM offsets_raw")
    return parse_since(since, max((s["last"] for s in span if s["last"]), default=None))


def write_report(lake: Path | str | LakeLocation, out: Path, group: str | None = None,
                 since: datetime | str | None = None) -> Path:
    """Write the HTML report of ``lake`` (or of one ``group``) to ``out``; returns ``out``.

    ``since`` (an instant, or ``--since`` text: an instant or a duration such as ``24h``
    before the newest record) limits the history the plots and group pages read to the
    commits from then on; the header's counts and the state, snapshot and reconciliation
    sections still cover the whole lake. None reads the whole history.

    Raises ``FileNotFoundError`` when ``lake`` holds no offsetlake tables and ``ValueError``
    when ``group`` never appears in it (a typo should not give an empty report).
    """
    lake, out = lake_location(lake), Path(out)
    if not DeltaTable.is_deltatable(lake.join("offsets_raw"), storage_options=lake.delta_options()):
        raise FileNotFoundError(f"{lake} holds no offsetlake lake (no offsets_raw table)")
    con = duckdb_connection(lake, [t for t in _TABLES if t != "offset_commits"])
    try:
        window = _window_start(con, lake, since)
        register_history(con, lake, window)
        if group is not None and not query_rows(con, """
                SELECT 1 AS found FROM offset_commits WHERE group_id = $g
                UNION ALL SELECT 1 FROM group_metadata WHERE group_id = $g
                UNION ALL SELECT 1 FROM committed_offsets WHERE group_id = $g LIMIT 1""", g=group):
            raise ValueError(f"group {group!r} does not appear in {lake}")
        summary, info = summary_section(con, lake, group)
        first = info["first"] if window is None or info["first"] is None else max(info["first"], window)
        if window is not None:
            summary += html_note(f"History window: the plots and group pages show the commits from "
                                 f"{fmt_ts(window)} on (<code>--since</code>); the counts above, "
                                 "the current lag and the reconciliation cover the whole lake.")
        has_snapshots = bool(query_rows(con, "SELECT 1 AS x FROM snapshot_log_end_offsets LIMIT 1"))
        sections = [
            _Section("Summary", summary, "summary"),
            _Section("Committed offsets and lag", offsets_section(con, group, first, info["last"]),
                     "offsets"),
            _Section("Current lag", lag_section(lake, group, has_snapshots), "lag"),
            _Section("Commit rate", commit_rate_section(con, group, first, info["last"]),
                     "commit-rate"),
            _Section("Generations and rebalances",
                     generations_section(lake, group, info["last"], since=window), "generations"),
            _Section("Groups", group_pages(con, lake, group, since=window), "groups"),
            _Section("Latest reconciliation", reconciliation_section(con, group), "reconciliation"),
        ]
    finally:
        con.close()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    title = f"offsetlake report — {group}" if group else "offsetlake report"
    meta = (f"{esc(', '.join(info['clusters']) or 'no cluster')} · history "
            f"{fmt_ts(info['first'])} → {fmt_ts(info['last'])} · generated {fmt_ts(now)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_page(title, meta, sections), encoding="utf-8")
    return out



__all__ = ["write_report"]
