"""``offsetlake report`` and ``state``: read the lake for people: the HTML report, and
offsets and groups as of an instant."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from pipelines.cli.common import (
    UserError,
    add_lake_args,
    env,
    lake_from,
    on_spark,
    spark_for_engine,
)

log = logging.getLogger("offsetlake")


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines.report.html import write_report

    if on_spark(args):
        raise UserError("report renders locally with DuckDB over delta-rs reads and cannot use "
                        "--delta-engine spark; the lake reads the same with either engine: run "
                        "report with --delta-engine delta-rs")
    if args.since is not None:
        from pipelines.report.window import parse_since

        try:
            parse_since(args.since, None)  # the format only; a duration counts from the lake's end
        except (TypeError, ValueError, OverflowError):
            raise UserError(f"--since {args.since!r} is neither a timestamp (ISO 8601, UTC unless "
                            "it has an offset, or epoch milliseconds) nor a duration such as 90m, "
                            "24h, 7d") from None
    path = write_report(lake_from(args), Path(args.out), group=args.group, since=args.since)
    print(path)
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    """Committed offsets and group states as the coordinator held them at ``--as-of``."""
    from pipelines.queries import utc_instant
    from pipelines.state.as_of import state_lines, state_tables

    try:
        as_of = utc_instant(int(args.as_of) if args.as_of.strip().lstrip("-").isdigit() else args.as_of)
    except (TypeError, ValueError):
        raise UserError(f"--as-of {args.as_of!r} is not a timestamp: give ISO 8601 (UTC unless "
                        "it has an offset), e.g. 2026-11-22T12:53:07.5Z, or epoch milliseconds") from None
    spark = spark_for_engine(args, "offsetlake-state")
    if spark is not None:
        from pipelines.queries.state_as_of import state_as_of_spark

        state = state_as_of_spark(spark, lake_from(args), as_of, args.group, args.cluster_id)
    else:
        from pipelines.queries.state_as_of import state_as_of_duckdb

        state = state_as_of_duckdb(lake_from(args), as_of, args.group, args.cluster_id)
    if args.group is not None and not state.groups.num_rows and not state.offsets.num_rows:
        log.warning("group %r had no group and no committed offset at %s", args.group, as_of)
    lines = state_lines(state, args.what) if args.format == "jsonl" else state_tables(state, args.what)
    for line in lines:
        print(line)
    return 0



def add_report_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``report`` and ``state`` commands' arguments."""
    p = sub.add_parser("report", help="write a self-contained HTML report with plots",
                       description="Offsets and lag over time, commit rate, generations and "
                                   "rebalances, the latest reconciliation.")
    add_lake_args(p)
    p.add_argument("--group", default=None, help="only this group")
    p.add_argument("--out", default="offsetlake-report.html", help="output file")
    p.add_argument("--since", default=None, metavar="TIMESTAMP|DURATION",
                   help="plot only the history from then on, so a scheduled report costs what "
                        "the recent history costs: an instant (ISO 8601 or epoch ms) or a "
                        "duration before the newest record (90m, 24h, 7d); counts, lag and "
                        "reconciliation still cover the whole lake (default: all history)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("state", help="offsets and group states as of a wall-clock instant",
                       description="Committed offsets and groups (type, state, generation/epoch) "
                                   "as the group coordinator held them at --as-of, rebuilt from "
                                   "the history: tombstones applied, a transactional commit "
                                   "visible from its COMMIT marker's time, an aborted one never.")
    add_lake_args(p)
    p.add_argument("--as-of", required=True, metavar="TIMESTAMP",
                   help="the instant: ISO 8601 (UTC unless it has an offset) or epoch milliseconds")
    p.add_argument("--group", default=None, help="only this group")
    p.add_argument("--cluster-id", default=env("CLUSTER_ID", None),
                   help="only this cluster (env OFFSETLAKE_CLUSTER_ID; default: every cluster)")
    p.add_argument("--format", choices=("jsonl", "table"), default="jsonl",
                   help="JSON lines (one object per offset/group, with a 'kind') or text tables")
    p.add_argument("--what", choices=("all", "offsets", "groups"), default="all",
                   help="what to print (default both)")
    p.set_defaults(func=cmd_state)
