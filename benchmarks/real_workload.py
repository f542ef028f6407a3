"""Benchmark (a), issue 9: a real workload end to end, as a user runs it.

The 20 largest real segment files of ``../shared/corpus/public`` (broker-written, several
clusters), each copied as its own partition directory ``__consumer_offsets-N``, ingested by
``offsetlake ingest --source segments`` in a fresh process into a fresh lake: wall time and
CPU time (the CLI's process, its JVM and every Python worker: this process is made their
child subreaper, so the JVM and its workers are reaped here and their CPU is counted), best
of N, after one first run that writes the JVM's class archive (printed on its own: what the
first run on a machine costs). A baseline checkout (``--baseline DIR``, e.g. the state before a change) runs the same
command alternately with the current one, so both see the same machine load.

``--breakdown`` then runs the same command once more per checkout in an instrumented child
process and prints where the time goes: interpreter and imports, Spark session start, table
creation, per micro-batch Spark's own durations (``StreamingQueryProgress``: source planning
``latestOffset``/``queryPlanning``, the batch ``addBatch``, checkpoint ``walCommit``/
``commitOffsets``) and inside the batch the history decode+write on the executors, the Delta
commits, the state merge and the audit; Delta log opens (``DeltaTable(...)``) and table
probes (``is_deltatable``) are counted; and what a Python worker has imported after the run.

    python benchmarks/real_workload.py                          # this checkout, best of 3
    python benchmarks/real_workload.py --baseline /tmp/before --breakdown
    python benchmarks/real_workload.py --yardstick  # beside a bare SparkSession + trivial query
    python benchmarks/real_workload.py --unchanged  # then again over the same, unchanged files
    python benchmarks/real_workload.py --kafka-home /opt/kafka_2.13-4.2.0  # beside Kafka's tool

``--kafka-home DIR`` (default ``KAFKA_HOME``): Kafka's own ``kafka-dump-log.sh
--offsets-decoder --print-data-log`` runs on the same files in every round, and the best wall
of each checkout is printed as a multiple of the tool's, beside the issue's goal (<= 1.5x);
see ``kafka_peer.py``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kafka_peer import add_kafka_home, dump_log_tool, run_dump_log, tool_files
from machine_cpu import busy_seconds

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "public"
PR_SET_CHILD_SUBREAPER = 36


def build_workload(corpus: Path, into: Path, count: int = 20) -> list[Path]:
    """Copy the ``count`` largest segment files (``*.log`` and the corpus' ``*.log@commit``
    versions) into ``into/__consumer_offsets-N/<base offset>.log``, one file per directory."""
    files = [p for p in corpus.rglob("*.log*") if p.is_file() and ".log" in p.name
             and p.parent.name.startswith("__consumer_offsets-")]
    files.sort(key=lambda p: (-p.stat().st_size, str(p)))
    chosen = files[:count]
    for n, path in enumerate(chosen):
        target = into / f"__consumer_offsets-{n}" / path.name.split("@", 1)[0]
        target.parent.mkdir(parents=True)
        shutil.copyfile(path, target)
    return chosen


def _reap_orphans(timeout: float = 30.0) -> None:
    """Wait for the descendants re-parented to this process (the JVM, Python workers), so
    their CPU time lands in ``RUSAGE_CHILDREN``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def _cpu_children() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


JVM_CACHE: Path | None = None  # this benchmark's own JVM class archive (pipelines/jvm_cache.py)


def _env(checkout: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout)
    env.pop("OFFSETLAKE_LOG_LEVEL", None)
    if JVM_CACHE is not None:
        env["OFFSETLAKE_JVM_CACHE"] = str(JVM_CACHE)
    return env


def run_cli(checkout: Path, data: Path, work: Path, reap: bool = True, lake: Path | None = None
            ) -> tuple[float, float, float, dict]:
    """``offsetlake ingest --source segments`` in a fresh process and a fresh lake:
    (wall seconds, CPU seconds of the process tree by rusage, CPU seconds the machine was
    busy meanwhile, the printed summary). The rusage figure misses the Python workers Spark's
    daemons fork (machine_cpu.py); the machine's counts them, and anything else running.
    ``reap``: wait for the processes it left (a first run's JVM dumping its class archive)
    before counting the CPU; the first run does that itself, to time the dump. ``lake``: this
    one instead of a fresh one, and kept."""
    kept, lake = lake is not None, lake or Path(tempfile.mkdtemp(prefix="lake-", dir=work))
    cmd = [sys.executable, "-m", "pipelines.cli", "ingest", "--source", "segments",
           "--path", str(data), "--lake", str(lake)]
    cpu0, busy0 = _cpu_children(), busy_seconds()
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=checkout, env=_env(checkout), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if reap:
        _reap_orphans()
    cpu, machine = _cpu_children() - cpu0, busy_seconds() - busy0
    if not kept:
        shutil.rmtree(lake, ignore_errors=True)
    if out.returncode != 0:
        raise RuntimeError(f"ingest failed in {checkout}: {out.stderr[-2000:]}")
    return wall, cpu, machine, json.loads(out.stdout)


# ---- the instrumented child (--child): one ingest, timed phase by phase --------------------

def _child(data: str, lake: str, spawned: float) -> None:
    started = time.time()
    phases: dict[str, float] = {"interpreter start": started - spawned}
    counts = {"DeltaTable opens": 0, "is_deltatable probes": 0}
    t = time.perf_counter()
    import pipelines.cli
    import pipelines.ingest as ingest
    import pipelines.spark as spark_mod

    phases["driver imports"] = time.perf_counter() - t
    import deltalake.table

    progress: list[dict] = []
    marks: dict[str, float] = {}
    timings: dict[str, float] = {}

    def timed(owner, name: str, label: str) -> None:
        if not hasattr(owner, name):
            return
        inner = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            marks.setdefault(label + " (start)", t0)
            try:
                return inner(*args, **kwargs)
            finally:
                timings[label] = timings.get(label, 0.0) + time.perf_counter() - t0
        setattr(owner, name, wrapper)

    init = deltalake.table.DeltaTable.__init__

    def counted_init(self, *args, **kwargs):
        counts["DeltaTable opens"] += 1
        return init(self, *args, **kwargs)
    deltalake.table.DeltaTable.__init__ = counted_init
    probe = deltalake.table.DeltaTable.is_deltatable

    def counted_probe(*args, **kwargs):
        counts["is_deltatable probes"] += 1
        return probe(*args, **kwargs)
    deltalake.table.DeltaTable.is_deltatable = staticmethod(counted_probe)

    make_session = spark_mod.spark_session

    def session(*args, **kwargs):
        t0 = time.perf_counter()
        spark = make_session(*args, **kwargs)
        phases["Spark session start"] = time.perf_counter() - t0
        from pyspark.sql.streaming import StreamingQueryListener

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                marks.setdefault("query started", time.perf_counter())

            def onQueryIdle(self, event): ...

            def onQueryTerminated(self, event):
                marks.setdefault("query terminated", time.perf_counter())

            def onQueryProgress(self, event):
                p = event.progress
                marks.setdefault("first progress", time.perf_counter())
                progress.append({"batch": p.batchId, "records": p.numInputRows, **p.durationMs})

        spark.streams.addListener(Listener())
        return spark
    spark_mod.spark_session = session
    try:  # where the per-batch steps live (pipelines.ingest in older trees)
        import pipelines.micro_batch as batch_steps
    except ImportError:
        batch_steps = ingest
    timed(ingest, "ensure_tables", "tables created (ensure_tables)")
    timed(batch_steps, "pending_history", "batch: replay check (pending_history)")
    timed(batch_steps, "part_cells_on_executors", "batch: decode + history files (Spark job)")
    timed(batch_steps, "commit_batch", "batch: commits, state, audit (commit_batch)")
    timed(batch_steps, "apply_state", "batch:   state merge (apply_state)")
    timed(batch_steps, "audit_batch", "batch:   audit (audit_batch)")
    timed(ingest, "_source_facts", "after the query: source problems")
    timed(ingest, "run_ingest", "run_ingest total")
    timed(ingest, "open_stream", "open_stream (source registered)")
    timed(ingest, "_write_batch", "batch on the driver (_write_batch)")
    if batch_steps is not ingest:
        timed(batch_steps.Handover, "_commit", "batch on the driver (Handover._commit)")
    from pipelines.lake.engines import DeltaRsEngine
    timed(DeltaRsEngine, "commit_files", "batch:   history Delta commits (commit_files)")

    t = time.perf_counter()
    code = pipelines.cli.main(["ingest", "--source", "segments", "--path", data, "--lake", lake])
    phases["CLI main total"] = time.perf_counter() - t
    origin = marks.get("run_ingest total (start)", t)
    timeline = {k: v - origin for k, v in sorted(marks.items(), key=lambda kv: kv[1])}
    spark = spark_mod.SparkSession.getActiveSession() if hasattr(spark_mod, "SparkSession") else None
    if spark is None:
        from pyspark.sql import SparkSession
        spark = SparkSession.getActiveSession()
    print(json.dumps({"exit": code, "phases": phases, "timings": timings, "counts": counts,
                      "progress": progress, "timeline": timeline,
                      "worker_modules": _worker_modules(spark)}),
          file=sys.stderr)


def _worker_modules(spark) -> list[str]:
    """Top-level packages loaded in a (reused) Python worker after the ingest ran there."""
    import pyarrow as pa

    def probe(batches):
        for _ in batches:
            pass
        names = sorted({m.split(".")[0] for m in sys.modules})
        yield pa.RecordBatch.from_arrays([pa.array(names)], names=["m"])

    rows = spark.range(1, numPartitions=1).mapInArrow(probe, "m string").collect()
    return sorted({r.m for r in rows})


def breakdown(checkout: Path, data: Path, work: Path) -> dict:
    lake = Path(tempfile.mkdtemp(prefix="lake-", dir=work))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(data), str(lake),
           repr(time.time())]
    out = subprocess.run(cmd, cwd=checkout, env=_env(checkout), capture_output=True, text=True)
    _reap_orphans()
    shutil.rmtree(lake, ignore_errors=True)
    for line in reversed(out.stderr.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"breakdown run failed in {checkout}: {out.stderr[-2000:]}")


def import_seconds(checkout: Path, modules: list[str]) -> float:
    """Seconds a fresh interpreter takes to import ``modules`` (what a new worker pays)."""
    code = ("import time, importlib; t = time.perf_counter()\n"
            f"for m in {modules!r}:\n"
            "    try: importlib.import_module(m)\n"
            "    except Exception: pass\n"
            "print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=_env(checkout),
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


#: The issue's yardstick: a bare local SparkSession (Spark's defaults) and one trivial query,
#: in a fresh process, stopped, as a script would; and the same with offsetlake's session.
YARDSTICKS = {
    "bare SparkSession + one trivial query (Spark defaults)":
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.master('local[2]').getOrCreate()\n"
        "s.range(1).collect()\ns.stop()",
    "the same on offsetlake's session (pipelines.spark.spark_session)":
        "from pipelines.spark import spark_session\n"
        "s = spark_session(own_workers=True)\ns.range(1).collect()\ns.stop()",
}


def yardsticks(runs: int, work: Path) -> None:
    """Best wall time of each :data:`YARDSTICKS` script in a fresh process: what a short
    Spark job pays on this machine before any record is read."""
    for label, code in YARDSTICKS.items():
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], cwd=work, env=_env(REPO),
                           capture_output=True, check=True)
            walls.append(time.perf_counter() - t0)
        print(f"  {label}: best {min(walls):.2f} s wall (runs {', '.join(f'{w:.2f}' for w in walls)})")


def _print_breakdown(name: str, checkout: Path, b: dict) -> None:
    print(f"\n== breakdown: {name} ({checkout}) ==")
    for label, secs in b["phases"].items():
        print(f"  {label:<50} {secs:7.2f} s")
    for label, secs in sorted(b["timings"].items()):
        print(f"  {label:<50} {secs:7.2f} s")
    for p in b["progress"]:
        durations = ", ".join(f"{k} {v / 1000:.2f}" for k, v in p.items()
                              if k not in ("batch", "records") and v)
        print(f"  micro-batch {p['batch']} ({p['records']} records): {durations} s")
    print("  timeline from run_ingest's start (s):")
    for label, at in b.get("timeline", {}).items():
        print(f"    {at:7.2f}  {label}")
    for label, n in b["counts"].items():
        print(f"  {label:<50} {n:7d}")
    mods = [m for m in b["worker_modules"] if not m.startswith("_")]
    heavy = [m for m in ("pandas", "pyarrow", "numpy", "deltalake", "great_expectations",
                         "scipy", "sqlalchemy", "kafka", "pipelines") if m in mods]
    own = [m for m in mods if m in ("pandas", "deltalake", "great_expectations", "numpy",
                                    "pipelines", "kafka", "scipy", "sqlalchemy")]
    print(f"  Python worker after the run: {len(mods)} top-level packages; of note: {heavy}")
    if own:
        print(f"  fresh import of {own}: {import_seconds(checkout, own):.2f} s")


def unchanged(checkouts: dict[str, Path], data: Path, work: Path, runs: int) -> None:
    """The same command again on a lake it filled, the files unchanged since: what a
    scheduled run over a directory copied less often than it is polled waits for."""
    lakes = {name: Path(tempfile.mkdtemp(prefix="lake-", dir=work)) for name in checkouts}
    for name, checkout in checkouts.items():
        run_cli(checkout, data, work, lake=lakes[name])
    walls: dict[str, list[float]] = {name: [] for name in checkouts}
    for _ in range(runs):
        for name, checkout in checkouts.items():
            wall, _, _, summary = run_cli(checkout, data, work, lake=lakes[name])
            assert summary["records"] == 0, summary
            walls[name].append(wall)
    for name, found in walls.items():
        print(f"unchanged files, {name:<8}: best {min(found):.2f} s wall "
              f"(runs {', '.join(f'{w:.2f}' for w in found)})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--baseline", type=Path, help="another checkout to run alternately")
    parser.add_argument("--breakdown", action="store_true", help="also an instrumented run each")
    parser.add_argument("--yardstick", action="store_true",
                        help="also a bare SparkSession + one trivial query (the issue's yardstick)")
    parser.add_argument("--unchanged", action="store_true",
                        help="also the same command again on the lake it filled, files unchanged")
    add_kafka_home(parser)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], args.child[1], float(args.child[2]))
        return
    tool = dump_log_tool(args.kafka_home)
    if not args.corpus.is_dir():
        raise SystemExit(f"no corpus at {args.corpus} (the shared real segment files)")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    checkouts = {"current": REPO}
    if args.baseline:
        checkouts["baseline"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory(prefix="real-workload-") as tmp:
        work = Path(tmp)
        data = work / "data"
        chosen = build_workload(args.corpus, data, args.files)
        size = sum(p.stat().st_size for p in chosen)
        print(f"workload: {len(chosen)} real segment files, {size / 1e6:.1f} MB, one partition each")
        global JVM_CACHE
        JVM_CACHE = work / "jvm-cache"
        cpu0 = _cpu_children()
        wall, cpu, _, _ = run_cli(REPO, data, work, reap=False)
        started = time.perf_counter()
        _reap_orphans(timeout=300)  # the JVM writing the archive and the process publishing it
        published = sorted(JVM_CACHE.glob("*.jsa"))
        print(f"  first run on this machine (current): wall {wall:6.2f} s; its JVM then writes "
              f"the class archive for {time.perf_counter() - started:.1f} s more, in the "
              f"background; cpu of it all {_cpu_children() - cpu0:6.2f} s; archive "
              f"{'published' if published else 'NOT published'}")
        files = tool_files([data], work / "peer-files") if tool else []
        best: dict[str, tuple[float, float, float]] = {}
        peer: tuple[float, float] | None = None  # Kafka's tool: best wall, best cpu
        for run in range(args.runs):
            for name, checkout in (checkouts.items() if run % 2 == 0 else
                                   reversed(list(checkouts.items()))):
                wall, cpu, machine, summary = run_cli(checkout, data, work)
                print(f"  run {run + 1} {name:<8} wall {wall:6.2f} s  cpu {cpu:6.2f} s  "
                      f"machine cpu {machine:6.2f} s  records {summary['records']}  "
                      f"batches {summary['batches']}")
                old = best.get(name, (wall, cpu, machine))
                best[name] = (min(wall, old[0]), min(cpu, old[1]), min(machine, old[2]))
            if tool:
                wall, cpu, printed = run_dump_log(tool, files, work / "kafka.out")
                print(f"  run {run + 1} Kafka    wall {wall:6.2f} s  cpu {cpu:6.2f} s  "
                      f"records {printed} (kafka-dump-log --offsets-decoder --print-data-log)")
                peer = (min(wall, peer[0]), min(cpu, peer[1])) if peer else (wall, cpu)
        for name, (wall, cpu, machine) in best.items():
            print(f"best of {args.runs} {name:<8}: wall {wall:.2f} s, cpu {cpu:.2f} s (rusage: "
                  f"without the workers Spark's daemons fork), machine cpu {machine:.2f} s")
        if peer:
            print(f"best of {args.runs} Kafka's tool: wall {peer[0]:.2f} s, cpu {peer[1]:.2f} s")
            for name, (wall, _, _) in best.items():
                print(f"{name} / Kafka's tool wall: {wall / peer[0]:.2f}x (issue 9 goal: <= 1.5x)")
        else:
            print("Kafka's tool: none (--kafka-home or KAFKA_HOME to measure the issue's ratio)")
        if "baseline" in best:
            print(f"current / baseline wall: {best['current'][0] / best['baseline'][0]:.2f}x")
        if args.unchanged:
            unchanged(checkouts, data, work, args.runs)
        if args.yardstick:
            yardsticks(args.runs, work)
        if args.breakdown:
            for name, checkout in checkouts.items():
                _print_breakdown(name, checkout, breakdown(checkout, data, work))


if __name__ == "__main__":
    main()
