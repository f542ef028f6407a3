"""What ``offsetlake decode`` prints, built from RAW Arrow batches in bulk: JSON lines and
the ``--stats`` counts.

Why: the per-record writer (``decode_record``, a dict and ``json.dumps`` for every record)
spent ~25 us per record. Here offset commits and their tombstones (nearly every record of a
real log) are decoded column-wise by :mod:`.columnar` and their JSON lines assembled column
by column with Arrow string kernels; every other record (group records, control markers,
undecodable ones, a v4 value without its tagged-field section) goes through the per-record
codec and the text ``json.dumps`` writes (written by msgspec: :func:`.jsonify.dumps_spaced`).
``--stats`` counts Arrow columns (a group-by over type, status and version) instead of
building rows. The output is byte for byte the per-record writer's: tests/test_decode_dump.py
compares both on real and generated logs, the old writer kept as the oracle in
``tests/support/decode_oracle.py``.

Pure: Arrow batches in, Arrow strings and counters out; reading files is the caller's job.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode.columnar import decode_offset_commits
from pipelines.decode.formats import record_formats
from pipelines.decode.jsonify import dumps_spaced
from pipelines.decode.partitioning import partition_for
from pipelines.decode.records import CONTROL, OK, TOMBSTONE, DecodedRecord, decode_record
from pipelines.decode.wire import ZERO_UUID
from pipelines.model import distinct_sorted

__all__ = ["json_lines", "record_json", "stats_counts"]

_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
#: Bytes that json.dumps(ensure_ascii=False) escapes: control characters, quote, backslash.
_ESCAPED = np.zeros(256, dtype=bool)
_ESCAPED[:0x20] = _ESCAPED[ord('"')] = _ESCAPED[ord("\\")] = True

#: Looks up a record's timestamp when the RAW row has none (RAW keeps negative ones as null,
#: the per-record writer printed the stored value): ``(raw row) -> int``.
TimestampLookup = Callable[[dict[str, Any]], int]


# ----------------------------------------------------------------------------- per record


def record_json(row: dict[str, Any], timestamp: int, decoded: DecodedRecord) -> dict[str, Any]:
    """One record's JSON object from its RAW row: the definition the bulk path matches."""
    key = None
    if decoded.record_type is not None:
        key = {"type": decoded.record_type, "name": decoded.type_name, "fields": decoded.key}
    value = decoded.value
    if decoded.record_type == 1 and value and value.get("topic_id") == ZERO_UUID:
        # v4 without the topicId tag: no topic id, as offset_commits.topic_id (null) says
        value = {**value, "topic_id": None}
    out = {
        "partition": row["offsets_partition"],
        "offset": row["offset"],
        "timestamp": timestamp,
        "timestamp_type": _TIMESTAMP_TYPES.get(row["timestamp_type"], "NoTimestamp"),
        "key": key,
        "value": None if value is None else {"version": decoded.value_version, "fields": value},
        "batch": {
            "base_offset": row["batch_base_offset"], "producer_id": row["producer_id"],
            "producer_epoch": row["producer_epoch"], "transactional": row["is_transactional"],
            "control": row["is_control"], "control_type": row["control_type"],
            "compression": row["compression"], "magic": row["magic"],
            "crc_valid": row["crc_valid"], "position": row["source_position"],
        },
        "decode_status": decoded.decode_status,
        "decode_error": decoded.decode_error,
        "file": row["source"],
    }
    if decoded.decode_status not in (OK, TOMBSTONE, CONTROL):
        out["key_hex"] = row["key"].hex() if row["key"] is not None else None
        out["value_hex"] = row["value"].hex() if row["value"] is not None else None
    return out


def record_line(row: dict[str, Any], timestamp: int, decoded: DecodedRecord) -> str:
    """:func:`record_json` as one JSON line: the text of ``json.dumps(jsonable(...))``, bytes
    as base64 (tests/test_jsonify.py and tests/test_decode_dump.py hold it to that)."""
    return dumps_spaced(record_json(row, timestamp, decoded)) + "\n"


def _slow_lines(raw: pa.RecordBatch, rows: np.ndarray, stamps: pa.Array,
                lookup: TimestampLookup | None, statuses: Counter) -> list[str]:
    """The JSON lines of ``rows`` one record at a time (the rows the bulk path leaves);
    their decode statuses are counted into ``statuses``."""
    if not len(rows):
        return []
    take = pa.array(rows)
    sub = raw.drop_columns(["timestamp"]).take(take).to_pylist()
    out = []
    keys: dict[bytes, Any] = {}  # a group's keys repeat: one per member and record type
    for row, ts in zip(sub, stamps.take(take).to_pylist(), strict=True):
        if ts is None:
            ts = lookup(row) if lookup is not None else -1
        decoded = decode_record(row["key"], row["value"], bool(row["is_control"]), keys=keys)
        statuses[decoded.decode_status] += 1
        out.append(record_line(row, ts, decoded))
    return out


# ----------------------------------------------------------------------------- in bulk


def _lit(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.string())


def _jint(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Integers as JSON numbers; null stays null (a piece the join skips)."""
    return pc.cast(arr, pa.string())


def _jstr_inner(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Strings as ``json.dumps(s, ensure_ascii=False)`` writes them *without* the enclosing
    quotes (the neighbouring pieces carry them), null staying null: the string itself, and
    ``json.dumps`` for the few that need escapes."""
    arr = _array(pc.cast(arr, pa.string()))
    rows = _escaped_rows(arr)
    if len(rows):
        escaped = [json.dumps(s, ensure_ascii=False)[1:-1]
                   for s in arr.take(pa.array(rows)).to_pylist()]
        mask = np.zeros(len(arr), dtype=bool)
        mask[rows] = True
        arr = pc.replace_with_mask(arr, pa.array(mask), pa.array(escaped, pa.string()))
    return arr


def _escaped_rows(arr: pa.Array) -> np.ndarray:
    """Rows of a string array holding a byte JSON escapes (one table lookup per byte)."""
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    data, offsets = _values(arr)
    begin, end = int(offsets[0]), int(offsets[-1])
    hits = np.flatnonzero(_ESCAPED[np.frombuffer(data, dtype=np.uint8)[begin:end]])
    if not len(hits):
        return hits
    return distinct_sorted(np.searchsorted(offsets, hits + begin, side="right") - 1)


def _dumps(value: Any) -> str:
    """One JSON value as record_line prints it."""
    return json.dumps(value, ensure_ascii=False)


class _Codes(NamedTuple):
    """A low-cardinality column as small integer codes: ``codes[i]`` indexes ``values``
    (``len(values) - 1`` is null)."""

    codes: np.ndarray
    values: list[Any]


def _codes_of(arr: pa.Array | pa.ChunkedArray) -> _Codes:
    """Dictionary codes of any column (strings, ints, booleans), null as the last value."""
    if pa.types.is_boolean(arr.type):  # no hashing: false 0, true 1, null 2
        return _Codes(_int64s(pc.cast(arr, pa.int8()), 2), [False, True, None])
    enc = pc.dictionary_encode(_array(arr))
    values = [*enc.dictionary.to_pylist(), None]
    return _Codes(_int64s(enc.indices, len(values) - 1), values)


def _rendered(columns: list[_Codes], render: Callable[..., str | None]) -> pa.Array:
    """``render(*values)`` of each row's combination of the coded ``columns``, rendered once
    per distinct combination (Python) and spread to the rows by ``take``: one join argument
    instead of one per column and literal. None renders as null (a skipped piece)."""
    dims = tuple(len(c.values) for c in columns)
    packed = np.ravel_multi_index(tuple(c.codes for c in columns), dims)
    size = int(np.prod(dims, dtype=np.int64))
    if size <= 1 << 22:
        present = np.bincount(packed, minlength=size) > 0
        ids = np.flatnonzero(present)
        index = (np.cumsum(present) - 1)[packed]
    else:  # many combinations: sort instead of a dense table
        ids, index = np.unique(packed, return_inverse=True)
    rows = zip(*np.unravel_index(ids, dims), strict=True)
    texts = [render(*(c.values[i] for c, i in zip(columns, row, strict=True))) for row in rows]
    # a dictionary array cast to strings: ~10x faster than take() for long repeated texts
    return pc.cast(pa.DictionaryArray.from_arrays(pa.array(index.astype(np.int32)),
                                                  pa.array(texts, pa.string())), pa.string())


def _flag(mask: np.ndarray) -> _Codes:
    return _Codes(mask.astype(np.int64), [False, True])


def _jvalue(value: Any) -> str:
    """A scalar as _jint/_jbool/_jstr print it (null as ``null``)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value) if isinstance(value, int) else _dumps(value)


_BATCH = '}}, "batch": {"base_offset": '  # closes the value object, opens the batch
_VALUE_TAIL = {1: ', "expire_timestamp": ', 4: ', "topic_id": '}
_NULL = pa.scalar(None, pa.string())


def _value_pieces(d: pa.Table, tomb: np.ndarray, ver: np.ndarray) -> list[pa.Array]:
    """The join pieces from ``}}, "value": `` to ``"batch": {"base_offset": `` of offset
    commits: the fields each value version has, in the codec's order (v0/v2: offset,
    metadata, commit_timestamp; v1 + expire_timestamp; v3 leader_epoch after offset; v4 +
    topic_id, null for type 1 when the tag is absent, as record_json does). Fields a version
    lacks are null in the decoded columns (json_lines checks it), so they are skipped."""
    version = _Codes(np.where(tomb, 0, np.clip(ver, -1, 98) + 2), ["tomb", None, *range(99)])
    no_id = _array(pc.fill_null(pc.and_(pc.equal(d.column("record_type"), 1),
                                        pc.equal(d.column("topic_id"), ZERO_UUID)), False))
    quoted_id = _flag(np.logical_and(ver == 4, ~no_id.to_numpy(zero_copy_only=False)))
    head = _rendered([version], lambda v: '}}, "value": null' if v == "tomb" else
                     f'}}}}, "value": {{"version": {_jvalue(v)}, "fields": {{"offset": ')
    epoch = np.logical_and(~tomb, ver >= 3)
    return [
        head, _jint(d.column("committed_offset")),
        _rendered([version], lambda v: None if v == "tomb" else
                  ', "leader_epoch": ' if v is not None and v >= 3 else ', "metadata": "'),
        pc.if_else(pa.array(epoch), _jint(d.column("leader_epoch")), _NULL),
        _rendered([_flag(epoch)], lambda e: ', "metadata": "' if e else None),
        _jstr_inner(d.column("metadata")),
        _rendered([_flag(tomb)], lambda t: None if t else '", "commit_timestamp": '),
        _jint(d.column("commit_timestamp")),
        _rendered([version, quoted_id], lambda v, q: ', "batch": {"base_offset": ' if v == "tomb"
                  else ', "topic_id": ' + ('"' if q else "null") if v == 4 else
                  _VALUE_TAIL.get(v, _BATCH)),
        _jint(d.column("expire_timestamp")),
        pc.if_else(no_id, _NULL, _jstr_inner(d.column("topic_id"))),
        _rendered([version, quoted_id], lambda v, q: ('"' if q else "") + _BATCH
                  if v in _VALUE_TAIL else None),
    ]


def _fast_lines(r: pa.RecordBatch, d: pa.Table, stamps: pa.Array) -> pa.Array:
    """JSON lines of well-formed offset commits and their tombstones (RAW rows ``r``, decoded
    columns ``d``), in record_json's member order: one Arrow join over the rows, with the
    low-cardinality members (partition, timestamp type, record type, batch flags, codec,
    magic, status, file) rendered once per distinct combination."""
    tomb = _array(pc.fill_null(d.column("is_tombstone"), False)).to_numpy(zero_copy_only=False)
    ver = _int64s(d.column("value_version"), -1)
    names = {0: "LegacyOffsetCommit", 1: "OffsetCommit"}
    ts_type = _int64s(r.column("timestamp_type"), -1)
    ts_names = _Codes(np.where(np.isin(ts_type, (0, 1)), ts_type, 2),
                      [*_TIMESTAMP_TYPES.values(), "NoTimestamp"])
    rtype = _codes_of(d.column("record_type"))
    pieces = [
        _rendered([_codes_of(r.column("offsets_partition"))],
                  lambda p: f'{{"partition": {_jvalue(p)}, "offset": '),
        _jint(r.column("offset")), _lit(', "timestamp": '), _jint(stamps),
        _rendered([ts_names, rtype], lambda ts, t: (
            f', "timestamp_type": {_dumps(ts)}, "key": {{"type": {_jvalue(t)}, "name": '
            f'{_jvalue(names.get(t))}, "fields": {{"group": "')),
        _jstr_inner(d.column("group_id")), _lit('", "topic": "'),
        _jstr_inner(d.column("topic")), _lit('", "partition": '), _jint(d.column("partition")),
        *_value_pieces(d, tomb, ver),
        _jint(r.column("batch_base_offset")), _lit(', "producer_id": '),
        _jint(r.column("producer_id")), _lit(', "producer_epoch": '),
        _jint(r.column("producer_epoch")),
        _rendered([_codes_of(r.column(c)) for c in ("is_transactional", "is_control",
                                                    "control_type", "compression", "magic",
                                                    "crc_valid")],
                  lambda tx, ctl, ctype, codec, magic, crc: (
                      f', "transactional": {_jvalue(tx)}, "control": {_jvalue(ctl)}, '
                      f'"control_type": {_jvalue(ctype)}, "compression": {_jvalue(codec)}, '
                      f'"magic": {_jvalue(magic)}, "crc_valid": {_jvalue(crc)}, "position": ')),
        _jint(r.column("source_position")),
        _rendered([_codes_of(d.column("decode_status")), _codes_of(r.column("source"))],
                  lambda status, source: (f'}}, "decode_status": {_jvalue(status)}, '
                                          f'"decode_error": null, "file": {_jvalue(source)}}}\n')),
    ]
    return pc.binary_join_element_wise(*pieces, _lit(""), null_handling="skip")


def _fast_rows(dec: pa.Table, stamps: pa.Array, raw: pa.RecordBatch) -> pa.Array:
    """Rows the bulk lines stand for: offset commits (types 0/1) that decoded ok or as
    tombstones without a note, with a timestamp, and every member record_json prints present
    exactly where their value version has it (a null the bulk join would skip goes to the
    per-record writer, which prints it as null)."""
    ver = pc.fill_null(dec.column("value_version"), -1)
    tomb = pc.fill_null(dec.column("is_tombstone"), False)
    valid = pc.is_valid
    value_ok = pc.and_(
        pc.and_(pc.and_(valid(dec.column("committed_offset")), valid(dec.column("metadata"))),
                pc.and_(valid(dec.column("commit_timestamp")),
                        pc.is_in(ver, pa.array([0, 1, 2, 3, 4], pa.int16())))),
        pc.and_(pc.and_(pc.or_(pc.less(ver, 3), valid(dec.column("leader_epoch"))),
                        pc.equal(pc.equal(ver, 1), valid(dec.column("expire_timestamp")))),
                pc.equal(pc.equal(ver, 4), valid(dec.column("topic_id")))))
    value_absent = pc.and_(
        pc.and_(pc.is_null(dec.column("committed_offset")), pc.is_null(dec.column("metadata"))),
        pc.and_(pc.and_(pc.is_null(dec.column("commit_timestamp")),
                        pc.is_null(dec.column("leader_epoch"))),
                pc.and_(pc.is_null(dec.column("expire_timestamp")),
                        pc.is_null(dec.column("topic_id")))))
    shape = pc.if_else(tomb, value_absent, value_ok)
    present = [valid(c) for c in (stamps, raw.column("offset"), raw.column("batch_base_offset"),
                                  raw.column("producer_id"), raw.column("producer_epoch"),
                                  raw.column("source_position"), dec.column("group_id"),
                                  dec.column("topic"), dec.column("partition"))]
    fast = pc.and_(pc.is_in(dec.column("decode_status"), pa.array([OK, TOMBSTONE])),
                   pc.and_(pc.is_null(dec.column("decode_error")), shape))
    for p in present:
        fast = pc.and_(fast, p)
    return pc.fill_null(pc.and_(fast, pc.is_in(dec.column("record_type"),
                                               pa.array([0, 1], pa.int16()))), False)


def _array(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def json_lines(raw: pa.RecordBatch, lookup: TimestampLookup | None = None
               ) -> tuple[list[memoryview | bytes], Counter]:
    """The JSON lines (newline included) of ``raw``'s rows (RAW_ARROW_SCHEMA), in order, as
    byte pieces to write one after the other, and the count of each decode status.

    The bulk lines are built for every row; the rows it cannot stand for are cut out of its
    buffer and their per-record lines put in their place (no copy of the bulk buffer).
    ``lookup`` gives the stored timestamp of rows whose RAW timestamp is null (negative on
    disk, e.g. magic 0); without it they print -1."""
    control = pc.fill_null(raw.column("is_control"), False)
    dec = decode_offset_commits(raw.column("key"), raw.column("value"), is_control=control,
                                chunk_rows=max(1, raw.num_rows)).combine_chunks()
    stamps = pc.cast(raw.column("timestamp"), pa.int64())
    fast = _fast_rows(dec, stamps, raw)
    fast_np = _array(fast).to_numpy(zero_copy_only=False)
    slow_rows = np.flatnonzero(~fast_np)
    statuses: Counter = Counter()
    _count_values(statuses, dec.column("decode_status").filter(fast))
    if fast_np.any():
        lines = _array(pc.fill_null(_fast_lines(raw, dec, stamps), ""))
        data, offsets = _values(lines)
    else:
        data, offsets = memoryview(b""), np.zeros(raw.num_rows + 1, dtype=np.int64)
    slow = _slow_lines(raw, slow_rows, stamps, lookup, statuses)
    pieces: list[memoryview | bytes] = []
    begin = int(offsets[0])
    for row, line in zip(slow_rows.tolist(), slow, strict=True):
        pieces.append(data[begin:int(offsets[row])])
        pieces.append(line.encode("utf-8"))
        begin = int(offsets[row + 1])
    pieces.append(data[begin:int(offsets[-1])])
    return [p for p in pieces if len(p)], statuses


def _values(lines: pa.Array) -> tuple[memoryview, np.ndarray]:
    """A string array's value bytes and its offsets (no copy)."""
    width = 8 if pa.types.is_large_string(lines.type) else 4
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64 if width == 8 else np.int32,
                            count=len(lines) + 1, offset=lines.offset * width)
    data = lines.buffers()[2]
    return memoryview(data if data is not None else b""), offsets


def _count_values(counter: Counter, column: pa.ChunkedArray | pa.Array) -> None:
    if len(column):
        counter.update({c["values"]: c["counts"] for c in pc.value_counts(column).to_pylist()})


# ----------------------------------------------------------------------------- --stats


def stats_counts(raw: pa.RecordBatch, num_partitions: int | None
                 ) -> tuple[Counter, Counter, int]:
    """``(histogram, statuses, partition_for mismatches)`` of ``raw``'s records, as the
    per-record writer counted them: histogram keys are ``(kind, name)``."""
    control = pc.fill_null(raw.column("is_control"), False)
    dec = decode_offset_commits(raw.column("key"), raw.column("value"), is_control=control,
                                decode_other_types=True, chunk_rows=max(1, raw.num_rows))
    stats: Counter = Counter()
    statuses: Counter = Counter()
    formats = record_formats()
    for rtype, status, version, n in _type_status_version_counts(dec):
        if status == CONTROL:
            name = "ControlRecord"
        else:
            fmt = formats.get(rtype) if rtype is not None else None
            name = fmt.name if fmt is not None else f"unknown({rtype})"
        stats[("type", name)] += n
        stats[("status", status)] += n
        statuses[status] += n
        if version is not None:
            stats[("version", f"{name} v{version}")] += n
    for kind, column in (("compression", "compression"), ("magic", "magic")):
        for c in pc.value_counts(raw.column(column)).to_pylist():
            stats[(kind, c["values"] if kind == "compression" else str(c["values"]))] += c["counts"]
    crc_bad = pc.invert(pc.fill_null(raw.column("crc_valid"), False))
    invalid = pc.sum(pc.cast(crc_bad, pa.int64())).as_py() or 0
    if invalid:
        stats[("crc", "invalid")] += invalid
    wrong = _partition_mismatches(dec.column("group_id"), raw.column("offsets_partition"),
                                  num_partitions) if num_partitions else 0
    return stats, statuses, wrong


#: Offset and null code of int16 columns in the packed keys of :func:`_type_status_version_counts`
_INT16_SHIFT = 1 << 16
_FIELD_BITS = 20


def _int64s(column: pa.Array | pa.ChunkedArray, null: int) -> np.ndarray:
    """An integer column as an int64 numpy array, nulls as ``null``."""
    return _array(pc.fill_null(pc.cast(column, pa.int64()), null)).to_numpy(zero_copy_only=False)


def _type_status_version_counts(dec: pa.Table
                                ) -> list[tuple[int | None, str | None, int | None, int]]:
    """``(record_type, decode_status, value_version, count)`` of each combination present.

    Why numpy and not ``Table.group_by``: group_by loads Arrow's Acero engine and
    ``pyarrow.dataset`` (~50 ms of imports, a tenth of ``decode --stats``); here the three
    columns are packed into one int64 (int16 + 2**16, null as 0; status dictionary index + 1,
    null as 0) and counted by ``np.unique``."""
    if dec.num_rows == 0:
        return []
    status = pc.dictionary_encode(_array(dec.column("decode_status")))
    names = status.dictionary.to_pylist()
    key = ((_int64s(dec.column("record_type"), -_INT16_SHIFT) + _INT16_SHIFT) << 2 * _FIELD_BITS
           | (_int64s(dec.column("value_version"), -_INT16_SHIFT) + _INT16_SHIFT) << _FIELD_BITS
           | (_int64s(status.indices, -1) + 1))
    packed, counts = np.unique(key, return_counts=True)
    mask = (1 << _FIELD_BITS) - 1
    out = []
    for k, n in zip(packed.tolist(), counts.tolist(), strict=True):
        rtype, version, code = k >> 2 * _FIELD_BITS, (k >> _FIELD_BITS) & mask, k & mask
        out.append((rtype - _INT16_SHIFT if rtype else None, names[code - 1] if code else None,
                    version - _INT16_SHIFT if version else None, n))
    return out


def _partition_mismatches(group_id: pa.ChunkedArray, part: pa.Array, num_partitions: int) -> int:
    """Records whose group hashes (``partition_for``) to another offsets partition: each
    distinct (group, partition) pair is hashed once (dictionary codes, ``np.unique``)."""
    group_id, part = _array(group_id), _array(part)
    keep = pc.and_(pc.is_valid(group_id), pc.greater_equal(part, 0))
    groups = pc.dictionary_encode(group_id.filter(keep))
    if len(groups) == 0:
        return 0
    names = groups.dictionary.to_pylist()
    key = _int64s(groups.indices, 0) << 32 | _int64s(part.filter(keep), 0)
    pairs, counts = np.unique(key, return_counts=True)
    return sum(n for k, n in zip(pairs.tolist(), counts.tolist(), strict=True)
               if partition_for(names[k >> 32], num_partitions) != k & 0xFFFFFFFF)
