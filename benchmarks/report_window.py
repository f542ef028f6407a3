"""Benchmark: ``offsetlake report`` by history size, whole history vs a ``--since`` window.

Why: a report scheduled after each ingest should cost what the recent history costs, not
what the lake has piled up. Two history sizes of the same groups and keys (the demo cluster
at two ``--scale`` values, as in ``reconcile_incremental.py``: ~5,000 records per unit, the
same commit rate, so a window of the same length holds the same number of commits). The
lake is the one that benchmark builds; its history tables (``offset_commits``,
``commit_attribution``) are then laid out by time with delta-rs' ``optimize.z_order`` on
``record_timestamp``, the layout scheduled ingests give them (each run appends the new
commits in new files) and the one ``--since`` relies on to skip whole files.

Printed per history size, best of ``--repeat``, wall and CPU seconds: the report of the
whole history and the report with ``--since`` (default ``2h`` before the newest record).
Run it again with ``PYTHONPATH=/tmp/before`` (a checkout without ``--since``) for the
baseline's whole-history figures: its write_report has no ``since``, so only those print.

Usage: ``python benchmarks/report_window.py [--scale N ...] [--since 2h] [--repeat N]
[--work DIR]`` (default scales 200 and 2000: ~1M and ~10M records).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import shutil
import tempfile
from pathlib import Path

from reconcile_incremental import best_of, build, print_results

TIME_LAID_TABLES = ("offset_commits", "commit_attribution")


def time_laid(work: Path, scale: int) -> tuple[Path, int]:
    """The benchmark lake at ``scale`` with its history tables in files by time (built once)."""
    from deltalake import DeltaTable

    lake, records = build(work, scale)
    laid = work / f"lake-{scale}-by-time"
    if not laid.exists():
        shutil.copytree(lake, laid)
        for table in TIME_LAID_TABLES:
            DeltaTable(str(laid / table)).optimize.z_order(["record_timestamp"],
                                                           target_size=1 << 20)
    return laid, records


def measure(lake: Path, repeat: int, work: Path, since: str) -> dict[str, tuple[float, float]]:
    from pipelines.report.html import write_report

    write_report(lake, work / "warm-up.html")  # imports, plotly.js
    times = {"report, whole history": best_of(repeat, lambda: write_report(lake, work / "all.html"))}
    if "since" in inspect.signature(write_report).parameters:
        times[f"report --since {since}"] = best_of(
            repeat, lambda: write_report(lake, work / "window.html", since=since))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, action="append",
                        help="demo generator scale (repeatable; default 200 and 2000)")
    parser.add_argument("--since", default="2h", help="the window (default 2h)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, help="keep the generated lakes here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = {}
        for scale in args.scale or [200, 2000]:
            lake, records = time_laid(work, scale)
            results[records] = measure(lake, args.repeat, work, args.since)
        print_results(results, args.repeat)


if __name__ == "__main__":
    main()
