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

import html
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from pipelines.lake.location import LakeLocation, lake_location
from pipelines.lake.summary import lake_counts
from pipelines.queries import duckdb_connection, run_duckdb

#: The offsets plot gets a dropdown of at most this many groups (the busiest) ...
MAX_GROUPS = 20
#: ... and at most this many partitions per group (the busiest).
MAX_PARTITIONS = 40
#: Time buckets across the history for the offsets series and the commit rate.
OFFSET_BUCKETS = 600
RATE_BUCKETS = 60
#: Reconciliation rows listed (not-explained first); the counts always cover every row.
MAX_RECONCILIATION_ROWS = 200
MAX_RISK_ROWS = 100

_TABLES = ("offsets_raw", "offset_commits", "group_metadata", "group_generations",
           "consumer_groups", "committed_offsets", "snapshot_runs", "snapshot_log_end_offsets",
           "snapshot_lag", "reconciliation")
_NICE_BUCKETS_MS = [1_000 * s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
                                        3600, 7200, 21600, 43200, 86400, 604800)]
_PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6",
            "#9D755D", "#BAB0AC", "#EECA3B", "#1F77B4", "#2CA02C", "#D62728", "#9467BD"]
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
_PLOT_CONFIG = {"displaylogo": False, "responsive": True,
                "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


@dataclass
class _Section:
    title: str
    body: str
    anchor: str


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt_ts(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt_ms(ms: int) -> str:
    """A duration the way people say it: 850 ms, 12 s, 3 min 57 s, 2 h 5 min, 3 d 4 h."""
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    for big, big_size, small, small_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60),
                                             ("min", 60, "s", 1)):
        if s >= big_size:
            rest = (s % big_size) // small_size
            return f"{s // big_size} {big}" + (f" {rest} {small}" if rest else "")
    return f"{s} s"


def _fmt_exact_ms(ms: int | None) -> str:
    """A time lag readable and exact: "3 min 57 s (237,041 ms)"; "—" when unknown."""
    if ms is None:
        return "—"
    return _fmt_ms(ms) if ms < 1000 else f"{_fmt_ms(ms)} ({ms:,} ms)"


def _nice_bucket(span_ms: int, buckets: int) -> int:
    want = max(1, span_ms // max(1, buckets))
    return next((b for b in _NICE_BUCKETS_MS if b >= want), _NICE_BUCKETS_MS[-1])


def _note(text: str) -> str:
    return f'<p class="note">{text}</p>'


def _table(columns: Sequence[str], rows: Iterable[Sequence[Any]], classes: str = "") -> str:
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for v in row:
            if isinstance(v, tuple):  # (text, css class)
                cells.append(f'<td class="{v[1]}">{_esc(v[0])}</td>')
            else:
                cells.append(f'<td class="num">{v:,}</td>' if isinstance(v, int)
                             and not isinstance(v, bool) else f"<td>{_esc(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table-wrap"><table class="{classes}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _figure(fig: go.Figure, div_id: str) -> str:
    fig.update_layout(template="plotly_white", font={"family": "Inter, system-ui, sans-serif",
                                                      "size": 12},
                      margin={"l": 60, "r": 20, "t": 40, "b": 40},
                      hoverlabel={"namelength": -1})
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config=_PLOT_CONFIG)


def _rows(con: Any, sql: str, **params: Any) -> list[dict[str, Any]]:
    rel = con.execute(sql, params) if params else con.execute(sql)
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


def _short(member_id: str | None) -> str:
    """Member ids are long (client id + uuid); keep enough to tell them apart."""
    if not member_id:
        return ""
    return member_id if len(member_id) <= 30 else member_id[:22] + "…" + member_id[-6:]


# ------------------------------------------------------------------------------ sections


def _summary(con: Any, lake: Path, group: str | None) -> tuple[str, dict[str, Any]]:
    """The header: where, what, when, and the state of snapshots and reconciliation."""
    span = _rows(con, """
        SELECT cluster_id, COUNT(*) AS records, MIN(r.timestamp) AS first, MAX(r.timestamp) AS last
        FROM offsets_raw r GROUP BY cluster_id ORDER BY cluster_id""")
    groups = _rows(con, """
        SELECT group_type, group_state, COUNT(*) AS n, CAST(SUM(num_members) AS BIGINT) AS members
        FROM consumer_groups GROUP BY 1, 2 ORDER BY 1, 2""")
    snaps = _rows(con, """
        SELECT cluster_id, snapshot_id, captured_at FROM snapshot_runs
        ORDER BY captured_at DESC, snapshot_id DESC LIMIT 1""") or _rows(con, """
        SELECT cluster_id, snapshot_id, MAX(captured_at) AS captured_at
        FROM snapshot_log_end_offsets GROUP BY 1, 2 ORDER BY 3 DESC, 2 DESC LIMIT 1""")
    n_snaps = _rows(con, "SELECT COUNT(DISTINCT snapshot_id) AS n FROM snapshot_log_end_offsets")
    recs = _rows(con, """
        SELECT reconcile_id, MAX(reconciled_at) AS run_at, COUNT(*) AS n_rows,
               SUM(CASE WHEN explained THEN 0 ELSE 1 END) AS unexplained
        FROM reconciliation GROUP BY reconcile_id ORDER BY run_at DESC LIMIT 1""")
    committed = _rows(con, """
        SELECT COUNT(*) AS partitions, COUNT(DISTINCT group_id) AS groups FROM committed_offsets""")
    first = min((s["first"] for s in span if s["first"]), default=None)
    last = max((s["last"] for s in span if s["last"]), default=None)
    info = {"first": first, "last": last, "clusters": [s["cluster_id"] for s in span]}

    n_groups = sum(g["n"] for g in groups)
    cards = [
        ("Records", f"{sum(s['records'] for s in span):,}",
         f"{len(span)} cluster(s): {', '.join(s['cluster_id'] for s in span) or '—'}"),
        ("History", _fmt_ms(int((last - first).total_seconds() * 1000)) if first and last
         else "—", f"{_fmt_ts(first)} → {_fmt_ts(last)}"),
        ("Groups", f"{n_groups:,}", ", ".join(
            f"{t}: {sum(g['n'] for g in groups if g['group_type'] == t)}"
            for t in sorted({g["group_type"] for g in groups})) or "—"),
        ("Committed partitions", f"{committed[0]['partitions']:,}",
         f"in {committed[0]['groups']:,} group(s)"),
        ("Snapshots", f"{n_snaps[0]['n']:,}",
         f"latest {_fmt_ts(snaps[0]['captured_at'])}" if snaps else "none stored yet"),
        ("Reconciliation",
         ("passed" if not recs[0]["unexplained"] else f"{recs[0]['unexplained']:,} unexplained")
         if recs else "—",
         f"{recs[0]['n_rows']:,} rows, {_fmt_ts(recs[0]['run_at'])}" if recs else "none run yet"),
    ]
    status = ""
    if recs:
        status = "ok" if not recs[0]["unexplained"] else "bad"
    card_html = "".join(
        f'<div class="card{" " + status if title == "Reconciliation" and status else ""}">'
        f'<div class="label">{_esc(title)}</div><div class="value">{_esc(value)}</div>'
        f'<div class="sub">{_esc(sub)}</div></div>' for title, value, sub in cards)
    states = _table(["group type", "state", "groups", "members"],
                    [(g["group_type"], g["group_state"], g["n"], g["members"] or 0)
                     for g in groups]) if groups else ""
    counts = lake_counts(lake)
    tables = _table(["table", "rows"], sorted(counts.items())) if counts else ""
    scope = (f"Group <b>{_esc(group)}</b> only." if group else "All groups.")
    body = (f'<div class="cards">{card_html}</div><p class="scope">{scope} Lake: '
            f"<code>{_esc(lake_location(lake))}</code></p>"
            f'<details><summary>Tables and groups by state</summary><div class="two-col">'
            f"{tables}{states}</div></details>")
    return body, info


def _offsets(con: Any, group: str | None, first: datetime | None, last: datetime | None
             ) -> str:
    """Committed offset per partition over time, end offsets and lag from the snapshots."""
    if first is None or last is None:
        return _note("The lake holds no records yet.")
    span_ms = max(1, int((last - first).total_seconds() * 1000))
    bucket = max(1, span_ms // OFFSET_BUCKETS)
    busiest = _rows(con, """
        SELECT group_id, COUNT(*) AS commits FROM offset_commits
        WHERE $group IS NULL OR group_id = $group
        GROUP BY group_id ORDER BY commits DESC, group_id LIMIT $limit""",
                    group=group, limit=MAX_GROUPS)
    if not busiest:
        return _note("No offset commits in the lake" + (f" for group {_esc(group)}." if group
                                                           else "."))
    groups = [b["group_id"] for b in busiest]
    n_groups = _rows(con, """SELECT COUNT(DISTINCT group_id) AS n FROM offset_commits
                             WHERE $group IS NULL OR group_id = $group""", group=group)[0]["n"]
    # The last commit of each partition in each time bucket; a tombstone ends the line.
    series = _rows(con, """
        WITH c AS (
            SELECT c.group_id, c.topic, c.partition, c.offset AS log_offset,
                   COALESCE(c.record_timestamp, c.commit_timestamp) AS t,
                   CASE WHEN c.is_tombstone THEN NULL ELSE c.committed_offset END AS committed
            FROM offset_commits c
            WHERE list_contains($groups, c.group_id)
        ), ranked AS (
            SELECT *, ROW_NUMBER() OVER (
                PARTITION BY group_id, topic, partition, CAST(epoch_ms(t) // $bucket AS BIGINT)
                ORDER BY log_offset DESC) AS rn
            FROM c
        )
        SELECT group_id, topic, partition, t, committed FROM ranked WHERE rn = 1
        ORDER BY group_id, topic, partition, t""", groups=groups, bucket=bucket)
    ends = _rows(con, """
        SELECT topic, partition, captured_at, log_end_offset FROM snapshot_log_end_offsets
        WHERE log_end_offset IS NOT NULL ORDER BY captured_at""")
    lags = _rows(con, """
        SELECT group_id, topic, partition, captured_at, lag FROM snapshot_lag
        WHERE lag IS NOT NULL AND list_contains($groups, group_id)
        ORDER BY captured_at""", groups=groups)

    by_key: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in series:
        by_key[(r["group_id"], r["topic"], r["partition"])].append(r)
    ends_by_tp: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in ends:
        ends_by_tp[(e["topic"], e["partition"])].append(e)
    lag_by_key: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in lags:
        lag_by_key[(r["group_id"], r["topic"], r["partition"])].append(r)

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.64, 0.36],
                        subplot_titles=("Committed offset (lines) and log end offset at "
                                        "snapshots (diamonds)", "Lag at snapshots"))
    owner: list[str] = []
    truncated = []
    for gi, g in enumerate(groups):
        keys = sorted((k for k in by_key if k[0] == g), key=lambda k: -len(by_key[k]))
        if len(keys) > MAX_PARTITIONS:
            truncated.append(f"{g}: {MAX_PARTITIONS} of {len(keys)} partitions")
            keys = keys[:MAX_PARTITIONS]
        for i, key in enumerate(sorted(keys, key=lambda k: (k[1], k[2]))):
            color = _PALETTE[i % len(_PALETTE)]
            name = f"{key[1]}-{key[2]}"
            pts = by_key[key]
            fig.add_trace(go.Scatter(
                x=[p["t"] for p in pts], y=[p["committed"] for p in pts], name=name,
                legendgroup=name, mode="lines", line={"shape": "hv", "color": color, "width": 1.6},
                visible=gi == 0, hovertemplate=f"{_esc(g)} {name}<br>%{{x}}<br>committed "
                                               "%{y:,}<extra></extra>"), row=1, col=1)
            owner.append(g)
            tp_ends = ends_by_tp.get((key[1], key[2]), [])
            if tp_ends:
                fig.add_trace(go.Scatter(
                    x=[e["captured_at"] for e in tp_ends], y=[e["log_end_offset"] for e in tp_ends],
                    name=f"{name} end", legendgroup=name, showlegend=False, mode="markers",
                    marker={"symbol": "diamond", "size": 9, "color": color,
                            "line": {"width": 1, "color": "white"}},
                    visible=gi == 0, hovertemplate=f"{name}<br>%{{x}}<br>log end offset "
                                                   "%{y:,}<extra></extra>"), row=1, col=1)
                owner.append(g)
            key_lags = lag_by_key.get(key, [])
            if key_lags:
                fig.add_trace(go.Scatter(
                    x=[r["captured_at"] for r in key_lags], y=[r["lag"] for r in key_lags],
                    name=f"{name} lag", legendgroup=name, showlegend=False,
                    mode="lines+markers", line={"color": color, "width": 1.4},
                    marker={"size": 7, "color": color}, visible=gi == 0,
                    hovertemplate=f"{name}<br>%{{x}}<br>lag %{{y:,}}<extra></extra>"),
                    row=2, col=1)
                owner.append(g)
    if len(groups) > 1:
        buttons = [{"label": g, "method": "update",
                    "args": [{"visible": [o == g for o in owner]},
                             {"title.text": f"Offsets of {g}"}]} for g in groups]
        fig.update_layout(updatemenus=[{"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.16,
                                        "yanchor": "top", "direction": "down",
                                        "bgcolor": "white", "showactive": True}])
    fig.update_layout(title={"text": f"Offsets of {groups[0]}", "x": 0.5}, height=640,
                      legend={"title": {"text": "partition"}},
                      margin={"t": 90})
    fig.update_yaxes(title_text="offset", row=1, col=1, tickformat=",")
    fig.update_yaxes(title_text="records behind", row=2, col=1, tickformat=",",
                     rangemode="tozero")
    fig.update_xaxes(title_text="time (UTC)", row=2, col=1)
    notes = []
    if n_groups > len(groups):
        notes.append(f"Showing the {len(groups)} busiest of {n_groups} groups; "
                     "<code>offsetlake report --group G</code> reports one group.")
    if truncated:
        notes.append("Busiest partitions only: " + "; ".join(_esc(t) for t in truncated) + ".")
    if not ends:
        notes.append("No snapshot yet, so no log end offsets or lag: "
                     "<code>offsetlake snapshot</code> records the cluster's answers.")
    elif not lags:
        notes.append("The snapshots recorded end offsets but no per-group lag (snapshot_lag).")
    notes.append(f"Series: the last commit per partition per {_fmt_ms(bucket)}; a gap is an "
                 "offset deleted (tombstone).")
    return _figure(fig, "plot-offsets") + "".join(_note(n) for n in notes)


def _commit_rate(con: Any, group: str | None, first: datetime | None, last: datetime | None
                 ) -> str:
    """Offset commit records per minute, stacked by group (the busiest, then the rest)."""
    if first is None or last is None:
        return _note("The lake holds no records yet.")
    span_ms = max(1, int((last - first).total_seconds() * 1000))
    bucket = _nice_bucket(span_ms, RATE_BUCKETS)
    rows = _rows(con, """
        SELECT group_id, CAST(epoch_ms(COALESCE(record_timestamp, commit_timestamp)) // $bucket
                              AS BIGINT) * $bucket AS bucket_ms,
               COUNT(*) AS commits
        FROM offset_commits
        WHERE NOT is_tombstone AND ($group IS NULL OR group_id = $group)
        GROUP BY 1, 2 ORDER BY 2""", group=group, bucket=bucket)
    if not rows:
        return _note("No offset commits" + (f" for group {_esc(group)}." if group else "."))
    totals: dict[str, int] = defaultdict(int)
    for r in rows:
        totals[r["group_id"]] += r["commits"]
    top = [g for g, _ in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))][:10]
    start = int(first.timestamp() * 1000) // bucket * bucket
    stop = int(last.timestamp() * 1000) // bucket * bucket
    grid = list(range(start, stop + bucket, bucket))
    per_min = 60_000 / bucket
    series: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        series[r["group_id"] if r["group_id"] in top else "other groups"][r["bucket_ms"]] += \
            r["commits"]
    fig = go.Figure()
    xs = [datetime.fromtimestamp(b / 1000, tz=timezone.utc) for b in grid]
    for i, name in enumerate([*top, "other groups"]):
        if name not in series:
            continue
        fig.add_trace(go.Scatter(
            x=xs, y=[series[name].get(b, 0) * per_min for b in grid], name=name,
            stackgroup="commits", mode="lines", line={"width": 0.6,
                                                      "color": _PALETTE[i % len(_PALETTE)]},
            hovertemplate=f"{_esc(name)}<br>%{{x}}<br>%{{y:,.1f}} commits/min<extra></extra>"))
    fig.update_layout(height=380, title={"text": f"Offset commits per minute "
                                                 f"(buckets of {_fmt_ms(bucket)})", "x": 0.5},
                      yaxis={"title": "partition offsets committed / min", "tickformat": ","},
                      xaxis={"title": "time (UTC)"}, legend={"title": {"text": "group"}})
    return _figure(fig, "plot-commit-rate") + _note(
        "One commit = one partition offset in an OffsetCommit / TxnOffsetCommit request; "
        "tombstones are not counted.")


def _generations(lake: Path, group: str | None, last: datetime | None) -> str:
    """Generation spans per group, rebalance events on top, and the KIP-70 risk rows."""
    rows = _timeline_rows(lake, group)
    if not rows:
        return _note("No group records (GroupMetadata or KIP-848 records) in the lake" +
                     (f" for group {_esc(group)}." if group else "."))
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_group[r["group_id"]].append(r)
    groups = sorted(by_group, key=lambda g: (-len(by_group[g]), g))[:MAX_GROUPS * 2]
    groups.sort()
    shown = "" if len(groups) == len(by_group) else _note(
        f"The {len(groups)} groups with the most group records of {len(by_group)}; "
        "<code>offsetlake report --group G</code> shows one.")
    end = last or max(r["event_time"] for r in rows)
    fig = go.Figure()
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
            hover_text.append(f"<b>{_esc(g)}</b><br>generation/epoch {gen} · up to {members} "
                              f"member(s)<br>{_fmt_ts(r['event_time'])} → {_fmt_ts(stop_at)}")
    for k in (0, 1):
        fig.add_trace(go.Scatter(x=span_x[k], y=span_y[k], mode="lines", hoverinfo="skip",
                                 line={"width": 14, "color": shade[k]}, showlegend=k == 0,
                                 name="generation (alternating shade)"))
    fig.add_trace(go.Scatter(x=hover_x, y=hover_y, mode="markers", text=hover_text,
                             hoverinfo="text", marker={"size": 6, "color": "rgba(0,0,0,0)"},
                             showlegend=False))
    for event, (symbol, color) in _EVENTS.items():
        pts = [r for g in groups for r in by_group[g] if r["event"] == event]
        if not pts:
            continue
        fig.add_trace(go.Scatter(
            x=[r["event_time"] for r in pts], y=[r["group_id"] for r in pts], mode="markers",
            name=event, marker={"symbol": symbol, "size": 11, "color": color,
                                "line": {"width": 1.2, "color": color}},
            text=[_event_hover(r) for r in pts], hoverinfo="text"))
    fig.update_layout(height=120 + 34 * len(groups), title={"text": "Generations and rebalances",
                                                            "x": 0.5},
                      xaxis={"title": "time (UTC)"},
                      yaxis={"categoryorder": "array", "categoryarray": groups[::-1],
                             "automargin": True},
                      legend={"orientation": "h", "y": -0.12 if len(groups) > 6 else -0.3})
    return _figure(fig, "plot-generations") + shown + _risk_table(lake, group)


def _timeline_rows(lake: Path, group: str | None) -> list[dict[str, Any]]:
    table = run_duckdb(lake, "rebalance_timeline", group_id=group)
    return table.to_pylist()


def _event_hover(r: dict[str, Any]) -> str:
    lines = [f"<b>{_esc(r['group_id'])}</b>: {_esc(r['event'])}", _fmt_ts(r["event_time"])]
    if r["generation"] is not None:
        lines.append(f"generation/epoch {r['generation']}, {r['members_after']} member(s) after")
    for label, key in (("joined", "members_joined"), ("left", "members_left")):
        if r[key]:
            lines.append(f"{label}: " + ", ".join(_esc(_short(m)) for m in r[key][:6]) +
                         (" …" if len(r[key]) > 6 else ""))
    if r["partitions_assigned"] or r["partitions_revoked"]:
        lines.append(f"partitions: +{r['partitions_assigned']} / -{r['partitions_revoked']}")
    return "<br>".join(lines)


def _risk_table(lake: Path, group: str | None) -> str:
    risk = run_duckdb(lake, "revoked_without_commit", group_id=group).to_pylist()
    if not risk:
        return _note("No partition was revoked without a commit during its ownership.")
    counts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in risk:
        counts[r["group_id"]].append(r)
    summary = _table(["group", "ownerships ended with no commit", "of which moved to another "
                      "owner", "last"],
                     [(g, len(rs), sum(1 for r in rs if r["moved"]),
                       _fmt_ts(max(r["valid_to"] for r in rs))) for g, rs in sorted(counts.items())])
    shown = sorted(risk, key=lambda r: r["valid_to"], reverse=True)[:MAX_RISK_ROWS]
    detail = _table(["group", "generation", "member", "partition", "owned from", "to",
                     "next owner", "resumed from offset"],
                    [(r["group_id"], r["generation"], _short(r["member_id"]),
                      f"{r['topic']}-{r['partition']}", _fmt_ts(r["valid_from"]),
                      _fmt_ts(r["valid_to"]), _short(r["next_member_id"]) or "—",
                      r["last_committed_offset"] if r["last_committed_offset"] is not None
                      else ("none (auto.offset.reset)", "muted"))
                     for r in shown], classes="compact")
    more = f" Latest {MAX_RISK_ROWS} of {len(risk)} shown." if len(risk) > MAX_RISK_ROWS else ""
    note = _note("Ownerships that ended with no offset commit since they began: the next owner "
                 "re-read whatever the previous one had processed. Query: "
                 "<code>revoked_without_commit</code>." + more)
    return ("<h3>Partitions revoked without a commit (KIP-70 duplicate-processing risk)</h3>"
            f"{note}{summary}<details><summary>Rows</summary>{detail}</details>")


def _lag(lake: Path, group: str | None, has_snapshots: bool) -> str:
    """The current lag per group from the latest snapshot (query ``lag_by_group``): offset
    lag and, beside it, the exact time lag the snapshot read from the log, plus the estimated
    catch-up time (labelled as an estimate)."""
    if not has_snapshots:
        return _note("No snapshot of the cluster yet, so no lag: <code>offsetlake snapshot"
                     "</code> records log end offsets (and the brokers' answers to reconcile "
                     "against).")
    rows = run_duckdb(lake, "lag_by_group", group_id=group).to_pylist()
    if not rows:
        return _note("No committed offsets to measure lag for.")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.12,
                        subplot_titles=("Offset lag (records behind)",
                                        "Time lag (newest record - next record to read)"))
    groups = [r["group_id"] for r in rows][::-1]
    fig.add_trace(go.Bar(
        x=[r["total_lag"] or 0 for r in rows][::-1], y=groups,
        orientation="h", marker={"color": "#4C78A8"}, name="offset lag",
        text=[f"{r['total_lag']:,}" if r["total_lag"] is not None else "n/a"
              for r in rows][::-1], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}<br>total lag %{x:,}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(
        x=[(r["max_time_lag_ms"] or 0) / 1000 for r in rows][::-1], y=groups,
        orientation="h", marker={"color": "#F58518"}, name="time lag",
        text=[_fmt_ms(r["max_time_lag_ms"]) if r["max_time_lag_ms"] is not None else "n/a"
              for r in rows][::-1], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}<br>time lag %{text}<extra></extra>"), row=1, col=2)
    fig.update_layout(height=max(240, 80 + 26 * len(rows)), showlegend=False,
                      yaxis={"automargin": True}, margin={"r": 60},
                      title={"text": f"Current lag per group (snapshot {rows[0]['snapshot_id']})",
                             "x": 0.5})
    fig.update_xaxes(title_text="records behind", tickformat=",", row=1, col=1)
    fig.update_xaxes(title_text="seconds behind", row=1, col=2)
    table = _table(["group", "type", "state", "partitions", "with end offset", "total lag",
                    "max lag", "time lag", "with time lag", "catch-up (estimate)",
                    "last commit", "snapshot taken"],
                   [(r["group_id"], r["group_type"] or "—", r["group_state"] or "—",
                     r["partitions"], r["partitions_with_lag"],
                     r["total_lag"] if r["total_lag"] is not None else "—",
                     r["max_lag"] if r["max_lag"] is not None else "—",
                     _fmt_exact_ms(r["max_time_lag_ms"]), r["partitions_with_time_lag"],
                     (f"~{_fmt_ms(round(r['est_catch_up_s'] * 1000))}"
                      if r["est_catch_up_s"] is not None else "—"),
                     _fmt_ts(r["last_commit_at"]), _fmt_ts(r["captured_at"])) for r in rows],
                   classes="compact")
    note = _note("Time lag is exact: the snapshot read the timestamp of the record at each "
                 "committed offset and of the newest record from the log (largest over the "
                 "group's partitions; shown where the snapshot saw the lake's committed "
                 "offset, see <code>lag_by_partition</code> for why a partition has none). "
                 "Catch-up is an <em>estimate</em>: lag divided by the group's recent commit "
                 "rate in the lake's history, ignoring what producers add meanwhile.")
    if not any(r["max_time_lag_ms"] is not None for r in rows):
        note += _note("This snapshot has no time lag (a recorded capture, or taken before "
                      "offsetlake read record timestamps): run <code>offsetlake snapshot"
                      "</code> against the cluster.")
    return (_figure(fig, "plot-lag") + note
            + f"<details><summary>Table</summary>{table}</details>")


def _reconciliation(con: Any, group: str | None) -> str:
    """The latest reconciliation run: counts per class and the rows, findings first."""
    latest = _rows(con, """
        SELECT reconcile_id, snapshot_id, MAX(reconciled_at) AS run_at FROM reconciliation
        GROUP BY 1, 2 ORDER BY run_at DESC, reconcile_id DESC LIMIT 1""")
    if not latest:
        return _note("No reconciliation yet: <code>offsetlake reconcile</code> compares the "
                     "lake with the latest snapshot and runs the quality gate.")
    run = latest[0]
    rows = _rows(con, """
        SELECT level, group_id, topic, partition, classification, explained,
               lake_committed_offset, broker_committed_offset, lake_group_state,
               broker_group_state, detail
        FROM reconciliation
        WHERE reconcile_id = $rid AND ($group IS NULL OR group_id = $group)
        ORDER BY explained, classification = 'match', level, group_id, topic, partition""",
                 rid=run["reconcile_id"], group=group)
    counts: dict[tuple[str, bool], int] = defaultdict(int)
    for r in rows:
        counts[(r["classification"], bool(r["explained"]))] += 1
    ordered = sorted(counts.items(), key=lambda kv: (kv[0][1], -kv[1]))
    fig = go.Figure(go.Bar(
        x=[n for _, n in ordered][::-1],
        y=[f"{c}{'' if ok else ' (unexplained)'}" for (c, ok), _ in ordered][::-1],
        orientation="h", width=0.6, marker={"color": ["#54A24B" if ok else "#E45756"
                                                      for (_, ok), _ in ordered][::-1]},
        text=[f"{n:,}" for _, n in ordered][::-1], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}: %{x:,} rows<extra></extra>"))
    fig.update_layout(height=max(150, 80 + 28 * len(ordered)),
                      title={"text": "Rows per class", "x": 0.5},
                      xaxis={"title": "rows", "tickformat": ","}, yaxis={"automargin": True},
                      margin={"r": 60})
    unexplained = sum(n for (_, ok), n in counts.items() if not ok)
    verdict = (f'<p class="verdict ok">All {len(rows):,} rows matched or were explained.</p>'
               if not unexplained else
               f'<p class="verdict bad">{unexplained:,} of {len(rows):,} rows are unexplained '
               "differences (findings).</p>")
    shown = rows[:MAX_RECONCILIATION_ROWS]
    table = _table(["level", "group", "partition", "class", "lake offset", "broker offset",
                    "lake state", "broker state", "detail"],
                   [(r["level"], r["group_id"],
                     f"{r['topic']}-{r['partition']}" if r["topic"] is not None else "—",
                     (r["classification"], "ok" if r["explained"] else "bad"),
                     r["lake_committed_offset"] if r["lake_committed_offset"] is not None
                     else "—",
                     r["broker_committed_offset"] if r["broker_committed_offset"] is not None
                     else "—", r["lake_group_state"] or "—", r["broker_group_state"] or "—",
                     r["detail"] or "") for r in shown], classes="compact")
    more = (_note(f"First {MAX_RECONCILIATION_ROWS} of {len(rows):,} rows, findings first.")
            if len(rows) > MAX_RECONCILIATION_ROWS else "")
    head = (f"<p>Run <code>{_esc(run['reconcile_id'])}</code> at {_fmt_ts(run['run_at'])} against "
            f"snapshot <code>{_esc(run['snapshot_id'])}</code>.</p>")
    return head + verdict + _figure(fig, "plot-reconciliation") + more + table


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
    nav = "".join(f'<a href="#{s.anchor}">{_esc(s.title)}</a>' for s in sections)
    body = "".join(f'<section id="{s.anchor}"><h2>{_esc(s.title)}</h2>{s.body}</section>'
                   for s in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_esc(title)}</title><style>{_CSS}</style>{_PROBE_HEAD}"
            f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
            f"<header><h1>{_esc(title)}</h1><div class=\"meta\">{meta}</div></header>"
            f"<nav>{nav}</nav><main>{body}</main>"
            f"<footer>offsetlake · Kafka __consumer_offsets as Delta tables</footer>"
            f"{_PROBE_TAIL}</body></html>\n")


def write_report(lake: Path | str | LakeLocation, out: Path, group: str | None = None) -> Path:
    """Write the HTML report of ``lake`` (or of one ``group``) to ``out``; returns ``out``.

    Raises ``FileNotFoundError`` when ``lake`` holds no offsetlake tables and ``ValueError``
    when ``group`` never appears in it (a typo should not give an empty report).
    """
    from deltalake import DeltaTable

    from pipelines.report.group_page import group_pages  # it builds on this module's helpers

    lake, out = lake_location(lake), Path(out)
    if not DeltaTable.is_deltatable(lake.join("offsets_raw"), storage_options=lake.delta_options()):
        raise FileNotFoundError(f"{lake} holds no offsetlake lake (no offsets_raw table)")
    con = duckdb_connection(lake, _TABLES)
    try:
        if group is not None and not _rows(con, """
                SELECT 1 AS found FROM offset_commits WHERE group_id = $g
                UNION ALL SELECT 1 FROM group_metadata WHERE group_id = $g LIMIT 1""", g=group):
            raise ValueError(f"group {group!r} does not appear in {lake}")
        summary, info = _summary(con, lake, group)
        has_snapshots = bool(_rows(con, "SELECT 1 AS x FROM snapshot_log_end_offsets LIMIT 1"))
        sections = [
            _Section("Summary", summary, "summary"),
            _Section("Committed offsets and lag", _offsets(con, group, info["first"],
                                                           info["last"]), "offsets"),
            _Section("Current lag", _lag(lake, group, has_snapshots), "lag"),
            _Section("Commit rate", _commit_rate(con, group, info["first"], info["last"]),
                     "commit-rate"),
            _Section("Generations and rebalances", _generations(lake, group, info["last"]),
                     "generations"),
            _Section("Groups", group_pages(con, lake, group), "groups"),
            _Section("Latest reconciliation", _reconciliation(con, group), "reconciliation"),
        ]
    finally:
        con.close()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    title = f"offsetlake report — {group}" if group else "offsetlake report"
    meta = (f"{_esc(', '.join(info['clusters']) or 'no cluster')} · history "
            f"{_fmt_ts(info['first'])} → {_fmt_ts(info['last'])} · generated {_fmt_ts(now)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_page(title, meta, sections), encoding="utf-8")
    return out


__all__ = ["write_report"]
