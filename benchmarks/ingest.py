"""Ingest throughput: segment files -> every Delta table, on local Spark (2 cores here).

Prints records/second for the streaming job (availableNow, bounded micro-batches) on the
public corpus and on a generated history, the cost of an incremental run after 1% new
data, and the ratio to a naive baseline run in this same process (per-record decode and
a Python dict fold, no Delta writes: roughly what ``kafka-dump-log --offsets-decoder``
does, which the issue measured at ~17k records/s on this machine kind).

    python benchmarks/ingest.py                      # public corpus + 1M generated records
    python benchmarks/ingest.py --scale 2000         # ~10M generated records
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KAFKA_DUMP_LOG_RATE = 17_000  # records/s, kafka-dump-log --offsets-decoder (issue #3)


def naive_baseline(path: Path) -> tuple[int, float]:
    """Per-record decode + dict fold of offsets: the in-process yardstick."""
    from pipelines.decode import decode_record
    from pipelines.sources.record_batches.exact_reader import read_records

    started = time.perf_counter()
    state: dict = {}
    n = 0
    for rec in read_records(path):
        n += 1
        d = decode_record(rec.key, rec.value, rec.batch.is_control)
        if d.record_type in (0, 1) and d.key is not None:
            key = (d.key["group"], d.key["topic"], d.key["partition"])
            if d.value is None:
                state.pop(key, None)
            else:
                state[key] = d.value["offset"]
    return n, time.perf_counter() - started


def corpus_as_data_dirs(corpus: Path, into: Path) -> Path:
    """Each committed version (``.log@commit``) of a corpus file as its own data dir.

    The corpus keeps several git versions of one segment side by side; a broker never
    does, so each version becomes one small "cluster" and every record counts once.
    """
    from pipelines.sources.segments.files import find_segments

    for plog in find_segments(corpus):
        for seg in plog.segments:
            version = seg.suffix.lstrip("@.") or "head"
            rel = plog.directory.relative_to(corpus)
            target = into / f"{rel.parent}@{version}" / plog.directory.name / f"{seg.base_offset:020d}.log"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(seg.path)
    return into


def append_one_percent(data: Path, seed: int = 11) -> int:
    """Append 1% more offset commits to every partition, as a new rolled segment."""
    import random

    from pipelines.sources.record_batches.exact_reader import read_records
    from pipelines.sources.record_batches.writer import SegmentWriter
    from pipelines.sources.segments.files import find_segments

    rng = random.Random(seed)
    added = 0
    for plog in find_segments(data):
        records = list(read_records(plog.directory))
        commits = [r for r in records if r.key and r.key[:2] == b"\x00\x01" and r.value is not None]
        if not commits:
            continue
        last = records[-1]
        writer = SegmentWriter(plog.directory.parent, plog.offsets_partition, base_offset=last.offset + 1,
                               partition_leader_epoch=last.batch.partition_leader_epoch)
        picked = [(r.key, r.value) for r in rng.choices(commits, k=max(1, len(records) // 100))]
        ts = max(r.timestamp for r in records) + 1000
        for i in range(0, len(picked), 50):
            writer.append(picked[i:i + 50], timestamp=ts + i)
        writer.close()
        added += len(picked)
    return added


def run_ingest_timed(spark, data: Path, lake: Path, cluster_id: str, batch: int):
    from pipelines.ingest import IngestConfig, run_ingest

    return run_ingest(spark, IngestConfig(source="segments", lake=lake, path=str(data), cluster_id=cluster_id,
                                          max_records_per_batch=batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpus" / "public")
    parser.add_argument("--scale", type=int, default=200, help="demo generator scale (200 ~ 1M, 2000 ~ 10M records)")
    parser.add_argument("--max-records-per-batch", type=int, default=None,
                        help="default: the product's (pipelines.sources.batching)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep data and lakes here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from pipelines.demo import generate_cluster
    from pipelines.ingest import ingest_segments_local
    from pipelines.sources.batching import DEFAULT_MAX_RECORDS_PER_BATCH
    from pipelines.spark import spark_session

    args.max_records_per_batch = args.max_records_per_batch or DEFAULT_MAX_RECORDS_PER_BATCH

    work = args.workdir or Path(tempfile.mkdtemp(prefix="offsetlake-bench-"))
    for old in ("public", "lake-public", "lake-public-local", "generated", "lake-generated", "lake-local"):
        shutil.rmtree(work / old, ignore_errors=True)  # a kept --workdir: fresh data and lakes again
    spark = spark_session("offsetlake-bench")
    rows = []

    if args.corpus.exists():
        data = corpus_as_data_dirs(args.corpus, work / "public")
        n, secs = naive_baseline(data)
        base_rate = n / secs
        rep = run_ingest_timed(spark, data, work / "lake-public", "auto", args.max_records_per_batch)
        rows.append(("public corpus (cold JVM)", rep.records, rep.seconds, rep.records_per_second, base_rate))
        local = ingest_segments_local(data, work / "lake-public-local", cluster_id="auto",
                                      max_records_per_batch=args.max_records_per_batch)
        rows.append(("  same, no Spark (driver)", local.records, local.seconds, local.records_per_second,
                     base_rate))

    gen_dir = work / "generated"
    started = time.perf_counter()
    manifest = generate_cluster(gen_dir, num_partitions=10, scale=args.scale)
    gen_secs = time.perf_counter() - started
    n, secs = naive_baseline(gen_dir)
    base_rate = n / secs
    lake = work / "lake-generated"
    rep = run_ingest_timed(spark, gen_dir, lake, "bench", args.max_records_per_batch)
    rows.append((f"generated (scale {args.scale})", rep.records, rep.seconds, rep.records_per_second, base_rate))

    local = ingest_segments_local(gen_dir, work / "lake-local", cluster_id="bench",
                                  max_records_per_batch=args.max_records_per_batch)
    rows.append(("  same, no Spark (driver)", local.records, local.seconds, local.records_per_second, base_rate))

    empty = run_ingest_timed(spark, gen_dir, lake, "bench", args.max_records_per_batch)
    added = append_one_percent(gen_dir)
    inc = run_ingest_timed(spark, gen_dir, lake, "bench", args.max_records_per_batch)

    print(f"\ngenerated {manifest.counts['records']:,} records in {gen_secs:.1f}s; work dir {work}")
    print(f"{'data':<26}{'records':>12}{'seconds':>10}{'records/s':>12}{'baseline/s':>12}"
          f"{'vs baseline':>13}{'vs dump-log':>13}")
    for name, records, seconds, rate, base in rows:
        print(f"{name:<26}{records:>12,}{seconds:>10.1f}{rate:>12,.0f}{base:>12,.0f}"
              f"{rate / base:>12.1f}x{rate / KAFKA_DUMP_LOG_RATE:>12.1f}x")
    print(f"incremental run, no new data: {empty.seconds:.1f}s, {empty.records} records")
    print(f"incremental run after +{added:,} records (1%): {inc.seconds:.1f}s, {inc.records:,} records")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
