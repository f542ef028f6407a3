"""``offsetlake``: the command line. Every command has ``--help``; flags default from env vars.

Errors a user can fix (bad arguments, missing paths, unreachable clusters) print one
line and exit 2; ``--log-level DEBUG`` shows the details.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pipelines import redaction

log = logging.getLogger("offsetlake")


class UserError(Exception):
    """An error the user can fix; printed as one line."""


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"OFFSETLAKE_{name}", default)


def _flag_env(name: str) -> bool:
    """A boolean flag's env default: true/1/yes (any case; Airflow renders params as True)."""
    return (_env(name) or "").strip().lower() in ("true", "1", "yes")


def _kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value


def _lake(args: argparse.Namespace):
    """``--lake`` with its storage options: the store's env vars (AWS_*, AZURE_*, GOOGLE_*),
    OFFSETLAKE_STORAGE_OPTIONS (JSON), then ``--storage-option``. Errors name keys only."""
    from pipelines.lake.location import StorageOptionError, lake_location, parse_options

    try:
        return lake_location(args.lake, parse_options(getattr(args, "storage_option", None)))
    except StorageOptionError as exc:
        raise UserError(str(exc)) from None


def _lake_args(p: argparse.ArgumentParser, checkpoint: bool = False) -> None:
    """``--lake`` and ``--storage-option`` (and ``--checkpoint`` for streaming commands)."""
    p.add_argument("--lake", default=_env("LAKE", "lake"),
                   help="lake root: a directory or a URI (file://, s3://, abfss://, az://, gs://); "
                        "env OFFSETLAKE_LAKE; default ./lake")
    p.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="object-store setting for delta-rs/object_store, e.g. "
                        "AWS_ENDPOINT_URL=http://host:9000 (repeatable; also read: AWS_*, AZURE_*, "
                        "GOOGLE_* env vars and OFFSETLAKE_STORAGE_OPTIONS as a JSON object); "
                        "values are never logged")
    if checkpoint:
        p.add_argument("--checkpoint", default=_env("CHECKPOINT"),
                       help="directory for Spark's checkpoint, the app id marker and the segment "
                            "index cache (env OFFSETLAKE_CHECKPOINT; default <lake>/_checkpoints/"
                            "ingest; required for a lake at a URI)")
    _engine_arg(p)


ENGINE_HELP = ("Delta engine for every command that reads or writes the lake: delta-rs (no JVM jars "
               "needed; default) or spark (delta-spark's jars on Spark's classpath); env "
               "OFFSETLAKE_DELTA_ENGINE")


def _engine_arg(p: argparse.ArgumentParser) -> None:
    """``--delta-engine`` after the command too; unset there, the global setting holds."""
    p.add_argument("--delta-engine", choices=["delta-rs", "spark"], default=argparse.SUPPRESS,
                   help=ENGINE_HELP)


def _kafka_args(p: argparse.ArgumentParser) -> None:
    """``--kafka-option`` and ``--kafka-options-file`` (plus OFFSETLAKE_KAFKA_OPTION_* env)."""
    p.add_argument("--kafka-option", action="append", type=_kv, metavar="KEY=VALUE",
                   help="Kafka client setting, e.g. security.protocol=SASL_SSL (repeatable). "
                        "Never put secrets here (visible in ps): use --kafka-options-file or "
                        "OFFSETLAKE_KAFKA_OPTION_<KEY> env vars, e.g. "
                        "OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD")
    p.add_argument("--kafka-options-file", default=_env("KAFKA_OPTIONS_FILE"), metavar="FILE",
                   help="Java properties file of Kafka client settings, like Kafka's "
                        "--command-config (sasl.jaas.config, ssl.truststore.location (PEM), ...); "
                        "env OFFSETLAKE_KAFKA_OPTIONS_FILE")


def _kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """Raw Kafka options from the file, OFFSETLAKE_KAFKA_OPTION_* and --kafka-option."""
    from pipelines.kafka_options import KafkaOptionError, gather

    try:
        return gather(dict(args.kafka_option or ()), args.kafka_options_file)
    except KafkaOptionError as exc:
        raise UserError(str(exc)) from None


def _source_options(raw: dict[str, str]) -> dict[str, str]:
    """Raw options checked by the one normaliser and spelt as kafka-python settings, as the
    ``offsetlake-kafka`` source takes them (a JAAS line becomes username + password keys,
    which Spark's own redaction of option values also recognises)."""
    from kafka import KafkaConsumer

    from pipelines.kafka_options import KafkaOptionError, normalize

    try:
        typed = normalize(raw, KafkaConsumer.DEFAULT_CONFIG)
    except KafkaOptionError as exc:
        raise UserError(str(exc)) from None
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in typed.items()}


# ----------------------------------------------------------------------------- decode


def _record_json(rec, decoded) -> dict:
    from pipelines.decode.jsonify import jsonable
    from pipelines.decode.wire import ZERO_UUID

    b = rec.batch
    key = None
    if decoded.record_type is not None:
        key = {"type": decoded.record_type, "name": decoded.type_name, "fields": decoded.key}
    value = decoded.value
    if decoded.record_type == 1 and value and value.get("topic_id") == ZERO_UUID:
        # v4 without the topicId tag: no topic id, as offset_commits.topic_id (null) says
        value = {**value, "topic_id": None}
    out = {
        "partition": b.offsets_partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "timestamp_type": {0: "CreateTime", 1: "LogAppendTime"}.get(rec.timestamp_type, "NoTimestamp"),
        "key": key,
        "value": None if value is None else {"version": decoded.value_version, "fields": value},
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
    statuses: Counter = Counter()
    wrong_partition = 0
    out = sys.stdout
    try:
        for _batch, records in iter_batches(*args.paths, problems=problems):
            for rec in records:
                decoded = decode_record(rec.key, rec.value, rec.batch.is_control)
                statuses[decoded.decode_status] += 1
                if args.stats:
                    _count(stats, rec, decoded)
                    group = decoded.group_id
                    part = rec.batch.offsets_partition
                    if args.num_partitions and group is not None and part >= 0 \
                            and partition_for(group, args.num_partitions) != part:
                        wrong_partition += 1
                else:
                    out.write(json.dumps(_record_json(rec, decoded), ensure_ascii=False))
                    out.write("\n")
        out.flush()
    except BrokenPipeError:  # `decode | head`: the reader has all it wants; not a failure
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail
        return 0
    for problem in problems:  # one line each: the reader leaves them to us
        log.warning("unreadable region in %s, bytes %d-%d (%d bytes skipped): %s", problem.path,
                    problem.position, problem.position + problem.length_skipped,
                    problem.length_skipped, problem.reason)
    skipped = sum(p.length_skipped for p in problems)
    if args.stats:
        report: dict = {}
        for (kind, name), n in sorted(stats.items()):
            report.setdefault(kind, {})[name] = n
        report["problems"] = len(problems)
        report["bytes_skipped"] = skipped
        report["problem_list"] = [{"file": p.path, "byte_range": [p.position, p.position + p.length_skipped],
                                   "bytes_skipped": p.length_skipped, "reason": p.reason} for p in problems]
        if args.num_partitions:
            report["partition_for_mismatches"] = wrong_partition
        print(json.dumps(report, indent=2))
    else:
        print(f"offsetlake decode: {sum(statuses.values())} records "
              f"({', '.join(f'{k}: {n}' for k, n in sorted(statuses.items())) or 'none'}); "
              f"{len(problems)} problem(s), {skipped} bytes skipped", file=sys.stderr)
    if not statuses:
        log.warning("no record in %s (no __consumer_offsets-N segment files, or none readable)",
                    " ".join(args.paths))
    bad = sum(n for k, n in statuses.items() if k not in ("ok", "tombstone", "control"))
    return 3 if args.strict and (problems or bad or not statuses) else 0


def _count(stats: Counter, rec, decoded) -> None:
    """The --stats histogram of one record."""
    stats[("type", decoded.type_name or f"unknown({decoded.record_type})")] += 1
    stats[("status", decoded.decode_status)] += 1
    if decoded.value_version is not None:
        stats[("version", f"{decoded.type_name} v{decoded.value_version}")] += 1
    stats[("compression", rec.batch.compression)] += 1
    stats[("magic", str(rec.batch.magic))] += 1
    if not rec.batch.crc_valid:
        stats[("crc", "invalid")] += 1


# ----------------------------------------------------------------------------- ingest


def _ingest_config(args: argparse.Namespace):
    from pipelines.ingest import IngestConfig

    if args.source == "segments" and not args.path:
        raise UserError("--source segments needs --path DIR (a __consumer_offsets data directory)")
    if args.source == "segments" and not Path(args.path).exists():
        raise UserError(f"no such directory: {args.path}")
    if args.source in ("kafka", "spark-kafka") and not args.bootstrap_servers:
        raise UserError(f"--source {args.source} needs --bootstrap-servers HOST:PORT")
    cfg = IngestConfig(
        source=args.source, lake=_lake(args), path=args.path,
        bootstrap_servers=args.bootstrap_servers, cluster_id=args.cluster_id,
        delta_engine=args.delta_engine, trigger=args.trigger,
        max_records_per_batch=args.max_records_per_batch,
        kafka_options=_ingest_kafka_options(args), checkpoint=args.checkpoint,
        allow_data_loss=args.allow_data_loss, progress=True,
    )
    _checkpoint_or_fail(cfg)
    return cfg


def _ingest_kafka_options(args: argparse.Namespace) -> dict[str, str]:
    raw = _kafka_options(args)
    return _source_options(raw) if args.source == "kafka" else raw


def _checkpoint_or_fail(cfg) -> None:
    from pipelines.ingest import CheckpointError

    try:
        cfg.checkpoint_dir  # noqa: B018 -- resolves (and checks) the location
    except CheckpointError as exc:
        raise UserError(str(exc)) from None


def _check_engine(spark, engine: str) -> None:
    from pipelines.spark import has_delta_jars

    if engine in ("spark", "delta-spark") and not has_delta_jars(spark):
        raise UserError("--delta-engine spark needs delta-spark's jars visible to Spark (e.g. "
                        "spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.1); "
                        "use --delta-engine delta-rs otherwise")


def _spark_for_engine(args: argparse.Namespace, app_name: str):
    """A SparkSession with Delta's extension and catalog whose jars are checked, or None
    for delta-rs (no JVM at all)."""
    if args.delta_engine not in ("spark", "delta-spark"):
        return None
    from pipelines.spark import spark_session

    spark = spark_session(app_name, delta_spark=True)
    _check_engine(spark, args.delta_engine)
    return spark


def _lake_engine(args: argparse.Namespace, app_name: str):
    """The Delta engine the shared ``--delta-engine`` setting names, on ``--lake``."""
    from pipelines.lake.engines import make_engine

    return make_engine(args.delta_engine, _lake(args), spark=_spark_for_engine(args, app_name))


def cmd_ingest(args: argparse.Namespace) -> int:
    from pipelines.ingest import run_ingest
    from pipelines.spark import spark_session

    cfg = _ingest_config(args)
    if cfg.source == "kafka":
        # credentials, TLS, ACLs (DESCRIBE + READ) and reachability checked before Spark
        # starts: a refusal is one named line (exit 2), not a traceback from the query
        from pipelines.sources.kafka_source import check_access

        check_access({"bootstrap_servers": cfg.bootstrap_servers,
                      **{f"kafka.{k}": v for k, v in cfg.kafka_options.items()}})
    spark = spark_session("offsetlake-ingest", delta_spark=cfg.delta_engine != "delta-rs")
    _check_engine(spark, cfg.delta_engine)
    report = run_ingest(spark, cfg)
    print(json.dumps(report.summary(), indent=2, default=str))
    return _verdict(report, args.strict)


def _verdict(report, strict: bool) -> int:
    """Exit status of an ingest: 0, or 3 with --strict when the source had any problem or
    held nothing. Without --strict the same facts are a loud warning (and in the summary)."""
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
    for fault in faults:
        if strict:
            print(f"offsetlake ingest: strict: {fault}", file=sys.stderr)
        else:
            log.warning("%s", fault)
    return 3 if strict and faults else 0


# ----------------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    from pipelines.demo import generate_cluster
    from pipelines.ingest import IngestConfig, run_ingest
    from pipelines.lake.summary import print_summary
    from pipelines.spark import spark_session

    data = Path(args.data)
    lake = _lake(args)
    manifest_path = data / "demo-manifest.json"
    cfg = IngestConfig(source="segments", lake=lake, path=str(data), cluster_id="demo",
                       checkpoint=args.checkpoint, progress=True, delta_engine=args.delta_engine)
    if args.regenerate:
        _clear_demo(data, lake, cfg)
    if not (data / "__consumer_offsets-0").exists():
        manifest = generate_cluster(data, num_partitions=args.partitions, scale=args.scale, seed=args.seed)
        manifest.write_manifest(manifest_path)
        log.info("generated %s records of cluster history under %s", manifest.counts["records"], data)
    spark = spark_session("offsetlake-demo", delta_spark=args.delta_engine == "spark")
    _check_engine(spark, args.delta_engine)
    _checkpoint_or_fail(cfg)
    report = run_ingest(spark, cfg)
    log.info("ingested %d records in %d batches (%.0f records/s)", report.records, report.batches,
             report.records_per_second)
    print_summary(lake, groups=args.show_groups)
    code = _check_demo(lake, json.loads(manifest_path.read_text()),
                       _lake_engine(args, "offsetlake-demo")) if manifest_path.exists() else 0
    if code == 0:
        print(_next_commands(args, data))
    return code


def _program() -> str:
    """How the user ran us, for commands printed to be run next."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "offsetlake":
        on_path = shutil.which("offsetlake")
        if on_path and Path(on_path).resolve() == argv0.resolve():
            return "offsetlake"
        return shlex.quote(sys.argv[0])  # e.g. .venv/bin/offsetlake, as `make demo` runs it
    if argv0 is not None and argv0.name in ("cli.py", "__main__.py"):
        return f"{shlex.quote(sys.executable)} -m pipelines.cli"
    return "offsetlake"


def _next_commands(args: argparse.Namespace, data: Path) -> str:
    """The commands that take a new user from the demo lake through the quality gate."""
    prog, lake = _program(), shlex.quote(str(args.lake))
    return "\n".join([
        "",
        "Next: store the brokers' answers recorded at the end of this history as a snapshot,",
        "reconcile the lake with them (the quality gate), and write the HTML report:",
        f"  {prog} snapshot --recorded {shlex.quote(str(data / 'live'))} --lake {lake} --cluster-id demo",
        f"  {prog} reconcile --lake {lake} --cluster-id demo",
        f"  {prog} report --lake {lake} --out offsetlake-report.html",
    ])


def _clear_demo(data: Path, lake, cfg) -> None:
    """``demo --regenerate``: a new history must not mix with the old one, neither in the
    data directory (old segment files) nor in the lake (old rows, the checkpoint's positions).
    Only a lake that holds nothing but the demo cluster is removed."""
    from pipelines.source_identity import _lake_clusters

    if not getattr(lake, "is_local", True):
        raise UserError("demo --regenerate rebuilds the demo lake and needs a local --lake")
    root = Path(lake.local_path if hasattr(lake, "local_path") else lake)
    others = _lake_clusters(root) - {"demo"} if root.exists() else set()
    if others:
        raise UserError(f"demo --regenerate would remove {root}, which also holds clusters "
                        f"{', '.join(sorted(others))}; give the demo its own --lake")
    for old in [*data.glob("__consumer_offsets-*"), data / "live"]:
        shutil.rmtree(old, ignore_errors=True)
    (data / "demo-manifest.json").unlink(missing_ok=True)
    (data / "capture_log.json").unlink(missing_ok=True)
    if root.exists():
        shutil.rmtree(root)
    if cfg.checkpoint is not None:
        shutil.rmtree(cfg.checkpoint_dir, ignore_errors=True)
    log.info("demo --regenerate: removed the old history under %s and the lake %s", data, root)


def _check_demo(lake: Path, manifest: dict, engine=None) -> int:
    """Compare the lake's committed offsets with the generator's independent expectation."""
    from pipelines.lake.engines import DeltaRsEngine

    expected = {(c["group"], c["topic"], c["partition"]): (c["offset"], c["leader_epoch"], c["metadata"])
                for c in manifest["committed_offsets"]}
    rows = (engine or DeltaRsEngine(lake)).read("committed_offsets").to_pylist()
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


def _store_recorded(lake: Path, live_dir: Path, cluster_id: str, require_stable: bool,
                    engine=None) -> dict:
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
    engine = engine or DeltaRsEngine(lake)
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
        summary = _store_recorded(_lake(args), Path(args.recorded), args.cluster_id,
                                  args.require_stable, _lake_engine(args, "offsetlake-snapshot"))
        print(json.dumps(summary, indent=2, default=str))
        return 0
    if not args.bootstrap_servers:
        raise UserError("snapshot needs --bootstrap-servers HOST:PORT (or OFFSETLAKE_BOOTSTRAP_SERVERS) "
                        "or --recorded DIR")
    summary = take_snapshot(_lake(args), args.bootstrap_servers, cluster_id=args.cluster_id,
                            require_stable=args.require_stable,
                            kafka_config=_kafka_options(args),
                            engine=_lake_engine(args, "offsetlake-snapshot"))
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
    from pipelines.reconcile.reconcile import run_reconcile

    result = run_reconcile(_lake(args), cluster_id=args.cluster_id, gate=not args.no_gate,
                           num_partitions=args.num_partitions,
                           allow_partial=args.allow_partial, snapshot_id=args.snapshot_id,
                           engine=_lake_engine(args, "offsetlake-reconcile"),
                           fail_on_anomalies=tuple(k.strip() for k in (args.fail_on_anomalies or "").split(",")
                                                   if k.strip()))
    print(json.dumps(result.summary, indent=2, default=str))
    return 0 if result.passed or args.no_gate else 1


def cmd_maintain(args: argparse.Namespace) -> int:
    from pipelines.lake.maintain import maintain

    spark = _spark_for_engine(args, "offsetlake-maintain")
    if getattr(args, "rebuild_audit", False) and args.dry_run:
        raise UserError("--rebuild-audit rewrites the audit tables: it cannot be a --dry-run")
    if getattr(args, "rebuild_audit", False):  # before compaction, which then tidies its files
        from pipelines.lake.engines import make_engine
        from pipelines.state.audit import rebuild

        rebuilt = {"audit_rebuilt": {"offset_commits": rebuild(make_engine(args.delta_engine, _lake(args),
                                                                           spark=spark))}}
    else:
        rebuilt = {}
    if spark is not None:  # Delta's own OPTIMIZE and VACUUM, on the cluster
        from pipelines.lake.maintain_spark import maintain_with_spark

        print(json.dumps({**maintain_with_spark(spark, _lake(args), retention_hours=args.retention_hours,
                                                dry_run=args.dry_run), **rebuilt}, indent=2, default=str))
        return 0
    print(json.dumps({**maintain(_lake(args), retention_hours=args.retention_hours,
                                 dry_run=args.dry_run), **rebuilt}, indent=2, default=str))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines.report.html import write_report

    if args.delta_engine in ("spark", "delta-spark"):
        raise UserError("report renders locally with DuckDB over delta-rs reads and cannot use "
                        "--delta-engine spark; the lake reads the same with either engine: run "
                        "report with --delta-engine delta-rs")
    path = write_report(_lake(args), Path(args.out), group=args.group)
    print(path)
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    """Committed offsets and group states as the coordinator held them at ``--as-of``."""
    from pipelines.queries import _utc
    from pipelines.state.as_of import state_lines, state_tables

    try:
        as_of = _utc(int(args.as_of) if args.as_of.strip().lstrip("-").isdigit() else args.as_of)
    except (TypeError, ValueError):
        raise UserError(f"--as-of {args.as_of!r} is not a timestamp: give ISO 8601 (UTC unless "
                        "it has an offset), e.g. 2026-11-22T12:53:07.5Z, or epoch milliseconds") from None
    spark = _spark_for_engine(args, "offsetlake-state")
    if spark is not None:
        from pipelines.queries.state_as_of import state_as_of_spark

        state = state_as_of_spark(spark, _lake(args), as_of, args.group, args.cluster_id)
    else:
        from pipelines.queries.state_as_of import state_as_of_duckdb

        state = state_as_of_duckdb(_lake(args), as_of, args.group, args.cluster_id)
    if args.group is not None and not state.groups.num_rows and not state.offsets.num_rows:
        log.warning("group %r had no group and no committed offset at %s", args.group, as_of)
    lines = state_lines(state, args.what) if args.format == "jsonl" else state_tables(state, args.what)
    for line in lines:
        print(line)
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
    parser.add_argument("--log-level", default=_env("LOG_LEVEL"),
                        help="logging level (env OFFSETLAKE_LOG_LEVEL; default WARNING, INFO "
                             "with --verbose)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=_flag_env("VERBOSE"),
                        help="progress logs, Spark's JVM warnings and its console progress bar "
                             "(env OFFSETLAKE_VERBOSE=true); quiet otherwise")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("--delta-engine", choices=["delta-rs", "spark"],
                        default=_env("DELTA_ENGINE") or "delta-rs", help=ENGINE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("decode", help="print every record of segment files as JSON lines",
                       description="Decode __consumer_offsets segment files (.log) like "
                                   "kafka-dump-log --offsets-decoder, as one JSON object per record.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="segment files or directories")
    p.add_argument("--stats", action="store_true",
                   help="print a histogram of record types, versions and statuses instead")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="with --stats: check partition_for(group, N) against each record's partition")
    p.add_argument("--strict", action="store_true", default=_flag_env("STRICT"),
                   help="exit 3 when any byte could not be read, any record not decoded, or "
                        "there was no record at all")
    p.set_defaults(func=cmd_decode)

    p = sub.add_parser("ingest", help="stream __consumer_offsets into the Delta lake",
                       description="Run the Structured Streaming ingest: history tables appended, "
                                   "current-state tables merged, exactly once.")
    p.add_argument("--source", choices=["segments", "kafka", "spark-kafka"],
                   default=_env("SOURCE", "kafka"), help="where to read (env OFFSETLAKE_SOURCE)")
    p.add_argument("--path", default=_env("SEGMENTS_PATH"),
                   help="segments: a broker data dir or any tree of __consumer_offsets-N dirs")
    p.add_argument("--bootstrap-servers", default=_env("BOOTSTRAP_SERVERS"),
                   help="kafka/spark-kafka: HOST:PORT[,HOST:PORT] (env OFFSETLAKE_BOOTSTRAP_SERVERS)")
    _lake_args(p, checkpoint=True)
    p.add_argument("--cluster-id", default=_env("CLUSTER_ID", "default"),
                   help="name stamped on every row (segments: 'auto' reads meta.properties)")
    p.add_argument("--trigger", default=_env("TRIGGER", "available-now"),
                   help="'available-now' (default: process what exists, then stop) or an interval "
                        "such as '30 seconds' to run continuously")
    p.add_argument("--max-records-per-batch", type=int, default=int(_env("MAX_RECORDS_PER_BATCH", "500000")),
                   help="bound on records per micro-batch (default 500000)")
    _kafka_args(p)
    p.add_argument("--allow-data-loss", action="store_true",
                   default=_flag_env("ALLOW_DATA_LOSS"),
                   help="kafka: when the log start moved past the checkpoint (retention, a "
                        "recreated topic), continue from the log start instead of failing")
    p.add_argument("--strict", action="store_true", default=_flag_env("STRICT"),
                   help="exit 3 when the source had any problem (unreadable bytes, undecodable "
                        "records) or held nothing (env OFFSETLAKE_STRICT=true); without it "
                        "these are warnings and listed in the summary")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("demo", help="generate a realistic cluster history and ingest it locally",
                       description="Generate a cluster history (rebalances, static members, "
                                   "transactions, deletions, KIP-848 groups) as segment files, "
                                   "ingest it on local Spark into the lake and print what it built.")
    _lake_args(p, checkpoint=True)
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
    _lake_args(p)
    p.add_argument("--cluster-id", default=_env("CLUSTER_ID", "default"), help="cluster name")
    p.add_argument("--require-stable", action="store_true",
                   help="OffsetFetch v7+ RequireStable: report partitions with open transactions")
    _kafka_args(p)
    p.add_argument("--strict", action="store_true", default=_flag_env("STRICT"),
                   help="exit 3 when the snapshot is partial (groups or topics refused by ACLs, "
                        "the offsets topic not visible, errors); env OFFSETLAKE_STRICT=true")
    p.set_defaults(func=cmd_snapshot)

    p = sub.add_parser("reconcile", help="compare the lake with the latest snapshot; run the quality gate",
                       description="Classify every (group, topic, partition) of the lake and the "
                                   "latest snapshot, run the Great Expectations suite, exit 1 if "
                                   "the gate fails.")
    _lake_args(p)
    p.add_argument("--cluster-id", default=_env("CLUSTER_ID", "default"), help="cluster name")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="__consumer_offsets partition count (default: from the snapshot; never "
                        "guessed: without either the reconcile fails)")
    p.add_argument("--allow-partial", action="store_true",
                   default=_env("ALLOW_PARTIAL", "") == "true",
                   help="accept a partial snapshot (groups/topics refused by ACLs, capture "
                        "errors): its not_authorized rows count as explained (env "
                        "OFFSETLAKE_ALLOW_PARTIAL=true); without it such a snapshot fails")
    p.add_argument("--snapshot-id", default=_env("SNAPSHOT_ID", None),
                   help="reconcile against this stored snapshot instead of the latest captured "
                        "one (env OFFSETLAKE_SNAPSHOT_ID)")
    p.add_argument("--no-gate", action="store_true", help="report only; never exit non-zero")
    p.add_argument("--fail-on-anomalies", metavar="KIND,...", default=_env("FAIL_ON_ANOMALIES", None),
                   help="offset_anomalies kinds that fail the gate (default: none, counts are "
                        "warnings): offset_rewind, leader_epoch_regression, "
                        "commit_after_group_deleted, zombie_commit, unassigned_partition, "
                        "past_log_end, below_log_start, or all (env OFFSETLAKE_FAIL_ON_ANOMALIES)")
    p.set_defaults(func=cmd_reconcile)

    p = sub.add_parser("maintain", help="compact small files and vacuum safely",
                       description="Compact small files (OPTIMIZE) and vacuum old files with a "
                                   "retention that keeps time travel for audits.")
    _lake_args(p)
    p.add_argument("--retention-hours", type=int, default=int(_env("RETENTION_HOURS", str(24 * 30))),
                   help="keep removed files this long for time travel (default 720, never < 168)")
    p.add_argument("--dry-run", action="store_true", help="show what vacuum would delete")
    p.add_argument("--rebuild-audit", action="store_true",
                   help="rebuild commit_attribution, offset_anomalies and offset_audit_cursor from "
                        "the whole history (ingest backfills a lake older than the audit by itself)")
    p.set_defaults(func=cmd_maintain)

    p = sub.add_parser("report", help="write a self-contained HTML report with plots",
                       description="Offsets and lag over time, commit rate, generations and "
                                   "rebalances, the latest reconciliation.")
    _lake_args(p)
    p.add_argument("--group", default=None, help="only this group")
    p.add_argument("--out", default="offsetlake-report.html", help="output file")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("state", help="offsets and group states as of a wall-clock instant",
                       description="Committed offsets and groups (type, state, generation/epoch) "
                                   "as the group coordinator held them at --as-of, rebuilt from "
                                   "the history: tombstones applied, a transactional commit "
                                   "visible from its COMMIT marker's time, an aborted one never.")
    _lake_args(p)
    p.add_argument("--as-of", required=True, metavar="TIMESTAMP",
                   help="the instant: ISO 8601 (UTC unless it has an offset) or epoch milliseconds")
    p.add_argument("--group", default=None, help="only this group")
    p.add_argument("--cluster-id", default=_env("CLUSTER_ID", None),
                   help="only this cluster (env OFFSETLAKE_CLUSTER_ID; default: every cluster)")
    p.add_argument("--format", choices=("jsonl", "table"), default="jsonl",
                   help="JSON lines (one object per offset/group, with a 'kind') or text tables")
    p.add_argument("--what", choices=("all", "offsets", "groups"), default="all",
                   help="what to print (default both)")
    p.set_defaults(func=cmd_state)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    default = logging.INFO if args.verbose else logging.WARNING
    level = getattr(logging, str(args.log_level).upper(), default) if args.log_level else default
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    redaction.install()  # every handler of the root logger: kafka-python's loggers included
    if level > logging.DEBUG:  # kafka-python's connection chatter (connecting, closed, ...)
        logging.getLogger("kafka").setLevel(logging.WARNING)
    if level <= logging.DEBUG or args.verbose:
        os.environ.setdefault("OFFSETLAKE_SPARK_LOG_LEVEL", "WARN")
        os.environ.setdefault("OFFSETLAKE_SPARK_QUIET", "false")
    try:
        check_schemas()
        return args.func(args)
    except UserError as exc:
        print(f"offsetlake {args.command}: error: {redaction.redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"offsetlake {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        reason = _user_facing(exc)
        if reason:
            print(f"offsetlake {args.command}: error: {redaction.redact(reason)}", file=sys.stderr)
            return 2
        log.debug("failure", exc_info=True)
        first = redaction.redact(str(exc).splitlines()[0] if str(exc) else "")
        print(f"offsetlake {args.command}: failed: {type(exc).__name__}: {first}"
              " (rerun with --log-level DEBUG for details)", file=sys.stderr)
        return 1


_ONE_LINE_ERRORS = ("ClusterUnreachable", "NoBrokersAvailable", "NoSnapshotError",
                    "CheckpointMismatch", "KafkaOptionError", "KafkaAuthenticationError",
                    "KafkaAuthorizationError", "PartialSnapshotError")


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
        if e is not None and type(e).__name__ in _ONE_LINE_ERRORS:
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
