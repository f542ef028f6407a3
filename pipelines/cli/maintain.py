"""``offsetlake maintain``: compaction, safe vacuum and the audit rebuild of the lake."""

from __future__ import annotations

import argparse
import json

from pipelines.cli.common import (
    UserError,
    add_lake_args,
    env,
    lake_from,
    spark_for_engine,
    without_pandas_on_delta_rs,
)


def cmd_maintain(args: argparse.Namespace) -> int:
    without_pandas_on_delta_rs(args)
    from pipelines.lake.maintain import maintain

    spark = spark_for_engine(args, "offsetlake-maintain")
    if getattr(args, "rebuild_audit", False) and args.dry_run:
        raise UserError("--rebuild-audit rewrites the audit tables: it cannot be a --dry-run")
    if getattr(args, "rebuild_audit", False):  # before compaction, which then tidies its files
        from pipelines.lake.engines import make_engine
        from pipelines.state.audit import rebuild

        rebuilt = {"audit_rebuilt": {"offset_commits": rebuild(make_engine(args.delta_engine, lake_from(args),
                                                                           spark=spark))}}
    else:
        rebuilt = {}
    if spark is not None:  # Delta's own OPTIMIZE and VACUUM, on the cluster
        from pipelines.lake.maintain_spark import maintain_with_spark

        print(json.dumps({**maintain_with_spark(spark, lake_from(args), retention_hours=args.retention_hours,
                                                dry_run=args.dry_run), **rebuilt}, indent=2, default=str))
        return 0
    print(json.dumps({**maintain(lake_from(args), retention_hours=args.retention_hours,
                                 dry_run=args.dry_run), **rebuilt}, indent=2, default=str))
    return 0



def add_maintain_parser(sub: argparse._SubParsersAction) -> None:
    """The ``maintain`` command's arguments."""
    p = sub.add_parser("maintain", help="compact small files and vacuum safely",
                       description="Compact small files (OPTIMIZE) and vacuum old files with a "
                                   "retention that keeps time travel for audits.")
    add_lake_args(p)
    p.add_argument("--retention-hours", type=int, default=int(env("RETENTION_HOURS", str(24 * 30))),
                   help="keep removed files this long for time travel (default 720, never < 168)")
    p.add_argument("--dry-run", action="store_true", help="show what vacuum would delete")
    p.add_argument("--rebuild-audit", action="store_true",
                   help="rebuild commit_attribution, offset_anomalies and offset_audit_cursor from "
                        "the whole history (ingest backfills a lake older than the audit by itself)")
    p.set_defaults(func=cmd_maintain)
