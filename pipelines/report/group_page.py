"""The report's page per group: lag over snapshots, who committed over time, anomalies.

Why a page per group: an auditor's question is about one group ("who committed offset 0 on
orders-3 at 03:12, and was it flagged?"), and the answers live in four tables that a
generic view does not join: ``snapshot_lag`` (offset lag, and time lag where the snapshots
recorded it), ``commit_attribution`` (each commit's owner), ``offset_anomalies`` and the
current ``consumer_groups`` row.

The optional parts are read from the lake's own Delta tables with their actual columns:
a lake written before time lag, attribution or anomalies existed lacks those tables or
columns, and the page says "not available in this lake" for exactly that part instead of
plotting nothing or failing. A table that exists but has no rows for the group says so too.

Public API: :func:`group_pages` (the HTML of the "Groups" section).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from pipelines.lake.location import LakeLocation
from pipelines.queries import is_remote, open_table, plain_files
from pipelines.report.render import (
    MAX_PARTITIONS,
    PALETTE,
    esc,
    figure_div,
    fmt_ms,
    fmt_ts,
    html_note,
    html_table,
    merge_layout,
    query_rows,
    short_member,
    subplot_axes,
)
from pipelines.report.window import filter_window, fresh_files

#: Groups with a page in a whole-lake report (the busiest by commits); --group gives one.
MAX_GROUP_PAGES = 20
#: Time buckets of the attributed-commits chart, and anomaly rows listed per group.
COMMIT_BUCKETS = 60
MAX_ANOMALY_ROWS = 100
_SEVERITY_COLOURS = {"critical": "#C62828", "warning": "#F58518", "info": "#4C78A8"}
_NOT_OWNER_COLOURS = {"zombie": "#C62828", "unassigned": "#E45756", "group_empty": "#9D755D",
                      "no_membership": "#BAB0AC"}


def _slug(group_id: str, index: int) -> str:
    """A DOM-safe id for the group's anchors and plot divs (index keeps them unique)."""
    return f"{index}-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", group_id).strip("-")[:40] or "group")


def read_group_rows(lake: str | LakeLocation, table: str, groups: list[str],
                    columns: list[str] | None = None, since: datetime | None = None
                    ) -> pa.Table | None:
    """Rows of ``groups`` in lake table ``table`` with the table's *own* columns (not the
    contract's; of ``columns``, those it has), or None when the lake has no such table
    (written by an older offsetlake).

    Filtered in memory, not pushed into the scan: the files' statistics are string_view
    here, and pyarrow's pruning has no string/string_view comparison kernel for ``isin``.
    With ``since`` (a history table's window), the files that hold nothing from then on are
    not read, nor the rows before it.
    """
    where, dt = open_table(lake, table)
    if dt is None:
        return None
    schema = pa.schema(dt.schema().to_arrow())
    wanted = None if columns is None else [c for c in schema.names if c in {"group_id", *columns}]
    files = plain_files(dt)
    if files and since is not None:
        files = fresh_files(dt, files, since)
    if files is None:  # partition columns, deletion vectors: delta-rs reads it whole
        data = dt.to_pyarrow_table(columns=wanted)
    elif not files:
        return schema.empty_table() if wanted is None else schema.empty_table().select(wanted)
    elif any(is_remote(f) for f in files):
        data = pads.dataset([where.fs_path(f) for f in files], filesystem=where.filesystem(),
                            schema=schema, format="parquet").to_table(columns=wanted)
    else:
        data = pads.dataset(files, schema=schema, format="parquet").to_table(columns=wanted)
    data = filter_window(data, since)
    return data.filter(pc.is_in(data.column("group_id").cast(pa.string()),
                                pa.array(groups, pa.string())))


def _by_group(table: pa.Table | None) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if table is not None:
        for r in table.to_pylist():
            out[r["group_id"]].append(r)
    return out


def _not_available(table: str, what: str) -> str:
    return html_note(f"{what}: not available in this lake (it has no <code>{table}</code> table; "
                     "lakes written by offsetlake versions before it existed do not).")


# ------------------------------------------------------------------------------ parts


def _header(group_id: str, state: dict[str, Any] | None, activity: dict[str, Any] | None) -> str:
    if state is None:
        now = "not in <code>consumer_groups</code> (deleted, or never a group)"
    else:
        epoch = (f", generation {state['generation']}" if state["generation"] is not None else "")
        if state.get("assignment_epoch") is not None:
            epoch += f", assignment epoch {state['assignment_epoch']}"
        now = (f"{esc(state['group_type'])}, <b>{esc(state['group_state'])}</b>{epoch}, "
               f"{state['num_members']} member(s)")
    span = ""
    if activity and activity["commits"]:
        span = (f" · {activity['commits']:,} commit record(s) {fmt_ts(activity['first'])} → "
                f"{fmt_ts(activity['last'])}")
    when = activity["last"] if activity and activity["last"] else None
    hint = (f" · state at any instant: <code>offsetlake state --group {esc(group_id)} --as-of "
            f"{when.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%SZ}</code>" if when else "")
    return f"<p>Now: {now}{span}{hint}</p>"


def _lag_over_snapshots(group_id: str, slug: str, rows: list[dict[str, Any]],
                        has_time_lag: bool, table_exists: bool) -> str:
    if not table_exists:
        return html_note("No snapshot of the cluster yet (no <code>snapshot_lag</code> table): "
                         "<code>offsetlake snapshot</code> records offset and time lag.")
    if not rows:
        return html_note("No snapshot recorded lag for this group (<code>offsetlake snapshot</code> "
                         "records it).")
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["captured_at"], r["topic"], r["partition"])):
        series[f"{r['topic']}-{r['partition']}"].append(r)
    busiest = sorted(series, key=lambda k: (-max((r["lag"] or 0) for r in series[k]), k))
    shown = sorted(busiest[:MAX_PARTITIONS])
    with_time = has_time_lag and any(r.get("time_lag_ms") is not None for r in rows)
    layout = subplot_axes(rows=2 if with_time else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                          subplot_titles=("offset lag (records)", *(["time lag (seconds)"] if with_time else [])))
    traces: list[dict[str, Any]] = []
    for i, name in enumerate(shown):
        pts = series[name]
        colour = PALETTE[i % len(PALETTE)]
        traces.append({
            "type": "scatter", "x": [r["captured_at"] for r in pts], "y": [r["lag"] for r in pts],
            "name": name, "legendgroup": name, "mode": "lines+markers",
            "line": {"color": colour, "width": 1.5},
            "hovertemplate": f"{name}<br>%{{x}}<br>lag %{{y:,}} records<extra></extra>",
            "xaxis": "x", "yaxis": "y"})
        if with_time:
            traces.append({
                "type": "scatter", "x": [r["captured_at"] for r in pts],
                "y": [None if r.get("time_lag_ms") is None else r["time_lag_ms"] / 1000 for r in pts],
                "name": f"{name} time", "legendgroup": name, "showlegend": False,
                "mode": "lines+markers", "line": {"color": colour, "width": 1.5, "dash": "dot"},
                "hovertemplate": f"{name}<br>%{{x}}<br>time lag %{{y:,.3f}} s<extra></extra>",
                "xaxis": "x2", "yaxis": "y2"})
    merge_layout(layout, {"height": 520 if with_time else 340, "legend": {"title": {"text": "partition"}},
                          "title": {"text": f"Lag of {group_id} over snapshots", "x": 0.5}})
    notes = []
    if len(shown) < len(series):
        notes.append(f"Showing the {len(shown)} partitions with the highest lag of {len(series)}.")
    if not has_time_lag:
        notes.append("Time lag: not available in this lake (its <code>snapshot_lag</code> has no "
                     "<code>time_lag_ms</code>: snapshots taken before time lag was recorded).")
    elif not with_time:
        notes.append("The snapshots recorded no time lag for this group (see "
                     "<code>time_lag_reason</code> in <code>snapshot_lag</code>).")
    latest = max(r["captured_at"] for r in rows)
    now = sorted((r for r in rows if r["captured_at"] == latest),
                 key=lambda r: (r["topic"], r["partition"]))
    columns = ["partition", "committed", "log end", "offset lag"]
    if has_time_lag:
        columns += ["time lag", "why no time lag", "est. catch-up"]
    body = []
    for r in now:
        row: list[Any] = [f"{r['topic']}-{r['partition']}", r["committed_offset"],
                          r["log_end_offset"] if r["log_end_offset"] is not None else "—",
                          r["lag"] if r["lag"] is not None else "—"]
        if has_time_lag:
            tl = r.get("time_lag_ms")
            eta = r.get("est_catch_up_s")
            row += [fmt_ms(int(tl)) if tl is not None else "—", r.get("time_lag_reason") or "",
                    fmt_ms(int(eta * 1000)) + " (estimate)" if eta is not None else "—"]
        body.append(row)
    table = html_table(columns, body, classes="compact")
    return (figure_div({"data": traces, "layout": layout}, f"plot-group-{slug}-lag")
            + "".join(html_note(n) for n in notes)
            + f"<details><summary>Lag at the latest snapshot ({fmt_ts(latest)})</summary>"
              f"{table}</details>")


def _owner_label(r: dict[str, Any]) -> str:
    if r.get("attribution") == "owner":
        who = r.get("client_id") or short_member(r.get("member_id"))
        if r.get("group_instance_id"):
            who += f" [{r['group_instance_id']}]"
        return who
    return f"({r.get('attribution') or 'unknown'})"


@dataclass
class AttributedCommits:
    """One group's attributed commits, counted: what its chart and table show. ``first`` is
    None when no commit has a time; ``counts`` is owner label -> time bucket -> commits."""

    rows: int
    first: datetime | None = None
    bucket_ms: int = 1
    counts: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(
        lambda: defaultdict(int)))
    per_label: dict[str, dict[str, Any]] = field(default_factory=dict)


_OWNER_KEYS = ("attribution", "client_id", "member_id", "group_instance_id")


def _column(table: pa.Table, name: str, kind: pa.DataType) -> pa.ChunkedArray:
    """A column of ``table``, or nulls where its lake has no such column (an older lake)."""
    if name in table.schema.names:
        return table.column(name).cast(kind)
    return pa.chunked_array([pa.nulls(table.num_rows, kind)])


def _spans(group_ids: pa.ChunkedArray, ts: pa.ChunkedArray) -> dict[str, AttributedCommits]:
    """Each group's row count, first commit time and bucket width (as the chart defines them)."""
    spans = pa.table({"g": group_ids, "ts": ts}).group_by("g").aggregate(
        [("ts", "min"), ("ts", "max"), ([], "count_all")])
    out = {}
    for r in spans.to_pylist():
        first, last = r["ts_min"], r["ts_max"]
        summary = AttributedCommits(r["count_all"])
        if first is not None:
            span_ms = max(1, int((last - first).total_seconds() * 1000))
            summary.first, summary.bucket_ms = first, max(1, -(-span_ms // COMMIT_BUCKETS))
        out[r["g"]] = summary
    return out


def attribution_summary(table: pa.Table | None) -> dict[str, AttributedCommits]:
    """Every group's attributed commits counted per owner and time bucket.

    Why in Arrow: the table has a row per commit (millions in a long history). The rows are
    grouped by (group, owner columns, bucket) in Arrow, and only those few rows are folded
    here, into the same numbers the row-by-row count gave: the bucket is computed with the
    same float arithmetic (``int(seconds * 1000) // bucket_ms``), and an owner's host and
    attribution are its first row's (Arrow groups in order of first appearance).
    """
    if table is None or not table.num_rows:
        return {}
    us = pa.timestamp("us", "UTC")
    group_ids = table.column("group_id").cast(pa.string())
    ts = pc.coalesce(table.column("record_timestamp").cast(us), _column(table, "commit_timestamp", us))
    summaries = _spans(group_ids, ts)
    names = [g for g, s in summaries.items() if s.first is not None]
    if not names:
        return summaries
    row_group = pc.index_in(group_ids, value_set=pa.array(names, pa.string()))
    first = pc.take(pa.array([summaries[g].first for g in names], us), row_group)
    width = pc.take(pa.array([summaries[g].bucket_ms for g in names], pa.int64()), row_group)
    filled = pc.coalesce(ts, first)
    delta_us = pc.fill_null(pc.subtract(filled.cast(pa.int64()), first.cast(pa.int64())), 0)
    width = pc.fill_null(width, 1).to_numpy(zero_copy_only=False)  # nulls: rows dropped below
    bucket = (delta_us.to_numpy(zero_copy_only=False) / 1e6 * 1000).astype(np.int64) // width
    rows = pa.table({"g": group_ids, **{k: _column(table, k, pa.string()) for k in _OWNER_KEYS},
                     "bucket": bucket, "ts": filled,
                     "host": _column(table, "client_host", pa.string())}).filter(pc.is_valid(row_group))
    grouped = rows.group_by(["g", *_OWNER_KEYS, "bucket"], use_threads=False).aggregate(
        [([], "count_all"), ("ts", "min"), ("ts", "max"),
         ("host", "first", pc.ScalarAggregateOptions(skip_nulls=False))])
    for r in grouped.to_pylist():
        summary, label, n = summaries[r["g"]], _owner_label(r), r["count_all"]
        summary.counts[label][r["bucket"]] += n
        info = summary.per_label.setdefault(label, {
            "n": 0, "first": r["ts_min"], "last": r["ts_max"], "attribution": r["attribution"],
            "host": r["host_first"], "members": set()})
        info["n"] += n
        info["first"], info["last"] = min(info["first"], r["ts_min"]), max(info["last"], r["ts_max"])
        if r["member_id"]:
            info["members"].add(r["member_id"])
    return summaries


def attributed_commits_html(group_id: str, slug: str, summary: AttributedCommits | None,
                            table_exists: bool) -> str:
    """The group's commits by owner over time (stacked bars) and the owners' table."""
    if not table_exists:
        return _not_available("commit_attribution", "Commits attributed to members")
    if summary is None or not summary.rows:
        return html_note("No attributed commits for this group.")
    if summary.first is None:
        return html_note(f"{summary.rows:,} attributed commits, none with a timestamp to plot.")
    first, bucket_ms, counts, per_label = (summary.first, summary.bucket_ms, summary.counts,
                                           summary.per_label)
    traces: list[dict[str, Any]] = []
    labels = sorted(per_label, key=lambda k: (k.startswith("("), -per_label[k]["n"], k))
    for i, label in enumerate(labels):
        xs = sorted(counts[label])
        colour = _NOT_OWNER_COLOURS.get(per_label[label]["attribution"], PALETTE[i % len(PALETTE)])
        traces.append({
            "type": "bar",
            "x": [datetime.fromtimestamp(first.timestamp() + b * bucket_ms / 1000, tz=timezone.utc)
                  for b in xs],
            "y": [counts[label][b] for b in xs], "name": label, "marker": {"color": colour},
            "hovertemplate": f"{esc(label)}<br>%{{x}}<br>%{{y:,}} commit(s)<extra></extra>"})
    layout = {"barmode": "stack", "height": 340, "bargap": 0.05,
              "title": {"text": f"Commits of {group_id} by owner ({fmt_ms(bucket_ms)} buckets)", "x": 0.5},
              "yaxis": {"title": {"text": "commit records"}}, "legend": {"title": {"text": "committed by"}}}
    table = html_table(["committed by", "attribution", "host", "member ids", "commits", "first",
                        "last"],
                       [(label, per_label[label]["attribution"] or "—", per_label[label]["host"] or "—",
                         ", ".join(short_member(m) for m in sorted(per_label[label]["members"])) or "—",
                         per_label[label]["n"], fmt_ts(per_label[label]["first"]),
                         fmt_ts(per_label[label]["last"])) for label in labels], classes="compact")
    return figure_div({"data": traces, "layout": layout}, f"plot-group-{slug}-commits") + table


def _anomalies(group_id: str, slug: str, rows: list[dict[str, Any]], table_exists: bool) -> str:
    if not table_exists:
        return _not_available("offset_anomalies", "Anomalies")
    if not rows:
        return html_note("No offset anomalies recorded for this group.")
    rows = sorted(rows, key=lambda r: (r["record_timestamp"] or datetime.min.replace(tzinfo=timezone.utc),
                                       r["offset"]))
    traces: list[dict[str, Any]] = []
    for severity in sorted({r["severity"] for r in rows}):
        pts = [r for r in rows if r["severity"] == severity]
        traces.append({
            "type": "scatter", "x": [r["record_timestamp"] for r in pts], "y": [r["kind"] for r in pts],
            "mode": "markers", "name": severity,
            "marker": {"size": 10, "color": _SEVERITY_COLOURS.get(severity, "#6b7785"),
                       "symbol": "diamond", "line": {"width": 1, "color": "white"}},
            "customdata": [[f"{r['topic']}-{r['partition']}", r["committed_offset"],
                            "—" if r.get("previous_offset") is None else r["previous_offset"],
                            esc(r.get("member_id") or r.get("attribution") or "—")] for r in pts],
            "hovertemplate": ("%{y}<br>%{x}<br>%{customdata[0]} committed %{customdata[1]}"
                              " (before: %{customdata[2]})<br>by %{customdata[3]}<extra></extra>")})
    kinds = sorted({r["kind"] for r in rows})
    layout = {"height": max(220, 120 + 34 * len(kinds)), "yaxis": {"automargin": True},
              "title": {"text": f"Offset anomalies of {group_id}", "x": 0.5},
              "legend": {"title": {"text": "severity"}}}
    by_kind = defaultdict(int)
    for r in rows:
        by_kind[(r["kind"], r["severity"])] += 1
    counts = ", ".join(f"{k} ({s}): {n}" for (k, s), n in sorted(by_kind.items()))
    shown = rows[:MAX_ANOMALY_ROWS]
    table = html_table(["time", "kind", "severity", "partition", "committed", "previous", "by", "reason"],
                       [(fmt_ts(r["record_timestamp"]), r["kind"], r["severity"],
                         f"{r['topic']}-{r['partition']}", r["committed_offset"],
                         r["previous_offset"] if r.get("previous_offset") is not None else "—",
                         short_member(r.get("member_id")) or r.get("attribution") or "—", r.get("reason") or "")
                        for r in shown], classes="compact")
    more = (html_note(f"First {MAX_ANOMALY_ROWS} of {len(rows):,} anomalies.")
            if len(rows) > MAX_ANOMALY_ROWS else "")
    return (figure_div({"data": traces, "layout": layout}, f"plot-group-{slug}-anomalies")
            + f"<p>{len(rows):,} anomalies: "
            f"{esc(counts)}</p>" + more + table)


# ------------------------------------------------------------------------------ the section


def group_pages(con: Any, lake: str | LakeLocation, group: str | None,
                since: datetime | None = None) -> str:
    """The "Groups" section: an index, then one page (sub-section) per group.

    ``con``: the report's DuckDB connection (offset_commits, group_metadata and
    consumer_groups registered); the optional audit tables are read here with their own
    columns.
    """
    activity = {r["group_id"]: r for r in query_rows(con, """
        SELECT group_id, COUNT(*) AS commits,
               MIN(COALESCE(record_timestamp, commit_timestamp)) AS first,
               MAX(COALESCE(record_timestamp, commit_timestamp)) AS last
        FROM offset_commits WHERE $group IS NULL OR group_id = $group
        GROUP BY group_id""", group=group)}
    known = {r["group_id"] for r in query_rows(con, """
        SELECT DISTINCT group_id FROM group_metadata WHERE $group IS NULL OR group_id = $group""",
                                               group=group)} | set(activity)
    if not known:
        return html_note("No groups in the lake.")
    ranked = sorted(known, key=lambda g: (-(activity[g]["commits"] if g in activity else 0), g))
    groups = sorted(ranked[:MAX_GROUP_PAGES])
    states = {r["group_id"]: r for r in query_rows(con, """
        SELECT * FROM consumer_groups WHERE list_contains($groups, group_id)""", groups=groups)}

    lag = read_group_rows(lake, "snapshot_lag", groups)
    attribution = read_group_rows(lake, "commit_attribution", groups, [
        "record_timestamp", "commit_timestamp", "attribution", "member_id", "client_id",
        "client_host", "group_instance_id"], since=since)
    anomalies = read_group_rows(lake, "offset_anomalies", groups)
    has_time_lag = lag is not None and "time_lag_ms" in lag.schema.names
    lag_rows, anomaly_rows = _by_group(lag), _by_group(anomalies)
    attr_rows = attribution_summary(attribution)

    pages, index = [], []
    for i, gid in enumerate(groups):
        slug = _slug(gid, i)
        n_anomalies = len(anomaly_rows.get(gid, []))
        index.append(f'<a href="#group-{slug}">{esc(gid)}</a>'
                     + (f' <span class="bad">({n_anomalies} anomalies)</span>' if n_anomalies else ""))
        pages.append(
            f'<div class="group-page" id="group-{slug}"><h3>{esc(gid)}</h3>'
            + _header(gid, states.get(gid), activity.get(gid))
            + "<h4>Offset and time lag over snapshots</h4>"
            + _lag_over_snapshots(gid, slug, lag_rows.get(gid, []), has_time_lag, lag is not None)
            + "<h4>Commits attributed to members over time</h4>"
            + attributed_commits_html(gid, slug, attr_rows.get(gid), attribution is not None)
            + "<h4>Anomalies on the timeline</h4>"
            + _anomalies(gid, slug, anomaly_rows.get(gid, []), anomalies is not None)
            + "</div>")
    more = (html_note(f"Pages for the {len(groups)} busiest of {len(known)} groups; "
                      "<code>offsetlake report --group G</code> gives any one group's page.")
            if len(groups) < len(known) else "")
    return (more + f'<p class="group-index">{" · ".join(index)}</p>' + "".join(pages))


__all__ = ["MAX_GROUP_PAGES", "AttributedCommits", "attributed_commits_html", "attribution_summary",
           "group_pages", "read_group_rows"]
