"""Benchmark (d): ``reconcile``, the quality gate and ``report`` by history size, same state.

Why: an Airflow run reconciles after each ingest; its cost must follow the state and the
snapshot (the groups and keys the cluster has), never the history the lake has piled up.
``pipelines.demo.generate_cluster`` at ``--scale`` multiplies only the commit rounds (about
5,000 records per unit), so two scales give two history sizes of the same groups and keys,
each with the brokers' recorded answers as a snapshot. Per history size: wall and CPU time
(best of ``--repeat``) of :func:`reconcile` alone, :func:`run_quality_gate` alone,
:func:`run_reconcile` (both, as the CLI runs them, no data docs) and the HTML report; then
``offsetlake reconcile`` as a scheduler runs it (a fresh process: imports, GX, data docs),
beside a fresh process that only imports GX as it is (the baseline: GX's own fixed cost).

Usage: ``python benchmarks/reconcile_incremental.py [--scale N ...] [--repeat N] [--work DIR]``
(default scales 200 and 2000: ~1M and ~10M records; ``--work`` keeps the lakes).
"""

from __future__ import annotations

import argparse
import logging
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pipelines.lake.engines import DeltaRsEngine

log = logging.getLogger("benchmarks.reconcile_incremental")
CLUSTER = "bench"


def build(work: Path, scale: int) -> tuple[Path, int]:
    """A lake of the demo cluster at ``scale`` with its recorded snapshot (kept under ``work``)."""
    from deltalake import DeltaTable

    from pipelines.demo import generate_cluster
    from pipelines.ingest import ingest_segments_local
    from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
    from pipelines.reconcile.snapshot import store_snapshot

    lake, data = work / f"lake-{scale}", work / f"data-{scale}"
    if not (lake / "snapshot_runs").exists():
        start = time.perf_counter()
        generate_cluster(data, scale=scale)
        report = ingest_segments_local(data, lake, cluster_id=CLUSTER)
        store_snapshot(DeltaRsEngine(lake), snapshot_from_recorded(data / "live"), CLUSTER)
        print(f"scale {scale}: generated, ingested ({report.records:,} records) and snapshot "
              f"stored in {time.perf_counter() - start:.1f} s")
    records = len(DeltaTable(str(lake / "offsets_raw")).to_pyarrow_dataset().to_table(columns=[]))
    return lake, records


def _cpu() -> float:
    """CPU seconds of this process and of its children waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, float]:
    """Best wall and best CPU seconds (this process' and its children's) of ``repeat`` calls."""
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), _cpu()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(_cpu() - c)
    return min(walls), min(cpus)


def measure(lake: Path, repeat: int, work: Path, report: bool = True) -> dict[str, tuple[float, float]]:
    from pipelines.reconcile.quality import run_quality_gate
    from pipelines.reconcile.reconcile import reconcile, run_reconcile
    from pipelines.report.html import write_report

    engine = DeltaRsEngine(lake)
    result = run_reconcile(lake, cluster_id=CLUSTER, data_docs=False)  # warm-up (imports, GX)
    if not result.summary["passed"]:
        log.warning("the benchmark lake's reconciliation did not pass: %s", result.summary["classes"])
    n = result.reconciliation.num_partitions
    times = {
        "reconcile": best_of(repeat, lambda: reconcile(engine, cluster_id=CLUSTER)),
        "quality gate": best_of(repeat, lambda: run_quality_gate(
            engine, cluster_id=CLUSTER, num_partitions=n, data_docs=False)),
        "reconcile + gate (CLI)": best_of(repeat, lambda: run_reconcile(
            lake, cluster_id=CLUSTER, data_docs=False)),
    }
    if report:
        times["report"] = best_of(repeat, lambda: write_report(lake, work / "report.html"))
    gx_alone = work / "import_gx.py"  # a file: under -c, pyspark's connect module may exit
    gx_alone.write_text("import great_expectations\n")
    times["import GX (fresh process)"] = best_of(repeat, lambda: fresh_process([str(gx_alone)]))
    times["offsetlake reconcile (CLI)"] = best_of(repeat, lambda: fresh_process(
        ["-m", "pipelines.cli", "reconcile", "--lake", str(lake), "--cluster-id", CLUSTER]))
    return times


def fresh_process(args: list[str]) -> None:
    """Run this interpreter with ``args`` to its end (its CPU: :func:`_cpu`'s children)."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: the gate failed, a verdict, not an error
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")


def print_results(results: dict[int, dict[str, tuple[float, float]]], repeat: int) -> None:
    """One row per measurement, one column per lake size (records)."""
    names = next(iter(results.values())).keys()
    print(f"{'best of ' + str(repeat):<26}" + "".join(f"{f'{r:,} records':>28}" for r in results))
    for name in names:
        print(f"{name:<26}" + "".join(
            f"{f'{t[name][0]:.2f} s wall {t[name][1]:.2f} s CPU':>28}" for t in results.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, action="append",
                        help="demo generator scale (repeatable; default 200 and 2000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, help="keep the generated lakes here")
    parser.add_argument("--no-report", action="store_true", help="skip the HTML report (slow)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = {}
        for scale in args.scale or [200, 2000]:
            lake, records = build(work, scale)
            results[records] = measure(lake, args.repeat, work, not args.no_report)
        print_results(results, args.repeat)


if __name__ == "__main__":
    main()
