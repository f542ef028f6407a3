"""``offsetlake snapshot`` and ``reconcile``: capture the cluster's answers (live or
recorded) into the lake, then compare the lake with them through the quality gate."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from pipelines import redaction
from pipelines.cli.common import (
    UserError,
    add_kafka_args,
    add_lake_args,
    env,
    flag_env,
    gather_kafka_options,
    lake_engine,
    lake_from,
    without_pandas_on_delta_rs,
)

log = logging.getLogger("offsetlake")


def store_recorded(lake: Path, live_dir: Path, cluster_id: str, require_stable: bool,
                   engine=None) -> dict:
    """Store a recorded capture folder (golden ``live/``, the demo's ``live/``) as a snapshot:
    offline audits and the demo reconcile against recorded answers exactly like live ones."""
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
    from pipelines.reconcile.snapshot import snapshot_summary, store_snapshot

    fetch = "offset_fetch_require_stable.json" if require_stable else "offset_fetch.json"
    missing = [name for name in ("list_groups.json", fetch) if not (live_dir / name).is_file()]
    if not live_dir.is_dir() or missing:
        raise UserError(f"{live_dir} is not a recorded capture (needs {', '.join(missing) or 'a directory'})")
    snapshot = snapshot_from_recorded(live_dir, require_stable=require_stable)
    engine = engine or DeltaRsEngine(lake)
    try:
        written = store_snapshot(engine, snapshot, cluster_id)
    except ValueError as exc:  # the same capture already stored with the other require_stable
        raise UserError(str(exc)) from exc
    for problem in snapshot.errors:
        log.warning("recorded capture %s: %s", live_dir, problem)
    return snapshot_summary(snapshot, engine, cluster_id, written)


def cmd_snapshot(args: argparse.Namespace) -> int:
    without_pandas_on_delta_rs(args)
    from pipelines.reconcile.snapshot import take_snapshot

    if args.recorded:
        summary = store_recorded(lake_from(args), Path(args.recorded), args.cluster_id,
                                 args.require_stable, lake_engine(args, "offsetlake-snapshot"))
        print(json.dumps(summary, indent=2, default=str))
        return 0
    if not args.bootstrap_servers:
        raise UserError("snapshot needs --bootstrap-servers HOST:PORT (or OFFSETLAKE_BOOTSTRAP_SERVERS) "
                        "or --recorded DIR")
    summary = take_snapshot(lake_from(args), args.bootstrap_servers, cluster_id=args.cluster_id,
                            require_stable=args.require_stable,
                            kafka_config=gather_kafka_options(args),
                            engine=lake_engine(args, "offsetlake-snapshot"))
    print(redaction.redact(json.dumps(summary, indent=2, default=str)))
    if summary.get("partial"):
        refused = ", ".join(summary.get("not_authorized") or [])
        message = "; ".join(([f"not authorized: {refused}"] if refused else [])
                            + list(summary.get("errors") or []))
        if args.strict:
            print(f"offsetlake snapshot: strict: partial snapshot: {redaction.redact(message)}",
                  file=sys.stderr)
            return 3
        log.warning("partial snapshot: %s (reconcile refuses it unless --allow-partial)", message)
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from pipelines.reconcile.quality import import_gx_without_unused_integrations
    from pipelines.reconcile.reconcile import run_reconcile

    if args.standalone and not args.no_gate:  # run(): the process ends with this command
        import_gx_without_unused_integrations()
    result = run_reconcile(lake_from(args), cluster_id=args.cluster_id, gate=not args.no_gate,
                           num_partitions=args.num_partitions,
                           allow_partial=args.allow_partial, snapshot_id=args.snapshot_id,
                           engine=lake_engine(args, "offsetlake-reconcile"),
                           fail_on_anomalies=tuple(k.strip() for k in (args.fail_on_anomalies or "").split(",")
                                                   if k.strip()))
    print(json.dumps(result.summary, indent=2, default=str))
    return 0 if result.passed or args.no_gate else 1



def add_snapshot_parsers(sub: argparse._SubParsersAction) -> None:
    """The ``snapshot`` and ``reconcile`` commands' arguments."""
    p = sub.add_parser("snapshot", help="capture the live cluster's answers into the lake",
                       description="ListGroups, DescribeGroups, ConsumerGroupDescribe, OffsetFetch "
                                   "and log-end offsets, stamped with the __consumer_offsets high "
                                   "watermarks read first; or, with --recorded, the same answers "
                                   "from a recorded capture folder (offline audits, the demo).")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--bootstrap-servers", default=env("BOOTSTRAP_SERVERS"),
                        help="HOST:PORT[,...] (env OFFSETLAKE_BOOTSTRAP_SERVERS)")
    source.add_argument("--recorded", metavar="DIR", default=None,
                        help="store a recorded capture instead of asking a cluster: a live/ folder "
                             "(list_groups.json, describe_groups.json, offset_fetch.json, ...; "
                             "../capture_log.json gives the snapshot point), e.g. demo-data/live")
    add_lake_args(p)
    p.add_argument("--cluster-id", default=env("CLUSTER_ID", "default"), help="cluster name")
    p.add_argument("--require-stable", action="store_true",
                   help="OffsetFetch v7+ RequireStable: report partitions with open transactions")
    add_kafka_args(p)
    p.add_argument("--strict", action="store_true", default=flag_env("STRICT"),
                   help="exit 3 when the snapshot is partial (groups or topics refused by ACLs, "
                        "the offsets topic not visible, errors); env OFFSETLAKE_STRICT=true")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("reconcile", help="compare the lake with the latest snapshot; run the quality gate",
                       description="Classify every (group, topic, partition) of the lake and the "
                                   "latest snapshot, run the Great Expectations suite, exit 1 if "
                                   "the gate fails.")
    add_lake_args(p)
    p.add_argument("--cluster-id", default=env("CLUSTER_ID", "default"), help="cluster name")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="__consumer_offsets partition count (default: from the snapshot; never "
                        "guessed: without either the reconcile fails)")
    p.add_argument("--allow-partial", action="store_true",
                   default=env("ALLOW_PARTIAL", "") == "true",
                   help="accept a partial snapshot (groups/topics refused by ACLs, capture "
                        "errors): its not_authorized rows count as explained (env "
                        "OFFSETLAKE_ALLOW_PARTIAL=true); without it such a snapshot fails")
    p.add_argument("--snapshot-id", default=env("SNAPSHOT_ID", None),
                   help="reconcile against this stored snapshot instead of the latest captured "
                        "one (env OFFSETLAKE_SNAPSHOT_ID)")
    p.add_argument("--no-gate", action="store_true", help="report only; never exit non-zero")
    p.add_argument("--fail-on-anomalies", metavar="KIND,...", default=env("FAIL_ON_ANOMALIES", None),
                   help="offset_anomalies kinds that fail the gate (default: none, counts are "
                        "warnings): offset_rewind, leader_epoch_regression, "
                        "commit_after_group_deleted, zombie_commit, unassigned_partition, "
                        "past_log_end, below_log_start, or all (env OFFSETLAKE_FAIL_ON_ANOMALIES)")
    p.set_defaults(func=cmd_reconcile)
