"""``offsetlake``: the command line. Every command has ``--help``; flags default from env vars.

Errors a user can fix (bad arguments, missing paths, unreachable clusters) print one
line and exit 2; ``--log-level DEBUG`` shows the details.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

log = logging.getLogger("offsetlake")


class UserError(Exception):
    """An error the user can fix; printed as one line."""


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"OFFSETLAKE_{name}", default)


def _kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value


# ----------------------------------------------------------------------------- decode


def _record_json(rec, decoded) -> dict:
    from pipelines.decode.jsonify import jsonable

    b = rec.batch
    key = None
    if decoded.record_type is not None:
        key = {"type": decoded.record_type, "name": decoded.type_name, "fields": decoded.key}
    out = {
        "partition": b.offsets_partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "timestamp_type": {0: "CreateTime", 1: "LogAppendTime"}.get(rec.timestamp_type, "NoTimestamp"),
        "key": key,
        "value": None if decoded.value is None else {"version": decoded.value_version,
                                                     "fields": decoded.value},
        "batch": {
            "base_offset": b.base_offset, "producer_id": b.producer_id,
            "producer_epoch": b.producer_epoch, "transactional": b.is_transactional,
            "control": b.is_control, "control_type": rec.control_type,
            "compression": b.compression, "magic": b.magic, "crc_valid": b.crc_valid,
            "position": b.position,
        },
        "decode_status": decoded.decode_status,
        "decode_error": decoded.decode_error,
        "file": b.source,
    }
    if decoded.decode_status not in ("ok", "tombstone", "control"):
        out["key_hex"] = rec.key.hex() if rec.key is not None else None
        out["value_hex"] = rec.value.hex() if rec.value is not None else None
    return jsonable(out)


def cmd_decode(args: argparse.Namespace) -> int:
    from pipelines.decode import decode_record, partition_for
    from pipelines.sources.segments import Problem, iter_batches

    for p in args.paths:
        if not Path(p).exists():
            raise UserError(f"no such file or directory: {p}")
    problems: list[Problem] = []
    stats: Counter = Counter()
    wrong_partition = 0
    out = sys.stdout
    for _batch, records in iter_batches(*args.paths, problems=problems):
        for rec in records:
            decoded = decode_record(rec.key, rec.value, rec.batch.is_control)
            if args.stats:
                stats[("type", decoded.type_name or f"unknown({decoded.record_type})")] += 1
                stats[("status", decoded.decode_status)] += 1
                if decoded.value_version is not None:
                    stats[("version", f"{decoded.type_name} v{decoded.value_version}")] += 1
                stats[("compression", rec.batch.compression)] += 1
                stats[("magic", str(rec.batch.magic))] += 1
                if not rec.batch.crc_valid:
                    stats[("crc", "invalid")] += 1
                group = decoded.group_id
                part = rec.batch.offsets_partition
                if args.num_partitions and group is not None and part >= 0 \
                        and partition_for(group, args.num_partitions) != part:
                    wrong_partition += 1
            else:
                out.write(json.dumps(_record_json(rec, decoded), ensure_ascii=False))
                out.write("\n")
    for problem in problems:
        log.warning("unreadable region in %s at byte %d (%d bytes skipped): %s",
                    problem.path, problem.position, problem.length_skipped, problem.reason)
    if args.stats:
        report: dict = {}
        for (kind, name), n in sorted(stats.items()):
            report.setdefault(kind, {})[name] = n
        report["problems"] = len(problems)
        if args.num_partitions:
            report["partition_for_mismatches"] = wrong_partition
        print(json.dumps(report, indent=2))
    return 0


# ----------------------------------------------------------------------------- ingest


def _ingest_config(args: argparse.Namespace):
    from pipelines.ingest import IngestConfig

    if args.source == "segments" and not args.path:
        raise UserError("--source segments needs --path DIR (a __consumer_offsets data directory)")
    if args.source == "segments" and not Path(args.path).exists():
        raise UserError(f"no such directory: {args.path}")
    if args.source in ("kafka", "spark-kafka") and not args.bootstrap_servers:
        raise UserError(f"--source {args.source} needs --bootstrap-servers HOST:PORT")
    return IngestConfig(
        source=args.source, lake=Path(args.lake), path=args.path,
        bootstrap_servers=args.bootstrap_servers, cluster_id=args.cluster_id,
        delta_engine=args.delta_engine, trigger=args.trigger,
        max_records_per_batch=args.max_records_per_batch,
        kafka_options=dict(args.kafka_option or ()),
    )


def _check_engine(spark, engine: str) -> None:
    from pipelines.spark import has_delta_jars

    if engine in ("spark", "delta-spark") and not has_delta_jars(spark):
        raise UserError("--delta-engine spark needs delta-spark's jars on Spark's classpath "
                        "(e.g. spark-submit --packages io.delta:delta-spark_2.13:4.0.0); "
                        "use --delta-engine delta-rs otherwise")


def cmd_ingest(args: argparse.Namespace) -> int:
    from pipelines.ingest import run_ingest
    from pipelines.spark import spark_session

    cfg = _ingest_config(args)
    spark = spark_session("offsetlake-ingest", delta_spark=cfg.delta_engine != "delta-rs")
    _check_engine(spark, cfg.delta_engine)
    report = run_ingest(spark, cfg)
    print(json.dumps({
        "batches": report.batches, "records": report.records,
        "records_per_second": round(report.records_per_second),
        "seconds": round(report.seconds, 2), "decode_status": dict(report.statuses),
        "rows_written": dict(report.rows), "skipped_replayed_batches": report.skipped_batches,
    }, indent=2))
    return 0


# ----------------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    from pipelines.demo import generate_cluster
    from pipelines.ingest import IngestConfig, run_ingest
    from pipelines.lake.summary import print_summary
    from pipelines.spark import spark_session

    data = Path(args.data)
    lake = Path(args.lake)
    manifest_path = data / "demo-manifest.json"
    if not (data / "__consumer_offsets-0").exists() or args.regenerate:
        manifest = generate_cluster(data, num_partitions=args.partitions, scale=args.scale, seed=args.seed)
        if not manifest_path.exists():
            manifest.write_manifest(manifest_path)
        log.info("generated %s records of cluster history under %s", manifest.counts["records"], data)
    spark = spark_session("offsetlake-demo")
    report = run_ingest(spark, IngestConfig(source="segments", lake=lake, path=str(data),
                                            cluster_id="demo"))
    log.info("ingested %d records in %d batches (%.0f records/s)", report.records, report.batches,
             report.records_per_second)
    print_summary(lake, groups=args.show_groups)
    if manifest_path.exists():
        return _check_demo(lake, json.loads(manifest_path.read_text()))
    return 0


def _check_demo(lake: Path, manifest: dict) -> int:
    """Compare the lake's committed offsets with the generator's independent expectation."""
    from pipelines.lake.engines import DeltaRsEngine

    expected = {(c["group"], c["topic"], c["partition"]): (c["offset"], c["leader_epoch"], c["metadata"])
                for c in manifest["committed_offsets"]}
    rows = DeltaRsEngine(lake).read("committed_offsets").to_pylist()
    actual = {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["leader_epoch"], r["metadata"])
              for r in rows}
    wrong = sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
    print(f"\ncommitted_offsets vs the generator's expected coordinator state: "
          f"{len(expected) - len([k for k in wrong if k in expected])} of {len(expected)} equal, "
          f"{len(actual.keys() - expected.keys())} unexpected")
    for key in wrong[:10]:
        print(f"  differs: {key}: lake={actual.get(key)} expected={expected.get(key)}")
    return 1 if wrong else 0


# ----------------------------------------------------------------------------- reconcile


def _store_recorded(lake: Path, live_dir: Path, cluster_id: str, require_stable: bool) -> dict:
    """Store a recorded capture folder (golden ``live/``, the demo's ``live/``) as a snapshot:
    offline audits and the demo reconcile against recorded answers exactly like live ones."""
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.reconcile.cluster import snapshot_from_recorded
    from pipelines.reconcile.snapshot import snapshot_summary, store_snapshot

    fetch = "offset_fetch_require_stable.json" if require_stable else "offset_fetch.json"
    missing = [name for name in ("list_groups.json", fetch) if not (live_dir / name).is_file()]
    if not live_dir.is_dir() or missing:
        raise UserError(f"{live_dir} is not a recorded capture (needs {', '.join(missing) or 'a directory'})")
    snapshot = snapshot_from_recorded(live_dir, require_stable=require_stable)
    engine = DeltaRsEngine(lake)
    try:
        written = store_snapshot(engine, snapshot, cluster_id)
    except ValueError as exc:  # the same capture already stored with the other require_stable
        raise UserError(str(exc)) from exc
    for problem in snapshot.errors:
        log.warning("recorded capture %s: %s", live_dir, problem)
    return snapshot_summary(snapshot, engine, cluster_id, written)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from pipelines.reconcile.snapshot import take_snapshot

    if args.recorded:
        summary = _store_recorded(Path(args.lake), Path(args.recorded), args.cluster_id,
                                  args.require_stable)
        print(json.dumps(summary, indent=2, default=str))
        return 0
    if not args.bootstrap_servers:
        raise UserError("snapshot needs --bootstrap-servers HOST:PORT (or OFFSETLAKE_BOOTSTRAP_SERVERS) "
                        "or --recorded DIR")
    summary = take_snapshot(Path(args.lake), args.bootstrap_servers, cluster_id=args.cluster_id,
                            require_stable=args.require_stable,
                            kafka_config=dict(args.kafka_option or ()))
    print(json.dumps(summary, indent=2, default=str))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    from pipelines.reconcile.reconcile import run_reconcile

    result = run_reconcile(Path(args.lake), cluster_id=args.cluster_id, gate=not args.no_gate,
                           num_partitions=args.num_partitions)
    print(json.dumps(result.summary, indent=2, default=str))
    return 0 if result.passed or args.no_gate else 1


def cmd_maintain(args: argparse.Namespace) -> int:
    from pipelines.lake.maintain import maintain

    print(json.dumps(maintain(Path(args.lake), retention_hours=args.retention_hours,
                              dry_run=args.dry_run), indent=2, default=str))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines.report.html import write_report

    path = write_report(Path(args.lake), Path(args.out), group=args.group)
    print(path)
    return 0


# ----------------------------------------------------------------------------- parser


def package_version() -> str:
    """The installed distribution's version (the wheel's metadata, also inside a --py-files zip)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("offsetlake")
    except PackageNotFoundError:
        return "unknown (not installed as a distribution)"


def check_schemas() -> None:
    """Load the record formats and table contracts before any work, or stop with one line.

    Without them every record would decode as ``unknown_type`` and the command exit 0.
    """
    from pipelines.decode.formats import MissingSchemas, record_formats
    from pipelines.lake.contracts import contracts

    try:
        record_formats()
        contracts()
    except MissingSchemas as exc:
        raise UserError(f"broken installation: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offsetlake",
        description="Kafka's __consumer_offsets as Delta Lake tables: decoded history, the group "
                    "coordinator's current state, and reconciliation with the live cluster.")
    parser.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"),
                        help="logging level (env OFFSETLAKE_LOG_LEVEL; default INFO)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("decode", help="print every record of segment files as JSON lines",
                       description="Decode __consumer_offsets segment files (.log) like "
                                   "kafka-dump-log --offsets-decoder, as one JSON object per record.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="segment files or directories")
    p.add_argument("--stats", action="store_true",
                   help="print a histogram of record types, versions and statuses instead")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="with --stats: check partition_for(group, N) against each record's partition")
    p.set_defaults(func=cmd_decode)

    lake_help = "lake root directory (env OFFSETLAKE_LAKE; default ./lake)"
    p = sub.add_parser("ingest", help="stream __consumer_offsets into the Delta lake",
                       description="Run the Structured Streaming ingest: history tables appended, "
                                   "current-state tables merged, exactly once.")
    p.add_argument("--source", choices=["segments", "kafka", "spark-kafka"],
                   default=_env("SOURCE", "kafka"), help="where to read (env OFFSETLAKE_SOURCE)")
    p.add_argument("--path", default=_env("SEGMENTS_PATH"),
                   help="segments: a broker data dir or any tree of __consumer_offsets-N dirs")
    p.add_argument("--bootstrap-servers", default=_env("BOOTSTRAP_SERVERS"),
                   help="kafka/spark-kafka: HOST:PORT[,HOST:PORT] (env OFFSETLAKE_BOOTSTRAP_SERVERS)")
    p.add_argument("--lake", default=_env("LAKE", "lake"), help=lake_help)
    p.add_argument("--cluster-id", default=_env("CLUSTER_ID", "default"),
                   help="name stamped on every row (segments: 'auto' reads meta.properties)")
    p.add_argument("--delta-engine", choices=["delta-rs", "spark"], default=_env("DELTA_ENGINE", "delta-rs"),
                   help="delta-rs (no JVM jars needed) or spark (delta-spark jars on the classpath)")
    p.add_argument("--trigger", default=_env("TRIGGER", "available-now"),
                   help="'available-now' (default: process what exists, then stop) or an interval "
                        "such as '30 seconds' to run continuously")
    p.add_argument("--max-records-per-batch", type=int, default=int(_env("MAX_RECORDS_PER_BATCH", "500000")),
                   help="bound on records per micro-batch (default 500000)")
    p.add_argument("--kafka-option", action="append", type=_kv, metavar="KEY=VALUE",
                   help="extra consumer setting, e.g. security.protocol=SASL_SSL (repeatable)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("demo", help="generate a realistic cluster history and ingest it locally",
                       description="Generate a cluster history (rebalances, static members, "
                                   "transactions, deletions, KIP-848 groups) as segment files, "
                                   "ingest it on local Spark into the lake and print what it built.")
    p.add_argument("--lake", default=_env("LAKE", "lake"), help=lake_help)
    p.add_argument("--data", default="demo-data", help="where the generated segments go (default ./demo-data)")
    p.add_argument("--partitions", type=int, default=10, help="__consumer_offsets partitions (default 10)")
    p.add_argument("--scale", type=int, default=1, help="multiply the number of commits (default 1)")
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    p.add_argument("--regenerate", action="store_true", help="regenerate even if data exists")
    p.add_argument("--show-groups", type=int, default=3, help="groups whose offsets are printed")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("snapshot", help="capture the live cluster's answers into the lake",
                       description="ListGroups, DescribeGroups, ConsumerGroupDescribe, OffsetFetch "
                                   "and log-end offsets, stamped with the __consumer_offsets high "
                                   "watermarks read first; or, with --recorded, the same answers "
                                   "from a recorded capture folder (offline audits, the demo).")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--bootstrap-servers", default=_env("BOOTSTRAP_SERVERS"),
                        help="HOST:PORT[,...] (env OFFSETLAKE_BOOTSTRAP_SERVERS)")
    source.add_argument("--recorded", metavar="DIR", default=None,
                        help="store a recorded capture instead of asking a cluster: a live/ folder "
                             "(list_groups.json, describe_groups.json, offset_fetch.json, ...; "
                             "../capture_log.json gives the snapshot point), e.g. demo-data/live")
    p.add_argument("--lake", default=_env("LAKE", "lake"), help=lake_help)
    p.add_argument("--cluster-id", default=_env("CLUSTER_ID", "default"), help="cluster name")
    p.add_argument("--require-stable", action="store_true",
                   help="OffsetFetch v7+ RequireStable: report partitions with open transactions")
    p.add_argument("--kafka-option", action="append", type=_kv, metavar="KEY=VALUE",
                   help="client setting, e.g. security_protocol=SSL (repeatable)")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("reconcile", help="compare the lake with the latest snapshot; run the quality gate",
                       description="Classify every (group, topic, partition) of the lake and the "
                                   "latest snapshot, run the Great Expectations suite, exit 1 if "
                                   "the gate fails.")
    p.add_argument("--lake", default=_env("LAKE", "lake"), help=lake_help)
    p.add_argument("--cluster-id", default=_env("CLUSTER_ID", "default"), help="cluster name")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="__consumer_offsets partition count (default: from the snapshot, else 50)")
    p.add_argument("--no-gate", action="store_true", help="report only; never exit non-zero")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("maintain", help="compact small files and vacuum safely",
                       description="Compact small files (OPTIMIZE) and vacuum old files with a "
                                   "retention that keeps time travel for audits.")
    p.add_argument("--lake", default=_env("LAKE", "lake"), help=lake_help)
    p.add_argument("--retention-hours", type=int, default=int(_env("RETENTION_HOURS", str(24 * 30))),
                   help="keep removed files this long for time travel (default 720, never < 168)")
    p.add_argument("--dry-run", action="store_true", help="show what vacuum would delete")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("report", help="write a self-contained HTML report with plots",
                       description="Offsets and lag over time, commit rate, generations and "
                                   "rebalances, the latest reconciliation.")
    p.add_argument("--lake", default=_env("LAKE", "lake"), help=lake_help)
    p.add_argument("--group", default=None, help="only this group")
    p.add_argument("--out", default="offsetlake-report.html", help="output file")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if level <= logging.DEBUG:
        os.environ.setdefault("OFFSETLAKE_SPARK_LOG_LEVEL", "WARN")
    try:
        check_schemas()
        return args.func(args)
    except UserError as exc:
        print(f"offsetlake {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"offsetlake {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        reason = _user_facing(exc)
        if reason:
            print(f"offsetlake {args.command}: error: {reason}", file=sys.stderr)
            return 2
        log.debug("failure", exc_info=True)
        print(f"offsetlake {args.command}: failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
              " (rerun with --log-level DEBUG for details)", file=sys.stderr)
        return 1


def _user_facing(exc: BaseException) -> str | None:
    """One line for failures the user can act on (unreachable cluster, no snapshot yet).

    Spark wraps errors raised in a source into a JVM exception pages long; the Kafka
    source knows how to find its own one-line cause inside.
    """
    from pipelines.sources.kafka_source import explain_failure

    explained = explain_failure(exc)
    if explained:
        return explained
    for e in (exc, exc.__cause__, exc.__context__):
        if e is not None and type(e).__name__ in ("ClusterUnreachable", "NoBrokersAvailable",
                                                  "NoSnapshotError"):
            return f"{type(e).__name__}: {e}"
    return None


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The console and spark-submit entry point: :func:`main`, then a clean, sure exit.

    Arrow's and delta-rs' native thread pools can abort the interpreter's own teardown
    after all work is done and committed (SIGABRT, "terminate called without an active
    exception": apache/arrow#34314, delta-io/delta-rs#2184; seen here about one run in
    ten). So Spark is stopped, output flushed, and the process leaves with the command's
    real status without that teardown.
    """
    code = main(argv)
    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
