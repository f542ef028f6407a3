"""The report's building blocks: formatting (times, durations, member ids), HTML tables
and notes, plotly figures as divs, DuckDB rows as dicts, and the limits that keep the
file small. Every section module renders through these, so the pages look alike."""

from __future__ import annotations

import copy
import functools
import html
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

import plotly.io as pio

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

_NICE_BUCKETS_MS = [1_000 * s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800,
                                        3600, 7200, 21600, 43200, 86400, 604800)]
PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6",
           "#9D755D", "#BAB0AC", "#EECA3B", "#1F77B4", "#2CA02C", "#D62728", "#9467BD"]
_PLOT_CONFIG = {"displaylogo": False, "responsive": True,
                "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def fmt_ts(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_ms(ms: int) -> str:
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


def fmt_exact_ms(ms: int | None) -> str:
    """A time lag readable and exact: "3 min 57 s (237,041 ms)"; "—" when unknown."""
    if ms is None:
        return "—"
    return fmt_ms(ms) if ms < 1000 else f"{fmt_ms(ms)} ({ms:,} ms)"


def nice_bucket(span_ms: int, buckets: int) -> int:
    want = max(1, span_ms // max(1, buckets))
    return next((b for b in _NICE_BUCKETS_MS if b >= want), _NICE_BUCKETS_MS[-1])


def html_note(text: str) -> str:
    return f'<p class="note">{text}</p>'


def html_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], classes: str = "") -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for v in row:
            if isinstance(v, tuple):  # (text, css class)
                cells.append(f'<td class="{v[1]}">{esc(v[0])}</td>')
            else:
                cells.append(f'<td class="num">{v:,}</td>' if isinstance(v, int)
                             and not isinstance(v, bool) else f"<td>{esc(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table-wrap"><table class="{classes}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


#: the look of every figure
TEMPLATE = "plotly_white"
#: what every figure's layout gets last, over its own
_LOOK = {"font": {"family": "Inter, system-ui, sans-serif", "size": 12},
         "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "hoverlabel": {"namelength": -1}}


def figure_div(figure: dict[str, Any], div_id: str) -> str:
    """A figure given as plotly's JSON (``{"data": [trace dicts], "layout": {...}}``) as a
    div, in the report's look (:data:`TEMPLATE`, then :data:`_LOOK` over its layout).

    Why dicts, not plotly's graph objects: plotly checks every property of a graph object as
    it is set, and copies the whole figure again to write it; the offsets plot's hundreds of
    traces (three per partition of each of 20 groups) took most of a small report's CPU that
    way. ``tests/test_report.py`` has plotly check every figure of a report, property by
    property, so that each is what graph objects would make. Keys are written sorted: a
    figure's text depends on its content only."""
    layout = {k: v for k, v in figure["layout"].items() if k != "template"}
    layout = _sorted_keys(merge_layout(layout, _LOOK))
    layout["template"] = _template()  # the report's, whatever the figure was made with
    body = {"data": [_sorted_keys(trace) for trace in figure["data"]], "layout": layout}
    return pio.to_html(body, validate=False, full_html=False, include_plotlyjs=False,
                       div_id=div_id, config=_PLOT_CONFIG)


def merge_layout(layout: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` merged into ``layout`` as plotly's ``update_layout`` does: nested dicts
    property by property, anything else (lists included) replaced."""
    for name, value in update.items():
        if isinstance(value, dict) and isinstance(layout.get(name), dict):
            layout[name] = merge_layout(dict(layout[name]), value)
        else:
            layout[name] = value
    return layout


def subplot_axes(**options: Any) -> dict[str, Any]:
    """The layout plotly's ``make_subplots(**options)`` makes (the axes, their domains and
    anchors, the subplot titles), without a template: a fresh copy, made once per process.
    A trace of row r, column c refers to its axes as ``"x"``/``"y"`` for the first subplot,
    ``"x2"``/``"y2"`` for the second, in rows' order."""
    return copy.deepcopy(_subplot_layout(tuple(sorted(options.items()))))


@functools.lru_cache(maxsize=8)
def _subplot_layout(options: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    from plotly.subplots import make_subplots

    layout = make_subplots(**dict(options)).to_dict()["layout"]
    layout.pop("template", None)
    return layout


@functools.lru_cache(maxsize=1)
def _template() -> dict[str, Any]:
    """:data:`TEMPLATE` as plotly's JSON, its keys sorted (shared by every figure: only read)."""
    return _sorted_keys(pio.templates[TEMPLATE].to_plotly_json())


def _sorted_keys(value: Any) -> Any:
    """``value`` with every dict's keys in order; lists of plain values (the data) as they are."""
    if isinstance(value, dict):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
        return [_sorted_keys(v) for v in value]
    return value


def query_rows(con: Any, sql: str, **params: Any) -> list[dict[str, Any]]:
    rel = con.execute(sql, params) if params else con.execute(sql)
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


def short_member(member_id: str | None) -> str:
    """Member ids are long (client id + uuid); keep enough to tell them apart."""
    if not member_id:
        return ""
    return member_id if len(member_id) <= 30 else member_id[:22] + "…" + member_id[-6:]
