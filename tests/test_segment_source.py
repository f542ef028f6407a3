"""Micro-batch planning of the segments source: bounded, fair, and never past what exists."""

from __future__ import annotations

import numpy as np

from pipelines.sources.segment_source import PartitionIndex, plan_end_offsets


def _idx(offsets: list[int]) -> PartitionIndex:
    return PartitionIndex(np.array(offsets, dtype=np.int64), (offsets[-1] + 1) if offsets else 0, ())


def test_plan_takes_everything_without_a_limit() -> None:
    indexes = {"a": _idx([0, 1, 5, 9]), "b": _idx([3, 4])}
    assert plan_end_offsets(indexes, {}, None) == {"a": 10, "b": 5}


def test_plan_bounds_the_batch_and_shares_it_fairly() -> None:
    indexes = {"a": _idx(list(range(0, 100, 2))), "b": _idx([7, 8])}  # a: 50 records with gaps
    end = plan_end_offsets(indexes, {}, 10)
    assert end["b"] == 9  # the small partition gets all of its backlog
    assert end["a"] == 16  # offsets 0..14: the 8 records left of the budget
    resumed = plan_end_offsets(indexes, end, 10)
    assert resumed["a"] == 36 and resumed["b"] == 9  # the next 10 records of a, nothing new in b
