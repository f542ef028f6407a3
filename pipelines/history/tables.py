"""Raw records -> the three append-only history tables, in Arrow.

Offset commits (the bulk) are decoded column-wise by :mod:`pipelines.decode.columnar`;
the few group records go through the per-record codec. Nothing is dropped: a record
that does not decode keeps its bytes in ``offsets_raw`` with its ``decode_status``.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode import OK, TOMBSTONE, DecodedRecord, decode_record
from pipelines.decode.columnar import decode_offset_commits
from pipelines.decode.formats import record_formats
from pipelines.decode.jsonify import dumps
from pipelines.decode.records import GROUP_METADATA_TYPE
from pipelines.decode.wire import ZERO_UUID
from pipelines.history.group_rows import GroupRows
from pipelines.lake.contracts import contract
from pipelines.model import (
    CLASSIC_MEMBERS,
    GroupColumns,
    GroupRecord,
    StateInput,
    classic_member,
    kept_rows,
    state_rows,
)

HISTORY_TABLES = ("offsets_raw", "offset_commits", "group_metadata")


def commit_ranges(offset_commits: pa.Table) -> pa.Table:
    """Per (cluster, offsets partition) the first and last offset-commit position."""
    if offset_commits.num_rows == 0:
        return pa.table({"cluster_id": pa.array([], pa.string()), "offsets_partition": pa.array([], pa.int32()),
                         "min_offset": pa.array([], pa.int64()), "max_offset": pa.array([], pa.int64())})
    agg = offset_commits.select(["cluster_id", "offsets_partition", "offset"]).group_by(
        ["cluster_id", "offsets_partition"], use_threads=False).aggregate([("offset", "min"), ("offset", "max")])
    return agg.select(["cluster_id", "offsets_partition", "offset_min", "offset_max"]).rename_columns(
        ["cluster_id", "offsets_partition", "min_offset", "max_offset"])


@dataclass
class HistoryBatch:
    offsets_raw: pa.Table
    offset_commits: pa.Table
    group_metadata: pa.Table
    group_rows: GroupRows | None = None  # the decoded group records, if any

    @property
    def group_records(self) -> list[GroupRecord]:
        """Every decoded group record, in order."""
        if self.group_rows is None:
            return []
        with no_cyclic_gc():  # hundreds of thousands of objects that all stay alive
            return self.group_rows.records()

    def status_counts(self) -> dict[str, int]:
        counts = pc.value_counts(self.offsets_raw.column("decode_status")).to_pylist()
        return {c["values"]: c["counts"] for c in counts}

    def state_input(self) -> StateInput:
        """The batch reduced to what the state depends on (small enough to ship to the driver)."""
        groups = GroupColumns.empty()
        if self.group_rows is not None:
            with no_cyclic_gc():  # hundreds of thousands of values that all stay alive
                groups = self.group_rows.for_state()
        return StateInput(state_rows(self.offset_commits), groups, commit_ranges(self.offset_commits))


def _ms_to_ts(arr: pa.Array) -> pa.Array:
    return pc.cast(arr, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))


def build_history(raw: pa.Table, batch_id: int, ingested_at: datetime) -> HistoryBatch:
    """Decode one micro-batch of raw records into the history tables.

    Offset commits stay columnar end to end; only rows the vectorized decoder defers
    (group records, the odd malformed record) are decoded one by one.
    """
    n = raw.num_rows
    is_control = pc.fill_null(raw.column("is_control"), False)
    offsets = decode_offset_commits(raw.column("key"), raw.column("value"), is_control=is_control)
    status = offsets.column("decode_status").combine_chunks()
    deferred = np.flatnonzero(pc.is_null(status).to_numpy(zero_copy_only=False))

    record_type = offsets.column("record_type").combine_chunks()
    error = offsets.column("decode_error").combine_chunks()
    metadata_tables: list[pa.Table] = []
    decoded: list[GroupRows] = []
    if len(deferred):
        d_type, d_status, d_error = _decode_deferred(raw, deferred, ingested_at, metadata_tables,
                                                     decoded)
        mask = np.zeros(n, dtype=bool)
        mask[deferred] = True
        mask_arr = pa.array(mask)
        record_type = pc.replace_with_mask(record_type, mask_arr, d_type)
        status = pc.replace_with_mask(status, mask_arr, d_status)
        error = pc.replace_with_mask(error, mask_arr, d_error)

    stamp_type = pa.timestamp("us", tz="UTC")
    stamps = pa.array(np.full(n, np.datetime64(ingested_at.replace(tzinfo=None), "us")), stamp_type)
    offsets_raw = raw.append_column("record_type", record_type)
    offsets_raw = offsets_raw.append_column("decode_status", status)
    offsets_raw = offsets_raw.append_column("decode_error", error)
    offsets_raw = offsets_raw.append_column("ingested_at", stamps)
    offsets_raw = offsets_raw.append_column("ingest_batch_id", pa.array(np.full(n, batch_id, np.int64)))
    offset_commits = _offset_commits(raw, offsets, record_type, status, stamps)
    gm_contract = contract("group_metadata")
    group_metadata = pa.concat_tables(metadata_tables) if metadata_tables \
        else gm_contract.arrow_schema.empty_table()
    return HistoryBatch(
        offsets_raw=contract("offsets_raw").conform(offsets_raw),
        offset_commits=contract("offset_commits").conform(offset_commits),
        group_metadata=group_metadata,
        group_rows=decoded[0] if decoded else None,
    )


def _decode_deferred(raw: pa.Table, deferred: np.ndarray, ingested_at: datetime,
                     metadata_tables: list[pa.Table], decoded: list[GroupRows]
                     ) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The rows the columnar decoder left (group records, malformed ones) decoded one by
    one: their (record type, status, error) columns; the group records that decoded are
    appended to ``decoded`` (as one :class:`GroupRows`) and, as one ``group_metadata``
    table, to ``metadata_tables``.

    Column lists, not a dict per row: on group-heavy logs (KIP-848 writes a record per
    member, epoch and assignment change) the per-row dicts cost as much as the decoding.
    The raw columns of the kept rows go to ``group_metadata`` as Arrow takes."""
    sub = raw.select(["cluster_id", "offsets_partition", "offset", "timestamp", "key",
                      "value"]).take(pa.array(deferred))
    with no_cyclic_gc():
        return _decode_group_rows(sub, ingested_at, metadata_tables, decoded)


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while group records are decoded (here) and while
    the driver folds a batch's decoded records into the state (``pipelines.ingest``).

    Why: decoding builds millions of small dicts and lists that all stay alive (they are the
    output); each allocation burst made the collector walk them again and again, half the
    CPU of a group-heavy batch (and a quarter of the driver's state step). Decoded records
    hold no reference cycles, so nothing is left for the collector; reference counting
    frees everything as before, and the collector runs again afterwards.

    On the way out, what the section allocated joins the oldest generation (``freeze`` then
    ``unfreeze``), which only a full collection walks: left in the youngest, the first
    allocation after re-enabling walked all of it at once (the driver's unpickling of a
    group-heavy batch's records: 1.2 s of a 2M-record run, py-spy)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def _decode_group_rows(sub: pa.Table, ingested_at: datetime, metadata_tables: list[pa.Table],
                       decoded: list[GroupRows]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """:func:`_decode_deferred` on the deferred rows' raw columns.

    Group records repeat: a key per member and record type, and values that hold no group
    id (an epoch, an assignment, a member's metadata) recur across groups and rejoins. Each
    distinct (key, value) pair is decoded once into one read-only record, each distinct
    value once (``decode_record(values=...)``), and the ``group_metadata`` columns that
    depend on the record alone are built once per distinct pair and spread over the rows
    with one Arrow take (group-heavy history: ~60% of the rows are distinct pairs)."""
    keys: dict[bytes, Any] = {}
    values: dict[tuple[int, bytes], Any] = {}
    first, at = _distinct_pairs(sub.column("key").combine_chunks(), sub.column("value").combine_chunks())
    picked = pa.array(first)
    uniq: list[DecodedRecord] = [
        decode_record(k, v, keys=keys, values=values)
        for k, v in zip(sub.column("key").take(picked).to_pylist(), sub.column("value").take(picked).to_pylist(),
                        strict=True)]
    take = pa.array(at)
    d_type = pa.array([r.record_type for r in uniq], pa.int16()).take(take)
    d_status = pa.array([r.decode_status for r in uniq], pa.string()).take(take)
    d_error = pa.array([r.decode_error for r in uniq], pa.string()).take(take)
    usable = np.array([r.decode_status in (OK, TOMBSTONE) for r in uniq], dtype=bool)
    kept = np.flatnonzero(usable[at])
    if not len(kept):
        return d_type, d_status, d_error
    if len(kept) < len(at):
        sub, at = sub.take(pa.array(kept)), at[kept]
    group_ids = [r.group_id if ok else None for r, ok in zip(uniq, usable, strict=True)]
    subkeys = [_subkey(r.key) if ok else "" for r, ok in zip(uniq, usable, strict=True)]
    fields = _group_fields(uniq)
    metadata = _group_metadata_table(uniq, group_ids, subkeys, fields, at, sub, ingested_at)
    metadata_tables.append(metadata.table)
    decoded.append(GroupRows(uniq, group_ids, subkeys, at,
                             sub.select(["cluster_id", "offsets_partition", "offset", "timestamp"]),
                             metadata.classic(uniq)))
    return d_type, d_status, d_error


def _distinct_pairs(key: pa.Array, value: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct (key, value) pair, in order of first appearance, and
    each row's pair (its place in that order). Hashed by Arrow, not as a Python tuple per
    row in a dict: only the distinct pairs' bytes become Python objects (~60% of a
    group-heavy history's rows; three of its partitions, 419k records, took 2.35 -> 2.22 s
    of ``build_history`` CPU). A null is a value of its own."""
    k = pc.dictionary_encode(key, null_encoding="encode").indices.to_numpy().astype(np.int64)
    v = pc.dictionary_encode(value, null_encoding="encode").indices.to_numpy().astype(np.int64)
    pair = k * (int(v.max()) + 1 if len(v) else 1) + v
    _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order))
    return first[order], place[inverse.reshape(-1)]


def _subkey(key: dict) -> str:
    """The member id or regular expression a group record is about ("" for group-level)."""
    if "member_id" in key:
        return key["member_id"]
    return key.get("regular_expression", "")


def _offset_commits(raw: pa.Table, offsets: pa.Table, record_type: pa.Array, status: pa.Array,
                    stamps: pa.Array) -> pa.Table:
    """The ``offset_commits`` rows: the decoded offset commits and tombstones beside their
    record's position, timestamp and producer (other record types filtered out)."""
    is_offset = pc.and_(pc.is_in(record_type, value_set=pa.array([0, 1], pa.int16())),
                        pc.is_in(status, value_set=pa.array([OK, TOMBSTONE])))
    is_offset = pc.fill_null(is_offset, False)
    src = raw.select(["cluster_id", "offsets_partition", "offset", "timestamp", "producer_id",
                      "is_transactional"])
    oc = offsets
    if not pc.all(is_offset).as_py():  # most batches hold nothing but offset commits
        oc, src = kept_rows(oc, is_offset), kept_rows(src, is_offset)
    topic_id = oc.column("topic_id")
    topic_id = pc.if_else(pc.equal(topic_id, ZERO_UUID), pa.nulls(len(topic_id), pa.string()), topic_id)
    return pa.table({
        "cluster_id": src.column("cluster_id"),
        "group_id": oc.column("group_id"),
        "topic": oc.column("topic"),
        "partition": oc.column("partition"),
        "committed_offset": oc.column("committed_offset"),
        "leader_epoch": oc.column("leader_epoch"),
        "metadata": oc.column("metadata"),
        "commit_timestamp": _ms_to_ts(oc.column("commit_timestamp")),
        "expire_timestamp": _ms_to_ts(oc.column("expire_timestamp")),
        "topic_id": topic_id,
        "value_version": oc.column("value_version"),
        "record_type": oc.column("record_type"),
        "is_tombstone": oc.column("is_tombstone"),
        "offsets_partition": src.column("offsets_partition"),
        "offset": src.column("offset"),
        "record_timestamp": src.column("timestamp"),
        "producer_id": src.column("producer_id"),
        "is_transactional": src.column("is_transactional"),
        "ingested_at": stamps[: src.num_rows],
    })


@cache
def _epoch_fields() -> dict[int, str]:
    """Record type -> the value field ``group_metadata.generation`` takes: the first of
    generation, epoch, member_epoch, assignment_epoch its format has (none: no entry)."""
    out = {}
    for record_type, fmt in record_formats().items():
        names = {f.name for f in fmt.value.fields}
        for name in ("generation", "epoch", "member_epoch", "assignment_epoch"):
            if name in names:
                out[record_type] = name
                break
    return out


#: the columns only classic GroupMetadata values have (tests/test_group_decode.py checks it)
CLASSIC_ONLY = ("protocol_type", "protocol", "leader", "current_state_timestamp", "members")


def _group_fields(recs: list[DecodedRecord]) -> dict[str, list]:
    """``generation`` and the :data:`CLASSIC_ONLY` columns of each record, in one pass: a
    group-heavy part holds ~9 KIP-848 records for each classic one, and a list per column
    of dict lookups that find nothing cost as much as the rest of the table."""
    n = len(recs)
    columns: dict[str, list] = {name: [None] * n for name in ("generation", *CLASSIC_ONLY)}
    generation, members = columns["generation"], columns["members"]
    epoch_field = _epoch_fields()
    for i, r in enumerate(recs):
        v = r.value
        if v is None:
            continue
        epoch_name = epoch_field.get(r.record_type)
        if epoch_name is not None:
            generation[i] = v.get(epoch_name)
        if r.record_type == GROUP_METADATA_TYPE:
            for name in ("protocol_type", "protocol", "leader"):
                columns[name][i] = v.get(name)
            c = v.get("current_state_timestamp")
            if c and c > 0:
                columns["current_state_timestamp"][i] = datetime.fromtimestamp(c / 1000, tz=timezone.utc)
            members[i] = [classic_member(m) for m in v.get("members") or ()]
    return columns


@dataclass
class _GroupMetadata:
    """A batch's ``group_metadata`` rows, and the columns of each distinct record they were
    taken from (``per_record``)."""

    table: pa.Table
    per_record: dict[str, pa.Array]

    def classic(self, uniq: list[DecodedRecord]) -> dict[str, pa.Array]:
        """Each distinct record's :data:`pipelines.model.GROUP_SCHEMA` classic columns,
        taken from its ``group_metadata`` ones: converted once for both."""
        is_classic = pa.array([r.record_type == GROUP_METADATA_TYPE for r in uniq], pa.bool_())
        generation = self.per_record["generation"]
        return {"classic_generation": pc.if_else(is_classic, generation, pa.nulls(len(uniq), generation.type)),
                "classic_members": self.per_record["members"].cast(CLASSIC_MEMBERS)}


def _group_metadata_table(uniq: list[DecodedRecord], group_ids: list[str | None], subkeys: list[str],
                          fields: dict[str, list], at: np.ndarray, raw: pa.Table,
                          ingested_at: datetime) -> _GroupMetadata:
    """The ``group_metadata`` rows of decoded group records: row ``j`` is record
    ``uniq[at[j]]`` at raw row ``j``. The decoded columns (``fields``: :func:`_group_fields`)
    are converted by Arrow (as ``Table.from_pylist`` would) once per distinct record and
    taken for every row; the position and time columns are cast from ``raw``."""
    n = len(at)
    stamp_type = pa.timestamp("us", tz="UTC")
    decoded = {
        "group_id": group_ids,
        "record_type": [r.record_type for r in uniq],
        "record_type_name": [r.type_name for r in uniq],
        "member_id": [s or None for s in subkeys],
        "is_tombstone": [r.value is None for r in uniq],
        "value_version": [r.value_version for r in uniq],
        **fields,
        "value_json": _value_json(uniq),
        "decode_status": [r.decode_status for r in uniq],
    }
    take = pa.array(at)
    columns = {
        "cluster_id": raw.column("cluster_id"),
        "offsets_partition": raw.column("offsets_partition"),
        "offset": raw.column("offset"),
        "record_timestamp": raw.column("timestamp"),
        "ingested_at": pa.array([ingested_at], stamp_type).take(pa.array(np.zeros(n, np.int64))),
    }
    schema = contract("group_metadata").arrow_schema
    per_record = {f.name: pa.array(decoded[f.name], f.type) for f in schema if f.name not in columns}
    table = pa.table([columns[f.name].cast(f.type) if f.name in columns else per_record[f.name].take(take)
                      for f in schema], schema=schema)
    return _GroupMetadata(table, per_record)


def _value_json(recs: list[DecodedRecord]) -> list[str | None]:
    """Each record's value as JSON, written once per distinct (shared) value."""
    texts: dict[int, str] = {}
    out = []
    for r in recs:
        v = r.value
        if v is None:
            out.append(None)
            continue
        text = texts.get(id(v))
        if text is None:
            text = texts[id(v)] = dumps(v)
        out.append(text)
    return out
