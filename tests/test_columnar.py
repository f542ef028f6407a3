"""The vectorized offset-commit decoder gives, row for row, what the per-row codec gives.

The per-row codec (``decode_record``) is the reference; ``decode_rows`` maps its results to
the columnar schema. Every comparison is over whole rows, statuses and error texts included.
"""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decode import OK, PARSE_ERROR, TOMBSTONE, encode_key, encode_value
from pipelines.decode import columnar as columnar_module
from pipelines.decode.columnar import (
    DECODED_COLUMNS,
    OUTPUT_SCHEMA,
    TAGS_ABSENT_NOTE,
    decode_batch,
    decode_offset_commits,
    decode_rows,
)
from pipelines.decode.formats import EXPLICIT_DEFAULT_TAGS, TAGS_ABSENT, UNKNOWN_TAGS
from pipelines.decode.wire import ZERO_UUID, uuid_to_str, write_uvarint

Key = bytes | None
Value = bytes | None

# ----------------------------------------------------------------------------- helpers


def _arrow(items: list[bytes | None], large: bool, chunks: int, lead: int) -> pa.ChunkedArray:
    """``items`` as (large_)binary, split into ``chunks`` chunks, the first one a slice with a
    non-zero offset when ``lead`` > 0 (exercises offset handling of the buffer views)."""
    typ = pa.large_binary() if large else pa.binary()
    n = len(items)
    bounds = [n * i // chunks for i in range(chunks + 1)]
    parts = []
    for a, b in itertools.pairwise(bounds):
        padded = pa.array([b"lead"] * lead + items[a:b], typ)
        parts.append(padded.slice(lead))
    return pa.chunked_array(parts, typ)


def _deferred(row: dict[str, Any], key: Key, value: Value, control: bool) -> dict[str, Any]:
    """What the default (deferring) mode promises for a row of another record type."""
    if control or key is None or len(key) < 2:
        return row
    record_type = struct.unpack(">h", key[:2])[0]
    if record_type in (0, 1):
        return row
    return {**dict.fromkeys(DECODED_COLUMNS), "record_type": record_type,
            "is_tombstone": value is None}


def _assert_same(
    keys: list[Key],
    values: list[Value],
    control: list[bool] | None = None,
    *,
    large: bool = False,
    chunks: int = 1,
    lead: int = 0,
) -> None:
    expected = decode_rows(keys, values, control)
    ctrl = None if control is None else pa.array(control, pa.bool_())
    k, v = _arrow(keys, large, chunks, lead), _arrow(values, large, chunks, lead)
    every = decode_offset_commits(k, v, is_control=ctrl, decode_other_types=True)
    assert every.schema == OUTPUT_SCHEMA
    for i, (got, want) in enumerate(zip(every.to_pylist(), expected, strict=True)):
        assert got == want, (i, keys[i], values[i])
    flags = control or [False] * len(keys)
    deferred = decode_offset_commits(k, v, is_control=ctrl).to_pylist()
    for i, got in enumerate(deferred):
        assert got == _deferred(expected[i], keys[i], values[i], flags[i]), (i, keys[i], values[i])


def _v4(offset: int, epoch: int, meta: bytes, ts: int, tags: bytes, varint_pad: int = 0) -> bytes:
    """A v4 value built by hand, optionally with a non-minimal metadata length varint."""
    out = bytearray(struct.pack(">hqi", 4, offset, epoch))
    length = bytearray()
    write_uvarint(length, len(meta) + 1)
    for _ in range(varint_pad):
        length[-1] |= 0x80
        length.append(0)
    out += length + meta + struct.pack(">q", ts) + tags
    return bytes(out)


# ----------------------------------------------------------------------------- strategies

_INTERESTING = [0x00, 0x01, 0x02, 0x0F, 0x10, 0x11, 0x7F, 0x80, 0x81, 0xC3, 0xFE, 0xFF]
_int64 = st.integers(-(1 << 63), (1 << 63) - 1)
_int32 = st.integers(-(1 << 31), (1 << 31) - 1)
_name = st.one_of(st.text(max_size=12), st.sampled_from(["g", "orders", "console-consumer-1"]))
_metadata = st.one_of(
    st.just(""),
    st.text(max_size=40),
    st.integers(120, 140).map(lambda n: "m" * n),  # 1- vs 2-byte varint
    st.integers(16370, 16400).map(lambda n: "x" * n),  # 2- vs 3-byte varint
    st.tuples(st.text(min_size=1, max_size=3), st.integers(40, 9000)).map(lambda t: t[0] * t[1]),
)
_topic_id = st.one_of(st.none(), st.just(ZERO_UUID), st.binary(min_size=16, max_size=16).map(uuid_to_str))


@st.composite
def _offset_commit(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A well-formed offset commit of any version, through the project's encoder."""
    record_type = draw(st.sampled_from([0, 1]))
    key = encode_key(record_type, {"group": draw(_name), "topic": draw(_name),
                                   "partition": draw(_int32)})
    version = draw(st.integers(0, 4))
    meta = draw(_metadata)
    if version < 4 and len(meta.encode()) > 32767:  # int16 string length
        meta = meta.encode()[:32767].decode("utf-8", "ignore")
    fields: dict[str, Any] = {"offset": draw(_int64), "metadata": meta,
                              "commit_timestamp": draw(_int64)}
    if version >= 3:
        fields["leader_epoch"] = draw(_int32)
    if version == 1:
        fields["expire_timestamp"] = draw(_int64)
    if version == 4:
        topic_id = draw(_topic_id)
        if topic_id is not None:
            fields["topic_id"] = topic_id
        shape = draw(st.sampled_from(["plain", "no_tags", "explicit_zero", "unknown_tags"]))
        if shape == "no_tags":
            fields = {**fields, TAGS_ABSENT: True}
        elif shape == "explicit_zero":
            fields = {**fields, "topic_id": ZERO_UUID, EXPLICIT_DEFAULT_TAGS: [0]}
        elif shape == "unknown_tags":
            fields[UNKNOWN_TAGS] = draw(st.dictionaries(
                st.integers(1, 300), st.binary(max_size=20), min_size=1, max_size=2))
    return key, encode_value(record_type, version, fields)


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[Key, Value]:
    """An offset commit, then maybe damaged: truncated, extended, a byte changed, or a
    tombstone; or a hand-built v4 with a padded varint."""
    key, value = draw(_offset_commit())
    what = draw(st.sampled_from(
        ["none", "none", "tombstone", "truncate_value", "truncate_key", "extend_value",
         "extend_key", "flip_value", "flip_key", "splice_value", "splice_key", "splice_tail",
         "version", "padded_varint"]))
    if what == "tombstone":
        return key, None
    if what == "truncate_value":
        return key, value[: draw(st.integers(0, len(value) - 1))]
    if what == "truncate_key":
        return key[: draw(st.integers(0, len(key) - 1))], value
    if what == "extend_value":
        return key, value + draw(st.binary(min_size=1, max_size=20))
    if what == "extend_key":
        return key + draw(st.binary(min_size=1, max_size=4)), value
    if what in ("flip_value", "flip_key"):
        blob = bytearray(value if what == "flip_value" else key)
        pos = draw(st.integers(0, len(blob) - 1))
        blob[pos] = draw(st.integers(0, 255))
        return (key, bytes(blob)) if what == "flip_value" else (bytes(blob), value)
    if what.startswith("splice"):  # interesting bytes, often in the (tagged) tail
        blob = bytearray(key if what == "splice_key" else value)
        low = max(0, len(blob) - 20) if what == "splice_tail" else 0
        pos = draw(st.integers(low, len(blob) - 1))
        new = draw(st.lists(st.sampled_from(_INTERESTING), min_size=1, max_size=3))
        blob[pos:pos + len(new)] = bytes(new)
        return (bytes(blob), value) if what == "splice_key" else (key, bytes(blob))
    if what == "version":
        return key, struct.pack(">h", draw(st.integers(-3, 9))) + value[2:]
    if what == "padded_varint":
        meta = draw(_metadata).encode()
        tags = draw(st.sampled_from([b"\x00", b"", b"\x01\x00\x10" + bytes(range(16))]))
        ts = draw(st.one_of(_int64, st.just(256)))
        return key, _v4(draw(_int64), draw(_int32), meta, ts, tags, draw(st.integers(1, 4)))
    return key, value


@st.composite
def _other(draw: st.DrawFn) -> tuple[Key, Value]:
    """Everything that is not an offset commit: group metadata, unknown types, junk."""
    what = draw(st.sampled_from(["group", "group_tombstone", "type", "junk", "null_key", "short"]))
    value = draw(st.one_of(st.none(), st.binary(max_size=30)))
    if what == "group":
        return encode_key(2, {"group": draw(_name)}), encode_value(2, draw(st.integers(0, 4)), {})
    if what == "group_tombstone":
        return encode_key(2, {"group": draw(_name)}), None
    if what == "type":
        return struct.pack(">h", draw(st.integers(-(1 << 15), (1 << 15) - 1))) + draw(
            st.binary(max_size=12)), value
    if what == "null_key":
        return None, value
    if what == "short":
        return draw(st.binary(max_size=1)), value
    return draw(st.binary(max_size=40)), value


_record = st.one_of(_offset_commit(), _mutated(), _mutated(), _other())


# ----------------------------------------------------------------------------- properties


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(
    records=st.lists(_record, min_size=1, max_size=25),
    controls=st.lists(st.booleans(), min_size=25, max_size=25),
    large=st.booleans(),
    chunks=st.integers(1, 3),
    lead=st.integers(0, 2),
)
def test_columnar_equals_per_row_codec(
    records: list[tuple[Key, Value]], controls: list[bool], large: bool, chunks: int, lead: int
) -> None:
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    control = [c and i % 5 == 0 for i, c in enumerate(controls[: len(records)])]
    _assert_same(keys, values, control, large=large, chunks=min(chunks, len(records)), lead=lead)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(
    pool=st.lists(_record, min_size=1, max_size=6),
    picks=st.lists(st.integers(0, 5), min_size=12, max_size=40),
    controls=st.lists(st.booleans(), min_size=40, max_size=40),
    large=st.booleans(),
)
def test_repeated_keys_equal_per_row_codec(
    pool: list[tuple[Key, Value]], picks: list[int], controls: list[bool], large: bool
) -> None:
    """A log repeats its keys, and the group and topic strings are then cut once per distinct
    key (at most half as many as rows): the same rows as the per-row codec, malformed keys,
    bad UTF-8, tombstones and control records sharing a key included."""
    records = [pool[i % len(pool)] for i in picks]
    keys, values = [k for k, _ in records], [v for _, v in records]
    control = [c and i % 3 == 0 for i, c in enumerate(controls[: len(records)])]
    _assert_same(keys, values, control, large=large)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(records=st.lists(_offset_commit(), min_size=1, max_size=20))
def test_well_formed_commits_never_take_the_per_row_path(
    records: list[tuple[bytes, bytes]],
) -> None:
    """The common shapes (all versions, 1-3 byte varints, topic id present or not) are
    decoded by the vectorized path alone; only unknown tags go per row."""
    plain = [(k, v) for k, v in records if not _has_unknown_tags(v)]
    if not plain:
        return
    calls: list[Any] = []
    original = columnar_module.decode_record
    columnar_module.decode_record = lambda *a: calls.append(a) or original(*a)
    try:
        keys, values = [k for k, _ in plain], [v for _, v in plain]
        got = decode_offset_commits(pa.array(keys, pa.binary()), pa.array(values, pa.binary()))
    finally:
        columnar_module.decode_record = original
    assert calls == []
    assert got.to_pylist() == decode_rows(keys, values)


def _has_unknown_tags(value: bytes) -> bool:
    """True for a v4 value whose tagged section is more than {} or {0: topicId}."""
    if value[:2] != b"\x00\x04":
        return False
    rec = columnar_module.decode_record(b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00", value)
    return UNKNOWN_TAGS in (rec.value or {})


# ----------------------------------------------------------------------------- examples


def test_spec_v4_worked_example() -> None:
    """Spec 1.2: the franz-go #1105 value (v4, empty metadata, no tags)."""
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 3})
    value = bytes.fromhex("0004" "000000000021d4a8" "ffffffff" "01" "0000019964f2d836" "00")
    (row,) = decode_offset_commits(pa.array([key]), pa.array([value])).to_pylist()
    assert row == {
        "record_type": 1, "group_id": "g", "topic": "t", "partition": 3, "value_version": 4,
        "committed_offset": 2217128, "leader_epoch": -1, "metadata": "",
        "commit_timestamp": 1758335260726, "expire_timestamp": None, "topic_id": ZERO_UUID,
        "is_tombstone": False, "decode_status": OK, "decode_error": None,
    }


def test_edge_cases_equal_the_codec() -> None:
    key = encode_key(1, {"group": "grüße", "topic": "😀", "partition": 7})
    v3 = encode_value(1, 3, {"offset": 1, "leader_epoch": 2, "metadata": "", "commit_timestamp": 3})
    tid = b"\x01\x00\x10" + bytes(range(16))
    cases: list[tuple[Key, Value]] = [
        (key, v3),
        (key, None),
        (None, None),
        (None, v3),
        (b"", v3),
        (b"\x00", None),
        (b"\x00\x01", v3),
        (key[:-1], v3),
        (key, v3 + b"\x00"),
        (key, v3[:-1]),
        (key, b"\x00"),
        (key, b""),
        (key, b"\x00\x05" + v3[2:]),
        (key, b"\xff\xff" + v3[2:]),
        (key, _v4(1, 2, b"", 3, b"")),  # no tagged section: ok with a note
        (key, _v4(1, 2, b"", 3, b"\x00")),
        (key, _v4(1, 2, b"", 3, tid)),
        (key, _v4(1, 2, b"", 3, tid + b"\x00")),  # trailing byte
        (key, _v4(1, 2, b"", 3, b"\x01\x00\x0f" + bytes(15))),  # topic id too short
        (key, _v4(1, 2, b"", 3, b"\x01\x00\x0f" + bytes(16))),  # size 15, 16 bytes follow
        (key, _v4(1, 2, b"", 3, b"\x01\x00\x11" + bytes(16))),  # size 17, 16 bytes follow
        (key, _v4(1, 2, b"", 3, b"\x01\x01\x10" + bytes(range(16)))),  # tag 1, not topicId
        (key, _v4(1, 2, b"", 3, b"\x01")),  # one tag announced, none follows
        (key, _v4(1, 2, b"", 3, b"\x80")),  # truncated count varint
        (key, _v4(1, 2, b"", 3, b"\x01\x05\x00")),  # unknown empty tag
        (key, _v4(1, 2, b"", 3, b"\x02\x00\x10" + bytes(16) + b"\x07\x01\x00")),
        (key, _v4(1, 2, b"", 3, b"\x02\x07\x00\x00\x10" + bytes(16))),  # out of order
        (key, _v4(1, 2, b"m" * 127, 3, b"\x00")),  # 2-byte varint
        (key, _v4(1, 2, b"m" * 16383, 3, b"\x00")),  # 3-byte varint
        (key, _v4(1, 2, b"m" * (1 << 21), 3, b"\x00")),  # 4-byte varint: per row
        (key, _v4(1, 2, b"", 3, b"\x00", varint_pad=5)),  # overlong varint
        (key, _v4(1, 2, b"", 256, b"", varint_pad=3)),  # 4-byte varint, ts ends in 00
        (key, _v4(1, 2, b"", 256, b"", varint_pad=2)),  # 3-byte non-minimal varint
        (key, b"\x00\x00" + bytes(8) + b"\xff\xfe" + bytes(6)),  # v0 negative metadata length
        (key, b"\x00\x03" + bytes(12) + b"\xff\xfe" + bytes(6)),  # v3 negative metadata length
        (key, _v4(1, 2, b"\xff", 3, b"\x00")),  # invalid UTF-8 metadata
        (key, _v4(1, 2, b"\xed\xa0\x80", 3, b"\x00")),  # UTF-8 encoded surrogate
        (key, _v4(1, 2, "é".encode(), 3, b"\x00")),
        (key, b"\x00\x04" + bytes(12) + b"\x00" + bytes(9)),  # compact null metadata
        (b"\x00\x01\x00\x02\xc3\x28\x00\x01t\x00\x00\x00\x00", v3),  # invalid UTF-8 group
        (b"\x00\x00\x00\x01a\x00\x01\x80\x00\x00\x00\x00", v3),  # invalid UTF-8 topic
        (b"\x00\x01\xff\xff\x00\x01t\x00\x00\x00\x00", v3),  # negative group length
        (b"\x00\x01\xff\xfc\x00\x00\x00", v3),  # group length -4 lands on the type
        (b"\x00\x01\x00\x00\xff\xfe\x00\x00", v3),  # topic length -2 lands on itself
        (encode_key(0, {"group": "legacy", "topic": "t", "partition": 0}),
         encode_value(0, 0, {"offset": 9, "metadata": "x", "commit_timestamp": 1})),
        (encode_key(2, {"group": "g"}), encode_value(2, 3, {})),
        (encode_key(2, {"group": "g"}), None),
        (b"\x00\x63\x00\x01a", b"\x00\x00"),
    ]
    keys = [k for k, _ in cases]
    values = [v for _, v in cases]
    _assert_same(keys, values)
    rows = decode_offset_commits(pa.array(keys, pa.binary()), pa.array(values, pa.binary()))
    statuses = rows.column("decode_status").to_pylist()
    assert statuses[:4] == [OK, TOMBSTONE, PARSE_ERROR, PARSE_ERROR]
    assert rows.column("decode_error")[14].as_py() == TAGS_ABSENT_NOTE
    assert rows.column("topic_id")[16].as_py() == uuid_to_str(bytes(range(16)))
    assert statuses[-3:] == [None, None, None]  # deferred to the per-row decoder


def test_control_records_and_empty_input() -> None:
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    marker = (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")
    _assert_same([key, marker[0]], [None, marker[1]], [False, True])
    empty = decode_offset_commits(pa.array([], pa.binary()), pa.array([], pa.binary()))
    assert empty.num_rows == 0 and empty.schema == OUTPUT_SCHEMA
    with pytest.raises(ValueError):
        decode_offset_commits(pa.array([key]), pa.array([], pa.binary()))


def test_decode_batch_keeps_input_columns() -> None:
    key = encode_key(1, {"group": "g", "topic": "t", "partition": 0})
    value = encode_value(1, 3, {"offset": 5, "leader_epoch": 1, "metadata": "",
                                "commit_timestamp": 7})
    batch = pa.RecordBatch.from_pydict({
        "offsets_partition": pa.array([4, 4], pa.int32()),
        "offset": pa.array([10, 11], pa.int64()),
        "key": pa.array([key, key], pa.binary()),
        "value": pa.array([value, None], pa.binary()),
        "is_control": pa.array([False, False]),
    })
    out = decode_batch(batch)
    assert out.schema.names == [*batch.schema.names, *DECODED_COLUMNS]
    assert out.column("offset").to_pylist() == [10, 11]
    assert out.column("committed_offset").to_pylist() == [5, None]
    assert out.column("decode_status").to_pylist() == [OK, TOMBSTONE]
    with pytest.raises(ValueError, match="topic"):
        decode_batch(out.select(["key", "value", "topic"]))
    empty = decode_batch(batch.slice(0, 0))
    assert empty.num_rows == 0 and empty.schema == out.schema


# ----------------------------------------------------------------------------- real data


def test_golden_scenario_a_equals_codec(scenario_a: Path) -> None:
    rows = [json.loads(line) for line in (scenario_a / "consumed_read_uncommitted.jsonl").open()]
    keys = [None if r["key"] is None else bytes.fromhex(r["key"]) for r in rows]
    values = [None if r["value"] is None else bytes.fromhex(r["value"]) for r in rows]
    assert rows
    _assert_same(keys, values)
    _assert_same(keys, values, large=True, chunks=3, lead=1)
    # keys and values chunked differently, and small work slices
    misaligned = decode_offset_commits(
        _arrow(keys, False, 2, 0), _arrow(values, True, 5, 1), chunk_rows=1000,
        decode_other_types=True,
    )
    assert misaligned.to_pylist() == decode_rows(keys, values)


def test_public_corpus_equals_codec(public_corpus: Path) -> None:
    from pipelines.sources.record_batches.arrow_reader import read_arrow

    compared = fast = 0
    for batch in read_arrow(public_corpus):
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        control = batch.column("is_control").to_pylist()
        expected = decode_rows(keys, values, control)
        got = decode_batch(batch, decode_other_types=True).select(list(DECODED_COLUMNS))
        for i, (have, want) in enumerate(zip(got.to_pylist(), expected, strict=True)):
            assert have == want, (batch.column("source")[i], batch.column("offset")[i])
        deferred = decode_batch(batch).column("decode_status")
        fast += sum(s in (OK, TOMBSTONE) for s in deferred.to_pylist())
        compared += len(expected)
    assert compared > 100_000  # 171,764 records at the time of writing
    assert fast > 0.95 * compared
