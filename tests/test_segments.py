"""Tests of the segment reader/writer against real broker-written segments.

Expected figures come from the corpus' own descriptions (SOURCES.md, MANIFEST.md, Kafka's
kafka-dump-log output, what a kafka-python consumer returned), never from this reader.
"""

from __future__ import annotations

import json
import random
import re
import struct
import zlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from kafka import codec as kcodec
from kafka.record import MemoryRecords

from pipelines.sources.raw import RAW_ARROW_SCHEMA
from pipelines.sources.record_batches import (
    arrow_decode,
    arrow_reader,
    exact_reader,
    framing,
    transactions,
)
from pipelines.sources.record_batches.exact_batch import BatchInfo, Record
from pipelines.sources.record_batches.exact_reader import decode_segment_bytes, read_records
from pipelines.sources.record_batches.problems import Problem
from pipelines.sources.record_batches.writer import (
    NewRecord,
    SegmentWriter,
    encode_batch,
    encode_control_batch,
    encode_records,
    reencode_batch,
)
from pipelines.sources.segments.files import find_segments
from tests.support import exact_fold
from tests.support.exact_fold import fold_transactions

GOLDEN_PARTITIONS = range(5)


# ------------------------------------------------------------------------------------------
# helpers and fixtures
# ------------------------------------------------------------------------------------------


def decode(
    data: bytes, offsets_partition: int = -1
) -> tuple[list[tuple[BatchInfo, list[Record]]], list[Problem]]:
    """All (batch, records) of in-memory segment bytes, and the problems reported."""
    problems: list[Problem] = []
    batches = list(
        decode_segment_bytes(data, offsets_partition=offsets_partition, problems=problems)
    )
    return batches, problems


def flat(batches: list[tuple[BatchInfo, list[Record]]]) -> list[Record]:
    return [r for _, recs in batches for r in recs]


def rec_id(r: Record) -> tuple[int, int | None, bytes | None, bytes | None]:
    return (r.offset, r.timestamp, r.key, r.value)


def kv_label(r: Record) -> str:
    """SOURCES.md's "key version / value version" label of a data record."""
    kver = struct.unpack_from(">h", r.key)[0] if r.key else "?"
    vver = "null" if r.value is None else struct.unpack_from(">h", r.value)[0]
    return f"{kver}/{vver}"


_SOURCES_FILE = re.compile(
    r"^  - `(?P<path>[^`]+)` — [\d,]+ B, commit \w+, (?P<batches>\d+) batches / "
    r"(?P<records>\d+) records, (?P<kv>\S*)$"
)


def parse_sources(public: Path) -> dict[Path, tuple[int, int, Counter[str]]]:
    """SOURCES.md per-file figures: path -> (batches, records, kv histogram)."""
    files: dict[Path, tuple[int, int, Counter[str]]] = {}
    repo_dir = None
    for line in (public / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## ") and "/" in line:
            repo_dir = line[3:].strip().replace("/", "_", 1)
            continue
        m = _SOURCES_FILE.match(line)
        if m and repo_dir:
            kv: Counter[str] = Counter()
            for part in filter(None, m["kv"].split(",")):
                label, count = part.split("=")
                kv[label] = int(count)
            files[public / repo_dir / m["path"]] = (int(m["batches"]), int(m["records"]), kv)
    return files


@pytest.fixture(scope="module")
def public_read(public_corpus: Path) -> dict[Path, tuple[list, list[Problem]]]:
    """Every public segment read once: path -> ((batch, records) pairs, problems)."""
    out = {}
    for plog in find_segments(public_corpus):
        for sf in plog.segments:
            problems: list[Problem] = []
            out[sf.path] = (list(exact_reader.read_segment_file(sf, problems=problems)), problems)
    return out


@pytest.fixture(scope="module")
def golden_read(scenario_a: Path) -> dict[int, tuple[list, list[Problem]]]:
    out = {}
    for plog in find_segments(scenario_a / "segments"):
        problems: list[Problem] = []
        batches = [b for sf in plog.segments for b in exact_reader.read_segment_file(sf, problems=problems)]
        out[plog.offsets_partition] = (batches, problems)
    return out


def parse_dump(path: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """kafka-dump-log output -> (batch header dicts, record dicts)."""
    batches, records = [], []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("baseOffset:"):
            batches.append(dict(re.findall(r"(\w+): (\S+)", line)))
        elif line.startswith("| offset:"):
            head = line.split(" key: ", 1)[0].split(" payload: ", 1)[0]
            records.append(dict(re.findall(r"(\w+): (\S+)", head)))
    return batches, records


def manifest_partitions(scenario: Path) -> dict[int, dict[str, int]]:
    text = (scenario / "MANIFEST.md").read_text(encoding="utf-8", errors="replace")
    table = text.split("Per partition (after capture):", 1)[1]
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].isdigit():
            out[int(cells[0])] = {
                "hw": int(cells[2]),
                "lso": int(cells[3]),
                "batches": int(cells[4]),
                "records": int(cells[5]),
            }
        elif out and not line.strip():
            break
    return out


def consumed(scenario: Path, isolation: str) -> set[tuple]:
    out = set()
    path = scenario / f"consumed_read_{isolation}.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        out.add(
            (
                d["partition"],
                d["offset"],
                d["timestamp"],
                d["timestamp_type"],
                d["leader_epoch"],
                d["key"],
                d["value"],
            )
        )
    return out


def as_consumed(records: list[Record]) -> set[tuple]:
    return {
        (
            r.offsets_partition,
            r.offset,
            r.timestamp,
            r.timestamp_type,
            r.partition_leader_epoch,
            r.key.hex() if r.key is not None else None,
            r.value.hex() if r.value is not None else None,
        )
        for r in records
    }


# ------------------------------------------------------------------------------------------
# real segments: public corpus
# ------------------------------------------------------------------------------------------


def test_public_corpus_matches_sources_md(public_corpus: Path, public_read: dict) -> None:
    expected = parse_sources(public_corpus)
    text = (public_corpus / "SOURCES.md").read_text(encoding="utf-8")
    assert len(expected) == text.count("\n  - `") > 300, "every file line of SOURCES.md parsed"
    assert set(public_read) == set(expected), "walker found exactly the files SOURCES.md lists"
    for path, (batches, problems) in public_read.items():
        n_batches, n_records, kv = expected[path]
        records = flat(batches)
        assert problems == [], path
        assert all(b.crc_valid for b, _ in batches), path
        assert len(batches) == n_batches, path
        assert len(records) == n_records, path
        assert Counter(kv_label(r) for r in records) == kv, path


def test_public_corpus_partitions_and_offsets(public_read: dict) -> None:
    for path, (batches, _) in public_read.items():
        assert batches[0][0].offsets_partition == int(path.parent.name.rsplit("-", 1)[1])
        name_base = int(path.name.split(".")[0])
        last = name_base - 1
        for batch, records in batches:
            assert batch.base_offset > last and batch.last_offset >= batch.base_offset
            assert [r.offset for r in records] == sorted(r.offset for r in records)
            assert all(batch.base_offset <= r.offset <= batch.last_offset for r in records)
            last = batch.last_offset


def test_public_magic1_file(public_read: dict) -> None:
    legacy = [(b, r) for path in public_read for b, r in public_read[path][0] if b.magic < 2]
    assert len(legacy) == 860  # SOURCES.md: xpxwo100/bullShit, magic {1: 860}
    assert all(b.magic == 1 and b.producer_id == -1 and b.timestamp_type == 0 for b, _ in legacy)
    assert all(len(r) == 1 and r[0].timestamp > 1_400_000_000_000 for _, r in legacy)


# ------------------------------------------------------------------------------------------
# real segments: golden scenario-a against kafka-dump-log and the MANIFEST
# ------------------------------------------------------------------------------------------


def test_golden_counts_match_manifest(scenario_a: Path, golden_read: dict) -> None:
    manifest = manifest_partitions(scenario_a)
    assert sorted(manifest) == list(GOLDEN_PARTITIONS)
    for part, (batches, problems) in golden_read.items():
        assert problems == []
        assert all(b.crc_valid for b, _ in batches)
        assert len(batches) == manifest[part]["batches"]
        assert len(flat(batches)) == manifest[part]["records"]


def test_golden_batch_headers_match_dump(scenario_a: Path, golden_read: dict) -> None:
    codecs_seen = Counter()
    for part in GOLDEN_PARTITIONS:
        dump_batches, dump_records = parse_dump(
            scenario_a / "dump" / f"__consumer_offsets-{part}.txt"
        )
        batches = golden_read[part][0]
        assert len(batches) == len(dump_batches)
        for (b, recs), d in zip(batches, dump_batches, strict=True):
            codecs_seen[b.compression] += 1
            ts_label = "LogAppendTime" if b.timestamp_type == 1 else "CreateTime"
            assert {
                "baseOffset": str(b.base_offset),
                "lastOffset": str(b.last_offset),
                "count": str(b.records_count),
                "baseSequence": str(b.base_sequence),
                "lastSequence": str(b.last_sequence),
                "producerId": str(b.producer_id),
                "producerEpoch": str(b.producer_epoch),
                "partitionLeaderEpoch": str(b.partition_leader_epoch),
                "isTransactional": str(b.is_transactional).lower(),
                "isControl": str(b.is_control).lower(),
                "position": str(b.position),
                ts_label: str(b.max_timestamp),
                "size": str(b.size),
                "magic": str(b.magic),
                "compresscodec": b.compression,
                "crc": str(b.crc),
                "isvalid": str(b.crc_valid).lower(),
                "deleteHorizonMs": "OptionalLong.empty"
                if b.delete_horizon_ms is None
                else f"OptionalLong[{b.delete_horizon_ms}]",
            }.items() <= d.items(), (part, d)
            assert len(recs) == b.records_count
        records = flat(batches)
        assert len(records) == len(dump_records)
        for r, d in zip(records, dump_records, strict=True):
            assert d["offset"] == str(r.offset)
            assert d["CreateTime"] == str(r.timestamp)
            assert d["keySize"] == str(len(r.key) if r.key is not None else -1)
            assert d["valueSize"] == str(len(r.value) if r.value is not None else -1)
            assert d["sequence"] == str(r.sequence)
            if r.is_control:
                assert d["endTxnMarker"] == r.control_type
                assert d["coordinatorEpoch"] == str(framing.coordinator_epoch_of(r.value))
            else:
                assert "endTxnMarker" not in d and r.control_type is None
    assert set(codecs_seen) == {"none", "gzip", "zstd"}


def test_golden_unfolded_equals_read_uncommitted(scenario_a: Path, golden_read: dict) -> None:
    data = [r for p in GOLDEN_PARTITIONS for r in flat(golden_read[p][0]) if not r.is_control]
    assert as_consumed(data) == consumed(scenario_a, "uncommitted")
    assert len(data) == len(as_consumed(data))  # no duplicates hidden by the set


def test_golden_folded_equals_read_committed(scenario_a: Path, golden_read: dict) -> None:
    manifest = manifest_partitions(scenario_a)
    kept: list[Record] = []
    markers = Counter()
    for part in GOLDEN_PARTITIONS:
        records = flat(golden_read[part][0])
        result = fold_transactions(records)
        assert result.held_back == []
        assert result.last_stable_offset == manifest[part]["lso"] == manifest[part]["hw"]
        assert [r.offset for r in result.records] == sorted(r.offset for r in result.records)
        assert not any(r.is_control for r in result.records)
        markers.update(m.control_type for m in result.markers)
        kept += result.records
        # stop_at_lso changes nothing when no transaction is open
        assert fold_transactions(records, stop_at_lso=True).records == result.records
    assert as_consumed(kept) == consumed(scenario_a, "committed")
    assert markers == {"COMMIT": 4, "ABORT": 3}  # MANIFEST: 7 control markers


def test_walker_reads_golden_dir_in_partition_order(scenario_a: Path) -> None:
    problems: list[Problem] = []
    records = list(read_records(scenario_a / "segments", problems=problems))
    assert problems == []
    assert len(records) == 16373  # MANIFEST "records: 16373"
    parts = [r.offsets_partition for r in records]
    assert parts == sorted(parts)


# ------------------------------------------------------------------------------------------
# Arrow view
# ------------------------------------------------------------------------------------------


def test_arrow_view_of_golden(scenario_a: Path, golden_read: dict) -> None:
    tables = list(
        arrow_reader.read_arrow(scenario_a / "segments", cluster_id="golden-a", rows_per_batch=5000)
    )
    assert all(t.schema == RAW_ARROW_SCHEMA for t in tables)
    assert all(t.num_rows < 5000 + 1000 for t in tables) and len(tables) >= 3
    table = pa.Table.from_batches(tables)
    records = [r for p in GOLDEN_PARTITIONS for r in flat(golden_read[p][0])]
    assert table.num_rows == len(records)
    assert table.column("offset").to_pylist() == [r.offset for r in records]
    assert table.column("value").to_pylist() == [r.value for r in records]
    assert table.column("source_position").to_pylist() == [r.batch_position for r in records]
    assert Counter(table.column("control_type").to_pylist()) == {
        None: 16366,
        "COMMIT": 4,
        "ABORT": 3,
    }
    assert set(table.column("cluster_id").to_pylist()) == {"golden-a"}
    assert Counter(table.column("compression").to_pylist()).keys() == {"none", "gzip", "zstd"}
    first = table.slice(0, 1).to_pylist()[0]
    assert first["timestamp"].tzinfo is not None
    assert int(first["timestamp"].timestamp() * 1000) == records[0].timestamp


def test_arrow_nulls_timestamp_of_magic0() -> None:
    data = legacy_message(7, 0, b"k", b"v")
    batches = list(exact_reader.batches_to_arrow(decode(data)[0]))
    row = batches[0].to_pylist()[0]
    assert row["timestamp"] is None and row["timestamp_type"] == -1 and row["magic"] == 0
    assert row["offset"] == 7 and row["source"] == "<memory>" and row["cluster_id"] is None


# ------------------------------------------------------------------------------------------
# corruption
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample(scenario_a: Path) -> tuple[bytes, list[tuple[BatchInfo, list[Record]]]]:
    """Partition 3: transactional, control, uncompressed and gzip batches."""
    data = (
        scenario_a / "segments" / "__consumer_offsets-3" / "00000000000000000000.log"
    ).read_bytes()
    batches, problems = decode(data)
    assert problems == [] and len(batches) == 27
    return data, batches


def test_truncation_at_random_points(sample: tuple) -> None:
    data, batches = sample
    rng = random.Random(1)
    cuts = rng.sample(range(1, len(data)), 60) + [b.position for b, _ in batches[1:]]
    for cut in cuts:
        got, problems = decode(data[:cut])
        complete = [(b, r) for b, r in batches if b.position + b.size <= cut]
        assert [rec_id(r) for r in flat(got)] == [rec_id(r) for r in flat(complete)]
        if any(b.position == cut for b, _ in batches):
            assert problems == []
        else:
            start = max(b.position for b, _ in batches if b.position < cut)
            assert [(p.position, p.length_skipped) for p in problems] == [(start, cut - start)], cut


def test_flipped_byte_in_checksummed_part(sample: tuple) -> None:
    data, batches = sample
    rng = random.Random(2)
    for _ in range(80):
        k = rng.randrange(len(batches))
        victim = batches[k][0]
        at = rng.randrange(victim.position + 21, victim.position + victim.size)
        damaged = bytearray(data)
        damaged[at] ^= 1 << rng.randrange(8)
        got, problems = decode(bytes(damaged))
        assert problems and problems[0].position == victim.position
        assert {p.position for p in problems} == {victim.position}
        others = [rec_id(r) for i, (_, recs) in enumerate(batches) if i != k for r in recs]
        assert [
            rec_id(r) for b, recs in got if b.position != victim.position for r in recs
        ] == others
        assert all(
            not r.crc_valid for b, recs in got if b.position == victim.position for r in recs
        )


def test_flipped_byte_in_length_field(sample: tuple) -> None:
    data, batches = sample
    rng = random.Random(3)
    for _ in range(40):
        k = rng.randrange(len(batches))
        victim = batches[k][0]
        damaged = bytearray(data)
        damaged[victim.position + 8 + rng.randrange(4)] ^= 1 << rng.randrange(8)
        got, problems = decode(bytes(damaged))
        assert [(p.position, p.length_skipped) for p in problems] == [
            (victim.position, victim.size)
        ]
        others = [rec_id(r) for i, (_, recs) in enumerate(batches) if i != k for r in recs]
        assert [rec_id(r) for r in flat(got)] == others


def test_garbage_inserted_between_batches(sample: tuple) -> None:
    data, batches = sample
    rng = random.Random(4)
    for _ in range(20):
        k = rng.randrange(1, len(batches))
        at = batches[k][0].position
        garbage = rng.randbytes(rng.randrange(1, 3000))
        got, problems = decode(data[:at] + garbage + data[at:])
        assert [(p.position, p.length_skipped) for p in problems] == [(at, len(garbage))]
        assert [rec_id(r) for r in flat(got)] == [rec_id(r) for r in flat(batches)]
        # the records after the garbage are found with their original positions shifted
        after = [b for b, _ in got if b.position > at]
        assert [b.position - len(garbage) for b in after] == [b.position for b, _ in batches[k:]]


def test_garbage_inserted_inside_a_batch(sample: tuple) -> None:
    data, batches = sample
    rng = random.Random(5)
    for _ in range(20):
        k = rng.randrange(len(batches) - 1)
        victim = batches[k][0]
        at = rng.randrange(victim.position + 1, victim.position + victim.size)
        garbage = rng.randbytes(rng.randrange(1, 500))
        got, problems = decode(data[:at] + garbage + data[at:])
        assert problems[0].position == victim.position
        assert problems[0].length_skipped == victim.size + len(garbage)
        assert len(problems) == 1
        others = [rec_id(r) for i, (_, recs) in enumerate(batches) if i != k for r in recs]
        assert [rec_id(r) for r in flat(got)] == others


def test_zero_filled_tail_and_zero_gap(sample: tuple) -> None:
    data, batches = sample
    got, problems = decode(data + bytes(100_000))
    assert [(p.position, p.length_skipped) for p in problems] == [(len(data), 100_000)]
    assert "zero-filled" in problems[0].reason
    assert len(flat(got)) == len(flat(batches))
    mid = batches[10][0].position
    got, problems = decode(data[:mid] + bytes(50_000) + data[mid:])
    assert [(p.position, p.length_skipped) for p in problems] == [(mid, 50_000)]
    assert len(flat(got)) == len(flat(batches))


def test_random_damage_never_raises(sample: tuple, scenario_a: Path) -> None:
    zstd_data = (
        scenario_a / "segments" / "__consumer_offsets-4" / "00000000000000000000.log"
    ).read_bytes()
    rng = random.Random(6)
    for data in (sample[0], zstd_data):
        for _ in range(150):
            damaged = bytearray(data)
            for _ in range(rng.randrange(1, 20)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            cut = rng.randrange(len(damaged) // 2, len(damaged) + 1)
            got, problems = decode(bytes(damaged[:cut]))
            assert all(0 <= p.position < cut and p.length_skipped >= 0 for p in problems)
            assert all(b.position + b.size <= cut for b, _ in got)
        assert decode(rng.randbytes(20_000))[0] == []


def test_crc32c_is_the_packages_c_function_loaded_on_its_own() -> None:
    """framing loads crc32c's extension without the package's __init__ (which reads its
    distribution's metadata at import): still CRC-32C, by the algorithm's published check
    value (RFC 3720 B.4, "123456789"), from the C code, on bytes and buffers alike."""
    import crc32c as package

    assert framing.crc32c(b"123456789") == 0xE3069283
    assert type(framing.crc32c).__name__ == "builtin_function_or_method"
    data = random.Random(7).randbytes(4096)
    assert framing.crc32c(memoryview(data)[5:]) == package.crc32c(data[5:])


def test_decompression_failure_is_reported_and_skipped() -> None:
    good1 = encode_batch([NewRecord(0, 1000, b"k0", b"v0")], base_offset=0)
    bad = bytearray(
        encode_batch([NewRecord(1, 1000, b"k1", b"v1" * 50)], base_offset=1, compression="gzip")
    )
    bad[61 + 12] ^= 0xFF  # inside the deflate stream
    struct.pack_into(">I", bad, 17, framing.crc32c(memoryview(bad)[21:]))  # keep the CRC valid
    good2 = encode_batch([NewRecord(2, 1000, b"k2", b"v2")], base_offset=2)
    got, problems = decode(good1 + bytes(bad) + good2)
    assert [r.offset for r in flat(got)] == [0, 2]
    assert [(p.position, p.length_skipped) for p in problems] == [(len(good1), len(bad))]
    assert "decompression failed" in problems[0].reason


# ------------------------------------------------------------------------------------------
# legacy message sets (magic 0/1)
# ------------------------------------------------------------------------------------------


def legacy_message(
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    *,
    timestamp: int = -1,
    attributes: int = 0,
) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def legacy_wrapper(
    first_offset: int,
    magic: int,
    codec: int,
    kvs: list[tuple[bytes | None, bytes | None]],
    *,
    ts: int,
    log_append: bool = False,
) -> bytes:
    """A compressed wrapper the way brokers store it: magic 1 inner offsets relative (0..n-1) and
    the wrapper carrying the last absolute offset; magic 0 inner offsets absolute."""
    inner = b"".join(
        legacy_message(i if magic == 1 else first_offset + i, magic, k, v, timestamp=ts + i)
        for i, (k, v) in enumerate(kvs)
    )
    encode = {
        1: kcodec.gzip_encode,
        2: kcodec.snappy_encode,
        3: kcodec.lz4_encode_old_kafka if magic == 0 else kcodec.lz4_encode,
    }[codec]
    attrs = codec | (0x08 if log_append else 0)
    wrapper_ts = ts + 1000
    return legacy_message(
        first_offset + len(kvs) - 1,
        magic,
        None,
        encode(inner),
        timestamp=wrapper_ts,
        attributes=attrs,
    )


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [1, 2, 3])
def test_legacy_compressed_wrappers(magic: int, codec: int) -> None:
    kvs = [(b"key-%d" % i, b"value-%d" % i if i != 2 else None) for i in range(5)]
    data = (
        legacy_message(10, magic, b"plain", b"x", timestamp=5)
        + legacy_wrapper(11, magic, codec, kvs, ts=100)
        + legacy_wrapper(16, magic, codec, kvs[:2], ts=200, log_append=True)
    )
    got, problems = decode(data, offsets_partition=9)
    assert problems == []
    records = flat(got)
    assert [r.offset for r in records] == list(range(10, 18))
    assert [(b.base_offset, b.last_offset, b.records_count) for b, _ in got] == [
        (10, 10, 1),
        (11, 15, 5),
        (16, 17, 2),
    ]
    assert [b.compression for b, _ in got] == ["none", *[framing.CODEC_NAMES[codec]] * 2]
    assert [r.value for r in records[1:6]] == [v for _, v in kvs]
    if magic == 0:
        assert {r.timestamp for r in records} == {-1} and {r.timestamp_type for r in records} == {
            -1
        }
    else:
        assert [r.timestamp for r in records] == [5, 100, 101, 102, 103, 104, 1200, 1200]
        assert [r.timestamp_type for r in records] == [0] * 6 + [1, 1]
    assert all(r.crc_valid and r.offsets_partition == 9 and r.producer_id == -1 for r in records)
    # independent decoder: kafka-python agrees on offsets, keys and values
    mr = MemoryRecords(data)
    theirs = []
    while mr.has_next():
        theirs += [(r.offset, r.key, r.value) for r in mr.next_batch()]
    assert theirs == [(r.offset, r.key, r.value) for r in records]


def test_legacy_inner_crc_mismatch_is_flagged() -> None:
    wrapper = bytearray(legacy_wrapper(0, 1, 1, [(b"k", b"v")], ts=1))
    inner = bytearray(kcodec.gzip_decode(bytes(wrapper[34:])))
    inner[-1] ^= 0xFF  # damage the inner message, then rebuild a wrapper with a valid CRC
    data = legacy_message(0, 1, None, kcodec.gzip_encode(bytes(inner)), timestamp=1, attributes=1)
    got, problems = decode(data)
    assert [r.crc_valid for r in flat(got)] == [False]
    assert [p.position for p in problems] == [0] and "inner" in problems[0].reason


# ------------------------------------------------------------------------------------------
# transaction folding on synthetic logs
# ------------------------------------------------------------------------------------------


def test_fold_open_aborted_and_interleaved_transactions(tmp_path: Path) -> None:
    with SegmentWriter(tmp_path, 7) as w:
        w.append([(b"a", b"1")], timestamp=1)  # 0 plain
        w.append(
            [(b"t1", b"x"), (b"t1", b"y")],
            timestamp=2,
            producer_id=5,
            producer_epoch=0,
            transactional=True,
        )  # 1-2
        w.append(
            [(b"t2", b"x")], timestamp=3, producer_id=6, producer_epoch=0, transactional=True
        )  # 3
        w.append([(b"b", None)], timestamp=4)  # 4 plain tombstone
        w.append_marker("ABORT", producer_id=6, producer_epoch=0, timestamp=5)  # 5
        w.append_marker("COMMIT", producer_id=5, producer_epoch=0, timestamp=6)  # 6
        w.append(
            [(b"t3", b"z")], timestamp=7, producer_id=5, producer_epoch=0, transactional=True
        )  # 7 open
        w.append([(b"c", b"2")], timestamp=8)  # 8 plain, after the LSO
    records = list(read_records(tmp_path))
    result = fold_transactions(records)
    assert [r.offset for r in result.records] == [0, 1, 2, 4, 8]
    assert [r.offset for r in result.aborted] == [3]
    assert [r.offset for r in result.held_back] == [7]
    assert [m.offset for m in result.markers] == [5, 6]
    assert (result.commit_markers, result.abort_markers) == (1, 1)
    assert result.last_stable_offset == 7
    assert [r.offset for r in fold_transactions(records, stop_at_lso=True).records] == [0, 1, 2, 4]
    empty = fold_transactions([])
    assert empty.records == [] and empty.last_stable_offset == 0
    assert fold_transactions(records[:1], log_end_offset=42).last_stable_offset == 42


# ------------------------------------------------------------------------------------------
# writer
# ------------------------------------------------------------------------------------------


def test_writer_round_trip(tmp_path: Path) -> None:
    headers = (("trace", b"abc"), ("empty", None), ("ключ", b""))
    long_value = bytes(range(256)) * 40  # multi-byte varints for lengths
    with SegmentWriter(tmp_path, 12, base_offset=100, partition_leader_epoch=3) as w:
        for i, comp in enumerate(framing.CODEC_NAMES):
            w.append(
                [(b"k%d" % i, b"v%d" % i), (None, long_value), (b"t", None)],
                timestamp=[10, 5, 2**40],
                compression=comp,
            )
        w.append([(b"h", b"v")], timestamp=50, headers=headers, timestamp_type=1)
        w.append(
            [(b"tx", b"1")],
            timestamp=60,
            producer_id=77,
            producer_epoch=2,
            base_sequence=9,
            transactional=True,
        )
        w.append_marker(
            "COMMIT", producer_id=77, producer_epoch=2, timestamp=61, coordinator_epoch=4
        )
        w.roll()
        w.append([(b"next", b"segment")], timestamp=70)
    assert [p.name for p in w.paths] == ["00000000000000000100.log", "00000000000000000118.log"]
    problems: list[Problem] = []
    batches = list(exact_reader.iter_batches(tmp_path, problems=problems))
    assert problems == []
    records = flat(batches)
    assert [r.offset for r in records] == list(range(100, 119))
    assert all(
        r.crc_valid and r.offsets_partition == 12 and r.partition_leader_epoch == 3 for r in records
    )
    for i, comp in enumerate(framing.CODEC_NAMES):
        b, recs = batches[i]
        assert b.compression == comp and b.base_timestamp == 10 and b.max_timestamp == 2**40
        assert [(r.key, r.value, r.timestamp) for r in recs] == [
            (b"k%d" % i, b"v%d" % i, 10),
            (None, long_value, 5),
            (b"t", None, 2**40),
        ]
    b, (r,) = batches[5]
    assert r.headers == headers and b.timestamp_type == 1 and r.timestamp == b.max_timestamp
    b, (r,) = batches[6]
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional) == (
        77,
        2,
        9,
        True,
    )
    b, (r,) = batches[7]
    assert b.is_control and b.is_transactional and r.control_type == "COMMIT"
    assert framing.coordinator_epoch_of(r.value) == 4
    # an independent decoder agrees, checksums included
    data = w.paths[0].read_bytes()
    mr = MemoryRecords(data)
    theirs = []
    while mr.has_next():
        kb = mr.next_batch()
        assert kb.validate_crc()
        theirs += [(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in kb]
    ours = [
        (r.offset, r.key, r.value, r.timestamp, r.headers)
        for r in records
        if r.source == str(w.paths[0])
    ]
    assert theirs == ours


def test_reencode_golden_and_public_batches(
    golden_read: dict, public_read: dict, scenario_a: Path
) -> None:
    """Every uncompressed v2 batch re-encodes to its exact bytes; for compressed batches the
    decompressed records section is reproduced (the compressed bytes depend on the JVM codec)."""
    checked = compressed = 0
    sources = [(b, r) for p in GOLDEN_PARTITIONS for b, r in golden_read[p][0]]
    sources += [(b, r) for batches, _ in public_read.values() for b, r in batches]
    blobs: dict[str, bytes] = {}
    for batch, records in sources:
        if batch.magic != 2:
            continue
        data = blobs.get(batch.source) or blobs.setdefault(
            batch.source, Path(batch.source).read_bytes()
        )
        original = data[batch.position : batch.position + batch.size]
        if batch.compression == "none":
            assert reencode_batch(batch, records) == original, (batch.source, batch.position)
            checked += 1
        else:
            payload = framing.decompress(framing.CODEC_NAMES.index(batch.compression), original[61:], 2)
            assert encode_records(records, batch.base_offset, batch.base_timestamp) == payload
            compressed += 1
    assert compressed == 21 + 53  # MANIFEST: gzip 21, zstd 53 batches
    assert checked == 16069 + 7 + 125150 - 860  # golden none + control; public v2 batches


def test_empty_batch_and_unknown_control_type() -> None:
    """The cleaner keeps empty batches (producer state); KRaft-only control types pass through."""
    empty = encode_batch([], base_offset=5, last_offset_delta=3, producer_id=9, producer_epoch=1)
    leader_change = encode_batch(
        [NewRecord(9, 1, struct.pack(">hh", 0, 2), b"\x00\x00")],
        base_offset=9,
        is_control=True,
        is_transactional=True,
        producer_id=9,
    )
    got, problems = decode(empty + leader_change)
    assert problems == []
    assert [(b.base_offset, b.last_offset, len(r)) for b, r in got] == [(5, 8, 0), (9, 9, 1)]
    (marker,) = got[1][1]
    assert marker.control_type == "UNKNOWN(2)" and framing.coordinator_epoch_of(marker.value) is None
    result = fold_transactions(flat(got))
    assert result.markers == [marker] and result.records == [] and result.last_stable_offset == 10


# ------------------------------------------------------------------------------------------
# names and walking
# ------------------------------------------------------------------------------------------


def test_find_segments_names_and_order(tmp_path: Path) -> None:
    names = [
        "00000000000000000000.log@0067b492",
        "00000000000000000000.log",
        "00000000000000000050.log.swap",
        "00000000000000000010.log.deleted",
        "00000000000000000030.log.cleaned",
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
    ]
    part = tmp_path / "data" / "__consumer_offsets-7"
    part.mkdir(parents=True)
    for n in names:
        (part / n).write_bytes(b"")
    other = tmp_path / "data" / "orders-0"
    other.mkdir()
    (other / "00000000000000000000.log").write_bytes(b"")
    deleted = tmp_path / "data" / "__consumer_offsets-2.3f2a9c-delete"
    deleted.mkdir()
    (deleted / "00000000000000000005.log").write_bytes(b"")

    logs = find_segments(tmp_path / "data", include_deleted=True)
    assert [(pl.offsets_partition, pl.directory.name) for pl in logs] == [
        (2, "__consumer_offsets-2.3f2a9c-delete"),
        (7, "__consumer_offsets-7"),
    ]
    # by default a directory walk leaves out segments Kafka already removed from the log
    assert [s.path.name for s in find_segments(tmp_path / "data")[1].segments] == [
        "00000000000000000000.log", "00000000000000000000.log@0067b492",
        "00000000000000000030.log.cleaned", "00000000000000000050.log.swap"]
    assert [(s.path.name, s.base_offset, s.suffix) for s in logs[1].segments] == [
        ("00000000000000000000.log", 0, ""),
        ("00000000000000000000.log@0067b492", 0, "@0067b492"),
        ("00000000000000000010.log.deleted", 10, ".deleted"),
        ("00000000000000000030.log.cleaned", 30, ".cleaned"),
        ("00000000000000000050.log.swap", 50, ".swap"),
    ]
    # a file named explicitly is read whatever its directory
    explicit = find_segments(
        other / "00000000000000000000.log", part / "00000000000000000050.log.swap"
    )
    assert [(pl.offsets_partition, [s.path.name for s in pl.segments]) for pl in explicit] == [
        (-1, ["00000000000000000000.log"]),
        (7, ["00000000000000000050.log.swap"]),
    ]
    assert list(read_records(tmp_path / "data")) == []


# ------------------------------------------------------------------------------------------
# vectorized Arrow reader (arrow_reader) == the record-object path, and fold_arrow
# ------------------------------------------------------------------------------------------


def exact_arrow(
    batches: Iterable[tuple[BatchInfo, list[Record]]], rows_per_batch: int = 65536
) -> list[pa.RecordBatch]:
    return list(exact_reader.batches_to_arrow(batches, cluster_id="c", rows_per_batch=rows_per_batch))


def assert_same_arrow(fast: list[pa.RecordBatch], exact: list[pa.RecordBatch]) -> None:
    """Same chunking, schema and values in every column (Table.equals is value equality)."""
    assert [b.num_rows for b in fast] == [b.num_rows for b in exact]
    assert all(b.schema == RAW_ARROW_SCHEMA for b in fast)
    got = pa.Table.from_batches(fast, schema=RAW_ARROW_SCHEMA)
    want = pa.Table.from_batches(exact, schema=RAW_ARROW_SCHEMA)
    for name in RAW_ARROW_SCHEMA.names:
        assert got.column(name).equals(want.column(name)), name


def assert_fast_decodes_like_exact(
    data: bytes, *, offsets_partition: int = 3, base_offset: int = 0, rows_per_batch: int = 7
) -> list[Problem]:
    """bytes_to_arrow == batches_to_arrow(decode_segment_bytes(...)), Problems included."""
    want: list[Problem] = []
    exact = exact_arrow(
        decode_segment_bytes(
            data, offsets_partition=offsets_partition, base_offset=base_offset, problems=want
        ),
        rows_per_batch,
    )
    got: list[Problem] = []
    fast = list(
        arrow_reader.bytes_to_arrow(
            data,
            offsets_partition=offsets_partition,
            base_offset=base_offset,
            cluster_id="c",
            rows_per_batch=rows_per_batch,
            problems=got,
        )
    )
    assert_same_arrow(fast, exact)
    assert got == want
    return got


@pytest.fixture(params=[arrow_reader.GROUP_BYTES, 700], ids=["groups-default", "groups-700B"])
def group_bytes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Also run with tiny groups: files are then cut into several walks and chunks span
    groups, which the corpus alone (3 groups) hardly exercises."""
    monkeypatch.setattr(arrow_reader, "GROUP_BYTES", request.param)
    return request.param


def test_fast_arrow_equals_exact_per_corpus_file(
    public_read: dict, golden_read: dict, scenario_a: Path
) -> None:
    for path, (batches, problems) in public_read.items():
        got: list[Problem] = []
        fast = list(arrow_reader.read_file_arrow(path, cluster_id="c", problems=got))
        assert_same_arrow(fast, exact_arrow(batches))
        assert got == problems == []
    for plog in find_segments(scenario_a / "segments"):
        (sf,) = plog.segments
        fast = list(arrow_reader.read_file_arrow(sf, cluster_id="c", rows_per_batch=1000))
        assert_same_arrow(fast, exact_arrow(golden_read[plog.offsets_partition][0], 1000))


@pytest.mark.parametrize(
    ("group", "rows_per_batch"), [(arrow_reader.GROUP_BYTES, 65536), (64 << 10, 5000), (64 << 10, 333)]
)
def test_fast_read_arrow_equals_exact_on_corpora(
    public_corpus: Path,
    public_read: dict,
    scenario_a: Path,
    monkeypatch: pytest.MonkeyPatch,
    group: int,
    rows_per_batch: int,
) -> None:
    """Whole trees: groups of many files, chunks spanning groups (64 KiB: ~300 groups)."""
    monkeypatch.setattr(arrow_reader, "GROUP_BYTES", group)
    order = [sf.path for plog in find_segments(public_corpus) for sf in plog.segments]
    exact = exact_arrow((b for p in order for b in public_read[p][0]), rows_per_batch)
    assert_same_arrow(
        list(arrow_reader.read_arrow(public_corpus, cluster_id="c", rows_per_batch=rows_per_batch)), exact
    )
    golden = scenario_a / "segments"
    assert_same_arrow(
        list(arrow_reader.read_arrow(golden, cluster_id="c", rows_per_batch=rows_per_batch)),
        exact_arrow(exact_reader.iter_batches(golden), rows_per_batch),
    )


def test_fast_arrow_equals_exact_on_corruption(sample: tuple, group_bytes: int) -> None:
    """The damage of the corruption tests above, read by both paths."""
    data, batches = sample
    rng = random.Random(11)
    cases = [data, data + bytes(1000), data[:100] + bytes(5000) + data[100:]]
    cases += [data[:cut] for cut in rng.sample(range(1, len(data)), 15)]
    for _ in range(25):
        k = rng.randrange(len(batches))
        victim = batches[k][0]
        damaged = bytearray(data)
        if rng.random() < 0.3:  # length field
            damaged[victim.position + 8 + rng.randrange(4)] ^= 1 << rng.randrange(8)
        else:  # checksummed part
            at = rng.randrange(victim.position + 21, victim.position + victim.size)
            damaged[at] ^= 1 << rng.randrange(8)
        cases.append(bytes(damaged))
    for _ in range(10):
        at = rng.randrange(len(data))
        cases.append(data[:at] + rng.randbytes(rng.randrange(1, 600)) + data[at:])
    for _ in range(25):
        damaged = bytearray(data)
        for _ in range(rng.randrange(1, 20)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cases.append(bytes(damaged[: rng.randrange(len(damaged) // 2, len(damaged) + 1)]))
    cases.append(rng.randbytes(5000))
    reported = 0
    for case in cases:
        reported += len(assert_fast_decodes_like_exact(case, base_offset=0))
    assert reported > len(cases)  # the cases do hit the exact path's problem reporting


def test_fast_arrow_equals_exact_on_legacy_and_special_batches() -> None:
    legacy = (
        legacy_message(10, 0, b"plain", b"x")
        + legacy_wrapper(11, 1, 1, [(b"k", b"v"), (b"k2", None)], ts=100)
        + legacy_message(13, 1, b"m1", b"y", timestamp=-5)
    )
    special = (
        encode_batch([NewRecord(14, 1, b"a", b"b")], base_offset=14)
        + encode_batch([], base_offset=15, last_offset_delta=3, producer_id=9)  # emptied
        + encode_batch([NewRecord(19, 5, b"h", b"v", (("k", b"v"), ("n", None)))], base_offset=19)
        + encode_batch([NewRecord(20, 7, b"t", b"v")], base_offset=20, timestamp_type=1)
        + encode_batch([NewRecord(21, 8, b"z", b"v" * 300)], base_offset=21, compression="gzip")
        + encode_control_batch("ABORT", offset=22, producer_id=9, producer_epoch=0, timestamp=9)
        + encode_batch(
            [NewRecord(23, 9, struct.pack(">hh", 0, 2), b"\x00\x00")],
            base_offset=23,
            is_control=True,
            is_transactional=True,
            producer_id=9,
        )
        + encode_batch([NewRecord(24, 10, b"dup", b"v")], base_offset=20)  # below the floor
    )
    for rows in (1, 3, 65536):
        assert_fast_decodes_like_exact(legacy + special, rows_per_batch=rows)
    assert_fast_decodes_like_exact(b"")


def zz(v: int, width: int | None = None) -> bytes:
    """Zig-zag varint, padded with continuation bytes to ``width`` (non-minimal) if given."""
    u = (v << 1) if v >= 0 else ((-v) << 1) - 1
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    while width is not None and len(out) < width:
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def raw_record(
    ts_delta: int,
    off_delta: int,
    key: bytes | None,
    value: bytes | None,
    *,
    widths: tuple[int | None, ...] = (None,) * 5,
    tail: bytes = b"\x00",
    length_adjust: int = 0,
    ts_bytes: bytes | None = None,
) -> bytes:
    """A v2 record with chosen varint widths (length, ts, offset, key len, value len), or
    the timestamp delta's raw varint bytes."""
    ts = zz(ts_delta, widths[1]) if ts_bytes is None else ts_bytes
    body = b"\x00" + ts + zz(off_delta, widths[2])
    body += zz(-1 if key is None else len(key), widths[3]) + (key or b"")
    body += zz(-1 if value is None else len(value), widths[4]) + (value or b"")
    body += tail
    return zz(len(body) + length_adjust, widths[0]) + body


def raw_batch(
    records: list[bytes],
    *,
    base_offset: int,
    count: int | None = None,
    base_timestamp: int = 1_700_000_000_000,
    max_timestamp: int = 1_700_000_000_999,
    attrs: int = 0,
    last_offset_delta: int | None = None,
) -> bytes:
    """A v2 batch around hand-made record bytes, with a valid CRC32C."""
    body = b"".join(records)
    count = len(records) if count is None else count
    out = bytearray(61)
    framing.V2_HEADER.pack_into(
        out, 0, base_offset, 49 + len(body), 0, 2, 0, attrs,
        max(count - 1, 0) if last_offset_delta is None else last_offset_delta,
        base_timestamp, max_timestamp, 77, 1, 0, count,
    )  # fmt: skip
    out += body
    struct.pack_into(">I", out, 17, framing.crc32c(memoryview(out)[21:]))
    return bytes(out)


@pytest.fixture
def fallbacks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Positions of the batches the vector parser declined (handed to _decode_v2_batch)."""
    calls: list[int] = []
    real = arrow_decode.decode_v2_batch

    def counting(data: bytes, mv: memoryview, pos: int, *args: Any) -> Any:
        calls.append(pos)
        return real(data, mv, pos, *args)

    monkeypatch.setattr(arrow_decode, "decode_v2_batch", counting)
    return calls


def test_fast_arrow_vector_edge_cases(fallbacks: list[int]) -> None:
    """Varint widths and record shapes the vector parser must accept exactly as the exact
    decoder does, or decline (the exact decoder then reports what is wrong)."""
    long_value = bytes(range(256)) * 70  # 3-byte length varint
    bit63 = b"\x80" * 9 + b"\x01"  # a 10-byte varint: zig-zag 2**63 -> 2**62
    good = [
        raw_batch([raw_record(0, 0, b"k", b"v")], base_offset=0),
        raw_batch([raw_record(-(2**40), 0, b"k" * 64, None)], base_offset=1),  # 6-byte ts
        raw_batch([raw_record(2**61, 0, None, long_value)], base_offset=2),  # 9-byte varint
        raw_batch([raw_record(5, 0, b"", b"", widths=(3, 2, 4, 5, 9))], base_offset=3),
        raw_batch([b"\x0e\x00\x00\x00\x03\x02v\x00"], base_offset=4),  # key length -2: null
        raw_batch([raw_record(1, 300, b"x", b"y")], base_offset=5, last_offset_delta=300),
        raw_batch([raw_record(3, 0, b"k", b"v")], base_offset=306, attrs=0x08 | 0x10 | 0x40),
        raw_batch([raw_record(-1, 0, b"k", b"v")], base_offset=307, base_timestamp=0),
        raw_batch(
            [raw_record(i, i, b"k%d" % i, b"v" * (i * 9)) for i in range(40)], base_offset=308
        ),  # many records: rounds, then the exact decoder for the straggler
        raw_batch([raw_record(0, 0, b"k", b"v", ts_bytes=bit63)], base_offset=348),
        raw_batch([raw_record(-1, 0, b"k", b"v")], base_offset=349, base_timestamp=-(2**63)),
    ]
    data = b"".join(good)
    assert assert_fast_decodes_like_exact(data) == []
    starts = np.cumsum([0] + [len(b) for b in good])
    assert fallbacks == [int(starts[i]) for i in (8, 9, 10)]  # all others: vector path
    bad = [
        raw_batch([raw_record(0, 0, b"k", b"v", tail=b"\x02\x02kk\x02vv")], base_offset=0),
        raw_batch([raw_record(0, 0, b"k", b"v", length_adjust=1)], base_offset=0),
        raw_batch([raw_record(0, 0, b"k", b"v", length_adjust=-1)], base_offset=0),
        raw_batch([raw_record(0, 0, b"k", b"v")], base_offset=0, count=2),
        raw_batch([raw_record(0, 0, b"k", b"v")] * 2, base_offset=0, count=1),
        raw_batch([raw_record(0, 0, b"k", b"v")], base_offset=0, count=-1),
        raw_batch([raw_record(0, 0, b"k", b"v")], base_offset=0, count=0),
        raw_batch([b"\x0a\x00\x00\x00\x03k\x02v\x00"], base_offset=0),
        raw_batch([b"\x04\x00\x00\x00\x00"], base_offset=0),  # record length 2 < 6
        raw_batch([zz(-(10**7)) + bytes(7)], base_offset=0),  # negative record length
        raw_batch([b"\x8c"], base_offset=0),  # varint running off the batch
        raw_batch([raw_record(0, 0, b"k", b"v")], base_offset=2**62 + 5),
        raw_batch([raw_record(0, 0, b"k", b"v")], base_offset=0, attrs=0x20),  # control
    ]
    for i, b in enumerate(bad):
        prefix = raw_batch([raw_record(0, 0, b"p", b"p")], base_offset=0)
        # each bad batch between good ones, at the end of a file, and alone
        for case in (prefix + b.replace(b"\x00" * 8, struct.pack(">q", 1), 1) + good[0], b):
            assert_fast_decodes_like_exact(case, rows_per_batch=1 + i % 3)
    # offsets past int64: the exact path's Arrow conversion raises, the fast one must too
    # (rather than wrap around silently)
    huge = raw_batch([raw_record(0, 5, b"k", b"v")], base_offset=2**63 - 3)
    with pytest.raises(OverflowError):
        exact_arrow(decode_segment_bytes(huge))
    with pytest.raises(OverflowError):
        list(arrow_reader.bytes_to_arrow(huge))


def test_fast_arrow_fuzzed_records_with_valid_crc(group_bytes: int) -> None:
    """Random damage inside checksummed batches whose CRC is then recomputed: framing stays
    sound, so every batch reaches the vector parser, which must decline exactly the records
    the exact decoder rejects."""
    recs = [NewRecord(i, 1_000 + i, b"key-%d" % i, b"value" * (i % 30)) for i in range(60)]
    sizes = [1, 1, 3, 1, 2, 7, 1, 1, 5, 1, 4, 1, 1, 2, 1, 6, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1]
    blobs, start = [], 0
    for size in sizes:
        blobs.append(encode_batch(recs[start : start + size], base_offset=start))
        start += size
    rng = random.Random(12)
    for _ in range(80):
        damaged = [bytearray(b) for b in blobs]
        for _ in range(rng.randrange(1, 4)):
            b = rng.choice(damaged)
            at = rng.choice([rng.randrange(21, len(b)), rng.randrange(57, 61), 61])
            b[at] = rng.randrange(256) if rng.random() < 0.5 else b[at] ^ 1 << rng.randrange(8)
            struct.pack_into(">I", b, 17, framing.crc32c(memoryview(b)[21:]))
        assert_fast_decodes_like_exact(b"".join(damaged), rows_per_batch=rng.choice([1, 9, 999]))


def test_writer_output_reads_the_same_fast(tmp_path: Path) -> None:
    """Headers, LogAppendTime, every codec, transactions, multi-segment: via files."""
    with SegmentWriter(tmp_path, 12, base_offset=100, partition_leader_epoch=3) as w:
        for comp in framing.CODEC_NAMES:
            w.append([(b"k", b"v"), (None, bytes(5000)), (b"t", None)], timestamp=[10, 5, 2**40],
                     compression=comp)  # fmt: skip
        w.append([(b"h", b"v")], timestamp=50, headers=(("trace", b"abc"),), timestamp_type=1)
        w.append([(b"tx", b"1")], timestamp=60, producer_id=77, producer_epoch=2,
                 base_sequence=9, transactional=True)  # fmt: skip
        w.append_marker("COMMIT", producer_id=77, producer_epoch=2, timestamp=61)
        w.roll()
        w.append([(b"next", b"segment")], timestamp=70)
    for rows in (1, 4, 65536):
        problems: list[Problem] = []
        assert_same_arrow(
            list(arrow_reader.read_arrow(tmp_path, cluster_id="c", rows_per_batch=rows, problems=problems)),
            exact_arrow(exact_reader.iter_batches(tmp_path), rows),
        )
        assert problems == []


def folded_rows(records: list[Record], result: exact_fold.FoldResult) -> list[Record]:
    """What fold_arrow keeps: FoldResult.records and .markers merged back into log order."""
    keep = {id(r) for r in result.records} | {id(r) for r in result.markers}
    return [r for r in records if id(r) in keep]


def assert_fold_arrow_equals_fold(records: list[Record], table: pa.Table) -> None:
    assert table.num_rows == len(records)
    end = max((r.batch.last_offset + 1 for r in records), default=0)
    for stop in (False, True):
        result = fold_transactions(records, stop_at_lso=stop)
        kept, lso = transactions.fold_arrow(table, stop_at_lso=stop, log_end_offset=end)
        assert lso == result.last_stable_offset
        want = list(exact_reader.records_to_arrow(folded_rows(records, result), cluster_id="c"))
        assert kept.equals(pa.Table.from_batches(want, schema=RAW_ARROW_SCHEMA)), stop
        if end == max((r.offset + 1 for r in records), default=0):  # no emptied tail batch
            assert transactions.fold_arrow(table, stop_at_lso=stop)[1] == lso


def test_fold_arrow_equals_fold_transactions_golden(scenario_a: Path, golden_read: dict) -> None:
    for plog in find_segments(scenario_a / "segments"):
        records = flat(golden_read[plog.offsets_partition][0])
        table = pa.Table.from_batches(list(arrow_reader.read_arrow(plog.directory, cluster_id="c")))
        assert_fold_arrow_equals_fold(records, table)


def test_fold_arrow_equals_fold_transactions_generated(tmp_path: Path) -> None:
    """The demo history (aborted and committed transactions), whole and cut at many points:
    every cut inside a transaction leaves it open, so held-back rows and the LSO move."""
    from pipelines.demo import generate_cluster

    generate_cluster(tmp_path, scale=1, live=False)
    rng = random.Random(13)
    aborted = 0
    for plog in find_segments(tmp_path):
        records = list(read_records(plog.directory))
        table = pa.Table.from_batches(
            list(arrow_reader.read_arrow(plog.directory, cluster_id="c")), schema=RAW_ARROW_SCHEMA
        )
        aborted += len(fold_transactions(records).aborted)
        cuts = {len(records)} | set(rng.sample(range(len(records) + 1), min(8, len(records))))
        txn = [i for i, r in enumerate(records) if r.is_transactional]
        cuts |= {i + 1 for i in txn[:: max(1, len(txn) // 6)]}
        for cut in sorted(cuts):
            assert_fold_arrow_equals_fold(records[:cut], table.slice(0, cut))
    assert aborted > 0


def test_fold_arrow_open_and_interleaved_transactions(tmp_path: Path) -> None:
    """The synthetic log of test_fold_open_aborted_and_interleaved_transactions, plus a
    KRaft-only control record and a transaction reopened after its marker."""
    with SegmentWriter(tmp_path, 7) as w:
        w.append([(b"a", b"1")], timestamp=1)
        w.append([(b"t1", b"x"), (b"t1", b"y")], timestamp=2, producer_id=5, producer_epoch=0,
                 transactional=True)  # fmt: skip
        w.append([(b"t2", b"x")], timestamp=3, producer_id=6, producer_epoch=0, transactional=True)
        w.append([(b"b", None)], timestamp=4)
        w.append_marker("ABORT", producer_id=6, producer_epoch=0, timestamp=5)
        w.write_raw(
            encode_batch([NewRecord(6, 5, struct.pack(">hh", 0, 2), b"\x00\x00")],
                         base_offset=6, is_control=True, is_transactional=True, producer_id=5),
            7,
        )  # fmt: skip
        w.append_marker("COMMIT", producer_id=5, producer_epoch=0, timestamp=6)
        w.append([(b"t3", b"z")], timestamp=7, producer_id=5, producer_epoch=0, transactional=True)
        w.append([(b"t4", b"z")], timestamp=7, producer_id=6, producer_epoch=1, transactional=True)
        w.append([(b"c", b"2")], timestamp=8)
    records = list(read_records(tmp_path))
    table = pa.Table.from_batches(list(arrow_reader.read_arrow(tmp_path, cluster_id="c")))
    for cut in range(len(records) + 1):
        assert_fold_arrow_equals_fold(records[:cut], table.slice(0, cut))
    kept, lso = transactions.fold_arrow(table)
    assert lso == 8 and kept.column("offset").to_pylist() == [0, 1, 2, 4, 5, 6, 7, 10]
    empty, lso = transactions.fold_arrow(table.slice(0, 0))
    assert empty.num_rows == 0 and lso == 0


def _union_by_offset(segments: list) -> list:
    """The reference: every record of every file, first copy of each offset, in offset order."""
    records = [r for s in segments for _, batch in exact_reader.read_segment_file(s) for r in batch]
    records.sort(key=lambda r: r.offset)  # stable: the first file's copy wins
    out, last = [], -1
    for r in records:
        if r.offset > last:
            out.append(r)
            last = r.offset
    return out


def test_unique_offsets_equals_log_records(public_corpus: Path) -> None:
    """Partition directories holding several copies of a segment: the union by offset."""
    overlapping = [pl for pl in find_segments(public_corpus) if len(pl.segments) > 1]
    assert len(overlapping) > 10
    deduplicated = 0
    for plog in overlapping:
        fast = list(arrow_reader.read_segments_arrow(plog.segments, cluster_id="c"))
        table = pa.Table.from_batches(fast, schema=RAW_ARROW_SCHEMA)
        want = list(exact_reader.records_to_arrow(_union_by_offset(plog.segments), cluster_id="c"))
        union = transactions.unique_offsets(table)
        assert union.equals(pa.Table.from_batches(want, schema=RAW_ARROW_SCHEMA)), plog.directory
        deduplicated += union.num_rows < table.num_rows
    assert deduplicated > 10


def _control_mix() -> bytes:
    """Data and transaction-marker batches: markers as the coordinator writes them, and
    control batches no coordinator writes (other types, negative ones, short and null keys,
    two records, none, compressed), between plain and transactional data."""
    ts = 1_795_000_000_000
    marker_value = struct.pack(">hi", 0, 3)

    def control(offset: int, keys: list[bytes | None], compression: str = "none") -> bytes:
        recs = [NewRecord(offset + i, ts + i, k, marker_value) for i, k in enumerate(keys)]
        return encode_batch(recs, base_offset=offset, producer_id=7, producer_epoch=1,
                            is_transactional=True, is_control=True, compression=compression,
                            last_offset_delta=max(len(keys) - 1, 0))

    def data(offset: int, transactional: bool) -> bytes:
        return encode_batch([NewRecord(offset, ts, b"\x00\x01k", b"\x00\x03v")], base_offset=offset,
                            producer_id=7 if transactional else -1, producer_epoch=1 if transactional else -1,
                            is_transactional=transactional)

    return b"".join([
        data(0, False), data(1, True),
        encode_control_batch("COMMIT", offset=2, producer_id=7, producer_epoch=1, timestamp=ts),
        data(3, True),
        encode_control_batch("ABORT", offset=4, producer_id=7, producer_epoch=1, timestamp=ts),
        control(5, [struct.pack(">hh", 0, 5)]), control(6, [struct.pack(">hh", 0, -3)]),
        control(7, [struct.pack(">hh", 0, -32768)]), control(8, [b"\x00\x01"]), control(9, [None]),
        control(10, [struct.pack(">hh", 0, 1), struct.pack(">hh", 0, 0)]), control(12, []),
        control(13, [struct.pack(">hh", 0, 1)], compression="gzip"),
        data(14, False),
    ])


@pytest.mark.parametrize("rows_per_batch", [3, 1000])
def test_control_batches_take_the_vector_path_and_read_as_the_exact_reader_does(
        rows_per_batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Uncompressed control batches are decoded with the data batches' rounds (a
    transactional history writes a marker batch per transaction: the 10M generated one 40k),
    their type read from the key as ``framing.control_type_of`` reads it; the full read and
    the index read give the exact reader's rows. Only the compressed one (no broker writes
    it) is left to the exact decoder."""
    blob = _control_mix()
    calls = []
    exact = arrow_decode.decode_v2_batch

    def counted(data: bytes, mv: memoryview, pos: int, *rest: Any) -> Any:
        calls.append(pos)
        return exact(data, mv, pos, *rest)

    monkeypatch.setattr(arrow_decode, "decode_v2_batch", counted)
    assert assert_fast_decodes_like_exact(blob, rows_per_batch=rows_per_batch) == []
    assert len(calls) == 1  # the gzip control batch alone
    got = pa.Table.from_batches(arrow_reader.bytes_to_arrow(blob, cluster_id="c"))
    assert got.column("control_type").to_pylist() == [
        None, None, "COMMIT", None, "ABORT", "UNKNOWN(5)", "UNKNOWN(-3)", "UNKNOWN(-32768)",
        "UNKNOWN(-1)", "UNKNOWN(-1)", "COMMIT", "ABORT", "COMMIT", None]
    assert got.column("is_control").to_pylist() == [False, False, True, False, True, *[True] * 8, False]


def test_an_index_read_gives_the_control_types_of_the_full_read(tmp_path: Path) -> None:
    """Planning reads control types from the index alone (which transactions aborted)."""
    from pipelines.sources.raw import INDEX_ARROW_SCHEMA

    where = tmp_path / "__consumer_offsets-0"
    where.mkdir()
    (where / "00000000000000000000.log").write_bytes(_control_mix())
    [plog] = find_segments(tmp_path)
    full = pa.Table.from_batches(arrow_reader.read_segments_arrow(plog.segments), schema=RAW_ARROW_SCHEMA)
    light = pa.Table.from_batches(arrow_reader.index_segments_arrow(plog.segments), schema=INDEX_ARROW_SCHEMA)
    assert light.num_rows == full.num_rows == 14
    for name in ("offset", "producer_id", "is_transactional", "is_control", "control_type", "source_position"):
        assert light.column(name).equals(full.column(name)), name
