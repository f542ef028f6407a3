"""How the decoding tasks' parts reach the driver: ``collect`` against ``toArrow``.

Each Spark task of a micro-batch hands the driver one binary cell, its pickled part (file
names, counts, the rows the state needs). On a group-heavy history the cells are large (~60
bytes per record: the decoded group records; a 1M-record batch's two cells hold ~60 MB).
This times, in one Spark session, ``collect`` of such cells (the baseline: what the ingest
did before) beside :func:`pipelines.micro_batch.cells_to_driver`, alternately, best of
``--repeat``: wall seconds and the driver's CPU seconds.

    python benchmarks/part_cells.py [--cells 2] [--megabytes 40] [--repeat 3]

Measured (2026-11-29, 2 cores, two 40 MB cells): collect 2.37-2.56 s wall, 0.79-0.81 s of
the driver's CPU; toArrow 0.69-0.87 s wall, 0.11-0.12 s.
"""

from __future__ import annotations

import argparse
import os
import time

import pyarrow as pa


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=2, help="tasks, one cell each")
    ap.add_argument("--megabytes", type=float, default=40.0, help="size of each cell")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from pipelines.micro_batch import cells_to_driver
    from pipelines.spark import spark_session

    size = int(args.megabytes * 1e6)
    spark = spark_session("offsetlake-bench-part-cells", own_workers=True)

    def task(batches):
        for _ in batches:
            pass
        yield pa.RecordBatch.from_arrays([pa.array([os.urandom(size)], pa.binary())], names=["part"])

    cells = spark.range(args.cells, numPartitions=args.cells).mapInArrow(task, "part binary")
    ways = {"collect (baseline)": lambda: [row.part for row in cells.collect()],
            "cells_to_driver (toArrow)": lambda: cells_to_driver(cells)}
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeat):
        for label, way in ways.items():
            wall, cpu = time.perf_counter(), time.process_time()
            got = way()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert len(got) == args.cells and all(isinstance(c, bytes) and len(c) == size for c in got)
            old = best.get(label, (float("inf"), float("inf")))
            best[label] = (min(old[0], wall), min(old[1], cpu))
    spark.stop()
    print(f"{args.cells} cells of {args.megabytes:g} MB, best of {args.repeat}:")
    for label, (wall, cpu) in best.items():
        print(f"  {label:<28} wall {wall:6.2f} s   driver cpu {cpu:6.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
