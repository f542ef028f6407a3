"""Benchmark (e): micro-batches of the ``offsetlake-kafka`` source on compacted partitions.

Why: ``__consumer_offsets`` is always compacted, so its offsets are mostly holes. A source
that cuts ``--max-records-per-batch`` by offset ranges then runs mostly empty micro-batches
(against a real Kafka 4.2 broker: 481 micro-batches, 57 with data, 236 s for 19,914 records
at 500 records per batch). This generates a history (``pipelines.demo``), compacts it the way
the log cleaner does (the last record of every key kept, at its original offset; markers and
aborted data gone; batches keep their base offsets), serves it from the in-test Kafka
protocol server (tests/support/fake_broker.py, same process) and runs the source as the
ingest job does (packed rows, ``include_batch_metadata``, ``trigger(availableNow=True)``,
``max_records_per_batch``) into a ``foreachBatch`` that counts rows. Printed: micro-batches,
batches with data, largest batch, wall time, records/s and this process's CPU time (driver
planning and the broker; the Python workers are separate processes).

Usage: ``python benchmarks/kafka_compacted.py [--scale 12] [--max-records-per-batch 500]``

Measured (2 shared cores, load 4-19, old and new run alternately, best of 2; defaults: 3,052
records over 60,211 offsets, 10 partitions): offset ranges (before issue 9) 88 micro-batches,
23 with data, 47.6 s (82.9 s) wall, 64 records/s, driver+broker CPU 1.1 s; records counted
ahead: 7 micro-batches, all with data, 7.7 s (14.1 s) wall, 399 records/s, CPU 0.1 s.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.demo import generate_cluster
from pipelines.sources.kafka.options import OFFSETS_TOPIC
from pipelines.sources.raw import unpacked
from pipelines.sources.record_batches.writer import NewRecord, encode_batch
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import emitted_table
from tests.support.fake_broker import FakeKafkaCluster

log = logging.getLogger("benchmarks.kafka_compacted")


def compacted_log(segments: list, dirty_fraction: float) -> tuple[bytes, int, int]:
    """The log the cleaner leaves of ``segments``: (batch bytes, records kept, log end).

    Below the dirty head (the last ``dirty_fraction`` of the offsets, which the cleaner has
    not reached yet) only the last record of every key is kept (tombstones too), at its
    offset; every batch keeps its base offset and last offset, as the cleaner keeps them.
    Markers and aborted data are gone."""
    table = emitted_table(segments, "bench")
    table = table.filter(pc.invert(table.column("is_control")))
    if table.num_rows == 0:
        return b"", 0, 0
    offsets = table.column("offset").to_pylist()
    bases = table.column("batch_base_offset").to_pylist()
    end = offsets[-1] + 1
    head = end - int(end * dirty_fraction)
    last_of_batch = {b: o for b, o in zip(bases, offsets, strict=True)}
    last_of_key = {k: i for i, k in enumerate(table.column("key").to_pylist())}
    keep = sorted({*last_of_key.values(), *(i for i, o in enumerate(offsets) if o >= head)})
    table = table.take(pa.array(keep, pa.int64()))
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp",
                             table.column("timestamp").cast(pa.int64()).fill_null(-1))
    out = bytearray()
    rows = table.select(["offset", "timestamp", "key", "value", "batch_base_offset"]).to_pylist()
    for i, row in enumerate(rows):
        if i == 0 or row["batch_base_offset"] != rows[i - 1]["batch_base_offset"]:
            group: list[NewRecord] = []
        group.append(NewRecord(row["offset"], row["timestamp"], row["key"], row["value"]))
        base = row["batch_base_offset"]
        if i + 1 == len(rows) or rows[i + 1]["batch_base_offset"] != base:
            out += encode_batch(group, base_offset=base, last_offset_delta=last_of_batch[base] - base)
    return bytes(out), len(rows), end


def _load(kafka: FakeKafkaCluster, root: Path, dirty_fraction: float) -> tuple[int, int]:
    """Every partition compacted into the broker: (records kept, offsets spanned)."""
    kept = spanned = 0
    for plog in find_segments(root):
        raw, n, end = compacted_log(plog.segments, dirty_fraction)
        kafka.set_log(OFFSETS_TOPIC, plog.offsets_partition, raw)
        kafka.partition(OFFSETS_TOPIC, plog.offsets_partition).set_offsets(log_end_offset=end)
        kept += n
        spanned += end
    return kept, spanned


def run_source(spark, bootstrap: str, budget: int, checkpoint: Path,
               topic: str = OFFSETS_TOPIC) -> dict[str, float]:
    """One availableNow run of the source as ingest reads it; what its micro-batches held."""
    from pipelines.sources.kafka import spark_source

    spark_source.register(spark)
    sizes: list[int] = []

    def count(df, _batch_id: int) -> None:
        sizes.append(unpacked(df.toArrow()).num_rows)  # packed rows: one per Arrow batch

    reader = (spark.readStream.format(spark_source.SOURCE_NAME)
              .option("bootstrap_servers", bootstrap).option("cluster_id", "bench")
              .option("topic", topic)
              .option("include_batch_metadata", "true").option("packed", "true")
              .option("max_records_per_batch", str(budget)))
    started, cpu = time.perf_counter(), time.process_time()
    query = (reader.load().writeStream.foreachBatch(count)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    rows = sum(sizes)
    return {"batches": len(sizes), "with_data": sum(1 for s in sizes if s),
            "largest": max(sizes, default=0), "rows": rows, "wall": wall, "cpu": cpu,
            "rate": rows / wall if wall else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=12, help="demo generator scale")
    parser.add_argument("--partitions", type=int, default=10, help="offsets partitions")
    parser.add_argument("--max-records-per-batch", type=int, default=500)
    parser.add_argument("--dirty-fraction", type=float, default=0.05,
                        help="share of each partition's offsets the cleaner has not reached")
    parser.add_argument("--repeat", type=int, default=2, help="runs; each is printed")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from pipelines.spark import spark_session

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        generate_cluster(root, scale=args.scale, num_partitions=args.partitions, live=False)
        with FakeKafkaCluster(num_brokers=1, offsets_topic_partitions=args.partitions,
                              max_lifetime_s=3600) as kafka:
            kept, spanned = _load(kafka, root, args.dirty_fraction)
            print(f"compacted log: {kept:,} records over {spanned:,} offsets "
                  f"({100 * kept / max(spanned, 1):.1f}% dense) in {args.partitions} partitions; "
                  f"max_records_per_batch {args.max_records_per_batch}")
            spark = spark_session("bench-kafka-compacted", master="local[2]")
            # Spark's first query (Python workers, JIT) costs ~20-30 s here: paid on a
            # one-partition warm-up topic, not in the runs measured
            kafka.add_topic("warmup", 1)
            kafka.set_log("warmup", 0, compacted_log(find_segments(root)[0].segments, 0.05)[0],
                          log_start_offset=0)
            run_source(spark, kafka.bootstrap_servers, args.max_records_per_batch,
                       Path(tmp) / "warmup", topic="warmup")
            for i in range(args.repeat):
                r = run_source(spark, kafka.bootstrap_servers, args.max_records_per_batch,
                               Path(tmp) / f"cp{i}")
                print(f"run {i + 1}: {r['batches']:.0f} micro-batches ({r['with_data']:.0f} with "
                      f"data, largest {r['largest']:,.0f} records), {r['rows']:,.0f} records in "
                      f"{r['wall']:.1f}s wall ({r['rate']:,.0f} records/s), driver+broker CPU "
                      f"{r['cpu']:.1f}s")
                if r["rows"] != kept:
                    raise SystemExit(f"read {r['rows']} records, the log holds {kept}")
            spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
