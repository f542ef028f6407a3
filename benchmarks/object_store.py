"""Ingest throughput with the lake on an S3 server beside the same ingest into a local lake.

One run, one Spark session, the same generated history and batch size: the streaming job
(Spark tasks decode and write the history Parquet straight to the store, the driver
commits) into a local lake, then into a lake on moto's S3 server on loopback, then the
same without Spark (driver only) on both, after an uncounted warm-up run. moto keeps objects in memory in one Python
process, so the S3 figure is a bound on the protocol's cost (requests, commits, listings),
not a forecast for AWS.

    python benchmarks/object_store.py               # scale 100 (~500k records)
    python benchmarks/object_store.py --scale 400
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.servers starts the S3 server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=100, help="demo generator scale")
    parser.add_argument("--max-records-per-batch", type=int, default=200_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from pipelines.demo import generate_cluster
    from pipelines.ingest import IngestConfig, ingest_segments_local, run_ingest
    from pipelines.lake.location import lake_location
    from pipelines.spark import spark_session
    from tests.support.servers import moto_installed, moto_server

    if not moto_installed():
        raise SystemExit("moto's server is not installed: pip install -e '.[dev]'")
    work = Path(tempfile.mkdtemp(prefix="offsetlake-bench-store-"))
    data = work / "data"
    manifest = generate_cluster(data, num_partitions=10, scale=args.scale)
    spark = spark_session("offsetlake-bench-store")
    rows = []
    try:
        # warm-up (JVM, Python workers), not counted: the first run would pay for both
        warm = work / "warm"
        generate_cluster(warm / "data", num_partitions=10, scale=1)
        run_ingest(spark, IngestConfig(source="segments", lake=warm / "lake", path=str(warm / "data"),
                                       cluster_id="warm", checkpoint=warm / "checkpoint"))
        with moto_server() as s3:
            lakes = [("local disk", lake_location(work / "lake")),
                     ("S3 (moto, loopback)", lake_location(s3.lake_uri("bench"), s3.storage_options))]
            for name, lake in lakes:
                rep = run_ingest(spark, IngestConfig(
                    source="segments", lake=lake, path=str(data), cluster_id="bench",
                    checkpoint=work / f"checkpoint-{len(rows)}",
                    max_records_per_batch=args.max_records_per_batch))
                rows.append((f"Spark, {name}", rep.records, rep.seconds, rep.batches))
            for name, lake in lakes:
                target = lake.child("driver-only") if not lake.is_local else lake_location(
                    work / "lake-driver")
                started = time.perf_counter()
                rep = ingest_segments_local(data, target, cluster_id="bench",
                                            max_records_per_batch=args.max_records_per_batch)
                rows.append((f"no Spark, {name}", rep.records, time.perf_counter() - started,
                             rep.batches))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{manifest.counts['records']:,} generated records, "
          f"max {args.max_records_per_batch:,} per batch")
    print(f"{'ingest':<32}{'records':>10}{'batches':>9}{'seconds':>9}{'records/s':>12}")
    for name, records, seconds, batches in rows:
        print(f"{name:<32}{records:>10,}{batches:>9}{seconds:>9.1f}{records / seconds:>12,.0f}")


if __name__ == "__main__":
    main()
