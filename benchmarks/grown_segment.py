"""A scheduled run after the busiest partition's active segment grew: what a small run costs
on a big partition (issue 9: cost follows new data), as a user runs it.

The busiest partition directory of ``--data`` (default: a generated history of ~2M records
in one partition) is copied with its last segment cut at a record batch boundary, keeping
``--keep`` of its batches; ``offsetlake ingest`` takes that in once. Then, run after run, the
lake is put back as that ingest left it, the segment grows back to its full length (the new
records), and ``offsetlake ingest`` runs again in a fresh process: the wall time a scheduled
run waits for. With ``--baseline``, an older checkout runs alternately.

    python benchmarks/grown_segment.py --baseline /tmp/before --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cut_copy(data: Path, into: Path, keep: float) -> tuple[Path, bytes]:
    """The busiest partition directory of ``data`` copied into ``into``, its last segment cut
    at a batch boundary (``keep`` of its batches): (the cut segment's path, its full bytes)."""
    import numpy as np
    import pyarrow as pa

    from pipelines.sources.record_batches.arrow_reader import index_segments_arrow
    from pipelines.sources.segments.files import find_segments

    plog = max(find_segments(data), key=lambda p: sum(s.path.stat().st_size for s in p.segments))
    target = into / plog.directory.name
    target.mkdir(parents=True)
    for seg in plog.segments:
        shutil.copyfile(seg.path, target / seg.path.name)
    last = plog.segments[-1]
    rows = pa.Table.from_batches(list(index_segments_arrow([last])))
    starts = np.unique(rows.column("source_position").to_numpy())
    full = last.path.read_bytes()
    cut = int(starts[min(len(starts) - 1, int(len(starts) * keep))])
    (target / last.path.name).write_bytes(full[:cut])
    return target / last.path.name, full


def ingest(checkout: Path, data: Path, lake: Path) -> tuple[float, dict]:
    """``offsetlake ingest`` from ``checkout`` in a fresh process: (wall seconds, summary)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("OFFSETLAKE_LOG_LEVEL", None)
    cmd = [sys.executable, "-m", "pipelines.cli", "ingest", "--source", "segments", "--path", str(data),
           "--lake", str(lake), "--cluster-id", "bench"]
    began = time.perf_counter()
    out = subprocess.run(cmd, cwd=lake.parent, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if out.returncode != 0:
        raise RuntimeError(f"ingest failed in {checkout}: {out.stderr[-2000:]}")
    return wall, json.loads(out.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="segment files (default: generate ~2M records)")
    parser.add_argument("--keep", type=float, default=0.98, help="share of the last segment's batches "
                        "the first ingest reads (default 0.98)")
    parser.add_argument("--runs", type=int, default=3, help="runs per checkout (default 3)")
    parser.add_argument("--baseline", type=Path, help="an older checkout, run alternately")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="grown-segment-") as tmp:
        work = Path(tmp)
        data = args.data
        if data is None:
            from pipelines.demo import generate_cluster

            data = work / "generated"
            generate_cluster(data, num_partitions=1, scale=400, live=False)
        segment, full = cut_copy(data, work / "data", args.keep)
        first_wall, first = ingest(REPO, work / "data", work / "lake0")
        print(f"first ingest: {first['records']:,} records, {first_wall:.2f} s wall "
              f"({len(full) - segment.stat().st_size:,} bytes of the last segment left to grow)")
        trees = {"current": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
        walls: dict[str, list[float]] = {name: [] for name in trees}
        for run in range(args.runs):
            for name, checkout in trees.items():
                lake = work / "lake"
                shutil.rmtree(lake, ignore_errors=True)
                shutil.copytree(work / "lake0", lake, symlinks=True)
                segment.write_bytes(full)  # the active segment grew: the new records
                wall, summary = ingest(checkout, work / "data", lake)
                walls[name].append(wall)
                print(f"  run {run + 1} {name:<8} wall {wall:6.2f} s  records {summary['records']:,}")
        for name, got in walls.items():
            print(f"{name:<8}: best {min(got):.2f} s, median {statistics.median(got):.2f} s wall")
        if args.baseline:
            print(f"current / baseline, best: {min(walls['current']) / min(walls['baseline']):.2f}x")


if __name__ == "__main__":
    main()
