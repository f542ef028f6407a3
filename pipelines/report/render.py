"""The report's building blocks: formatting (times, durations, member ids), HTML tables
and notes, plotly figures as divs, DuckDB rows as dicts, and the limits that keep the
file small. Every section module renders through these, so the pages look alike."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import plotly.graph_objects as go
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


@contextlib.contextmanager
def report_template() -> Iterator[None]:
    """Plotly's default template is the report's while its figures are made: a figure takes
    the default, validated once, when it is created, where setting the template on each
    figure validated all of it again (~8 ms a figure, a fifth of a small report's CPU)."""
    saved = pio.templates.default
    pio.templates.default = TEMPLATE
    try:
        yield
    finally:
        pio.templates.default = saved


def figure_div(fig: go.Figure, div_id: str) -> str:
    own = {} if pio.templates.default == TEMPLATE else {"template": TEMPLATE}  # made outside
    fig.update_layout(font={"family": "Inter, system-ui, sans-serif", "size": 12},
                      margin={"l": 60, "r": 20, "t": 40, "b": 40},
                      hoverlabel={"namelength": -1}, **own)
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config=_PLOT_CONFIG)


def query_rows(con: Any, sql: str, **params: Any) -> list[dict[str, Any]]:
    rel = con.execute(sql, params) if params else con.execute(sql)
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


def short_member(member_id: str | None) -> str:
    """Member ids are long (client id + uuid); keep enough to tell them apart."""
    if not member_id:
        return ""
    return member_id if len(member_id) <= 30 else member_id[:22] + "…" + member_id[-6:]
