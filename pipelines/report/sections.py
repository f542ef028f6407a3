"""The report's whole-lake sections: the summary header, committed offsets and lag over
time, the commit rate, the current lag per group and the latest reconciliation."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.lake.location import lake_location
from pipelines.lake.summary import lake_counts
from pipelines.queries import run_duckdb
from pipelines.report.render import (
    MAX_GROUPS,
    MAX_PARTITIONS,
    MAX_RECONCILIATION_ROWS,
    OFFSET_BUCKETS,
    PALETTE,
    RATE_BUCKETS,
    esc,
    figure_div,
    fmt_exact_ms,
    fmt_ms,
    fmt_ts,
    html_note,
    html_table,
    merge_layout,
    nice_bucket,
    query_rows,
    subplot_axes,
)
from pipelines.report.window import history_span


def summary_section(con: Any, lake: Path, group: str | None) -> tuple[str, dict[str, Any]]:
    """The header: where, what, when, and the state of snapshots and reconciliation."""
    span = history_span(lake) or query_rows(con, """
        SELECT cluster_id, COUNT(*) AS records, MIN(r.timestamp) AS first, MAX(r.timestamp) AS last
        FROM offsets_raw r GROUP BY cluster_id ORDER BY cluster_id""")
    groups = query_rows(con, """
        SELECT group_type, group_state, COUNT(*) AS n, CAST(SUM(num_members) AS BIGINT) AS members
        FROM consumer_groups GROUP BY 1, 2 ORDER BY 1, 2""")
    snaps = query_rows(con, """
        SELECT cluster_id, snapshot_id, captured_at FROM snapshot_runs
        ORDER BY captured_at DESC, snapshot_id DESC LIMIT 1""") or query_rows(con, """
        SELECT cluster_id, snapshot_id, MAX(captured_at) AS captured_at
        FROM snapshot_log_end_offsets GROUP BY 1, 2 ORDER BY 3 DESC, 2 DESC LIMIT 1""")
    n_snaps = query_rows(con, "SELECT COUNT(DISTINCT snapshot_id) AS n FROM snapshot_log_end_offsets")
    recs = query_rows(con, """
        SELECT reconcile_id, MAX(reconciled_at) AS run_at, COUNT(*) AS n_rows,
               SUM(CASE WHEN explained THEN 0 ELSE 1 END) AS unexplained
        FROM reconciliation GROUP BY reconcile_id ORDER BY run_at DESC LIMIT 1""")
    committed = query_rows(con, """
        SELECT COUNT(*) AS partitions, COUNT(DISTINCT group_id) AS groups FROM committed_offsets""")
    first = min((s["first"] for s in span if s["first"]), default=None)
    last = max((s["last"] for s in span if s["last"]), default=None)
    info = {"first": first, "last": last, "clusters": [s["cluster_id"] for s in span]}

    n_groups = sum(g["n"] for g in groups)
    cards = [
        ("Records", f"{sum(s['records'] for s in span):,}",
         f"{len(span)} cluster(s): {', '.join(s['cluster_id'] for s in span) or '—'}"),
        ("History", fmt_ms(int((last - first).total_seconds() * 1000)) if first and last
         else "—", f"{fmt_ts(first)} → {fmt_ts(last)}"),
        ("Groups", f"{n_groups:,}", ", ".join(
            f"{t}: {sum(g['n'] for g in groups if g['group_type'] == t)}"
            for t in sorted({g["group_type"] for g in groups})) or "—"),
        ("Committed partitions", f"{committed[0]['partitions']:,}",
         f"in {committed[0]['groups']:,} group(s)"),
        ("Snapshots", f"{n_snaps[0]['n']:,}",
         f"latest {fmt_ts(snaps[0]['captured_at'])}" if snaps else "none stored yet"),
        ("Reconciliation",
         ("passed" if not recs[0]["unexplained"] else f"{recs[0]['unexplained']:,} unexplained")
         if recs else "—",
         f"{recs[0]['n_rows']:,} rows, {fmt_ts(recs[0]['run_at'])}" if recs else "none run yet"),
    ]
    status = ""
    if recs:
        status = "ok" if not recs[0]["unexplained"] else "bad"
    card_html = "".join(
        f'<div class="card{" " + status if title == "Reconciliation" and status else ""}">'
        f'<div class="label">{esc(title)}</div><div class="value">{esc(value)}</div>'
        f'<div class="sub">{esc(sub)}</div></div>' for title, value, sub in cards)
    states = html_table(["group type", "state", "groups", "members"],
                        [(g["group_type"], g["group_state"], g["n"], g["members"] or 0)
                         for g in groups]) if groups else ""
    counts = lake_counts(lake)
    tables = html_table(["table", "rows"], sorted(counts.items())) if counts else ""
    scope = (f"Group <b>{esc(group)}</b> only." if group else "All groups.")
    body = (f'<div class="cards">{card_html}</div><p class="scope">{scope} Lake: '
            f"<code>{esc(lake_location(lake))}</code></p>"
            f'<details><summary>Tables and groups by state</summary><div class="two-col">'
            f"{tables}{states}</div></details>")
    return body, info


#: The last commit of each partition in each time bucket: one hash aggregate (arg_max by log
#: position) instead of a window over every commit, which sorted the whole history. One
#: struct so time and offset come from the same row, and a tombstone's NULL offset is kept
#: (arg_max skips NULL arguments; the struct is never NULL).
OFFSET_SERIES_SQL = """
    WITH last_in_bucket AS (
        SELECT group_id, topic, partition,
               arg_max({'t': COALESCE(record_timestamp, commit_timestamp),
                        'committed': CASE WHEN is_tombstone THEN NULL ELSE committed_offset END},
                       "offset") AS lb
        FROM offset_commits
        WHERE list_contains($groups, group_id)
        GROUP BY group_id, topic, partition,
                 CAST(epoch_ms(COALESCE(record_timestamp, commit_timestamp)) // $bucket AS BIGINT)
    )
    SELECT group_id, topic, partition, lb.t AS t, lb.committed AS committed
    FROM last_in_bucket ORDER BY group_id, topic, partition, t"""


@dataclass
class _OffsetSeries:
    """What the offsets plot draws, keyed for the traces: commits per (group, topic,
    partition), end offsets per (topic, partition), lag per (group, topic, partition)."""

    by_key: dict[tuple[str, str, int], list[dict[str, Any]]]
    ends_by_tp: dict[tuple[str, int], list[dict[str, Any]]]
    lag_by_key: dict[tuple[str, str, int], list[dict[str, Any]]]
    any_ends: bool
    any_lags: bool


def offsets_section(con: Any, group: str | None, first: datetime | None, last: datetime | None
                    ) -> str:
    """Committed offset per partition over time, end offsets and lag from the snapshots."""
    if first is None or last is None:
        return html_note("The lake holds no records yet.")
    span_ms = max(1, int((last - first).total_seconds() * 1000))
    bucket = max(1, span_ms // OFFSET_BUCKETS)
    busiest = query_rows(con, """
        SELECT group_id, COUNT(*) AS commits FROM offset_commits
        WHERE $group IS NULL OR group_id = $group
        GROUP BY group_id ORDER BY commits DESC, group_id LIMIT $limit""",
                         group=group, limit=MAX_GROUPS)
    if not busiest:
        return html_note("No offset commits in the lake" + (f" for group {esc(group)}." if group
                                                            else "."))
    groups = [b["group_id"] for b in busiest]
    n_groups = query_rows(con, """SELECT COUNT(DISTINCT group_id) AS n FROM offset_commits
                             WHERE $group IS NULL OR group_id = $group""", group=group)[0]["n"]
    data = _offset_series(con, groups, bucket)
    fig, truncated = _offsets_figure(groups, data)
    notes = []
    if n_groups > len(groups):
        notes.append(f"Showing the {len(groups)} busiest of {n_groups} groups; "
                     "<code>offsetlake report --group G</code> reports one group.")
    if truncated:
        notes.append("Busiest partitions only: " + "; ".join(esc(t) for t in truncated) + ".")
    if not data.any_ends:
        notes.append("No snapshot yet, so no log end offsets or lag: "
                     "<code>offsetlake snapshot</code> records the cluster's answers.")
    elif not data.any_lags:
        notes.append("The snapshots recorded end offsets but no per-group lag (snapshot_lag).")
    notes.append(f"Series: the last commit per partition per {fmt_ms(bucket)}; a gap is an "
                 "offset deleted (tombstone).")
    return figure_div(fig, "plot-offsets") + "".join(html_note(n) for n in notes)


def _offset_series(con: Any, groups: list[str], bucket: int) -> _OffsetSeries:
    """The last commit of each partition in each time bucket (a tombstone ends the line),
    the snapshots' end offsets and the groups' lag at each snapshot."""
    series = query_rows(con, OFFSET_SERIES_SQL, groups=groups, bucket=bucket)
    ends = query_rows(con, """
        SELECT topic, partition, captured_at, log_end_offset FROM snapshot_log_end_offsets
        WHERE log_end_offset IS NOT NULL ORDER BY captured_at""")
    lags = query_rows(con, """
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
    return _OffsetSeries(by_key, ends_by_tp, lag_by_key, bool(ends), bool(lags))


def _offsets_figure(groups: list[str], data: _OffsetSeries) -> tuple[dict[str, Any], list[str]]:
    """Committed offsets and end offsets above, lag below; one group visible at a time (a
    dropdown switches), the busiest partitions of each. Returns the figure (plotly's JSON:
    :func:`~pipelines.report.render.figure_div`) and the groups whose partitions were
    cut to :data:`MAX_PARTITIONS`."""
    layout = subplot_axes(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                          row_heights=(0.64, 0.36),
                          subplot_titles=("Committed offset (lines) and log end offset at "
                                          "snapshots (diamonds)", "Lag at snapshots"))
    traces: list[dict[str, Any]] = []
    owner: list[str] = []
    truncated = []
    for gi, g in enumerate(groups):
        keys = sorted((k for k in data.by_key if k[0] == g), key=lambda k: -len(data.by_key[k]))
        if len(keys) > MAX_PARTITIONS:
            truncated.append(f"{g}: {MAX_PARTITIONS} of {len(keys)} partitions")
            keys = keys[:MAX_PARTITIONS]
        for i, key in enumerate(sorted(keys, key=lambda k: (k[1], k[2]))):
            added = _partition_traces(traces, data, key, PALETTE[i % len(PALETTE)], gi == 0)
            owner += [g] * added
    if len(groups) > 1:
        buttons = [{"label": g, "method": "update",
                    "args": [{"visible": [o == g for o in owner]},
                             {"title.text": f"Offsets of {g}"}]} for g in groups]
        merge_layout(layout, {"updatemenus": [{"buttons": buttons, "x": 0, "xanchor": "left", "y": 1.16,
                                               "yanchor": "top", "direction": "down",
                                               "bgcolor": "white", "showactive": True}]})
    merge_layout(layout, {"title": {"text": f"Offsets of {groups[0]}", "x": 0.5}, "height": 640,
                          "legend": {"title": {"text": "partition"}}, "margin": {"t": 90},
                          "yaxis": {"title": {"text": "offset"}, "tickformat": ","},
                          "yaxis2": {"title": {"text": "records behind"}, "tickformat": ",",
                                     "rangemode": "tozero"},
                          "xaxis2": {"title": {"text": "time (UTC)"}}})
    return {"data": traces, "layout": layout}, truncated


#: the axes of each row of the offsets plot
_ROW_AXES = {1: {"xaxis": "x", "yaxis": "y"}, 2: {"xaxis": "x2", "yaxis": "y2"}}


def _partition_traces(traces: list[dict[str, Any]], data: _OffsetSeries, key: tuple[str, str, int],
                      color: str, visible: bool) -> int:
    """One partition's committed-offset line, its end-offset diamonds and its lag line
    (those the snapshots have), as plotly's trace dicts; returns how many were added."""
    g, name = key[0], f"{key[1]}-{key[2]}"
    pts = data.by_key[key]
    traces.append({
        "type": "scatter", "x": [p["t"] for p in pts], "y": [p["committed"] for p in pts],
        "name": name, "legendgroup": name, "mode": "lines",
        "line": {"shape": "hv", "color": color, "width": 1.6}, "visible": visible,
        "hovertemplate": f"{esc(g)} {name}<br>%{{x}}<br>committed %{{y:,}}<extra></extra>",
        **_ROW_AXES[1]})
    added = 1
    tp_ends = data.ends_by_tp.get((key[1], key[2]), [])
    if tp_ends:
        traces.append({
            "type": "scatter", "x": [e["captured_at"] for e in tp_ends],
            "y": [e["log_end_offset"] for e in tp_ends], "name": f"{name} end",
            "legendgroup": name, "showlegend": False, "mode": "markers",
            "marker": {"symbol": "diamond", "size": 9, "color": color,
                       "line": {"width": 1, "color": "white"}},
            "visible": visible,
            "hovertemplate": f"{name}<br>%{{x}}<br>log end offset %{{y:,}}<extra></extra>",
            **_ROW_AXES[1]})
        added += 1
    key_lags = data.lag_by_key.get(key, [])
    if key_lags:
        traces.append({
            "type": "scatter", "x": [r["captured_at"] for r in key_lags],
            "y": [r["lag"] for r in key_lags], "name": f"{name} lag", "legendgroup": name,
            "showlegend": False, "mode": "lines+markers", "line": {"color": color, "width": 1.4},
            "marker": {"size": 7, "color": color}, "visible": visible,
            "hovertemplate": f"{name}<br>%{{x}}<br>lag %{{y:,}}<extra></extra>",
            **_ROW_AXES[2]})
        added += 1
    return added


def commit_rate_section(con: Any, group: str | None, first: datetime | None, last: datetime | None
                 ) -> str:
    """Offset commit records per minute, stacked by group (the busiest, then the rest)."""
    if first is None or last is None:
        return html_note("The lake holds no records yet.")
    span_ms = max(1, int((last - first).total_seconds() * 1000))
    bucket = nice_bucket(span_ms, RATE_BUCKETS)
    rows = query_rows(con, """
        SELECT group_id, CAST(epoch_ms(COALESCE(record_timestamp, commit_timestamp)) // $bucket
                              AS BIGINT) * $bucket AS bucket_ms,
               COUNT(*) AS commits
        FROM offset_commits
        WHERE NOT is_tombstone AND ($group IS NULL OR group_id = $group)
        GROUP BY 1, 2 ORDER BY 2""", group=group, bucket=bucket)
    if not rows:
        return html_note("No offset commits" + (f" for group {esc(group)}." if group else "."))
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
    traces: list[dict[str, Any]] = []
    xs = [datetime.fromtimestamp(b / 1000, tz=timezone.utc) for b in grid]
    for i, name in enumerate([*top, "other groups"]):
        if name not in series:
            continue
        traces.append({
            "type": "scatter", "x": xs, "y": [series[name].get(b, 0) * per_min for b in grid],
            "name": name, "stackgroup": "commits", "mode": "lines",
            "line": {"width": 0.6, "color": PALETTE[i % len(PALETTE)]},
            "hovertemplate": f"{esc(name)}<br>%{{x}}<br>%{{y:,.1f}} commits/min<extra></extra>"})
    layout = {"height": 380, "title": {"text": f"Offset commits per minute (buckets of {fmt_ms(bucket)})",
                                       "x": 0.5},
              "yaxis": {"title": {"text": "partition offsets committed / min"}, "tickformat": ","},
              "xaxis": {"title": {"text": "time (UTC)"}}, "legend": {"title": {"text": "group"}}}
    return figure_div({"data": traces, "layout": layout}, "plot-commit-rate") + html_note(
        "One commit = one partition offset in an OffsetCommit / TxnOffsetCommit request; "
        "tombstones are not counted.")


def lag_section(lake: Path, group: str | None, has_snapshots: bool) -> str:
    """The current lag per group from the latest snapshot (query ``lag_by_group``): offset
    lag and, beside it, the exact time lag the snapshot read from the log, plus the estimated
    catch-up time (labelled as an estimate)."""
    if not has_snapshots:
        return html_note("No snapshot of the cluster yet, so no lag: <code>offsetlake snapshot"
                         "</code> records log end offsets (and the brokers' answers to reconcile "
                         "against).")
    rows = run_duckdb(lake, "lag_by_group", group_id=group).to_pylist()
    if not rows:
        return html_note("No committed offsets to measure lag for.")
    layout = subplot_axes(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.12,
                          subplot_titles=("Offset lag (records behind)",
                                          "Time lag (newest record - next record to read)"))
    groups = [r["group_id"] for r in rows][::-1]
    traces = [{
        "type": "bar", "x": [r["total_lag"] or 0 for r in rows][::-1], "y": groups,
        "orientation": "h", "marker": {"color": "#4C78A8"}, "name": "offset lag",
        "text": [f"{r['total_lag']:,}" if r["total_lag"] is not None else "n/a" for r in rows][::-1],
        "textposition": "outside", "cliponaxis": False,
        "hovertemplate": "%{y}<br>total lag %{x:,}<extra></extra>", "xaxis": "x", "yaxis": "y"}, {
        "type": "bar", "x": [(r["max_time_lag_ms"] or 0) / 1000 for r in rows][::-1], "y": groups,
        "orientation": "h", "marker": {"color": "#F58518"}, "name": "time lag",
        "text": [fmt_ms(r["max_time_lag_ms"]) if r["max_time_lag_ms"] is not None else "n/a"
                 for r in rows][::-1], "textposition": "outside", "cliponaxis": False,
        "hovertemplate": "%{y}<br>time lag %{text}<extra></extra>", "xaxis": "x2", "yaxis": "y2"}]
    merge_layout(layout, {"height": max(240, 80 + 26 * len(rows)), "showlegend": False,
                          "yaxis": {"automargin": True}, "margin": {"r": 60},
                          "title": {"text": f"Current lag per group (snapshot {rows[0]['snapshot_id']})",
                                    "x": 0.5},
                          "xaxis": {"title": {"text": "records behind"}, "tickformat": ","},
                          "xaxis2": {"title": {"text": "seconds behind"}}})
    table = html_table(["group", "type", "state", "partitions", "with end offset", "total lag",
                        "max lag", "time lag", "with time lag", "catch-up (estimate)",
                        "last commit", "snapshot taken"],
                       [(r["group_id"], r["group_type"] or "—", r["group_state"] or "—",
                         r["partitions"], r["partitions_with_lag"],
                         r["total_lag"] if r["total_lag"] is not None else "—",
                         r["max_lag"] if r["max_lag"] is not None else "—",
                         fmt_exact_ms(r["max_time_lag_ms"]), r["partitions_with_time_lag"],
                         (f"~{fmt_ms(round(r['est_catch_up_s'] * 1000))}"
                          if r["est_catch_up_s"] is not None else "—"),
                         fmt_ts(r["last_commit_at"]), fmt_ts(r["captured_at"])) for r in rows],
                       classes="compact")
    note = html_note("Time lag is exact: the snapshot read the timestamp of the record at each "
                     "committed offset and of the newest record from the log (largest over the "
                     "group's partitions; shown where the snapshot saw the lake's committed "
                     "offset, see <code>lag_by_partition</code> for why a partition has none). "
                     "Catch-up is an <em>estimate</em>: lag divided by the group's recent commit "
                     "rate in the lake's history, ignoring what producers add meanwhile.")
    if not any(r["max_time_lag_ms"] is not None for r in rows):
        note += html_note("This snapshot has no time lag (a recorded capture, or taken before "
                          "offsetlake read record timestamps): run <code>offsetlake snapshot"
                          "</code> against the cluster.")
    return (figure_div({"data": traces, "layout": layout}, "plot-lag") + note
            + f"<details><summary>Table</summary>{table}</details>")


def reconciliation_section(con: Any, group: str | None) -> str:
    """The latest reconciliation run: counts per class and the rows, findings first."""
    latest = query_rows(con, """
        SELECT reconcile_id, snapshot_id, MAX(reconciled_at) AS run_at FROM reconciliation
        GROUP BY 1, 2 ORDER BY run_at DESC, reconcile_id DESC LIMIT 1""")
    if not latest:
        return html_note("No reconciliation yet: <code>offsetlake reconcile</code> compares the "
                         "lake with the latest snapshot and runs the quality gate.")
    run = latest[0]
    rows = query_rows(con, """
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
    bars = {"type": "bar", "x": [n for _, n in ordered][::-1],
            "y": [f"{c}{'' if ok else ' (unexplained)'}" for (c, ok), _ in ordered][::-1],
            "orientation": "h", "width": 0.6,
            "marker": {"color": ["#54A24B" if ok else "#E45756" for (_, ok), _ in ordered][::-1]},
            "text": [f"{n:,}" for _, n in ordered][::-1], "textposition": "outside", "cliponaxis": False,
            "hovertemplate": "%{y}: %{x:,} rows<extra></extra>"}
    layout = {"height": max(150, 80 + 28 * len(ordered)), "title": {"text": "Rows per class", "x": 0.5},
              "xaxis": {"title": {"text": "rows"}, "tickformat": ","}, "yaxis": {"automargin": True},
              "margin": {"r": 60}}
    unexplained = sum(n for (_, ok), n in counts.items() if not ok)
    verdict = (f'<p class="verdict ok">All {len(rows):,} rows matched or were explained.</p>'
               if not unexplained else
               f'<p class="verdict bad">{unexplained:,} of {len(rows):,} rows are unexplained '
               "differences (findings).</p>")
    shown = rows[:MAX_RECONCILIATION_ROWS]
    table = html_table(["level", "group", "partition", "class", "lake offset", "broker offset",
                        "lake state", "broker state", "detail"],
                       [(r["level"], r["group_id"],
                         f"{r['topic']}-{r['partition']}" if r["topic"] is not None else "—",
                         (r["classification"], "ok" if r["explained"] else "bad"),
                         r["lake_committed_offset"] if r["lake_committed_offset"] is not None
                         else "—",
                         r["broker_committed_offset"] if r["broker_committed_offset"] is not None
                         else "—", r["lake_group_state"] or "—", r["broker_group_state"] or "—",
                         r["detail"] or "") for r in shown], classes="compact")
    more = (html_note(f"First {MAX_RECONCILIATION_ROWS} of {len(rows):,} rows, findings first.")
            if len(rows) > MAX_RECONCILIATION_ROWS else "")
    head = (f"<p>Run <code>{esc(run['reconcile_id'])}</code> at {fmt_ts(run['run_at'])} against "
            f"snapshot <code>{esc(run['snapshot_id'])}</code>.</p>")
    return head + verdict + figure_div({"data": [bars], "layout": layout}, "plot-reconciliation") + more + table
