"""Random mutations and truncations of real records never raise out of the codec or the reader."""

from __future__ import annotations

import json
from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decode import STATUSES, decode_record
from pipelines.decode.columnar import decode_offset_commits
from pipelines.sources.segments import decode_segment_bytes
from tests.conftest import corpus_path

FUZZ = settings(max_examples=400, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


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


@FUZZ
@given(st.data())
def test_codec_never_raises_on_mutated_real_records(data: st.DataObject) -> None:
    records = _real_records()
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


@FUZZ
@given(st.data())
def test_reader_never_raises_on_mutated_segments(data: st.DataObject) -> None:
    seg = corpus_path("golden", "scenario-a", "segments", "__consumer_offsets-3", "00000000000000000000.log")
    blob = seg.read_bytes()
    for _ in range(data.draw(st.integers(1, 3))):
        blob = _mutate(data, blob)
    problems: list = []
    for _batch, records in decode_segment_bytes(blob, path="fuzz", offsets_partition=3, problems=problems):
        for rec in records:
            assert rec.offset >= 0
