"""Benchmark: the commands one scheduled run of the Airflow DAG executes, as it runs them.

Why: each task of the DAG (``airflow_dags/``) is a fresh ``offsetlake`` process: ``ingest``,
``snapshot``, ``reconcile`` (with the quality gate) and ``maintain``. What a schedule waits
for is their fixed costs as much as their work. Per checkout (this one, and ``--baseline
DIR`` alternately, so both see the same machine load): a generated cluster (the demo's
generator at ``--scale``) as segment files with its recorded broker answers, a fresh lake,
then two scheduled runs: the first over everything, the second over the same files
unchanged (an hourly run over a directory copied daily; ``snapshot`` stores the recorded
answers again, a no-op). Each command's wall time, and each run's total, best of
``--runs``.

    python benchmarks/scheduled_run.py                       # this checkout, best of 3
    python benchmarks/scheduled_run.py --baseline /tmp/before
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "bench"


def commands(data: Path, lake: Path) -> dict[str, list[str]]:
    """The DAG's tasks for a segment-file cluster with recorded answers, as it builds them."""
    common = ["--lake", str(lake), "--cluster-id", CLUSTER]
    return {
        "ingest": ["ingest", "--source", "segments", *common, "--delta-engine", "delta-rs",
                   "--path", str(data), "--trigger", "available-now"],
        "snapshot": ["snapshot", *common, "--recorded", str(data / "live")],
        "reconcile": ["reconcile", *common],
        "maintain": ["maintain", "--lake", str(lake), "--retention-hours", "168"],
    }


def run_command(checkout: Path, args: list[str]) -> float:
    """``offsetlake <args>`` from ``checkout`` in a fresh process: its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=checkout, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1) or (done.returncode == 1 and args[0] != "reconcile"):
        raise RuntimeError(f"{' '.join(args[:1])} in {checkout} exited {done.returncode}: "
                           f"{done.stderr[-2000:]}")
    return wall


def scheduled_runs(checkout: Path, data: Path, work: Path) -> dict[str, dict[str, float]]:
    """A fresh lake, then the first and the unchanged scheduled run: {run: {task: wall}}."""
    lake = Path(tempfile.mkdtemp(prefix="lake-", dir=work))
    tasks = commands(data, lake)
    return {run: {task: run_command(checkout, args) for task, args in tasks.items()}
            for run in ("first run", "files unchanged")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=20, help="demo generator scale (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--baseline", type=Path, help="another checkout to run alternately")
    args = parser.parse_args(argv)
    from pipelines.demo import generate_cluster

    checkouts = {"current": REPO}
    if args.baseline:
        checkouts["baseline"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory(prefix="scheduled-run-") as tmp:
        work = Path(tmp)
        manifest = generate_cluster(work / "data", scale=args.scale)
        print(f"a generated cluster: {manifest.counts['records']:,} records in segment files")
        best: dict[str, dict[str, dict[str, float]]] = {}
        for n in range(args.runs):
            order = list(checkouts.items()) if n % 2 == 0 else list(reversed(checkouts.items()))
            for name, checkout in order:
                walls = scheduled_runs(checkout, work / "data", work)
                for run, tasks in walls.items():
                    print(f"  round {n + 1} {name:<8} {run:<15} " + "  ".join(
                        f"{task} {wall:5.2f}" for task, wall in tasks.items())
                        + f"  total {sum(tasks.values()):5.2f} s")
                    kept = best.setdefault(name, {}).setdefault(run, dict(tasks))
                    for task, wall in tasks.items():
                        kept[task] = min(kept[task], wall)
        for name, runs in best.items():
            for run, tasks in runs.items():
                print(f"best of {args.runs} {name:<8} {run:<15} " + "  ".join(
                    f"{task} {wall:5.2f}" for task, wall in tasks.items())
                    + f"  sum {sum(tasks.values()):5.2f} s")


if __name__ == "__main__":
    main()
