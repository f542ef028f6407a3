"""The report's generations section: generation spans and rebalance events per group on a
timeline, and the partitions revoked without a commit (the KIP-70 duplicate-processing
risk), from the analyst queries ``rebalance_timeline`` and ``revoked_without_commit``."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from pipelines.queries import run_duckdb
from pipelines.report.render import (
    MAX_GROUPS,
    MAX_RISK_ROWS,
    esc,
    figure_div,
    fmt_ts,
    html_note,
    html_table,
    short_member,
)

_EVENTS = {  # event -> (marker symbol, colour) on the generations timeline
    "group created": ("circle-open", "#4C78A8"),
    "rebalance": ("diamond", "#F58518"),
    "group empty": ("x", "#E45756"),
    "member replaced": ("star", "#B279A2"),
    "same generation rewritten": ("star-open", "#B279A2"),
    "group converted": ("square-open", "#54A24B"),
    "group deleted": ("x-thin-open", "#000000"),
    "member joined": ("triangle-up", "#54A24B"),
    "member left": ("triangle-down", "#E45756"),
}


_GENERATION_EVENTS = {"group created", "rebalance", "group empty", "member replaced",
                      "same generation rewritten", "group epoch bump", "group converted",
                      "group deleted"}



def generations_section(lake: Path, group: str | None, last: datetime | None,
                        since: datetime | None = None) -> str:
    """Generation spans per group, rebalance events on top, and the KIP-70 risk rows (with a
    history window: the records from ``since`` on, the ownerships that ended since)."""
    rows = _timeline_rows(lake, group, since)
    if not rows:
        return html_note("No group records (GroupMetadata or KIP-848 records) in the lake" +
                         (f" for group {esc(group)}." if group else "."))
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_group[r["group_id"]].append(r)
    groups = sorted(by_group, key=lambda g: (-len(by_group[g]), g))[:MAX_GROUPS * 2]
    groups.sort()
    shown = "" if len(groups) == len(by_group) else html_note(
        f"The {len(groups)} groups with the most group records of {len(by_group)}; "
        "<code>offsetlake report --group G</code> shows one.")
    end = last or max(r["event_time"] for r in rows)
    traces: list[dict[str, Any]] = []
    shade = ["#9ecae1", "#4292c6"]
    span_x: list[list[Any]] = [[], []]
    span_y: list[list[Any]] = [[], []]
    hover_x, hover_y, hover_text = [], [], []
    for g in groups:
        recs = by_group[g]
        starts = [i for i, r in enumerate(recs) if r["event"] in _GENERATION_EVENTS]
        for n, i in enumerate(starts):
            r = recs[i]
            stop_at = recs[starts[n + 1]]["event_time"] if n + 1 < len(starts) else end
            if r["event"] == "group deleted":
                continue
            upto = starts[n + 1] if n + 1 < len(starts) else len(recs)
            members = max((x["members_after"] for x in recs[i:upto]), default=0)
            span_x[n % 2] += [r["event_time"], stop_at, None]
            span_y[n % 2] += [g, g, None]
            mid = r["event_time"] + (stop_at - r["event_time"]) / 2
            hover_x.append(mid)
            hover_y.append(g)
            gen = r["generation"] if r["generation"] is not None else "?"
            hover_text.append(f"<b>{esc(g)}</b><br>generation/epoch {gen} · up to {members} "
                              f"member(s)<br>{fmt_ts(r['event_time'])} → {fmt_ts(stop_at)}")
    for k in (0, 1):
        traces.append({"type": "scatter", "x": span_x[k], "y": span_y[k], "mode": "lines",
                       "hoverinfo": "skip", "line": {"width": 14, "color": shade[k]},
                       "showlegend": k == 0, "name": "generation (alternating shade)"})
    traces.append({"type": "scatter", "x": hover_x, "y": hover_y, "mode": "markers", "text": hover_text,
                   "hoverinfo": "text", "marker": {"size": 6, "color": "rgba(0,0,0,0)"},
                   "showlegend": False})
    for event, (symbol, color) in _EVENTS.items():
        pts = [r for g in groups for r in by_group[g] if r["event"] == event]
        if not pts:
            continue
        traces.append({
            "type": "scatter", "x": [r["event_time"] for r in pts], "y": [r["group_id"] for r in pts],
            "mode": "markers", "name": event,
            "marker": {"symbol": symbol, "size": 11, "color": color, "line": {"width": 1.2, "color": color}},
            "text": [_event_hover(r) for r in pts], "hoverinfo": "text"})
    layout = {"height": 120 + 34 * len(groups), "title": {"text": "Generations and rebalances", "x": 0.5},
              "xaxis": {"title": {"text": "time (UTC)"}},
              "yaxis": {"categoryorder": "array", "categoryarray": groups[::-1], "automargin": True},
              "legend": {"orientation": "h", "y": -0.12 if len(groups) > 6 else -0.3}}
    return figure_div({"data": traces, "layout": layout}, "plot-generations") + shown + _risk_table(lake, group, since)


def _timeline_rows(lake: Path, group: str | None, since: datetime | None) -> list[dict[str, Any]]:
    table = run_duckdb(lake, "rebalance_timeline", group_id=group, since=since)
    return table.to_pylist()


def _event_hover(r: dict[str, Any]) -> str:
    lines = [f"<b>{esc(r['group_id'])}</b>: {esc(r['event'])}", fmt_ts(r["event_time"])]
    if r["generation"] is not None:
        lines.append(f"generation/epoch {r['generation']}, {r['members_after']} member(s) after")
    for label, key in (("joined", "members_joined"), ("left", "members_left")):
        if r[key]:
            lines.append(f"{label}: " + ", ".join(esc(short_member(m)) for m in r[key][:6]) +
                         (" …" if len(r[key]) > 6 else ""))
    if r["partitions_assigned"] or r["partitions_revoked"]:
        lines.append(f"partitions: +{r['partitions_assigned']} / -{r['partitions_revoked']}")
    return "<br>".join(lines)


def _risk_table(lake: Path, group: str | None, since: datetime | None) -> str:
    risk = run_duckdb(lake, "revoked_without_commit", group_id=group, since=since).to_pylist()
    if not risk:
        return html_note("No partition was revoked without a commit during its ownership.")
    counts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in risk:
        counts[r["group_id"]].append(r)
    summary = html_table(["group", "ownerships ended with no commit", "of which moved to another "
                      "owner", "last"],
                         [(g, len(rs), sum(1 for r in rs if r["moved"]),
                           fmt_ts(max(r["valid_to"] for r in rs))) for g, rs in sorted(counts.items())])
    shown = sorted(risk, key=lambda r: r["valid_to"], reverse=True)[:MAX_RISK_ROWS]
    detail = html_table(["group", "generation", "member", "partition", "owned from", "to",
                         "next owner", "resumed from offset"],
                        [(r["group_id"], r["generation"], short_member(r["member_id"]),
                          f"{r['topic']}-{r['partition']}", fmt_ts(r["valid_from"]),
                          fmt_ts(r["valid_to"]), short_member(r["next_member_id"]) or "—",
                          r["last_committed_offset"] if r["last_committed_offset"] is not None
                          else ("none (auto.offset.reset)", "muted"))
                         for r in shown], classes="compact")
    more = f" Latest {MAX_RISK_ROWS} of {len(risk)} shown." if len(risk) > MAX_RISK_ROWS else ""
    note = html_note("Ownerships that ended with no offset commit since they began: the next owner "
                     "re-read whatever the previous one had processed. Query: "
                     "<code>revoked_without_commit</code>." + more)
    return ("<h3>Partitions revoked without a commit (KIP-70 duplicate-processing risk)</h3>"
            f"{note}{summary}<details><summary>Rows</summary>{detail}</details>")
