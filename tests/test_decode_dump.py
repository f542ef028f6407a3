"""``offsetlake decode`` from Arrow in bulk prints exactly what the per-record writer printed.

The old writer (record objects, ``decode_record`` and ``json.dumps`` per record) is kept as
the oracle in tests/support/decode_oracle.py; both run on the same files and their bytes
are compared: JSON lines, the stderr summary, and the ``--stats`` report. On the real corpus
(skipped when ../shared is absent), on a generated cluster (always), and on a hand-made log
of the cases the bulk path hands back to the per-record codec (escapes, v4 without tags,
legacy messages without timestamps, undecodable and unknown records, markers).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.decode import encode_key, encode_value
from pipelines.demo import generate_cluster
from pipelines.sources.record_batches.writer import SegmentWriter
from tests.support.decode_oracle import oracle_decode


def _new_output(capsysbinary, paths: list[str], *extra: str) -> tuple[bytes, str]:
    assert main(["decode", *paths, *extra]) == 0
    out, err = capsysbinary.readouterr()
    return out, err.decode("utf-8")


def _assert_same(capsysbinary, paths: list[str],
                 stats_partitions: tuple[int | None, ...] = (None, 3, 50)) -> None:
    expected, summary = oracle_decode(paths)
    out, err = _new_output(capsysbinary, paths)
    assert out.count(b"\n") == expected.count("\n") > 0
    assert out == expected.encode("utf-8")
    assert summary in err.splitlines()
    for partitions in stats_partitions:
        expected_stats, _ = oracle_decode(paths, stats=True, num_partitions=partitions)
        extra = ("--stats",) if partitions is None else ("--stats", "--num-partitions",
                                                          str(partitions))
        out, _ = _new_output(capsysbinary, paths, *extra)
        assert out == expected_stats.encode("utf-8")


def test_decode_bulk_equals_per_record_writer_on_real_corpus(public_corpus: Path,
                                                             golden_dir: Path,
                                                             capsysbinary) -> None:
    # golden (codecs, transactions, KIP-848/share/streams records) and every 4th public
    # cluster: the whole public corpus through the old writer takes ~40 s on the CI box
    public = sorted(p for p in public_corpus.iterdir() if p.is_dir())[::4]
    _assert_same(capsysbinary, [str(golden_dir), *map(str, public)], (50,))


def test_decode_bulk_equals_per_record_writer_on_generated_cluster(tmp_path: Path,
                                                                   capsysbinary) -> None:
    generate_cluster(tmp_path, num_partitions=3, compression=["none", "gzip", "zstd"],
                     live=False)
    _assert_same(capsysbinary, [str(tmp_path)])


def _legacy_message(offset: int, magic: int, key: bytes | None, value: bytes | None,
                    timestamp: int = -1) -> bytes:
    """One uncompressed magic 0/1 message (no timestamp in magic 0: printed as -1)."""
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def _commit(group: str, topic: str, version: int, metadata: str = "", key_type: int = 1,
            **extra: object) -> tuple[bytes, bytes]:
    key = encode_key(key_type, {"group": group, "topic": topic, "partition": 3})
    fields = {"offset": 42, "metadata": metadata, "commit_timestamp": 1_700_000_000_123,
              "expire_timestamp": 1_700_086_400_000, "leader_epoch": 7, **extra}
    return key, encode_value(key_type, version, fields)


def test_decode_bulk_equals_per_record_writer_on_edge_cases(tmp_path: Path,
                                                            capsysbinary) -> None:
    tricky = 'quote " backslash \\ newline \n tab \t bell \x07 del \x7f é 漢字 \u2028 😀'
    with SegmentWriter(tmp_path, 0) as w:
        w.append([_commit("g", "t", v) for v in range(5)], timestamp=1_700_000_000_000)
        w.append([_commit(tricky, tricky, 3, tricky), _commit("g\"", "t\\", 4, "m\n")],
                 timestamp=1_700_000_000_001)
        w.append([_commit("g", "t", 4, topic_id="q1CqXfN2RrmUMx3tWQhpRw"),
                  _commit("legacy", "t", 3, key_type=0), _commit("legacy", "t", 4, key_type=0),
                  (encode_key(1, {"group": "g", "topic": "t", "partition": 3}), None)],
                 timestamp=[5, 6, 7, 8], timestamp_type=1)
        key, value = _commit("g", "t", 4)
        w.append([(key, value[:-1]),  # v4 without its tagged-field section
                  (key, value[:7]), (key, value + b"\x00"), (b"\x00", value), (None, value),
                  (struct.pack(">h", 99) + b"xyz", b"\x00\x00"), (key, b"\x00\x09abc")],
                 timestamp=-1)
        w.append([_commit("txn", "t", 3)], timestamp=9, producer_id=5, producer_epoch=1,
                 transactional=True)
        w.append_marker("COMMIT", producer_id=5, producer_epoch=1, timestamp=10)
        w.append([_commit("gz", "t", 3)] * 3, timestamp=11, compression="gzip")
        w.roll()
    legacy = tmp_path / "__consumer_offsets-1"
    legacy.mkdir()
    k, v = _commit("old", "t", 1)
    (legacy / "00000000000000000000.log").write_bytes(
        _legacy_message(0, 0, k, v) + _legacy_message(1, 1, k, v, timestamp=-5)
        + _legacy_message(2, 1, k, v, timestamp=123) + _legacy_message(3, 0, k, None))
    _assert_same(capsysbinary, [str(tmp_path)])


@pytest.mark.parametrize("stats", [False, True])
def test_decode_bulk_on_an_empty_directory(tmp_path: Path, capsysbinary, stats: bool) -> None:
    (tmp_path / "__consumer_offsets-0").mkdir()
    expected, _ = oracle_decode([str(tmp_path)], stats=stats)
    out, _ = _new_output(capsysbinary, [str(tmp_path)], *(["--stats"] if stats else []))
    assert out == expected.encode("utf-8")
