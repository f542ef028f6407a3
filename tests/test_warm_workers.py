"""Spark's Python workers started ahead of the first micro-batch (pipelines.spark_workers), and
the guess that decides whether that is worth it (pipelines.ingest._records_past_the_lake)."""

from __future__ import annotations

import threading
from pathlib import Path

from pipelines.demo import generate_cluster
from pipelines.ingest import IngestConfig, _records_past_the_lake, ingest_segments_local
from pipelines.lake.engines import make_engine
from pipelines.spark_workers import TASK_MODULES, WarmWorkers


def _jobs(spark, group: str) -> list[str]:
    tracker = spark.sparkContext.statusTracker()
    return [tracker.getJobInfo(i).status for i in tracker.getJobIdsForGroup(group)]


def _loaded(batches):
    import sys

    import pyarrow as pa

    yield pa.RecordBatch.from_pylist([{"name": m, "loaded": m in sys.modules} for m in TASK_MODULES])


def test_the_workers_start_ahead_in_a_job_of_their_own(spark) -> None:
    warm = WarmWorkers(spark, 2)
    warm.thread.join()
    warm.stop()
    assert _jobs(spark, warm.group) == ["SUCCEEDED"]
    # a later task runs in a worker the job started: the decoder's modules are imported already
    rows = spark.range(1).mapInArrow(_loaded, "name string, loaded boolean").collect()
    assert {r.name: r.loaded for r in rows} == dict.fromkeys(TASK_MODULES, True)


def test_no_job_when_the_run_has_nothing_to_read(spark) -> None:
    warm = WarmWorkers(spark, 2, worth_it=lambda: False)
    warm.stop()
    assert _jobs(spark, warm.group) == []


def test_a_stop_before_the_job_starts_means_no_job(spark) -> None:
    asked = threading.Event()
    answer = threading.Event()

    def worth_it() -> bool:
        asked.set()
        answer.wait(30)
        return True

    warm = WarmWorkers(spark, 2, worth_it=worth_it)
    asked.wait(30)
    stopping = threading.Thread(target=warm.stop)
    stopping.start()
    while not warm.stopped.is_set():
        stopping.join(0.01)
    answer.set()  # the guess says yes, after the run ended
    stopping.join(30)
    assert not stopping.is_alive()
    assert _jobs(spark, warm.group) == []


def _append_commits(data: Path) -> None:
    """One more record batch of offset commits at the end of the first partition's log."""
    from pipelines.sources.record_batches.exact_reader import read_records
    from pipelines.sources.record_batches.writer import SegmentWriter
    from pipelines.sources.segments.files import find_segments

    plog = find_segments(data)[0]
    records = list(read_records(plog.directory))
    commits = [(r.key, r.value) for r in records if r.key and r.key[:2] == b"\x00\x01" and r.value]
    last = records[-1]
    writer = SegmentWriter(plog.directory.parent, plog.offsets_partition, base_offset=last.offset + 1,
                           partition_leader_epoch=last.batch.partition_leader_epoch)
    writer.append(commits[:3], timestamp=max(r.timestamp for r in records) + 1000)
    writer.close()


def test_the_guess_follows_the_lake_and_the_segment_files(tmp_path: Path) -> None:
    data, lake = tmp_path / "data", tmp_path / "lake"
    generate_cluster(data, num_partitions=2, seed=3, live=False)
    cfg = IngestConfig(source="segments", lake=lake, path=str(data))
    engine = make_engine("delta-rs", lake)
    assert _records_past_the_lake(cfg, engine)  # nothing ingested yet
    ingest_segments_local(data, lake, cluster_id=cfg.cluster_id)
    assert not _records_past_the_lake(cfg, engine)  # every record is in the lake
    _append_commits(data)
    assert _records_past_the_lake(cfg, engine)
    other = IngestConfig(source="segments", lake=lake, path=str(data), cluster_id="another")
    assert _records_past_the_lake(other, engine)  # the lake holds none of that cluster's
    kafka = IngestConfig(source="kafka", lake=lake, bootstrap_servers="127.0.0.1:1")
    assert _records_past_the_lake(kafka, engine)
