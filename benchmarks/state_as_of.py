"""Benchmark: ``offsetlake state --as-of`` (DuckDB) and the report's group pages, by history size.

Why: the as-of answer folds the history written by an instant, so its cost grows with the
history; this measures how much, on a generated lake (pipelines/demo/ at ``--scale``) or an
existing one (``--lake``): the wall time of :func:`state_as_of_duckdb` at a few instants across
the history (best of ``--repeat``), with and without ``--group``, and of the whole report.

Usage: ``python benchmarks/state_as_of.py [--scale N | --lake PATH] [--repeat N]``
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from deltalake import DeltaTable

from pipelines.queries.state_as_of import state_as_of_duckdb
from pipelines.report.html import write_report

log = logging.getLogger("benchmarks.state_as_of")


def _best(repeat: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def run(lake: Path, repeat: int) -> None:
    commits = DeltaTable(str(lake / "offset_commits")).to_pyarrow_table(
        columns=["group_id", "record_timestamp"])
    times = sorted(commits.column("record_timestamp").to_pylist())
    busiest = max(set(commits.column("group_id").to_pylist()),
                  key=commits.column("group_id").to_pylist().count)
    print(f"lake {lake}: {commits.num_rows:,} offset commit records, "
          f"{times[0]:%H:%M:%S} -> {times[-1]:%H:%M:%S}; busiest group {busiest}")
    for frac in (0.25, 0.5, 1.0):
        at = times[min(len(times) - 1, int(frac * (len(times) - 1)))]
        secs, state = _best(repeat, lambda at=at: state_as_of_duckdb(lake, at))
        g_secs, _ = _best(repeat, lambda at=at: state_as_of_duckdb(lake, at, group_id=busiest))
        print(f"  as of {frac:4.0%} of the history: {secs * 1000:7.1f} ms all groups "
              f"({state.offsets.num_rows:,} offsets, {state.groups.num_rows} groups), "
              f"{g_secs * 1000:7.1f} ms --group {busiest}")
    with tempfile.TemporaryDirectory() as tmp:
        secs, _ = _best(1, lambda: write_report(lake, Path(tmp) / "r.html"))
        print(f"  report (all groups, with group pages): {secs:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=10, help="demo generator scale")
    parser.add_argument("--lake", type=Path, help="an existing lake instead of a generated one")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.lake:
        run(args.lake, args.repeat)
        return
    from pipelines.demo import generate_cluster
    from pipelines.ingest import ingest_segments_local

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        generate_cluster(root / "data", scale=args.scale)
        ingest_segments_local(root / "data", root / "lake", cluster_id="bench")
        print(f"generated and ingested scale {args.scale} in {time.perf_counter() - start:.1f} s "
              f"({datetime.now(timezone.utc):%H:%M:%S} UTC)")
        run(root / "lake", args.repeat)


if __name__ == "__main__":
    main()
