"""Indexing the segment files while the JVM starts: the cache holds exactly what the source
would index itself, and a checkpoint of another source is refused before Spark starts."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.demo import generate_cluster
from pipelines.ingest import IngestConfig, index_ahead
from pipelines.source_identity import CheckpointMismatch
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import SegmentIndexCache, index_partition


def test_the_cache_holds_what_the_source_indexes_itself(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=3, seed=5, live=False, compression=["none", "lz4"])
    cfg = IngestConfig(source="segments", lake=tmp_path / "lake", path=str(data))
    thread = index_ahead(cfg)
    thread.join()
    segments = [seg for plog in find_segments(str(data)) for seg in plog.segments]
    cached = sorted((cfg.checkpoint_dir / "segment_index").glob("*.parquet"))
    assert len(cached) == len(segments) >= 3
    own = SegmentIndexCache(tmp_path / "own-index")  # the source's own indexing, from scratch
    ahead = SegmentIndexCache(cfg.checkpoint_dir / "segment_index")
    for seg in segments:
        expected = own.rows(seg)
        assert expected.num_rows > 0
        assert ahead.rows(seg).equals(expected)
        assert ahead.problems(seg) == own.problems(seg)
    assert all(pq.read_metadata(p).num_rows > 0 for p in cached)
    # and each partition's finished index, as the source would build it
    plogs = find_segments(str(data))
    assert len(list((cfg.checkpoint_dir / "segment_index").glob("partition-*.arrow"))) == len(plogs)
    for plog in plogs:
        expected = index_partition(plog)
        stored = ahead.partition(plog, expected.signature)
        assert stored is not None and len(stored.offsets) > 0
        for name in ("offsets", "aborted", "run_row", "run_file", "run_pos"):
            assert np.array_equal(getattr(stored, name), getattr(expected, name)), name
        assert (stored.last_stable_offset, stored.files) == (expected.last_stable_offset, expected.files)


def test_a_checkpoint_of_another_source_is_refused_before_spark(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=1, seed=5, live=False)
    checkpoint = tmp_path / "checkpoint"
    first = IngestConfig(source="segments", lake=tmp_path / "lake", path=str(data),
                         checkpoint=checkpoint)
    index_ahead(first).join()
    other = IngestConfig(source="segments", lake=tmp_path / "lake", path=str(tmp_path / "elsewhere"),
                         checkpoint=checkpoint)
    with pytest.raises(CheckpointMismatch):
        index_ahead(other)


def test_only_segment_sources_index_ahead(tmp_path: Path) -> None:
    cfg = IngestConfig(source="kafka", lake=tmp_path / "lake", bootstrap_servers="127.0.0.1:1")
    assert index_ahead(cfg) is None
    assert not (tmp_path / "lake").exists()


def _index_with(cache_dir: str, data: str, go, delay: float, out) -> None:
    """A process indexing every partition of ``data`` into ``cache_dir`` once ``go`` is set,
    each file and partition it indexes itself taking ``delay`` longer; it reports the files
    and the partitions it indexed."""
    import time

    from pipelines.sources.segments import index as ix

    real_rows, real_build = ix._index_rows, ix._build_index
    files, partitions = [], []

    def slow_rows(segment, problems=None):
        files.append(str(segment.path))
        time.sleep(delay)
        return real_rows(segment, problems)

    def slow_build(plog, sig, cache):
        partitions.append(plog.offsets_partition)
        time.sleep(delay)
        return real_build(plog, sig, cache)

    ix._index_rows, ix._build_index = slow_rows, slow_build
    go.wait()
    indexes = ix.index_partitions(find_segments(data), ix.SegmentIndexCache(cache_dir))
    out.put((files, partitions, [len(i.offsets) for i in indexes]))


def test_processes_indexing_at_once_index_each_file_and_partition_once(tmp_path: Path) -> None:
    """The driver's index-ahead thread and the source's planner start on the same files:
    each file and each partition is indexed by one of them (the others go on to the next,
    and wait for it at the end), and all get the index a process of its own builds."""
    import multiprocessing

    data = tmp_path / "data"
    generate_cluster(data, num_partitions=3, seed=5, live=False, compression=["none", "lz4"],
                     segment_bytes=32 * 1024)
    segments = [str(seg.path) for plog in find_segments(str(data)) for seg in plog.segments]
    assert len(segments) >= 3 * 3
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_index_with, args=(str(tmp_path / "cache"), str(data), go, 0.1, out))
             for _ in range(3)]
    for p in procs:
        p.start()
    go.set()
    reports = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    plogs = find_segments(str(data))
    assert sorted(f for files, _, _ in reports for f in files) == sorted(segments)  # once each
    assert sorted(n for _, built, _ in reports for n in built) == sorted(p.offsets_partition for p in plogs)
    assert sum(1 for files, _, _ in reports if files) >= 2  # the work was shared
    whole = [len(index_partition(plog).offsets) for plog in plogs]  # each built alone, no cache
    assert all(sizes == whole for _, _, sizes in reports)
    cached, own = SegmentIndexCache(tmp_path / "cache"), SegmentIndexCache(tmp_path / "own")
    for plog in find_segments(str(data)):
        for seg in plog.segments:
            assert cached.rows(seg).equals(own.rows(seg))
    assert not list((tmp_path / "cache").glob("*.indexing")) and not list((tmp_path / "cache").glob("*.tmp"))


def test_a_claim_left_by_a_dead_process_is_taken_over_and_a_live_one_waited_for(tmp_path: Path) -> None:
    import subprocess
    import sys
    import threading
    import time

    data = tmp_path / "data"
    generate_cluster(data, num_partitions=1, seed=5, live=False)
    seg = find_segments(str(data))[0].segments[0]
    cache = SegmentIndexCache(tmp_path / "cache")
    claim = cache._entry(seg.path).with_suffix(".indexing")
    (tmp_path / "cache").mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claim.write_text(dead.stdout.strip())  # a process that is gone
    taken = {}
    taker = threading.Thread(target=lambda: taken.update(rows=cache.rows(seg)), daemon=True)
    taker.start()
    taker.join(timeout=30)
    assert not taker.is_alive(), "a dead process's claim was waited for"
    assert taken["rows"].num_rows > 0 and not claim.exists()
    # a live claim: rows() waits until its holder's entry appears, and indexes nothing itself
    other = SegmentIndexCache(tmp_path / "cache2")
    holder = other._entry(seg.path).with_suffix(".indexing")
    (tmp_path / "cache2").mkdir()
    holder.write_text(str(os.getpid()))
    got = {}
    waiter = threading.Thread(target=lambda: got.update(rows=other.rows(seg)), daemon=True)
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive() and not other._entry(seg.path).exists()  # waiting, not indexing
    SegmentIndexCache(tmp_path / "cache2")._index(seg, other._entry(seg.path))  # the holder's work
    holder.unlink()
    waiter.join(timeout=30)
    assert not waiter.is_alive() and got["rows"].equals(cache.rows(seg))
