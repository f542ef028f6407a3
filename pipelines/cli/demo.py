"""``offsetlake demo``: generate a cluster history, ingest it, check it against the
generator's expectation and print the commands to run next; and ``offsetlake warm-up``,
which ingests a small one for the local JVM's class archive. The only CLI module that
imports pipelines.demo.

Why warm-up: a local run maps Spark's classes from an archive that the first run's JVM writes
at its exit (:mod:`pipelines.jvm_cache`); without it every start takes ~4-5 s more (the real
workload: 10.5-11.3 s against 6.0-7.5 s). A machine that ends with each run (a container per
task, Airflow's KubernetesExecutor) never keeps the one its run writes. Its image can: the
command publishes the archive its JVM writes before it returns. Run it as the tasks run (the
same user or ``OFFSETLAKE_JVM_CACHE``, the same Java, Spark and conf dirs)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from pipelines.cli.common import (
    UserError,
    add_lake_args,
    check_engine,
    checkpoint_or_fail,
    lake_engine,
    lake_from,
    plain_ctrl_c,
    stop_spark,
)

log = logging.getLogger("offsetlake")


def cmd_demo(args: argparse.Namespace) -> int:
    from pipelines.demo import generate_cluster
    from pipelines.ingest import IngestConfig, run_ingest
    from pipelines.lake.summary import print_summary
    from pipelines.spark import spark_session

    data = Path(args.data)
    lake = lake_from(args)
    manifest_path = data / "demo-manifest.json"
    cfg = IngestConfig(source="segments", lake=lake, path=str(data), cluster_id="demo",
                       checkpoint=args.checkpoint, progress=True, delta_engine=args.delta_engine)
    if args.regenerate:
        _clear_demo(data, lake, cfg)
    if not (data / "__consumer_offsets-0").exists():
        manifest = generate_cluster(data, num_partitions=args.partitions, scale=args.scale, seed=args.seed)
        manifest.write_manifest(manifest_path)
        log.info("generated %s records of cluster history under %s", manifest.counts["records"], data)
    spark = spark_session("offsetlake-demo", delta_spark=args.delta_engine == "spark",
                          own_workers=args.standalone)
    if args.standalone:
        plain_ctrl_c()
    check_engine(spark, args.delta_engine)
    checkpoint_or_fail(cfg)
    report = run_ingest(spark, cfg)
    log.info("ingested %d records in %d batches (%.0f records/s)", report.records, report.batches,
             report.records_per_second)
    print_summary(lake, groups=args.show_groups)
    code = _check_demo(lake, json.loads(manifest_path.read_text()),
                       lake_engine(args, "offsetlake-demo")) if manifest_path.exists() else 0
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
    if argv0 is not None and argv0.parts[-3:] == ("pipelines", "cli", "__main__.py"):  # not pytest's
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
    from pipelines.source_identity import lake_clusters

    if not getattr(lake, "is_local", True):
        raise UserError("demo --regenerate rebuilds the demo lake and needs a local --lake")
    root = Path(lake.local_path if hasattr(lake, "local_path") else lake)
    others = lake_clusters(root) - {"demo"} if root.exists() else set()
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



def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    """The ``demo`` command's arguments."""
    p = sub.add_parser("demo", help="generate a realistic cluster history and ingest it locally",
                       description="Generate a cluster history (rebalances, static members, "
                                   "transactions, deletions, KIP-848 groups) as segment files, "
                                   "ingest it on local Spark into the lake and print what it built.")
    add_lake_args(p, checkpoint=True)
    p.add_argument("--data", default="demo-data", help="where the generated segments go (default ./demo-data)")
    p.add_argument("--partitions", type=int, default=10, help="__consumer_offsets partitions (default 10)")
    p.add_argument("--scale", type=int, default=1, help="multiply the number of commits (default 1)")
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    p.add_argument("--regenerate", action="store_true", help="regenerate even if data exists")
    p.add_argument("--show-groups", type=int, default=3, help="groups whose offsets are printed")
    p.set_defaults(func=cmd_demo)


def cmd_warm_up(args: argparse.Namespace) -> int:
    from pipelines import jvm_cache
    from pipelines.spark import class_archive_refusal

    refused = class_archive_refusal()
    if refused:
        raise UserError(f"no class archive can serve this machine's runs: {refused}")
    directory = jvm_cache.cache_dir(os.environ)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writable = os.access(directory, os.W_OK | os.X_OK)
    except OSError:
        writable = False
    if not writable:
        raise UserError(f"no class archive can be written: {directory} cannot be written here (set "
                        f"{jvm_cache.CACHE_ENV} to a directory that can)")
    jvm_cache.forget_refusals(directory)  # asked to write one now: every key is tried again
    before = len(jvm_cache.planned())
    _ingest_a_little(args)
    plans = jvm_cache.planned()[before:]
    jvm_cache.finish(wait=True)
    if not plans:  # its lock was taken
        raise UserError(f"another process is writing the class archive in {directory} now; run "
                        "warm-up again once it is done")
    plan = plans[-1]
    if not plan.archive.is_file():
        raise UserError(f"the JVM's class archive {plan.archive} is not in place (the JVM "
                        f"{'did not write it' if plan.writing else 'did not map it'}; --verbose "
                        "says more)")
    print(f"class archive in place: {plan.archive} "
          f"({'written now' if plan.writing else 'written before; mapped by this run'})")
    return 0


def _ingest_a_little(args: argparse.Namespace) -> None:
    """A small generated history ingested into a temporary lake, on a session made as
    ``offsetlake ingest`` makes it: its JVM loads the classes an ingest loads. Spark is
    stopped here, so that the JVM can exit and write its archive."""
    from pipelines.demo import generate_cluster
    from pipelines.ingest import IngestConfig, run_ingest
    from pipelines.spark import spark_session

    with tempfile.TemporaryDirectory(prefix="offsetlake-warm-up-") as tmp:
        data, lake = Path(tmp, "data"), Path(tmp, "lake")
        generate_cluster(data, num_partitions=2, scale=1, seed=7)
        spark = spark_session("offsetlake-warm-up", own_workers=args.standalone)
        if args.standalone:
            plain_ctrl_c()
        try:
            report = run_ingest(spark, IngestConfig(source="segments", lake=lake, path=str(data),
                                                    cluster_id="warm-up"))
            log.info("warm-up: ingested %d records", report.records)
        finally:
            stop_spark()


def add_warm_up_parser(sub: argparse._SubParsersAction) -> None:
    """The ``warm-up`` command's arguments (none)."""
    p = sub.add_parser("warm-up", help="write the local JVM's class archive now (e.g. in a container "
                                       "image's build), so that every run starts ~4 s sooner",
                       description="Ingest a small generated history into a temporary lake on local "
                                   "Spark and wait until the class archive its JVM writes at exit is "
                                   "in place (~150 MB under ~/.cache/offsetlake/jvm or "
                                   "OFFSETLAKE_JVM_CACHE). Run it as the scheduled runs run: the same "
                                   "user, Java, Spark and conf dirs. Exits 2, saying why, where no "
                                   "archive can serve (a non-local master, a Java agent or class-sharing "
                                   "option of yours, a Spark conf dir with more than spark-defaults.conf "
                                   "and a log4j2 file, OFFSETLAKE_JVM_CACHE=off).")
    p.set_defaults(func=cmd_warm_up)
