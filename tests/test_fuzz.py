"""Random mutations and truncations of records never raise out of the codec or the reader.

Records and segments the project generates (always) and real broker-written ones from the
golden scenario-a recording (when ../shared is there).
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decode import STATUSES, decode_record
from pipelines.decode.columnar import decode_offset_commits
from pipelines.sources.record_batches.exact_reader import decode_segment_bytes, read_records
from pipelines.sources.segments.files import find_segments
from tests.conftest import corpus_path
from tests.support.generated import generated_scenario

FUZZ = settings(max_examples=400, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


SOURCES = ("generated", "scenario-a")


@cache
def generated() -> Path:
    """One generated scenario per test process (5 partitions, none/gzip/zstd), removed when
    the process ends (a function for Hypothesis' tests, not a fixture; one stayed per run)."""
    folder = tempfile.mkdtemp(prefix="offsetlake-fuzz-")
    atexit.register(shutil.rmtree, folder, True)
    return generated_scenario(Path(folder))


def _records(source: str) -> list[tuple[bytes, bytes | None]]:
    return _real_records() if source == "scenario-a" else _generated_records()


@cache
def _generated_records() -> list[tuple[bytes, bytes | None]]:
    """Every non-commit record (all group record types) and every 40th offset commit."""
    recs = [r for r in read_records(generated() / "segments") if r.key is not None]
    commits = [r for r in recs if r.key[:2] in (b"\x00\x00", b"\x00\x01")]
    picked = [r for r in recs if r.key[:2] not in (b"\x00\x00", b"\x00\x01")] + commits[::40]
    return [(r.key, r.value) for r in picked]


def segment_file(source: str) -> Path:
    """A segment holding commits, group records and (scenario-a) transactions."""
    if source == "scenario-a":
        return corpus_path("golden", "scenario-a", "segments", "__consumer_offsets-3",
                           "00000000000000000000.log")
    return max((s.path for pl in find_segments(generated() / "segments") for s in pl.segments),
               key=lambda p: p.stat().st_size)


@cache
def _real_records() -> list[tuple[bytes, bytes | None]]:
    path = corpus_path("golden", "scenario-a", "consumed_read_uncommitted.jsonl")
    rows = [json.loads(line) for line in path.open()]
    picked = [r for r in rows if not r["key"].startswith("0001")] + rows[::400]
    return [(bytes.fromhex(r["key"]), None if r["value"] is None else bytes.fromhex(r["value"]))
            for r in picked]


def _mutate(data: st.DataObject, blob: bytes) -> bytes:
    op = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete", "splice"]))
    if not blob:
        return data.draw(st.binary(max_size=8))
    i = data.draw(st.integers(0, len(blob) - 1))
    if op == "truncate":
        return blob[:i]
    if op == "flip":
        return blob[:i] + bytes([blob[i] ^ data.draw(st.integers(1, 255))]) + blob[i + 1:]
    if op == "insert":
        return blob[:i] + data.draw(st.binary(min_size=1, max_size=6)) + blob[i:]
    if op == "delete":
        return blob[:i] + blob[i + data.draw(st.integers(1, 6)):]
    return blob[:i] + data.draw(st.binary(max_size=12))


@pytest.mark.parametrize("source", SOURCES)
@FUZZ
@given(st.data())
def test_codec_never_raises_on_mutated_real_records(source: str, data: st.DataObject) -> None:
    records = _records(source)
    key, value = data.draw(st.sampled_from(records))
    if data.draw(st.booleans()):
        key = _mutate(data, key)
    elif value is not None:
        value = _mutate(data, value)
    rec = decode_record(key, value)
    assert rec.decode_status in STATUSES
    import pyarrow as pa

    table = decode_offset_commits(pa.array([key], pa.binary()), pa.array([value], pa.binary()))
    assert table.num_rows == 1


@pytest.mark.parametrize("source", SOURCES)
@FUZZ
@given(st.data())
def test_reader_never_raises_on_mutated_segments(source: str, data: st.DataObject) -> None:
    blob = segment_file(source).read_bytes()
    for _ in range(data.draw(st.integers(1, 3))):
        blob = _mutate(data, blob)
    problems: list = []
    for _batch, records in decode_segment_bytes(blob, path="fuzz", offsets_partition=3, problems=problems):
        for rec in records:
            assert rec.offset >= 0
