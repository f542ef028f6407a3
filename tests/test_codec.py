"""The pure-Python codec: spec vectors, third-party vectors, golden Kafka decoding, round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.decode import (
    OK,
    PARSE_ERROR,
    TOMBSTONE,
    UNKNOWN_TYPE,
    UNKNOWN_VALUE_VERSION,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
    java_string_hashcode,
    partition_for,
    wire,
)
from pipelines.decode.formats import record_formats
from tests.conftest import corpus_path
from tests.kafka_dump import from_kafka_json, parse_dump, to_kafka_json

# ----------------------------------------------------------------------------- partitioning

# (group, expected hash or None, expected partition for n=50): the spec's section 3.5 vectors.
SPEC_VECTORS = [
    ("polygenelubricants", -(1 << 31), 0),
    ("GydZG_", -(1 << 31), 0),
    ("DESIGNING WORKHOUSES", -(1 << 31), 0),
    ("", 0, 0),
    ("my-group", -1906497762, 12),
    ("console-consumer-12345", None, 6),
    ("grüße", None, 23),
    ("😀group", None, 32),
]


@pytest.mark.parametrize(("group", "hashcode", "partition"), SPEC_VECTORS)
def test_partition_for_spec_vectors(group: str, hashcode: int | None, partition: int) -> None:
    if hashcode is not None:
        assert java_string_hashcode(group) == hashcode
    assert partition_for(group, 50) == partition


def test_partition_for_rejects_zero_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for("g", 0)


# ----------------------------------------------------------------------------- Burrow vectors


def _burrow_vectors() -> dict[tuple[str, str], bytes]:
    path = corpus_path("vectors", "burrow_kafka_client_test_vectors.json")
    vectors = json.loads(path.read_text())["vectors"]
    return {(v["test"], v["role"]): bytes.fromhex(v["hex"]) for v in vectors}


def test_burrow_primitive_vectors() -> None:
    v = _burrow_vectors()
    assert wire.read_string(v["TestKafkaClient_readString", "buf"], 0)[0] == "test"
    with pytest.raises(wire.WireError):
        wire.read_string(v["TestKafkaClient_readString_Underflow", "buf"], 0)
    assert wire.read_compact_string(v["TestKafkaClient_readCompactString", "buf"], 0)[0] == "test"
    assert wire.read_compact_string(v["TestKafkaClient_readCompactString_Empty", "buf"], 0)[0] == ""
    assert wire.read_compact_string(v["TestKafkaClient_readCompactString_Null", "buf"], 0, True)[0] is None
    with pytest.raises(wire.WireError):
        wire.read_compact_string(v["TestKafkaClient_readCompactString_Underflow", "buf"], 0)


OFFSET_KEY = {"group": "testgroup", "topic": "testtopic", "partition": 11}


@pytest.mark.parametrize(
    ("test", "version", "expected"),
    [
        ("TestKafkaClient_decodeKeyAndOffset", 0,
         {"offset": 8372, "metadata": "testdata", "commit_timestamp": 1637}),
        ("TestKafkaClient_decodeKeyAndOffset_ValueVersion4", 4,
         {"offset": 8372, "leader_epoch": 0, "metadata": "testdata", "commit_timestamp": 1637}),
    ],
)
def test_burrow_offset_vectors(test: str, version: int, expected: dict) -> None:
    v = _burrow_vectors()
    key = b"\x00\x01" + v[test, "keyBuf"]
    rec = decode_record(key, v[test, "valueBytes"])
    assert rec.decode_status == OK
    assert rec.key == OFFSET_KEY
    assert rec.value_version == version
    assert {k: rec.value[k] for k in expected} == expected
    assert encode_record(rec) == (key, v[test, "valueBytes"])


def test_burrow_allowlist_vector_names_its_group() -> None:
    v = _burrow_vectors()
    rec = decode_record(b"\x00\x01" + v["TestKafkaClient_decodeKeyAndOffset_Allowlist", "keyBuf"],
                        v["TestKafkaClient_decodeKeyAndOffset_Allowlist", "valueBytes"])
    assert rec.decode_status == OK and rec.key["group"] == "dropthisgroup"


def test_burrow_truncated_value_is_a_parse_error_not_an_exception() -> None:
    v = _burrow_vectors()
    rec = decode_record(b"\x00\x01" + v["TestKafkaClient_decodeKeyAndOffset", "keyBuf"],
                        v["TestKafkaClient_decodeAndSendOffset_ErrorValue", "valueBuf"])
    assert rec.decode_status == PARSE_ERROR
    assert rec.key == OFFSET_KEY
    assert "value v0" in rec.decode_error


def test_burrow_group_metadata_vectors() -> None:
    v = _burrow_vectors()
    rec = decode_record(v["TestKafkaClient_processConsumerOffsetsMessage_Offset", "key"],
                        v["TestKafkaClient_processConsumerOffsetsMessage_Offset", "value"])
    assert rec.decode_status == OK and rec.key == {"group": "testgroup"} and rec.value_version == 1
    (member,) = rec.value["members"]
    assert (rec.value["protocol_type"], rec.value["generation"], rec.value["protocol"],
            rec.value["leader"]) == ("consumer", 1, "testprotocol", "testleader")
    assert (member["member_id"], member["client_id"], member["client_host"],
            member["rebalance_timeout"], member["session_timeout"]) == (
        "testmemberid", "testclientid", "testclienthost", 4, 8)
    assert member["assignment"]["assigned_partitions"] == [{"topic": "topic1", "partitions": [11]}]


def test_burrow_edited_protocol_type_vector_is_malformed() -> None:
    """Burrow hand-edited this vector: "badprotocol" (11 bytes) behind a length prefix of 8.

    The bytes after the 8-byte string are garbage, so the honest answer is a parse error
    that still names the record type and group, with no exception.
    """
    v = _burrow_vectors()
    test = "TestKafkaClient_processConsumerOffsetsMessage_DifferentProtocolType"
    value = v[test, "value"]
    assert value[2:4] == b"\x00\x08" and value[4:15] == b"badprotocol"
    rec = decode_record(v[test, "key"], value)
    assert (rec.decode_status, rec.type_name, rec.key) == (PARSE_ERROR, "GroupMetadata", {"group": "testgroup"})


def test_other_protocol_types_keep_member_blobs_as_bytes() -> None:
    """Only protocol type "consumer" is expanded (Burrow #475 crashed on "sr" groups)."""
    v = _burrow_vectors()
    rec = decode_record(v["TestKafkaClient_processConsumerOffsetsMessage_Offset", "key"],
                        v["TestKafkaClient_processConsumerOffsetsMessage_Offset", "value"])
    group = dict(rec.value, protocol_type="sr")
    blob = encode_value(2, 1, group)
    other = decode_record(v["TestKafkaClient_processConsumerOffsetsMessage_Offset", "key"], blob)
    assert other.decode_status == OK and other.value["protocol_type"] == "sr"
    assert isinstance(other.value["members"][0]["assignment"], bytes)
    assert other.value["members"][0]["assignment"] == v["TestKafkaClient_processConsumerOffsetsMessage_Offset", "value"][-26:]


@pytest.mark.parametrize("test", ["TestKafkaClient_decodeMetadataValueHeaderV2",
                                  "TestKafkaClient_decodeMetadataValueHeaderV3"])
def test_burrow_group_metadata_v2_v3(test: str) -> None:
    blob = _burrow_vectors()[test, "value(metadata concat)"]
    rec = decode_record(encode_key(2, {"group": "g"}), blob)
    assert rec.decode_status == OK, rec.decode_error
    assert rec.value_version == int(test[-1])
    assert rec.value["protocol_type"] == "consumer"
    assert rec.value["leader"].startswith("tLeader-")
    assert encode_record(rec)[1] == blob


# ----------------------------------------------------------------------------- statuses


def test_statuses_for_bad_input() -> None:
    key = encode_key(1, OFFSET_KEY)
    assert decode_record(key, None).decode_status == TOMBSTONE
    assert decode_record(None, b"\x00\x03").decode_status == PARSE_ERROR
    assert decode_record(b"\x00\x63\x00\x01a", b"\x00\x00").decode_status == UNKNOWN_TYPE
    unknown_version = decode_record(key, b"\x00\x09" + b"\x00" * 20)
    assert unknown_version.decode_status == UNKNOWN_VALUE_VERSION
    assert unknown_version.key == OFFSET_KEY
    assert decode_record(key[:-1], None).decode_status == PARSE_ERROR
    assert decode_record(key + b"\x00", None).decode_status == PARSE_ERROR


def test_value_memo_shares_values_across_keys_and_keeps_each_records_key() -> None:
    """``decode_record(values=...)`` decodes a value's bytes once per record type and
    shares the result; every record keeps its own key, type and status, errors included."""
    epoch = encode_value(3, 0, {"epoch": 7})
    bad = b"\x00\x00\x01"  # a ConsumerGroupMetadata v0 value cut short
    keys = [encode_key(3, {"group_id": g}) for g in ("a", "b")]
    # the same bytes under another record type are another value
    other = encode_key(6, {"group_id": "a"})
    values: dict = {}
    for key in keys:
        for value in (epoch, bad, None):
            memo = decode_record(key, value, values=values)
            plain = decode_record(key, value)
            assert memo == plain
    assert decode_record(keys[0], epoch, values=values).value is decode_record(
        keys[1], epoch, values=values).value
    assert decode_record(other, epoch, values=values) == decode_record(other, epoch)
    broken = decode_record(keys[0], bad, values=values)
    assert broken.decode_status != OK and broken.decode_error and broken.value is None
    assert set(values) == {(3, epoch), (3, bad), (6, epoch)}


def test_removed_and_unknown_types_are_reported_with_their_number() -> None:
    rec = decode_record(b"\x00\x18" + encode_key(3, {"group_id": "g"})[2:], b"\x00\x00\x00")
    assert (rec.decode_status, rec.record_type) == (UNKNOWN_TYPE, 24)
    assert {9, 18} <= set(record_formats())  # removed from Kafka, still decoded


def _sample_values() -> list[tuple[int, int, dict]]:
    """One value per record type and version, exercising tags, nullables and nesting."""
    tp = [{"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": [0, 1, 2]}]
    return [
        (1, 0, {"offset": 5, "metadata": "m", "commit_timestamp": 7}),
        (1, 1, {"offset": 5, "metadata": "", "commit_timestamp": 7, "expire_timestamp": 9}),
        (1, 3, {"offset": 5, "leader_epoch": 3, "metadata": "x" * 200, "commit_timestamp": 7}),
        (1, 4, {"offset": 5, "leader_epoch": -1, "metadata": "é" * 100, "commit_timestamp": 7,
                "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}),
        (2, 4, {"protocol_type": "consumer", "generation": 3, "protocol": "range", "leader": "m1",
                "current_state_timestamp": 11, "members": [{
                    "member_id": "m1", "group_instance_id": "static", "client_id": "c",
                    "client_host": "/h", "rebalance_timeout": 1, "session_timeout": 2,
                    "subscription": {"version": 3, "topics": ["t"], "user_data": None,
                                     "owned_partitions": [{"topic": "t", "partitions": [0]}],
                                     "generation_id": 3, "rack_id": "r1"},
                    "assignment": {"version": 3, "assigned_partitions": [
                        {"topic": "t", "partitions": [0, 1]}], "user_data": b"\x01"}}]}),
        (5, 0, {"instance_id": None, "rack_id": "r", "client_id": "c", "client_host": "/h",
                "subscribed_topic_names": ["a", "b"], "subscribed_topic_regex": None,
                "rebalance_timeout_ms": 300, "server_assignor": "uniform",
                "classic_member_metadata": {"session_timeout_ms": 45000, "supported_protocols": [
                    {"name": "range", "metadata": b"\x00\x01"}]}}),
        (8, 0, {"member_epoch": 4, "previous_member_epoch": 3, "state": 1,
                "assigned_partitions": [{**tp[0], "assignment_epochs": [4, 4, 4]}],
                "partitions_pending_revocation": []}),
        (11, 0, {"epoch": 2, "metadata_hash": None}),
        (11, 0, {"epoch": 2, "metadata_hash": 77}),
        (17, 0, {"epoch": 1, "metadata_hash": 5, "validated_topology_epoch": 2,
                 "last_assignment_configs": [{"key": "k", "value": "v"}],
                 "stored_description_topology_epoch": -1, "failed_description_topology_epoch": 3}),
        (19, 0, {"instance_id": None, "rack_id": None, "client_id": "c", "client_host": "h",
                 "rebalance_timeout_ms": 1, "topology_epoch": 2, "process_id": "p",
                 "user_endpoint": {"host": "localhost", "port": 65535}, "client_tags": []}),
        (23, 0, {"epoch": 1, "subtopologies": [{
            "subtopology_id": "0", "source_topics": ["in"], "source_topic_regex": [],
            "state_changelog_topics": [{"name": "cl", "partitions": 0, "replication_factor": -1,
                                        "topic_configs": [{"key": "a", "value": "b"}]}],
            "repartition_sink_topics": [], "repartition_source_topics": [],
            "copartition_groups": [{"source_topics": [0], "source_topic_regex": [],
                                    "repartition_source_topics": []}]}]}),
    ]


@pytest.mark.parametrize(("record_type", "version", "value"), _sample_values())
def test_value_round_trip(record_type: int, version: int, value: dict) -> None:
    blob = encode_value(record_type, version, value)
    fields = {"group_id": "g", "member_id": "m", "group": "g", "topic": "t", "partition": 0}
    fmt = record_formats()[record_type]
    key = encode_key(record_type, {f.name: fields[f.name] for f in fmt.key_fields})
    rec = decode_record(key, blob)
    assert rec.decode_status == OK, rec.decode_error
    assert {k: rec.value[k] for k in value} == value
    assert encode_record(rec) == (key, blob)


def test_every_type_round_trips_its_defaults() -> None:
    """An all-defaults value of every known type and version encodes and decodes back."""
    for fmt in record_formats().values():
        key = encode_key(fmt.record_type, {f.name: 0 if f.type == "int32" else "k" for f in fmt.key_fields})
        for version in range(fmt.value.versions.low, min(fmt.value.versions.high, 10) + 1):
            blob = encode_value(fmt.record_type, version, {})
            rec = decode_record(key, blob)
            assert rec.decode_status == OK, (fmt.name, version, rec.decode_error)
            assert encode_record(rec) == (key, blob)


def test_unknown_tagged_fields_are_skipped_and_kept() -> None:
    key = encode_key(3, {"group_id": "g"})
    # ConsumerGroupMetadataValue v0: epoch 7, then 2 tagged fields: tag 0 (metadata hash) and
    # an unknown tag 5 that a newer broker might write.
    value = bytes.fromhex("0000" "00000007" "02" "00" "08" "0000000000000009" "05" "02" "abcd")
    rec = decode_record(key, value)
    assert rec.decode_status == OK
    assert (rec.value["epoch"], rec.value["metadata_hash"]) == (7, 9)
    assert encode_record(rec)[1] == value


# ----------------------------------------------------------------------------- golden


def _consumed(scenario: Path) -> list[dict]:
    return [json.loads(line) for line in (scenario / "consumed_read_uncommitted.jsonl").open()]


def test_golden_every_record_decodes_and_round_trips(scenario_a: Path) -> None:
    consumed = _consumed(scenario_a)
    assert consumed
    for row in consumed:
        key = bytes.fromhex(row["key"])
        value = None if row["value"] is None else bytes.fromhex(row["value"])
        rec = decode_record(key, value)
        assert rec.decode_status in (OK, TOMBSTONE), (row, rec)
        assert encode_record(rec) == (key, value)


def test_golden_fields_equal_kafkas_own_decoding(scenario_a: Path) -> None:
    """Every key and value field equals ``kafka-dump-log --offsets-decoder`` output."""
    by_position = {(r["partition"], r["offset"]): r for r in _consumed(scenario_a)}
    compared = 0
    for dump_file in sorted((scenario_a / "dump").glob("*.txt")):
        for batch in parse_dump(dump_file):
            for d in batch.records:
                if d.control:
                    continue
                row = by_position[d.partition, d.offset]
                value = None if row["value"] is None else bytes.fromhex(row["value"])
                rec = decode_record(bytes.fromhex(row["key"]), value)
                assert rec.record_type == int(d.key["type"])
                assert rec.key == from_kafka_json(d.key["data"])
                if d.payload is None:
                    assert rec.decode_status == TOMBSTONE and d.value_size == -1
                else:
                    assert rec.value_version == int(d.payload["version"])
                    _assert_same_fields(to_kafka_json(rec.value), from_kafka_json(d.payload["data"]),
                                        f"{d.partition}:{d.offset}")
                compared += 1
    assert compared == len(by_position)


def _assert_same_fields(ours: object, theirs: object, where: str) -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        assert set(theirs) <= set(ours), (where, set(theirs) - set(ours))
        for name, value in theirs.items():
            _assert_same_fields(ours[name], value, f"{where}.{name}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _assert_same_fields(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, (where, ours, theirs)
