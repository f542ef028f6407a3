"""Benchmark: records/s of the ``offsetlake-kafka`` source's read path (raw Fetch -> RAW Arrow).

Why: the Kafka source is the ingest job's reader; a refactoring of its Fetch path must not
slow it down. This loads a generated ``__consumer_offsets`` log (``pipelines.demo``, ~200k
records at ``--scale 40``, gzip/zstd and transactions included) into the in-test Kafka protocol
server (tests/support/fake_broker.py, 3 brokers, same process) and reads every partition up
to its last stable offset with :func:`pipelines.sources.kafka.reader.read_partition`, best of
``--repeat`` runs, once as a consumer sees it and once with ``include_batch_metadata`` (what
ingest reads). The fake broker shares the process and the CPU: the figure is the whole
round trip, broker included, so compare runs on the same machine only.

Usage: ``python benchmarks/kafka_source.py [--scale 40] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.demo import generate_cluster
from pipelines.sources.kafka.options import OFFSETS_TOPIC, SourceOptions
from pipelines.sources.kafka.reader import read_partition
from tests.support.fake_broker import FakeKafkaCluster

log = logging.getLogger("benchmarks.kafka_source")


def _load(kafka: FakeKafkaCluster, root: Path) -> dict[int, int]:
    """Every generated partition into the fake broker: {partition: last stable offset}."""
    ends: dict[int, int] = {}
    for directory in sorted(root.rglob(f"{OFFSETS_TOPIC}-*")):
        if not directory.is_dir():
            continue
        p = int(directory.name.rsplit("-", 1)[1])
        kafka.load_segments(OFFSETS_TOPIC, p, sorted(directory.glob("*.log")))
        ends[p] = kafka.partition(OFFSETS_TOPIC, p).last_stable_offset
    return ends


def _best(opts: SourceOptions, ends: dict[int, int], repeat: int) -> tuple[int, float, float]:
    """(rows, best wall seconds, best CPU seconds of this process) of reading every partition
    ``[0, end)``. CPU time (broker threads included) is the steadier figure on a shared box."""
    sum(b.num_rows for b in read_partition(opts, 0, 0, min(ends[0], 100)))  # warm-up
    best = best_cpu = float("inf")
    rows = 0
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        rows = sum(b.num_rows for p, end in ends.items() for b in read_partition(opts, p, 0, end))
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return rows, best, best_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=40, help="demo generator scale")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode; best is kept")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        generate_cluster(Path(tmp), scale=args.scale, live=False)
        with FakeKafkaCluster(num_brokers=3, offsets_topic_partitions=50,
                              max_lifetime_s=3600) as kafka:
            ends = _load(kafka, Path(tmp))
            print(f"{sum(ends.values()):,} offsets in {len(ends)} partitions, fake broker "
                  f"in-process, best of {args.repeat}")
            for label, extra in (("consumer view", {}),
                                 ("include_batch_metadata", {"include_batch_metadata": "true"})):
                opts = SourceOptions.from_options(
                    {"bootstrap_servers": kafka.bootstrap_servers, **extra})
                rows, seconds, cpu = _best(opts, ends, args.repeat)
                print(f"{label:24s} {rows:>9,} rows  {seconds:6.2f}s  "
                      f"{rows / seconds:>11,.0f} records/s  ({rows / cpu:>11,.0f} per CPU-s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
