"""``offsetlake ingest``: the streaming ingest from its flags, and its exit status."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from pipelines.cli.common import (
    UserError,
    add_kafka_args,
    add_lake_args,
    check_engine,
    checkpoint_or_fail,
    env,
    flag_env,
    gather_kafka_options,
    lake_from,
    plain_ctrl_c,
    source_options,
)
from pipelines.sources.batching import DEFAULT_MAX_RECORDS_PER_BATCH

log = logging.getLogger("offsetlake")


def _ingest_config(args: argparse.Namespace):
    from pipelines.ingest import IngestConfig

    if args.source == "segments" and not args.path:
        raise UserError("--source segments needs --path DIR (a __consumer_offsets data directory)")
    if args.source == "segments" and not Path(args.path).exists():
        raise UserError(f"no such directory: {args.path}")
    if args.source in ("kafka", "spark-kafka") and not args.bootstrap_servers:
        raise UserError(f"--source {args.source} needs --bootstrap-servers HOST:PORT")
    cfg = IngestConfig(
        source=args.source, lake=lake_from(args), path=args.path,
        bootstrap_servers=args.bootstrap_servers, cluster_id=args.cluster_id,
        delta_engine=args.delta_engine, trigger=args.trigger,
        max_records_per_batch=args.max_records_per_batch,
        kafka_options=_ingest_kafka_options(args), checkpoint=args.checkpoint,
        allow_data_loss=args.allow_data_loss, progress=True,
    )
    checkpoint_or_fail(cfg)
    return cfg


def _ingest_kafka_options(args: argparse.Namespace) -> dict[str, str]:
    raw = gather_kafka_options(args)
    return source_options(raw) if args.source == "kafka" else raw


def cmd_ingest(args: argparse.Namespace) -> int:
    from pipelines.ingest import report_if_caught_up

    cfg = _ingest_config(args)
    if cfg.source == "kafka":
        # credentials, TLS, ACLs (DESCRIBE + READ) and reachability checked before Spark
        # starts: a refusal is one named line (exit 2), not a traceback from the query
        from pipelines.sources.kafka.wire import check_access

        check_access({"bootstrap_servers": cfg.bootstrap_servers,
                      **{f"kafka.{k}": v for k, v in cfg.kafka_options.items()}})
    report = report_if_caught_up(cfg)  # nothing new since the last run: Spark not started
    if report is None:
        report = _run_query(cfg, args.standalone)
    print(json.dumps(report.summary(), indent=2, default=str))
    return _verdict(report, args.strict)


def _run_query(cfg, standalone: bool):
    """The streaming query on a Spark session (the CLI's own local one, unless configured)."""
    from pipelines.ingest import index_ahead, run_ingest
    from pipelines.spark import spark_session

    indexing = index_ahead(cfg)  # while the JVM starts
    spark = spark_session("offsetlake-ingest", delta_spark=cfg.delta_engine != "delta-rs",
                          own_workers=standalone)
    if standalone:
        plain_ctrl_c()
    check_engine(spark, cfg.delta_engine)
    # not joined first: the query starts while the last files are indexed, and its source
    # waits for a file being indexed rather than indexing it again (SegmentIndexCache.rows)
    report = run_ingest(spark, cfg)
    if indexing is not None:
        indexing.join()  # long done: no temporary file left behind at exit
    return report


def _verdict(report, strict: bool) -> int:
    """Exit status of an ingest: 0, or 3 with --strict when the source had any problem, held
    nothing or mixed clusters (a group in two offsets partitions). Without --strict the same
    facts are a loud warning (and in the summary)."""
    faults = []
    if report.empty_source:
        faults.append(f"empty source: {report.empty_source}")
    if report.problems:
        faults.append(f"{len(report.problems)} unreadable region(s), "
                      f"{sum(p.length_skipped for p in report.problems)} bytes skipped "
                      "(listed in the summary and in the ingest_problems table)")
    bad = sum(n for k, n in report.statuses.items() if k not in ("ok", "tombstone", "control"))
    if bad:
        faults.append(f"{bad} record(s) not decoded (see decode_status)")
    if report.split_groups:
        from pipelines.state.split_groups import described

        faults.append(f"{described(report.split_groups)}: the logs of several clusters under one "
                      "--cluster-id? Their state and audit rows depend on where batches are cut; give "
                      "each cluster its own segment root and --cluster-id (or --cluster-id auto)")
    for fault in faults:
        if strict:
            print(f"offsetlake ingest: strict: {fault}", file=sys.stderr)
        else:
            log.warning("%s", fault)
    return 3 if strict and faults else 0



def add_ingest_parser(sub: argparse._SubParsersAction) -> None:
    """The ``ingest`` command's arguments."""
    p = sub.add_parser("ingest", help="stream __consumer_offsets into the Delta lake",
                       description="Run the Structured Streaming ingest: history tables appended, "
                                   "current-state tables merged, exactly once.")
    p.add_argument("--source", choices=["segments", "kafka", "spark-kafka"],
                   default=env("SOURCE", "kafka"), help="where to read (env OFFSETLAKE_SOURCE)")
    p.add_argument("--path", default=env("SEGMENTS_PATH"),
                   help="segments: a broker data dir or any tree of __consumer_offsets-N dirs")
    p.add_argument("--bootstrap-servers", default=env("BOOTSTRAP_SERVERS"),
                   help="kafka/spark-kafka: HOST:PORT[,HOST:PORT] (env OFFSETLAKE_BOOTSTRAP_SERVERS)")
    add_lake_args(p, checkpoint=True)
    p.add_argument("--cluster-id", default=env("CLUSTER_ID", "default"),
                   help="name stamped on every row (segments: 'auto' reads meta.properties)")
    p.add_argument("--trigger", default=env("TRIGGER", "available-now"),
                   help="'available-now' (default: process what exists, then stop) or an interval "
                        "such as '30 seconds' to run continuously")
    p.add_argument("--max-records-per-batch", type=int,
                   default=int(env("MAX_RECORDS_PER_BATCH", str(DEFAULT_MAX_RECORDS_PER_BATCH))),
                   help=f"most records per micro-batch (default {DEFAULT_MAX_RECORDS_PER_BATCH}; env "
                        "OFFSETLAKE_MAX_RECORDS_PER_BATCH); segment files: a backlog is cut into as "
                        "many batches as that needs, evenly sized")
    add_kafka_args(p)
    p.add_argument("--allow-data-loss", action="store_true",
                   default=flag_env("ALLOW_DATA_LOSS"),
                   help="kafka: when the log start moved past the checkpoint (retention, a "
                        "recreated topic), continue from the log start instead of failing")
    p.add_argument("--strict", action="store_true", default=flag_env("STRICT"),
                   help="exit 3 when the source had any problem (unreadable bytes, undecodable "
                        "records, a group id in two offsets partitions of one cluster id) or held "
                        "nothing (env OFFSETLAKE_STRICT=true); without it "
                        "these are warnings and listed in the summary")
    p.set_defaults(func=cmd_ingest)
