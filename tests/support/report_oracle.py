"""The report's per-row parts as they were before issue 9: the oracle the vectorized report
(pipelines/report/group_page.py, pipelines/report/sections.py) must match exactly.

``attributed_commits`` is the old ``_attributed_commits`` verbatim (every attributed commit
of a group as a Python dict, counted in a loop); ``by_group`` the old ``_by_group``;
``OFFSET_SERIES_SQL`` the old offsets-plot query (a ROW_NUMBER window over every commit).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

import plotly.graph_objects as go
import pyarrow as pa

from pipelines.report.group_page import COMMIT_BUCKETS
from pipelines.report.render import (
    PALETTE,
    esc,
    figure_div,
    fmt_ms,
    fmt_ts,
    html_note,
    html_table,
    short_member,
)

_NOT_OWNER_COLOURS = {"zombie": "#C62828", "unassigned": "#E45756", "group_empty": "#9D755D",
                      "no_membership": "#BAB0AC"}

OFFSET_SERIES_SQL = """
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
        ORDER BY group_id, topic, partition, t"""


def not_available(table: str, what: str) -> str:
    return html_note(f"{what}: not available in this lake (it has no <code>{table}</code> table; "
                     "lakes written by offsetlake versions before it existed do not).")


def by_group(table: pa.Table | None) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if table is not None:
        for r in table.to_pylist():
            out[r["group_id"]].append(r)
    return out


def _owner_label(r: dict[str, Any]) -> str:
    if r.get("attribution") == "owner":
        who = r.get("client_id") or short_member(r.get("member_id"))
        if r.get("group_instance_id"):
            who += f" [{r['group_instance_id']}]"
        return who
    return f"({r.get('attribution') or 'unknown'})"


def attributed_commits(group_id: str, slug: str, rows: list[dict[str, Any]],
                       table_exists: bool) -> str:
    if not table_exists:
        return not_available("commit_attribution", "Commits attributed to members")
    if not rows:
        return html_note("No attributed commits for this group.")
    for r in rows:  # the record's time; the broker's commit time where a row has none
        r["record_timestamp"] = r["record_timestamp"] or r.get("commit_timestamp")
    times = [r["record_timestamp"] for r in rows if r["record_timestamp"] is not None]
    if not times:
        return html_note(f"{len(rows):,} attributed commits, none with a timestamp to plot.")
    first, last = min(times), max(times)
    span_ms = max(1, int((last - first).total_seconds() * 1000))
    bucket_ms = max(1, -(-span_ms // COMMIT_BUCKETS))
    counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    per_label: dict[str, dict[str, Any]] = {}
    for r in rows:
        label = _owner_label(r)
        ts = r["record_timestamp"] or first
        counts[label][int((ts - first).total_seconds() * 1000) // bucket_ms] += 1
        info = per_label.setdefault(label, {"n": 0, "first": ts, "last": ts, "attribution":
                                            r.get("attribution"), "host": r.get("client_host"),
                                            "members": set()})
        info["n"] += 1
        info["first"], info["last"] = min(info["first"], ts), max(info["last"], ts)
        if r.get("member_id"):
            info["members"].add(r["member_id"])
    fig = go.Figure()
    labels = sorted(per_label, key=lambda k: (k.startswith("("), -per_label[k]["n"], k))
    for i, label in enumerate(labels):
        xs = sorted(counts[label])
        colour = _NOT_OWNER_COLOURS.get(per_label[label]["attribution"], PALETTE[i % len(PALETTE)])
        fig.add_trace(go.Bar(
            x=[datetime.fromtimestamp(first.timestamp() + b * bucket_ms / 1000, tz=timezone.utc)
               for b in xs],
            y=[counts[label][b] for b in xs], name=label, marker={"color": colour},
            hovertemplate=f"{esc(label)}<br>%{{x}}<br>%{{y:,}} commit(s)<extra></extra>"))
    fig.update_layout(barmode="stack", height=340, bargap=0.05,
                      title={"text": f"Commits of {group_id} by owner ({fmt_ms(bucket_ms)} buckets)",
                             "x": 0.5},
                      yaxis={"title": "commit records"}, legend={"title": {"text": "committed by"}})
    table = html_table(["committed by", "attribution", "host", "member ids", "commits", "first",
                        "last"],
                       [(label, per_label[label]["attribution"] or "—", per_label[label]["host"] or "—",
                         ", ".join(short_member(m) for m in sorted(per_label[label]["members"])) or "—",
                         per_label[label]["n"], fmt_ts(per_label[label]["first"]),
                         fmt_ts(per_label[label]["last"])) for label in labels], classes="compact")
    return figure_div(fig.to_dict(), f"plot-group-{slug}-commits") + table
