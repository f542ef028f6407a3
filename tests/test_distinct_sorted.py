"""``distinct_sorted`` gives ``np.unique``'s answer for the integer arrays the pipeline has
(log positions, row and file numbers, key ids, capture times), without its hash table."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.model import distinct_sorted

RNG = np.random.default_rng(7)

CASES = {
    "empty": np.zeros(0, np.int64),
    "one": np.array([5], np.int64),
    "all equal": np.full(1000, -3, np.int64),
    "ascending runs with repeats": np.concatenate([np.repeat(np.arange(100, 200), 3), np.arange(0, 150)]),
    "descending": np.arange(10_000, 0, -1, dtype=np.int64),
    "random int64, negatives and extremes": np.r_[RNG.integers(-(1 << 62), 1 << 62, 50_000),
                                                  np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0],
    "random int32": RNG.integers(-1000, 1000, 20_000).astype(np.int32),
    "int16 (a radix sort)": RNG.integers(0, 300, 5_000).astype(np.int16),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_distinct_values_in_ascending_order(name: str) -> None:
    values = CASES[name]
    got = distinct_sorted(values)
    assert got.dtype == values.dtype
    assert got.tolist() == sorted(set(values.tolist()))


def test_the_input_is_left_as_it_was() -> None:
    values = np.array([3, 1, 3, 2], np.int64)
    distinct_sorted(values)
    assert values.tolist() == [3, 1, 3, 2]
