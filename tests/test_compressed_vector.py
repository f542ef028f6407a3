"""Compressed v2 batches go through the vectorized reader, with the exact reader as oracle.

Why: gzip/snappy/lz4/zstd batches are decompressed and decoded by the same numpy rounds as
uncompressed ones (``arrow_decode._inflate``), not per record by the exact decoder; their rows
must still equal the exact reader's (every column: compression, attributes, positions) and
batches the vector path cannot take (not decompressable, corrupt records, record headers,
control batches) must still give the exact reader's rows and Problems.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipelines.demo import generate_cluster
from pipelines.sources.raw import RAW_ARROW_SCHEMA
from pipelines.sources.record_batches import arrow_decode, framing
from pipelines.sources.record_batches.arrow_reader import read_arrow
from pipelines.sources.record_batches.exact_reader import iter_batches, records_to_arrow
from pipelines.sources.record_batches.problems import Problem
from pipelines.sources.record_batches.writer import NewRecord, encode_batch, encode_records
from tests.conftest import corpus_path
from tests.test_segments import assert_fast_decodes_like_exact

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture
def exact_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """(attributes, declared record count) of every batch the vectorized reader hands to the
    exact decoder (the real decoder runs; this only records what it was given)."""
    calls: list[tuple[int, int]] = []
    real = arrow_decode.decode_v2_batch

    def spy(*args: Any) -> Any:
        batch, records, error = real(*args)
        calls.append((batch.attributes, batch.records_count))
        return batch, records, error

    monkeypatch.setattr(arrow_decode, "decode_v2_batch", spy)
    yield calls


def _read_like_exact(root: Path, rows_per_batch: int) -> pa.Table:
    """read_arrow(root) == records_to_arrow(exact records), chunks and Problems included;
    returns the rows."""
    want_problems: list[Problem] = []
    records = (r for _, recs in iter_batches(root, problems=want_problems) for r in recs)
    want = list(records_to_arrow(records, cluster_id="c", rows_per_batch=rows_per_batch))
    got_problems: list[Problem] = []
    got = list(read_arrow(root, cluster_id="c", rows_per_batch=rows_per_batch,
                          problems=got_problems))
    assert [b.num_rows for b in got] == [b.num_rows for b in want]
    got_t = pa.Table.from_batches(got, schema=RAW_ARROW_SCHEMA)
    want_t = pa.Table.from_batches(want, schema=RAW_ARROW_SCHEMA)
    for name in RAW_ARROW_SCHEMA.names:
        assert got_t.column(name).equals(want_t.column(name)), name
    assert got_problems == want_problems
    return got_t


def _short_compressed_data_batches(calls: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Compressed data batches of at most 16 records handed to the exact decoder: none may be
    (longer ones may, when fewer than 16 batches of a group are that long: a few long batches
    are cheaper per record on the exact path than in numpy rounds, compressed or not)."""
    return [(a, n) for a, n in calls
            if a & framing.ATTR_CODEC and not a & framing.ATTR_CONTROL and n <= 16]


@pytest.mark.parametrize("codec", CODECS)
def test_generated_history_every_codec_reads_like_exact_reader(
    codec: str, tmp_path: Path, exact_calls: list[tuple[int, int]]
) -> None:
    generate_cluster(tmp_path, num_partitions=3, seed=5, scale=1, compression=codec, live=False)
    for rows_per_batch in (65536, 333):
        table = _read_like_exact(tmp_path, rows_per_batch)
    seen = Counter(table.column("compression").to_pylist())
    assert seen[codec] > 1000  # every data batch carries the codec; control batches are "none"
    assert _short_compressed_data_batches(exact_calls) == []  # they took the vector path


def test_generated_mixed_codec_phases_read_like_exact_reader(
    tmp_path: Path, exact_calls: list[tuple[int, int]]
) -> None:
    generate_cluster(tmp_path, num_partitions=4, seed=9, scale=2,
                     compression=["zstd", "lz4", "snappy"], live=False)
    table = _read_like_exact(tmp_path, 1000)
    assert set(table.column("compression").to_pylist()) >= {"zstd", "lz4", "snappy"}
    assert _short_compressed_data_batches(exact_calls) == []


def test_golden_scenario_d_lz4_snappy_reads_like_exact_reader(
    exact_calls: list[tuple[int, int]],
) -> None:
    root = corpus_path("golden", "scenario-d", "segments")
    table = _read_like_exact(root, 65536)
    seen = Counter(table.column("compression").to_pylist())
    assert seen["snappy"] > 5000 and seen["lz4"] > 100  # MANIFEST: snappy then lz4 phases
    assert _short_compressed_data_batches(exact_calls) == []


def _batch(body: bytes, count: int, attrs: int, base_offset: int, last_delta: int = 0) -> bytes:
    """A v2 batch around an arbitrary records section, with a valid CRC32C: the walk accepts
    it, so only the records decoders decide."""
    out = bytearray(framing.V2_HEADER_SIZE)
    framing.V2_HEADER.pack_into(out, 0, base_offset, 49 + len(body), 0, 2, 0, attrs, last_delta,
                                1000, 1000, -1, -1, -1, count)
    out += body
    struct.pack_into(">I", out, framing.V2_CRC_OFFSET, framing.crc32c(memoryview(out)[21:]))
    return bytes(out)


def _records(base: int, n: int, headers: bool = False) -> bytes:
    hs = (("h", b"x"),) if headers else ()
    return encode_records([NewRecord(base + i, 1000 + i, b"k%d" % i, b"v" * (i + 1), hs)
                           for i in range(n)], base, 1000)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_damaged_compressed_batches_give_the_exact_readers_rows_and_problems(
    codec: str, exact_calls: list[tuple[int, int]]
) -> None:
    cid = framing.CODEC_IDS[codec]

    def packed(body: bytes) -> bytes:
        return framing.compress(codec, body)

    bases = [0, 10, 20, 30, 300, 310, 320, 330]  # around the others' 100..229
    good = [encode_batch([NewRecord(b + j, 1000 + j, b"g%d" % j, b"w" * j) for j in range(3)],
                         base_offset=b, compression=codec)
            for b in bases]
    bad = [
        _batch(b"\x01\x02not a compressed stream", 2, cid, 100, 1),  # does not decompress
        _batch(packed(_records(110, 3)[:-2]), 3, cid, 110, 2),  # records cut short
        _batch(packed(_records(120, 3) + b"\x00"), 3, cid, 120, 2),  # bytes left over
        _batch(packed(_records(130, 3)), 4, cid, 130, 3),  # count says 4
        _batch(packed(_records(140, 2)), 0, cid, 140, 1),  # count says 0
        _batch(_records(150, 2), 2, 5, 150, 1),  # codec bits 5: unknown codec
    ]
    fine = [
        _batch(packed(_records(160, 3, headers=True)), 3, cid, 160, 2),  # record headers
        _batch(packed(_records(170, 2)), 2, cid | framing.ATTR_TIMESTAMP_TYPE, 170, 1),
        _batch(packed(_records(180, 2)), 2, cid | framing.ATTR_TRANSACTIONAL, 180, 1),
        _batch(packed(_records(190, 40)), 40, cid, 190, 39),  # long: exact decoder, no problem
    ]
    data = b"".join(good[:4] + bad + fine + good[4:])
    first_bad = sum(map(len, good[:4]))
    bad_at = [first_bad + sum(map(len, bad[:i])) for i in range(len(bad))]
    problems = assert_fast_decodes_like_exact(data, rows_per_batch=5)
    assert [(p.position, p.length_skipped) for p in problems] == list(
        zip(bad_at, map(len, bad), strict=True))
    assert sum("decompression failed" in p.reason for p in problems) == 2
    assert len(exact_calls) == len(bad) + 2  # only those, the record headers and the long one


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_long_compressed_batches_among_short_ones_read_like_exact_reader(
    codec: str, exact_calls: list[tuple[int, int]]
) -> None:
    """A few long batches among short ones, some damaged past round 16: same rows and
    Problems as the exact reader; the short ones take the vector path."""
    cid = framing.CODEC_IDS[codec]

    def packed(body: bytes) -> bytes:
        return framing.compress(codec, body) if cid else body

    def headers_at_35(base: int) -> bytes:
        return encode_records([NewRecord(base + i, 1000 + i, b"k", b"v" * i,
                                         (("h", b"x"),) if i == 35 else ())
                               for i in range(40)], base, 1000)

    short = [encode_batch([NewRecord(b, 1000, b"s", b"v")], base_offset=b, compression=codec)
             for b in [*range(10), *range(900, 910)]]
    long_ok = [_batch(packed(_records(b, 30 + b % 7)), 30 + b % 7, cid, b, 29 + b % 7)
               for b in range(100, 400, 100)]
    long_bad = [
        _batch(packed(_records(500, 40)[:-1]), 40, cid, 500, 39),  # last record cut
        _batch(packed(_records(600, 40) + b"\x00"), 40, cid, 600, 39),  # a byte left over
        _batch(packed(_records(700, 40)), 41, cid, 700, 40),  # count says one more
        _batch(packed(headers_at_35(800)), 40, cid, 800, 39),  # record headers at record 35
    ]
    data = b"".join(short[:10] + long_ok + long_bad + short[10:])
    problems = assert_fast_decodes_like_exact(data, rows_per_batch=11)
    assert len(problems) == 3  # the headers batch decodes fine on the exact path
    assert [n for _, n in exact_calls if n <= 16] == []
