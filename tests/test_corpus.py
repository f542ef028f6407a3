"""Every record real brokers wrote (Kafka 0.10 to 4.2) decodes, round-trips and sits in its partition."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from pipelines.decode import OK, TOMBSTONE, decode_record, encode_record, partition_for
from pipelines.sources.record_batches.exact_reader import read_segment_file
from pipelines.sources.segments.files import find_segments
from tests.kafka_dump import from_kafka_json, parse_dump, to_kafka_json

# The public corpus holds data dirs of brokers left at Kafka's default
# offsets.topic.num.partitions = 50; the data agrees: every __consumer_offsets-N directory
# has N < 50, and a different count would show up as partition_for mismatches below.
PUBLIC_NUM_PARTITIONS = 50


def test_public_corpus_decodes_round_trips_and_hashes(public_corpus: Path) -> None:
    statuses: Counter = Counter()
    groups_checked = 0
    for plog in find_segments(public_corpus):
        assert 0 <= plog.offsets_partition < PUBLIC_NUM_PARTITIONS, plog.directory
        for seg in plog.segments:
            problems: list = []
            for batch, records in read_segment_file(seg, problems=problems):
                assert batch.crc_valid, (seg.path, batch.position)
                for rec in records:
                    decoded = decode_record(rec.key, rec.value, batch.is_control)
                    statuses[decoded.decode_status] += 1
                    assert decoded.decode_status in (OK, TOMBSTONE), (seg.path, rec.offset, decoded)
                    assert encode_record(decoded) == (rec.key, rec.value), (seg.path, rec.offset)
                    assert partition_for(decoded.group_id, PUBLIC_NUM_PARTITIONS) == plog.offsets_partition
                    groups_checked += 1
            assert problems == [], problems
    assert statuses[OK] > 100_000 and groups_checked == sum(statuses.values())


def _num_partitions(scenario: Path) -> int:
    """The golden broker's offsets.topic.num.partitions, from its recorded configuration."""
    text = (scenario / "broker-config" / "server.properties").read_text()
    return int(re.search(r"^offsets\.topic\.num\.partitions=(\d+)", text, re.M).group(1))


def test_golden_segments_equal_kafka_dump_record_by_record(scenario_a: Path) -> None:
    """Reader + codec against kafka-dump-log, markers and aborted data included."""
    n = _num_partitions(scenario_a)
    compared = 0
    for plog in find_segments(scenario_a / "segments"):
        ours = [(b, r) for seg in plog.segments for b, recs in read_segment_file(seg) for r in recs]
        dump = [d for batch in parse_dump(scenario_a / "dump" / f"__consumer_offsets-{plog.offsets_partition}.txt")
                for d in batch.records]
        assert [r.offset for _, r in ours] == [d.offset for d in dump]
        for (batch, rec), d in zip(ours, dump, strict=True):
            assert rec.timestamp == d.timestamp
            decoded = decode_record(rec.key, rec.value, batch.is_control)
            if d.control:
                assert (decoded.decode_status, rec.control_type) == ("control", d.control)
                continue
            assert decoded.record_type == int(d.key["type"])
            assert decoded.key == from_kafka_json(d.key["data"])
            assert partition_for(decoded.group_id, n) == plog.offsets_partition
            if d.payload is None:
                assert decoded.decode_status == TOMBSTONE
            else:
                assert decoded.value_version == int(d.payload["version"])
                assert _same(to_kafka_json(decoded.value), from_kafka_json(d.payload["data"]))
            assert encode_record(decoded) == (rec.key, rec.value)
            compared += 1
    assert compared == 16373 - 7  # the MANIFEST's records minus its 7 markers


def _same(ours: object, theirs: object) -> bool:
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and all(k in ours and _same(ours[k], v) for k, v in theirs.items())
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(ours) == len(theirs) and all(
            _same(a, b) for a, b in zip(ours, theirs, strict=True))
    return ours == theirs
