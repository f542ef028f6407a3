"""Issue 9, throughput: one executor task of a steady-state micro-batch, and the Spark job of
one micro-batch, each beside a baseline checkout.

Why: a steady-state ingest spends its batch time in one Spark job per micro-batch (the
segments source hands each task its ranges; the decoding worker reads them, builds and
writes the history files) and in the driver's commits. This separates the first two:

* ``task``: one task's share of a micro-batch run in this process, outside Spark, stage by
  stage (CPU time, best of N): read (segment bytes -> RAW Arrow), pack (Arrow IPC cells),
  unpack, ``build_history``, state input and counts, the three history Parquet files,
  pickling the state input; records per CPU-second of one core.
* ``--spark``: the same micro-batch through a local Spark session (the source's deferred reads, as
  the ingest job reads it, then ``history_part`` in ``mapInArrow``), wall and CPU of the whole
  process tree split into the JVM and the Python processes (driver, daemons, workers), best
  of N after one warm-up run that pays the workers' start.

Each checkout (this one and ``--baseline DIR``) runs in its own child process, alternately,
so both see the same machine load.

    python benchmarks/executor_task.py --baseline /tmp/before            # generated 1M records
    python benchmarks/executor_task.py --baseline /tmp/before --spark --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def tree_cpu() -> dict[str, float]:
    """CPU seconds (user + system, reaped children included) of this process and every
    descendant still alive, by command name (``java``, ``python``...)."""
    children: dict[int, list[tuple[int, list[str]]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append((int(entry), [comm, *fields]))
    out: dict[str, float] = {}
    stack = [os.getpid()]
    own = Path(f"/proc/{os.getpid()}/stat").read_text()
    out["python"] = sum(int(x) for x in own[own.rindex(")") + 2:].split()[11:15]) / CLK_TCK
    while stack:
        for pid, (comm, *fields) in children.get(stack.pop(), []):
            out[comm] = out.get(comm, 0.0) + sum(int(x) for x in fields[11:15]) / CLK_TCK
            stack.append(pid)
    return out


def _task_ranges(data: str, batch: int, packed: bool):
    from pipelines.sources.segments.spark_source import SegmentPlanner

    planner = SegmentPlanner({"path": data, "packed": str(packed).lower(), "cluster_id": "bench",
                              "max_records_per_batch": str(batch)})
    end = planner._latest({}, batch, None)
    return planner, planner._task_ranges({}, end)


def run_task(data: str, batch: int, repeat: int) -> dict:
    """Stage CPU times (best of ``repeat``) of the first task of the first micro-batch."""
    import pyarrow as pa

    from pipelines.history.tables import HISTORY_TABLES, build_history
    from pipelines.lake.files import write_data_file
    from pipelines.sources.raw import pack, unpacked

    planner, tasks = _task_ranges(data, batch, packed=False)
    lake = Path(tempfile.mkdtemp(prefix="offsetlake-task-"))
    now = datetime.now(timezone.utc)
    best: dict[str, float] = {}
    rows = 0
    for _ in range(repeat):
        times = []
        t = time.process_time()
        raw_batches = list(planner._read_ranges(tasks[0]))
        times.append(("read", time.process_time() - t))
        t = time.process_time()
        cells = list(pack(raw_batches))
        times.append(("pack", time.process_time() - t))
        t = time.process_time()
        raw = unpacked(pa.Table.from_batches(cells))
        times.append(("unpack", time.process_time() - t))
        t = time.process_time()
        history = build_history(raw, 1, now)
        times.append(("build_history", time.process_time() - t))
        t = time.process_time()
        state, _ = history.state_input(), history.status_counts()
        times.append(("state input, counts", time.process_time() - t))
        t = time.process_time()
        for name in HISTORY_TABLES:
            if getattr(history, name).num_rows:
                write_data_file(lake / name, getattr(history, name))
        times.append(("parquet files", time.process_time() - t))
        t = time.process_time()
        pickle.dumps(state)
        times.append(("pickle state", time.process_time() - t))
        rows = raw.num_rows
        for name, secs in times:
            best[name] = min(best.get(name, secs), secs)
    return {"tasks": len(tasks), "rows": rows, "stages": best,
            "cell_bytes": sum(c.column(0)[0].as_buffer().size for c in cells)}


def run_spark(data: str, batch: int, repeat: int) -> dict:
    """Wall and process-tree CPU of one micro-batch's read + decode + write Spark job."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    from pipelines.history.parts import history_part
    from pipelines.history.tables import HISTORY_TABLES
    from pipelines.sources import raw
    from pipelines.sources.raw import unpacked
    from pipelines.sources.segments import spark_source
    from pipelines.spark import spark_session

    spark = spark_session("offsetlake-executor-bench")
    spark_source.register(spark)
    now = datetime.now(timezone.utc)
    # as the checkout's ingest reads: deferred reads, or (before them) packed cells
    deferred = hasattr(raw, "DEFERRED_ARROW_SCHEMA")
    schema = raw.DEFERRED_ARROW_SCHEMA if deferred else raw.PACKED_ARROW_SCHEMA
    frame = (spark.read.format(spark_source.NAME).schema(from_arrow_schema(schema))
             .option("path", data).option("defer_read" if deferred else "packed", "true")
             .option("cluster_id", "bench").option("max_records_per_batch", str(batch)).load())
    runs = []
    for _ in range(repeat + 1):  # the first run starts the Python workers
        lake = tempfile.mkdtemp(prefix="offsetlake-task-")

        def task(batches, lake=lake):
            raw = unpacked(pa.Table.from_batches([b for b in batches if b.num_rows]))
            part = history_part(raw, 1, now, lake, HISTORY_TABLES)
            yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(part)], pa.binary())], names=["part"])

        before, started = tree_cpu(), time.perf_counter()
        parts = [pickle.loads(r.part) for r in frame.mapInArrow(task, "part binary").collect()]
        wall, after = time.perf_counter() - started, tree_cpu()
        cpu = {"java": 0.0, "python": 0.0}  # Python processes may carry a launcher's name
        for name, secs in after.items():
            cpu["java" if name == "java" else "python"] += secs - before.get(name, 0.0)
        runs.append({"wall": wall, "cpu": cpu, "records": sum(p.records for p in parts)})
    spark.stop()
    warm = runs[1:]
    return {"first": runs[0], "best_cpu": min(warm, key=lambda r: sum(r["cpu"].values())),
            "best_wall": min(warm, key=lambda r: r["wall"])}


def child(args: argparse.Namespace) -> None:
    result = (run_spark if args.mode == "spark" else run_task)(str(args.data), args.batch, args.repeat)
    print("RESULT " + json.dumps(result))


def measure(checkout: Path, mode: str, data: Path, batch: int, repeat: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, "--data", str(data),
           "--batch", str(batch), "--repeat", str(repeat)]
    out = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="segment files (default: a generated 1M-record history)")
    parser.add_argument("--scale", type=int, default=200, help="demo generator scale when --data is not given")
    parser.add_argument("--batch", type=int, default=500_000, help="records per micro-batch")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of current and baseline")
    parser.add_argument("--baseline", type=Path, help="another checkout, run alternately")
    parser.add_argument("--spark", action="store_true", help="also the micro-batch's Spark job")
    parser.add_argument("--child", choices=("task", "spark"), dest="mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        return child(args)
    data = args.data
    if data is None:
        from pipelines.demo import generate_cluster

        data = Path(tempfile.mkdtemp(prefix="offsetlake-executor-")) / "generated"
        generate_cluster(data, num_partitions=10, scale=args.scale)
    checkouts = {"current": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    modes = ["task", *(["spark"] if args.spark else [])]
    results: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.rounds):
        for mode in modes:
            for name, checkout in checkouts.items():
                results.setdefault((mode, name), []).append(measure(checkout, mode, data, args.batch, args.repeat))
    report(results, checkouts)


def report(results: dict, checkouts: dict) -> None:
    names = list(checkouts)
    if ("task", names[0]) in results:
        best = {n: _best_stages(results[("task", n)]) for n in names}
        first = results[("task", names[0])][0]
        print(f"\none task, outside Spark: {first['rows']:,} records (1 of {first['tasks']} tasks), "
              "CPU ms, best of all runs")
        print(f"{'stage':<22}" + "".join(f"{n:>12}" for n in names))
        for stage in best[names[0]]:
            print(f"{stage:<22}" + "".join(f"{best[n][stage] * 1000:>12.1f}" for n in names))
        totals = {n: sum(best[n].values()) for n in names}
        print(f"{'total':<22}" + "".join(f"{totals[n] * 1000:>12.1f}" for n in names))
        print(f"{'records/CPU-s':<22}" + "".join(f"{first['rows'] / totals[n]:>12,.0f}" for n in names))
        print(f"{'packed cell MB':<22}" + "".join(
            f"{results[('task', n)][0]['cell_bytes'] / 1e6:>12.2f}" for n in names))
    if ("spark", names[0]) in results:
        print("\none micro-batch's Spark job (read, pack, JVM, decode, write), seconds")
        print(f"{'':<10}{'records':>10}{'wall':>8}{'cpu':>8}{'java':>8}{'python':>8}{'first wall':>12}"
              f"{'first cpu':>11}")
        for n in names:
            runs = results[("spark", n)]
            cpu = min((r["best_cpu"] for r in runs), key=lambda r: sum(r["cpu"].values()))
            wall = min(r["best_wall"]["wall"] for r in runs)
            first = min((r["first"] for r in runs), key=lambda r: r["wall"])
            print(f"{n:<10}{cpu['records']:>10,}{wall:>8.2f}{sum(cpu['cpu'].values()):>8.2f}"
                  f"{cpu['cpu'].get('java', 0):>8.2f}{cpu['cpu'].get('python', 0):>8.2f}"
                  f"{first['wall']:>12.2f}{sum(first['cpu'].values()):>11.2f}")


def _best_stages(runs: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for run in runs:
        for stage, secs in run["stages"].items():
            out[stage] = min(out.get(stage, secs), secs)
    return out


if __name__ == "__main__":
    main()
