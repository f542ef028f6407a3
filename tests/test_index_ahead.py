"""Indexing the segment files while the JVM starts: the cache holds exactly what the source
would index itself, and a checkpoint of another source is refused before Spark starts."""

from __future__ import annotations

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
