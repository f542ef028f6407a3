"""Vectorized decoding of offset commit records (key types 0 and 1) straight from Arrow buffers.

Why: offset commits are more than 95% of ``__consumer_offsets``, and the per-row codec
(:func:`pipelines.decode.records.decode_record`) spends microseconds per record in Python.
Here the key and value bytes of a whole batch are parsed at once with numpy: big-endian
integers are gathered at computed positions, string bytes are copied into new Arrow buffers
by computed ranges, and UTF-8 is validated by Arrow. No per-row Python runs on the fast path.

The per-row codec stays the single source of truth. Any row the fast path does not *fully*
validate (null or short keys, unknown value versions, unusual varints, unknown or out-of-shape
tagged fields, trailing bytes, invalid UTF-8, ...) is decoded by ``decode_record`` and mapped
to the same columns by :func:`row_from_record`, so the output is identical to the per-row
codec for every row, errors included.

Column contract (one output row per input row, see :data:`OUTPUT_SCHEMA`):

* ``record_type``: the key's int16; null when the key is missing or undecodable (as the codec).
* ``group_id``, ``topic``, ``partition``: the key of types 0/1 (also of tombstones and of
  values that failed to parse).
* ``value_version``: the value's int16 (null for tombstones and keys that failed).
* ``committed_offset``, ``leader_epoch``, ``metadata``, ``commit_timestamp``,
  ``expire_timestamp``, ``topic_id``: only when ``decode_status == "ok"``. ``leader_epoch`` is
  -1 for v0-v2 (the field's default); ``expire_timestamp`` is null unless v1.
* ``topic_id``: as the codec returns it: null for v0-v3 (the field does not exist there), and
  for v4 the tagged ``topicId`` as Kafka's ``Uuid.toString``, i.e. the zero uuid
  ``"AAAAAAAAAAAAAAAAAAAAAA"`` when the tag is absent (that is what a v4 reader sees).
* ``is_tombstone``: the value is null (Kafka's definition, independent of ``decode_status``);
  false for control records.
* ``decode_status`` / ``decode_error``: the codec's vocabulary (ok, tombstone, control,
  unknown_type, unknown_value_version, parse_error) and message.

Rows whose key type is neither 0 nor 1 (group metadata, KIP-848 records, unknown types) are
**deferred** by default: ``record_type`` and ``is_tombstone`` are filled, every other column,
``decode_status`` included, is null. ``decode_status IS NULL`` therefore means "route this row
to the per-row decoder". With ``decode_other_types=True`` they are decoded per row instead, and
get ``group_id``, ``value_version``, ``decode_status`` and ``decode_error`` from the codec.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode.records import (
    CONTROL,
    OFFSET_COMMIT_TYPES,
    OK,
    STATUSES,
    TOMBSTONE,
    DecodedRecord,
    decode_record,
)
from pipelines.model import distinct_sorted

log = logging.getLogger(__name__)

__all__ = [
    "DECODED_COLUMNS",
    "OUTPUT_SCHEMA",
    "decode_batch",
    "decode_offset_commits",
    "decode_rows",
    "row_from_record",
]

OUTPUT_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("record_type", pa.int16()),
        pa.field("group_id", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("value_version", pa.int16()),
        pa.field("committed_offset", pa.int64()),
        pa.field("leader_epoch", pa.int32()),
        pa.field("metadata", pa.string()),
        pa.field("commit_timestamp", pa.int64()),
        pa.field("expire_timestamp", pa.int64()),
        pa.field("topic_id", pa.string()),
        pa.field("is_tombstone", pa.bool_()),
        pa.field("decode_status", pa.string()),
        pa.field("decode_error", pa.string()),
    ]
)
DECODED_COLUMNS: tuple[str, ...] = tuple(OUTPUT_SCHEMA.names)

#: The codec's note for a v4 value that ends where its tagged-field section should start.
TAGS_ABSENT_NOTE = "no tagged-field section (read as empty)"

ArrowBinary = pa.Array | pa.ChunkedArray

_PAD = 32  # zero bytes after each data copy, so fixed-width gathers never leave the buffer
_INT32_MAX = (1 << 31) - 1
_DEFAULT_CHUNK_ROWS = 1 << 16
_B64 = np.frombuffer(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", dtype=np.uint8
)
_STATUS_CODE = {s: i for i, s in enumerate(STATUSES)}

_NUMERIC = {
    "record_type": np.int16,
    "partition": np.int32,
    "value_version": np.int16,
    "committed_offset": np.int64,
    "leader_epoch": np.int32,
    "commit_timestamp": np.int64,
    "expire_timestamp": np.int64,
}
_STRINGS = ("group_id", "topic", "metadata", "topic_id", "decode_error")


# ----------------------------------------------------------------------------- public API


def decode_offset_commits(
    keys: ArrowBinary,
    values: ArrowBinary,
    *,
    is_control: pa.Array | pa.ChunkedArray | None = None,
    decode_other_types: bool = False,
    chunk_rows: int = _DEFAULT_CHUNK_ROWS,
) -> pa.Table:
    """Decode ``keys``/``values`` (binary or large_binary, plain or chunked) into
    :data:`OUTPUT_SCHEMA`, one row per input row, in input order.

    ``is_control`` marks transaction markers (status ``control``, as the codec does with
    ``is_control=True``). Work is done in slices of at most ``chunk_rows`` rows to bound the
    temporary memory; the table has one chunk per slice.
    """
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    if is_control is not None and len(is_control) != len(keys):
        raise ValueError(f"{len(is_control)} is_control flags for {len(keys)} records")
    columns: dict[str, ArrowBinary] = {"key": keys, "value": values}
    if is_control is not None:
        columns["is_control"] = is_control
    table = pa.table(columns)
    batches = [
        out
        for batch in table.to_batches(max_chunksize=max(1, chunk_rows))
        for out in _decode_sliced(batch, decode_other_types)
    ]
    return pa.Table.from_batches(batches, schema=OUTPUT_SCHEMA)


def decode_batch(batch: pa.RecordBatch, *, decode_other_types: bool = False) -> pa.RecordBatch:
    """``batch`` (with ``key`` and ``value`` binary columns, e.g. the project's raw schema) with
    the decoded columns appended. An ``is_control`` column, when present, is honoured."""
    clash = set(batch.schema.names) & set(DECODED_COLUMNS)
    if clash:
        raise ValueError(f"input already has decoded column(s) {sorted(clash)}")
    keys, values = batch.column("key"), batch.column("value")
    control = batch.column("is_control") if "is_control" in batch.schema.names else None
    decoded = decode_offset_commits(
        keys,
        values,
        is_control=control,
        decode_other_types=decode_other_types,
        chunk_rows=max(1, batch.num_rows),
    )
    arrays = [*batch.columns, *(decoded.column(name).combine_chunks() for name in DECODED_COLUMNS)]
    return pa.RecordBatch.from_arrays(
        arrays, schema=pa.schema([*batch.schema, *OUTPUT_SCHEMA], metadata=batch.schema.metadata)
    )


def row_from_record(
    rec: DecodedRecord, *, value_is_null: bool, is_control: bool = False
) -> dict[str, Any]:
    """The columnar row for one per-row codec result: the definition the fast path matches."""
    row: dict[str, Any] = dict.fromkeys(DECODED_COLUMNS)
    row["record_type"] = rec.record_type
    row["value_version"] = rec.value_version
    row["is_tombstone"] = value_is_null and not is_control
    row["decode_status"] = rec.decode_status
    row["decode_error"] = rec.decode_error
    if rec.key is None:
        return row
    if rec.record_type not in OFFSET_COMMIT_TYPES:
        row["group_id"] = rec.group_id
        return row
    row["group_id"] = rec.key["group"]
    row["topic"] = rec.key["topic"]
    row["partition"] = rec.key["partition"]
    value = rec.value
    if value is not None:
        row["committed_offset"] = value["offset"]
        row["leader_epoch"] = value.get("leader_epoch", -1)
        row["metadata"] = value["metadata"]
        row["commit_timestamp"] = value["commit_timestamp"]
        row["expire_timestamp"] = value.get("expire_timestamp")
        row["topic_id"] = value.get("topic_id")
    return row


def decode_rows(
    keys: list[bytes | None],
    values: list[bytes | None],
    is_control: list[bool] | None = None,
) -> list[dict[str, Any]]:
    """Reference: the per-row codec over every record, as rows of :data:`OUTPUT_SCHEMA`
    (every type decoded, i.e. ``decode_other_types=True``). Slow; for tests and baselines."""
    flags = is_control if is_control is not None else [False] * len(keys)
    return [
        row_from_record(decode_record(k, v, c), value_is_null=v is None, is_control=c)
        for k, v, c in zip(keys, values, flags, strict=True)
    ]


# ----------------------------------------------------------------------------- buffers


class _Binary:
    """numpy views of one binary array: rebased int64 offsets, a padded data copy, validity."""

    __slots__ = ("data", "end", "length", "start", "valid")

    def __init__(self, arr: pa.Array) -> None:
        if arr.type not in (pa.binary(), pa.large_binary()):
            arr = arr.cast(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
        n = len(arr)
        bufs = arr.buffers()
        width = 8 if arr.type == pa.large_binary() else 4
        if n == 0 or bufs[1] is None:
            offsets = np.zeros(n + 1, dtype=np.int64)
        else:
            raw = np.frombuffer(
                bufs[1], dtype=np.int64 if width == 8 else np.int32, count=n + 1,
                offset=arr.offset * width,
            )
            offsets = raw.astype(np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        self.data = np.zeros(last - first + _PAD, dtype=np.uint8)
        if last > first:
            self.data[: last - first] = np.frombuffer(
                bufs[2], dtype=np.uint8, count=last - first, offset=first
            )
        offsets -= first
        self.start = offsets[:-1]
        self.end = offsets[1:]
        self.length = self.end - self.start
        if arr.null_count:
            self.valid = arr.is_valid().to_numpy(zero_copy_only=False)
        else:
            self.valid = np.ones(n, dtype=bool)

    def be(self, pos: np.ndarray, width: int) -> np.ndarray:
        """Big-endian signed ints of ``width`` bytes at byte positions ``pos`` (unaligned)."""
        view = np.ndarray(
            (len(self.data) - width + 1,), dtype=f">i{width}", buffer=self.data, strides=(1,)
        )
        return view[pos].astype(f"=i{width}")

    def byte(self, pos: np.ndarray) -> np.ndarray:
        return self.data[pos].astype(np.int64)


# ----------------------------------------------------------------------------- decoding


def _decode_sliced(batch: pa.RecordBatch, decode_other_types: bool) -> Iterator[pa.RecordBatch]:
    """Split further when a slice's bytes would not fit int32 string offsets."""
    n = batch.num_rows
    too_big = n > 1 and any(
        _data_size(batch.column(name)) > _INT32_MAX for name in ("key", "value")
    )
    if too_big:
        half = n // 2
        yield from _decode_sliced(batch.slice(0, half), decode_other_types)
        yield from _decode_sliced(batch.slice(half), decode_other_types)
        return
    control = batch.column("is_control") if "is_control" in batch.schema.names else None
    yield _decode_chunk(batch.column("key"), batch.column("value"), control, decode_other_types)


def _data_size(arr: pa.Array) -> int:
    """Bytes referenced by a large_binary slice (binary ones fit int32 by construction)."""
    if len(arr) == 0 or not pa.types.is_large_binary(arr.type):
        return 0
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1,
                            offset=arr.offset * 8)
    return int(offsets[-1] - offsets[0])


class _KeyLayout(NamedTuple):
    """Where the fields of each row's key are: int16 type, then (types 0/1) string group,
    string topic, int32 partition (spec 1.3)."""

    rtype: np.ndarray  # the key's record type (0 when it has none)
    other: np.ndarray  # a record type other than 0/1: decoded elsewhere
    ok: np.ndarray  # a well-formed offset-commit key
    glen: np.ndarray
    tpos: np.ndarray
    tlen: np.ndarray
    ppos: np.ndarray


class _ValueLayout(NamedTuple):
    """Where the fields of each row's value are: int16 version, then the v0-v4 layouts of
    spec 1.4 (a v4 value's metadata is a compact string, its tags at most a topic id)."""

    tomb: np.ndarray  # a well-formed key without a value
    ok: np.ndarray  # a value the fast path reads
    ver: np.ndarray
    flex: np.ndarray  # version 4 (flexible)
    mstart: np.ndarray  # metadata string
    mlen: np.ndarray
    ctpos: np.ndarray  # commit timestamp (expire timestamp / tags follow)
    tags_absent: np.ndarray
    has_tid: np.ndarray  # tag 0 = topicId present


def _key_layout(k: _Binary, ctrl: np.ndarray) -> _KeyLayout:
    zero = np.zeros(len(ctrl), dtype=np.int64)
    has_type = k.valid & (k.length >= 2) & ~ctrl
    rtype = np.where(has_type, k.be(k.start, 2), 0)
    commit = has_type & ((rtype == 0) | (rtype == 1))
    kok = commit & (k.length >= 4)
    glen = k.be(np.where(kok, k.start + 2, zero), 2).astype(np.int64)
    tpos = k.start + 4 + glen
    kok &= (glen >= 0) & (tpos + 2 <= k.end)
    tpos = np.where(kok, tpos, zero)
    tlen = k.be(tpos, 2).astype(np.int64)
    ppos = tpos + 2 + tlen
    kok &= (tlen >= 0) & (ppos + 4 == k.end)
    ppos = np.where(kok, ppos, zero)
    return _KeyLayout(rtype, has_type & ~commit, kok, glen, tpos, tlen, ppos)


def _value_layout(v: _Binary, kok: np.ndarray) -> _ValueLayout:
    zero = np.zeros(len(kok), dtype=np.int64)
    tomb = kok & ~v.valid
    vok = kok & v.valid & (v.length >= 2)
    ver = np.where(vok, v.be(v.start, 2), 0).astype(np.int64)
    vok &= (ver >= 0) & (ver <= 4)
    flex = vok & (ver == 4)
    mpos = v.start + 10 + np.where(ver >= 3, 4, 0)
    vok &= mpos + 1 <= v.end
    mpos = np.where(vok, mpos, zero)
    b0, b1, b2 = v.byte(mpos), v.byte(mpos + 1), v.byte(mpos + 2)
    c0, c1 = b0 >= 0x80, (b0 >= 0x80) & (b1 >= 0x80)
    # compact string: unsigned varint N+1 (fast path: 1-3 bytes; longer ones go per row)
    compact = (b0 & 0x7F) | np.where(c0, (b1 & 0x7F) << 7, 0) | np.where(c1, (b2 & 0x7F) << 14, 0)
    vok &= ~flex | ~(c1 & (b2 >= 0x80))
    mlen = np.where(flex, compact - 1, v.be(mpos, 2))  # compact 0 = null: rejected below
    mstart = mpos + np.where(flex, 1 + c0 + c1, 2)
    ctpos = mstart + mlen
    vok &= (mlen >= 0) & (ctpos + 8 <= v.end)
    tail = v.end - (ctpos + 8)
    vok &= flex | (tail == np.where(ver == 1, 8, 0))
    ctpos = np.where(vok, ctpos, zero)
    # tagged fields of a v4 value: absent, empty (00), or exactly tag 0 = topicId (01 00 10 +16)
    t0, t1, t2 = v.byte(ctpos + 8), v.byte(ctpos + 9), v.byte(ctpos + 10)
    tags_absent = flex & (tail == 0)
    tags_empty = flex & (tail == 1) & (t0 == 0)
    has_tid = flex & (tail == 19) & (t0 == 1) & (t1 == 0) & (t2 == 16)
    vok &= ~flex | tags_absent | tags_empty | has_tid
    return _ValueLayout(tomb, vok, ver, flex, mstart, mlen, ctpos, tags_absent, has_tid)


def _numeric(k: _Binary, v: _Binary, key: _KeyLayout, val: _ValueLayout, vok: np.ndarray,
             key_rows: np.ndarray, deferred: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The numeric columns as (values, validity) of the fast path (several share one mask)."""
    zero = np.zeros(len(vok), dtype=np.int64)
    ver, ctpos = val.ver, val.ctpos
    return {
        "record_type": (key.rtype.astype(np.int16), key_rows | deferred),
        "partition": (np.where(key_rows, k.be(key.ppos, 4), 0).astype(np.int32), key_rows),
        "value_version": (ver.astype(np.int16), vok),
        "committed_offset": (v.be(np.where(vok, v.start + 2, zero), 8), vok),
        "leader_epoch": (
            np.where(vok & (ver >= 3), v.be(np.where(vok, v.start + 10, zero), 4), -1)
            .astype(np.int32), vok,
        ),
        "commit_timestamp": (v.be(ctpos, 8), vok),
        "expire_timestamp": (v.be(np.where(vok & (ver == 1), ctpos + 8, zero), 8),
                             vok & (ver == 1)),
    }


def _overwrite_fallback(k: _Binary, v: _Binary, rows: np.ndarray,
                        num: dict[str, tuple[np.ndarray, np.ndarray]], status: np.ndarray,
                        strings: dict[str, pa.Array]) -> dict[str, pa.Array]:
    """Rows the fast path cannot read, decoded one by one into their slots: ``num`` and
    ``status`` in place, the string columns returned."""
    fb = _fallback_rows(k, v, rows)
    for name, (values_, shared_valid) in num.items():
        valid = shared_valid.copy()  # several columns share one mask
        values_[rows] = [r[name] or 0 for r in fb]
        valid[rows] = [r[name] is not None for r in fb]
        num[name] = (values_, valid)
    status[rows] = [_STATUS_CODE[r["decode_status"]] for r in fb]
    return {name: _scatter(arr, rows, [r[name] for r in fb]) for name, arr in strings.items()}


def _decode_chunk(
    keys: pa.Array, values: pa.Array, control: pa.Array | None, decode_other_types: bool
) -> pa.RecordBatch:
    n = len(keys)
    k, v = _Binary(keys), _Binary(values)
    ctrl = (
        pc.fill_null(control, False).to_numpy(zero_copy_only=False).astype(bool)
        if control is not None
        else np.zeros(n, dtype=bool)
    )
    key = _key_layout(k, ctrl)
    val = _value_layout(v, key.ok)

    # --- strings (UTF-8 checked by Arrow; a row that fails goes per row)
    key_rows = key.ok & (val.ok | val.tomb)
    group, bad_g, topic, bad_t = _key_strings(keys, k, key, key_rows)
    metadata, bad_m = _strings(v, val.mstart, val.mlen, val.ok)
    bad = bad_g | bad_t | bad_m
    vok, tomb, key_rows = val.ok & ~bad, val.tomb & ~bad, key_rows & ~bad
    v4 = vok & val.flex
    tid_pos = np.where(val.has_tid & v4, val.ctpos + 11, np.zeros(n, dtype=np.int64))
    topic_id = _uuid_strings(v, tid_pos, val.has_tid & v4, v4)

    deferred = key.other if not decode_other_types else np.zeros(n, dtype=bool)
    num = _numeric(k, v, key, val, vok, key_rows, deferred)
    status = np.full(n, -1, dtype=np.int8)
    status[vok] = _STATUS_CODE[OK]
    status[tomb] = _STATUS_CODE[TOMBSTONE]
    status[ctrl] = _STATUS_CODE[CONTROL]
    error = np.where(vok & val.tags_absent, 0, -1)
    strings = {"group_id": group, "topic": topic, "metadata": metadata, "topic_id": topic_id,
               "decode_error": _take_small([TAGS_ABSENT_NOTE], error)}
    rows = np.flatnonzero(~ctrl & ~key_rows & ~deferred)  # the rest: decoded one by one
    if len(rows):
        strings = _overwrite_fallback(k, v, rows, num, status, strings)

    arrays: dict[str, pa.Array] = {name: _num(name, values_, valid)
                                   for name, (values_, valid) in num.items()}
    arrays.update(strings)
    arrays["is_tombstone"] = pa.array(~v.valid & ~ctrl, type=pa.bool_())
    # built here, not at import: pyarrow's first pa.array imports pandas, which the ingest
    # command would then load before it starts its JVM, not beside the JVM's start
    arrays["decode_status"] = pa.array(STATUSES, pa.string()).take(pa.array(status, mask=status < 0))
    if log.isEnabledFor(logging.DEBUG):
        log.debug("decoded %d rows: %d fast, %d per row, %d deferred, %d control", n,
                  int(key_rows.sum()), len(rows), int(deferred.sum()), int(ctrl.sum()))
    return pa.RecordBatch.from_arrays([arrays[c] for c in DECODED_COLUMNS], schema=OUTPUT_SCHEMA)


def _key_strings(keys: pa.Array, k: _Binary, key: _KeyLayout, key_rows: np.ndarray
                 ) -> tuple[pa.Array, np.ndarray, pa.Array, np.ndarray]:
    """The group and topic of each of ``key_rows`` (null elsewhere), and masks of the rows
    whose group or topic bytes are not valid UTF-8.

    Why by distinct key: a log repeats its keys (a group commits the same partitions again
    and again; the 20 largest real segment files hold 2-8 distinct keys each). The strings
    are cut from the distinct keys and taken for every row: 1M commits over 25 keys 108 ->
    35 ms. Keys mostly distinct (a log just compacted) are cut row by row, as before."""
    encoded = pc.dictionary_encode(keys)
    if not len(encoded.dictionary) or 2 * len(encoded.dictionary) > len(keys):
        group, bad_g = _strings(k, k.start + 4, key.glen, key_rows)
        topic, bad_t = _strings(k, key.tpos + 2, key.tlen, key_rows)
        return group, bad_g, topic, bad_t
    distinct = _Binary(encoded.dictionary)
    layout = _key_layout(distinct, np.zeros(len(encoded.dictionary), dtype=bool))
    # a row's key is well formed (key_rows) only if its distinct key is
    group, bad_g = _strings(distinct, distinct.start + 4, layout.glen, layout.ok)
    topic, bad_t = _strings(distinct, layout.tpos + 2, layout.tlen, layout.ok)
    at = np.where(key_rows, pc.fill_null(encoded.indices, 0).to_numpy(), 0)
    take = pa.array(at.astype(np.int32), mask=~key_rows)
    return group.take(take), bad_g[at] & key_rows, topic.take(take), bad_t[at] & key_rows


def _strings(
    src: _Binary, starts: np.ndarray, lengths: np.ndarray, selected: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """A string array of ``src`` bytes ``[start, start+length)`` for ``selected`` rows (null
    elsewhere), plus a mask of rows whose bytes are not valid UTF-8.

    The ranges lie inside their rows' slots, so one gather of computed byte indices copies
    them all (measured faster than a byte mask over the source buffer built with cumsum).
    """
    n = len(lengths)
    lengths = np.where(selected, lengths, 0).astype(np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        idx = np.repeat(starts - offsets[:-1], lengths)
        idx += np.arange(total, dtype=np.int64)
        data = src.data[idx]
    else:
        data = np.zeros(0, dtype=np.uint8)
    bad = np.zeros(n, dtype=bool)
    if total and data.max() >= 0x80:
        bad = _invalid_utf8_rows(data, offsets)
    arr = pa.StringArray.from_buffers(
        n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), _bitmap(selected)
    )
    return arr, bad


def _num(name: str, values: np.ndarray, valid: np.ndarray) -> pa.Array:
    """A numeric output column; Arrow builds the bitmap from the mask without copying values."""
    return pa.array(values, type=OUTPUT_SCHEMA.field(name).type, mask=~valid)


def _bitmap(valid: np.ndarray) -> pa.Buffer:
    """An Arrow validity bitmap (LSB first) from a bool mask."""
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _invalid_utf8_rows(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rows whose bytes are not valid UTF-8. Arrow validates all rows with non-ASCII bytes in
    one call; only when that fails are those rows checked one by one (corruption is rare)."""
    n = len(offsets) - 1
    bad = np.zeros(n, dtype=bool)
    high = np.flatnonzero(data >= 0x80)
    rows = distinct_sorted(np.searchsorted(offsets, high, side="right") - 1)
    starts, ends = offsets[rows], offsets[rows + 1]
    lengths = ends - starts
    sub_off = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=sub_off[1:])
    idx = np.repeat(starts - sub_off[:-1], lengths) + np.arange(int(sub_off[-1]), dtype=np.int64)
    sub = pa.Array.from_buffers(
        pa.binary(), len(rows), [None, pa.py_buffer(sub_off.astype(np.int32)),
                                 pa.py_buffer(data[idx])]
    )
    try:
        sub.cast(pa.string())
        return bad
    except pa.ArrowInvalid:
        pass
    for row, a, b in zip(rows.tolist(), starts.tolist(), ends.tolist(), strict=True):
        try:
            data[a:b].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            bad[row] = True
    return bad


def _uuid_strings(
    src: _Binary, pos: np.ndarray, present: np.ndarray, selected: np.ndarray
) -> pa.Array:
    """Kafka ``Uuid.toString`` (URL-safe base64, no padding) of the 16 bytes at ``pos`` where
    ``present``; the zero uuid where only ``selected``; null elsewhere."""
    n = len(pos)
    rows = np.flatnonzero(selected)
    raw = np.zeros((len(rows), 18), dtype=np.uint8)
    sel_present = present[rows]
    raw[sel_present, :16] = src.data[pos[rows][sel_present, None] + np.arange(16)]
    g = raw.reshape(len(rows), 6, 3).astype(np.uint32)
    word = (g[..., 0] << 16) | (g[..., 1] << 8) | g[..., 2]
    sextets = np.stack([word >> 18, word >> 12, word >> 6, word], axis=-1) & 63
    chars = _B64[sextets.reshape(len(rows), 24)[:, :22]]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(selected, 22, 0), out=offsets[1:])
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(chars)), _bitmap(selected)
    )


def _take_small(dictionary: list[str], codes: np.ndarray) -> pa.Array:
    """A string column from a few distinct values (``codes`` index them, -1 = null)."""
    return pa.array(dictionary, pa.string()).take(pa.array(codes, mask=codes < 0))


def _scatter(arr: pa.Array, rows: np.ndarray, items: list[Any]) -> pa.Array:
    """``arr`` with ``rows`` replaced by ``items`` (one Arrow take; no per-row Python)."""
    n = len(arr)
    idx = np.arange(n, dtype=np.int64)
    idx[rows] = n + np.arange(len(rows), dtype=np.int64)
    combined = pa.concat_arrays([arr, pa.array(items, type=arr.type)])
    return combined.take(pa.array(idx))


def _fallback_rows(k: _Binary, v: _Binary, rows: np.ndarray) -> list[dict[str, Any]]:
    """The per-row codec over ``rows`` (as bytes cut from the same buffers); a key's bytes
    are decoded once (a group's keys repeat: one per member and record type), classic
    members' blobs not at all (a row keeps no value field of a group record)."""
    kd, vd = k.data, v.data
    out = []
    keys: dict[bytes, Any] = {}
    for i in rows.tolist():
        key = kd[k.start[i]:k.end[i]].tobytes() if k.valid[i] else None
        value = vd[v.start[i]:v.end[i]].tobytes() if v.valid[i] else None
        out.append(row_from_record(decode_record(key, value, keys=keys, embedded=False),
                                   value_is_null=value is None))
    return out
