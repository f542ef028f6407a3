"""Group records decoded the fast way equal the old per-record path exactly (issue 9, item 2).

The record decoders are now generated source (pipelines/decode/codegen.py) and the history's
group-record path builds its rows from lists and Arrow takes with the collector paused. The
oracle is the code before that change, kept in tests/support: ``codec_oracle`` (the closure
tree and ``decode_record`` over it) and ``group_history_oracle`` (the old group part of
``build_history``). Compared on real broker-written data (golden scenarios A and D: classic,
KIP-848, share and streams records; the public corpus), on histories the project generates
(default demo, group-heavy demo) and on damaged group records (every truncation, byte flips,
spliced lengths), so error statuses and messages are covered too.
"""

from __future__ import annotations

import gc
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.decode import decode_record
from pipelines.demo import generate_cluster
from pipelines.history.tables import build_history
from pipelines.model import GroupRecord
from pipelines.sources.record_batches.arrow_reader import read_arrow
from tests.conftest import CORPUS, corpus_path
from tests.support import codec_oracle
from tests.support.group_history_oracle import group_history

NOW = datetime(2026, 11, 24, 11, 0, tzinfo=timezone.utc)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
GROUP_TYPES = range(2, 24)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A default demo history (classic, KIP-848, transactions, deletions; several codecs) and
    a group-heavy one (churning classic and KIP-848 groups)."""
    base = tmp_path_factory.mktemp("group-decode")
    generate_cluster(base / "default", num_partitions=3, seed=11, live=False,
                     compression=["none", "zstd", "lz4"])
    generate_cluster(base / "heavy", scale=1, group_heavy=30, live=False)
    return {"default": base / "default", "heavy": base / "heavy"}


def _source(name: str, generated: dict[str, Path]) -> Path:
    if name in generated:
        return generated[name]
    return corpus_path(*name.split("/"))


def _raw(path: Path) -> pa.Table:
    return pa.Table.from_batches(list(read_arrow(path, cluster_id="c1")))


def _assert_same_record(new, old, what: str) -> None:
    assert new == old, what
    assert repr(new) == repr(old), f"{what}: same values, different key order"


SOURCES = ["golden/scenario-a", "golden/scenario-d", "public", "default", "heavy"]


@pytest.mark.parametrize("source", SOURCES)
def test_codec_equals_the_old_codec_on_every_record(source: str, generated: dict[str, Path]) -> None:
    raw = _raw(_source(source, generated))
    keys, values = raw.column("key").to_pylist(), raw.column("value").to_pylist()
    control = raw.column("is_control").to_pylist()
    group = 0
    for i, (k, v, c) in enumerate(zip(keys, values, control, strict=True)):
        new = decode_record(k, v, bool(c))
        _assert_same_record(new, codec_oracle.decode_record(k, v, bool(c)), f"{source} row {i}")
        group += new.record_type in GROUP_TYPES
    assert group > 0, f"{source} holds no group records: the comparison would prove nothing"


def _group_samples(generated: dict[str, Path]) -> list[tuple[bytes, bytes]]:
    """One (key, value) per group record type and value version, from golden D when it is
    there (share and streams records) and the generated histories."""
    paths = [generated["default"], generated["heavy"]]
    golden = CORPUS / "golden" / "scenario-d"
    if golden.exists():
        paths.append(golden)
    seen: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    for path in paths:
        raw = _raw(path)
        for k, v in zip(raw.column("key").to_pylist(), raw.column("value").to_pylist(),
                        strict=True):
            if k and v and len(k) >= 2 and len(v) >= 2:
                kind = (int.from_bytes(k[:2], "big", signed=True), int.from_bytes(v[:2], "big"))
                if kind[0] in GROUP_TYPES and kind not in seen:
                    seen[kind] = (k, v)
    return list(seen.values())


def _damaged(key: bytes, value: bytes) -> list[tuple[bytes, bytes | None]]:
    """Every truncation of the value and key, a flipped byte at every position, lengths and
    counts spliced to huge, negative or null markers, trailing garbage."""
    out: list[tuple[bytes, bytes | None]] = [(key, None), (key, value + b"\x00"),
                                            (key, value + b"\x01\x05\x00")]
    out += [(key, value[:n]) for n in range(len(value))]
    out += [(key[:n], value) for n in range(2, len(key))]
    for pos in range(2, len(value)):
        for byte in (0x00, 0x7F, 0x80, 0xFF):
            out.append((key, value[:pos] + bytes([byte]) + value[pos + 1:]))
    for pos in range(2, len(key)):
        out.append((key[:pos] + b"\xff" + key[pos + 1:], value))
    return out


def test_codec_equals_the_old_codec_on_damaged_group_records(generated: dict[str, Path]) -> None:
    samples = _group_samples(generated)
    assert len(samples) >= 8  # classic GroupMetadata and the KIP-848 record types at least
    statuses: set[str] = set()
    for key, value in samples:
        for k, v in _damaged(key, value):
            new = decode_record(k, v)
            _assert_same_record(new, codec_oracle.decode_record(k, v), f"{k!r} {v!r}")
            statuses.add(new.decode_status)
    assert {"ok", "tombstone", "parse_error"} <= statuses


def test_assignment_tails_decode_once_and_errors_every_time(generated: dict[str, Path]) -> None:
    """A KIP-848 member's current assignment (type 8) is decoded epoch by epoch, its
    partitions once per distinct tail bytes (pipelines/decode/codegen.py): values that differ
    in their epochs only share the decoded partitions and equal the old codec's; a damaged
    tail fails each time with the same message; more tails than the memo keeps, and tails
    too long to keep, decode as ever."""
    from pipelines.decode import codegen
    from pipelines.decode.records import encode_value

    raw = _raw(generated["heavy"])
    pairs = [(k, v) for k, v in zip(raw.column("key").to_pylist(), raw.column("value").to_pylist(), strict=True)
             if k and v and k[:2] == b"\x00\x08"]
    assert pairs, "the group-heavy history holds no type-8 record"
    key, value = pairs[0]
    fields = decode_record(key, value).value
    assert fields["assigned_partitions"], fields
    twins = [encode_value(8, 0, {**fields, "member_epoch": epoch, "previous_member_epoch": epoch - 1})
             for epoch in (7001, 7002)]
    assert twins[0][11:] == twins[1][11:] and twins[0] != twins[1]
    decoded = [decode_record(key, v) for v in twins]
    for new, v in zip(decoded, twins, strict=True):
        _assert_same_record(new, codec_oracle.decode_record(key, v), f"{v!r}")
    assert [r.value["member_epoch"] for r in decoded] == [7001, 7002]
    assert decoded[0].value["assigned_partitions"] is decoded[1].value["assigned_partitions"]
    broken = twins[0][:-3]  # the tail cut short: no memo entry may answer for it
    for _ in range(2):
        new = decode_record(key, broken)
        assert new.decode_status == "legacy_layout" and new.value is None  # KIP-848: early layouts
        _assert_same_record(new, codec_oracle.decode_record(key, broken), f"{broken!r}")
    topic = fields["assigned_partitions"][0]["topic_id"]
    many = [encode_value(8, 0, {**fields, "assigned_partitions": [{"topic_id": topic, "partitions": [n]}]})
            for n in range(codegen.TAIL_MEMO_SIZE + 10)]
    for v in [*many, *many[:20]]:
        _assert_same_record(decode_record(key, v), codec_oracle.decode_record(key, v), f"{v!r}")
    wide = [{"topic_id": topic, "partitions": list(range(codegen.TAIL_MEMO_BYTES // 4))}]
    long_twins = [encode_value(8, 0, {**fields, "member_epoch": epoch, "assigned_partitions": wide})
                  for epoch in (7003, 7004)]
    assert len(long_twins[0]) - 11 > codegen.TAIL_MEMO_BYTES
    decoded = [decode_record(key, v) for v in long_twins]
    for new, v in zip(decoded, long_twins, strict=True):
        _assert_same_record(new, codec_oracle.decode_record(key, v), "a long tail")
    assert decoded[0].value["assigned_partitions"] is not decoded[1].value["assigned_partitions"]


@pytest.mark.parametrize("source", SOURCES)
def test_group_history_equals_the_old_path(source: str, generated: dict[str, Path]) -> None:
    raw = _raw(_source(source, generated))
    _check_history(raw)


def _check_history(raw: pa.Table) -> None:
    new = build_history(raw, 3, NOW)
    old = group_history(raw, NOW)
    assert len(old.group_records) > 0
    gm = new.group_metadata.combine_chunks()
    assert gm.schema == old.group_metadata.schema
    assert gm.equals(old.group_metadata.combine_chunks())
    # the state's records carry their timestamp in microseconds (the old path: datetimes)
    expected = [GroupRecord(g.cluster_id, g.group_id, g.record._replace(record_timestamp=_micros(
        g.record.record_timestamp))) for g in old.group_records]
    assert new.group_records == expected
    assert repr(new.group_records) == repr(expected)
    assert all(type(g.record.record_timestamp) in (int, type(None)) for g in new.group_records)
    rows = pa.array(old.rows, pa.int64())
    for name, expected in (("record_type", old.record_type), ("decode_status", old.decode_status),
                           ("decode_error", old.decode_error)):
        assert new.offsets_raw.column(name).take(rows).to_pylist() == expected, name


def _micros(stamp: datetime | None) -> int | None:
    return None if stamp is None else (stamp - EPOCH) // timedelta(microseconds=1)


def test_group_history_equals_the_old_path_with_damaged_records_and_spark_timestamps(
        generated: dict[str, Path]) -> None:
    """Damaged group records among good ones (statuses, errors, rows left out of
    group_metadata), timestamps as Spark hands them over (microseconds) with nulls."""
    raw = _raw(generated["heavy"]).slice(0, 3000)
    bad = [kv for key, value in _group_samples(generated)[:4] for kv in _damaged(key, value)[:60]]
    extra = raw.slice(0, len(bad)).set_column(
        raw.schema.get_field_index("key"), "key", pa.array([k for k, _ in bad], pa.binary()))
    extra = extra.set_column(extra.schema.get_field_index("value"), "value",
                             pa.array([v for _, v in bad], pa.binary()))
    mixed = pa.concat_tables([raw, extra])
    stamps = mixed.column("timestamp").cast(pa.timestamp("us", tz="UTC"))
    nulls = pa.array([i % 7 == 0 for i in range(mixed.num_rows)])
    stamps = pc.if_else(nulls, pa.scalar(None, stamps.type), stamps)
    mixed = mixed.set_column(mixed.schema.get_field_index("timestamp"), "timestamp", stamps)
    _check_history(mixed)
    statuses = set(build_history(mixed, 0, NOW).offsets_raw.column("decode_status").to_pylist())
    assert "parse_error" in statuses


def test_repeated_records_decode_as_if_alone(generated: dict[str, Path]) -> None:
    """Identical key and value bytes decode once per batch and share one record: the same
    rows as the old path when good and damaged records (bad keys included) each recur at
    several places of a batch, and no row's record leaks into another's."""
    raw = _raw(generated["heavy"]).slice(0, 2000)
    bad = [kv for key, value in _group_samples(generated)[:3] for kv in _damaged(key, value)[:40]]
    bad += [(b"\x00\x05\xff", v) for _, v in bad[:5]]  # a key that does not parse, repeated
    bad += [(None, v) for _, v in bad[:3]] + [(None, None)] * 2  # no key at all, repeated
    extra = raw.slice(0, len(bad)).set_column(
        raw.schema.get_field_index("key"), "key", pa.array([k for k, _ in bad], pa.binary()))
    extra = extra.set_column(extra.schema.get_field_index("value"), "value",
                             pa.array([v for _, v in bad], pa.binary()))
    mixed = pa.concat_tables([raw, extra, raw.slice(0, 500), extra])
    _check_history(mixed)
    keys = mixed.column("key").to_pylist()
    values = mixed.column("value").to_pylist()
    assert len(set(zip(keys, values, strict=True))) < len(keys)


@pytest.mark.parametrize("enabled", [True, False])
def test_build_history_leaves_the_garbage_collector_as_it_found_it(
        enabled: bool, generated: dict[str, Path]) -> None:
    raw = _raw(generated["heavy"]).slice(0, 500)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        assert build_history(raw, 0, NOW).group_records
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_only_classic_group_metadata_has_the_classic_columns() -> None:
    """history/tables.py fills ``CLASSIC_ONLY`` from GroupMetadata values alone (and
    ``generation`` from one field per type): true while no other format has such a field.
    A format that gains one fails here, before its column would silently stay null."""
    from pipelines.decode.formats import record_formats
    from pipelines.history.tables import CLASSIC_ONLY

    epochs = ("generation", "epoch", "member_epoch", "assignment_epoch")
    for record_type, fmt in record_formats().items():
        names = {f.name for f in fmt.value.fields}
        if record_type == 2:
            assert set(CLASSIC_ONLY) <= names
        else:
            assert not names & set(CLASSIC_ONLY), fmt.name
        assert len(names & set(epochs)) <= 1, fmt.name


def test_kept_rows_equal_a_filter_whatever_the_runs() -> None:
    """``offset_commits`` drops a batch's group records by slicing out the runs of offset
    commits between them, or by a filter when they are many: the same rows either way,
    across chunk boundaries, at either end and with nothing or everything kept."""
    import numpy as np

    from pipelines.model import kept_rows

    rng = np.random.default_rng(7)
    for n in (0, 1, 7, 1000):
        half = n // 2
        table = pa.table({"offset": pa.chunked_array([pa.array(range(half), pa.int64()),
                                                      pa.array(range(half, n), pa.int64())]),
                          "group_id": pa.chunked_array([pa.array([f"g{i % 5}" for i in range(n)])])})
        for dropped in (0.0, 0.003, 0.5, 1.0):
            keep = pa.chunked_array([pa.array(rng.random(n) >= dropped, pa.bool_())])
            expected = table.filter(keep)
            for most_runs in (0, 1, 256):
                got = kept_rows(table, keep, most_runs)
                assert got.schema == expected.schema and got.equals(expected), (n, dropped, most_runs)
