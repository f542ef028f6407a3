"""Differential fuzzing: the production (vectorized) reader against the exact reader.

Why: ingest reads segments with :mod:`pipelines.sources.record_batches.arrow_reader`, a vectorized re-implementation
of the exact per-record reader (:func:`pipelines.sources.record_batches.exact_reader.decode_segment_bytes`). On
any input, damaged or not, both must yield the same records (every column) and report the
same problems (file, byte position, bytes skipped, reason): otherwise what lands in the lake
and ``ingest_problems`` would depend on which reader ran. If they ever differ, the reader
is fixed, not this test.

Inputs: segments the project generates (always: none/gzip/zstd, transactions, KIP-848
records) and real broker-written ones (scenario-a, when ../shared is there), mutated by
hypothesis (truncations, bit flips, insertions, deletions, splices, and whole batches
duplicated or dropped).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.sources.segments.files import find_segments
from tests.conftest import corpus_path
from tests.test_fuzz import _mutate, generated
from tests.test_segments import assert_fast_decodes_like_exact

DIFF = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SOURCES = ("generated", "scenario-a")


def _segments(source: str) -> list[Path]:
    """Segment files small enough to fuzz quickly, with several codecs among them."""
    root = corpus_path("golden", "scenario-a", "segments") if source == "scenario-a" \
        else generated() / "segments"
    files = [s.path for pl in find_segments(root) for s in pl.segments]
    return sorted(files, key=lambda p: p.stat().st_size)[: 6]


def _batch_bounds(blob: bytes) -> list[tuple[int, int]]:
    """(start, end) of each well-framed v0/v1/v2 batch, by the length field."""
    out, pos = [], 0
    while pos + 12 <= len(blob):
        (length,) = struct.unpack_from(">i", blob, pos + 8)
        end = pos + 12 + length
        if length <= 0 or end > len(blob):
            break
        out.append((pos, end))
        pos = end
    return out


def _reshuffle(data: st.DataObject, blob: bytes) -> bytes:
    """Whole batches dropped or repeated (offset gaps, duplicates, floors moving back)."""
    bounds = _batch_bounds(blob)
    if len(bounds) < 2:
        return blob
    i = data.draw(st.integers(0, len(bounds) - 1))
    s, e = bounds[i]
    if data.draw(st.booleans()):
        return blob[:s] + blob[e:]
    return blob[:e] + blob[s:e] + blob[e:]


@pytest.mark.parametrize("source", SOURCES)
@DIFF
@given(st.data())
def test_vectorized_reader_equals_exact_reader_on_mutated_segments(source: str,
                                                                    data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(_segments(source)))
    blob = path.read_bytes()
    for _ in range(data.draw(st.integers(0, 3))):
        blob = _reshuffle(data, blob) if data.draw(st.booleans()) else _mutate(data, blob)
    base = int(path.name.split(".")[0]) if path.name.split(".")[0].isdigit() else 0
    assert_fast_decodes_like_exact(blob, offsets_partition=3, base_offset=base,
                                   rows_per_batch=data.draw(st.sampled_from([1, 7, 65536])))


@pytest.mark.parametrize("source", SOURCES)
def test_unmutated_segments_read_the_same_without_problems(source: str) -> None:
    """The baseline of the differential test: intact files, no problem from either reader."""
    for path in _segments(source):
        assert assert_fast_decodes_like_exact(path.read_bytes()) == [], path
