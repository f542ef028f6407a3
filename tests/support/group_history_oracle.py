"""The group-record part of ``history.tables.build_history`` as it was before issue 9's third
wave: every deferred row (a key type other than 0/1) decoded by the old per-record codec
(:mod:`tests.support.codec_oracle`), a ``GroupRecord`` per decoded record and the
``group_metadata`` rows from Python lists. The oracle the faster path must equal exactly.

Kept verbatim in behaviour (copied from pipelines/history/tables.py at e73508f).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa

from pipelines.decode.jsonify import jsonable
from pipelines.decode.records import OK, TOMBSTONE
from pipelines.lake.contracts import contract
from pipelines.model import GroupRecord, LatestRecord
from tests.support import codec_oracle

GROUP_SUBKEYS = ("member_id", "regular_expression")


@dataclass
class GroupHistory:
    """What the old code produced for a batch's group records."""

    rows: list[int]  # raw row numbers of the deferred rows
    record_type: list
    decode_status: list
    decode_error: list
    group_metadata: pa.Table
    group_records: list[GroupRecord]


def deferred_rows(raw: pa.Table) -> list[int]:
    """Rows the columnar decoder defers: a key of two bytes or more, not a control record,
    whose type is neither 0 nor 1."""
    keys = raw.column("key").to_pylist()
    control = raw.column("is_control").to_pylist()
    return [i for i, (k, c) in enumerate(zip(keys, control, strict=True))
            if not c and k is not None and len(k) >= 2
            and int.from_bytes(k[:2], "big", signed=True) not in (0, 1)]


def group_history(raw: pa.Table, ingested_at: datetime) -> GroupHistory:
    rows = deferred_rows(raw)
    sub = raw.select(["cluster_id", "offsets_partition", "offset", "timestamp", "key",
                      "value"]).take(pa.array(rows, pa.int64()))
    cluster, part, offset, stamp, keys, values = (c.to_pylist() for c in sub.columns)
    d_type, d_status, d_error = [], [], []
    kept, recs, subkeys, group_records = [], [], [], []
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        rec = codec_oracle.decode_record(key, value)
        d_type.append(rec.record_type)
        d_status.append(rec.decode_status)
        d_error.append(rec.decode_error)
        if rec.decode_status not in (OK, TOMBSTONE):
            continue
        subkey = next((rec.key[k] for k in GROUP_SUBKEYS if k in rec.key), "")
        latest = LatestRecord(rec.record_type, subkey, rec.value is None, rec.value,
                              part[i], offset[i], stamp[i], rec.value_version)
        group_records.append(GroupRecord(cluster[i], rec.group_id, latest))
        kept.append(i)
        recs.append(rec)
        subkeys.append(subkey)
    schema = contract("group_metadata").arrow_schema
    table = schema.empty_table()
    if kept:
        table = _group_metadata_table(recs, subkeys, {
            "cluster_id": [cluster[i] for i in kept],
            "offsets_partition": [part[i] for i in kept],
            "offset": [offset[i] for i in kept],
            "record_timestamp": [stamp[i] for i in kept],
            "ingested_at": [ingested_at] * len(kept)})
    return GroupHistory(rows, d_type, d_status, d_error, table, group_records)


def _epoch_of(value: dict) -> int | None:
    for name in ("generation", "epoch", "member_epoch", "assignment_epoch"):
        if name in value:
            return value[name]
    return None


def _group_metadata_table(recs: list, subkeys: list[str], known: dict[str, list]) -> pa.Table:
    vals = [r.value or {} for r in recs]
    csts = [v.get("current_state_timestamp") for v in vals]
    columns = {
        **known,
        "group_id": [r.group_id for r in recs],
        "record_type": [r.record_type for r in recs],
        "record_type_name": [r.type_name for r in recs],
        "member_id": [s or None for s in subkeys],
        "is_tombstone": [r.value is None for r in recs],
        "value_version": [r.value_version for r in recs],
        "protocol_type": [v.get("protocol_type") for v in vals],
        "generation": [_epoch_of(v) for v in vals],
        "protocol": [v.get("protocol") for v in vals],
        "leader": [v.get("leader") for v in vals],
        "current_state_timestamp": [datetime.fromtimestamp(c / 1000, tz=timezone.utc)
                                    if c and c > 0 else None for c in csts],
        "members": [[_classic_member(m) for m in v.get("members") or ()]
                    if r.record_type == 2 and r.value is not None else None
                    for r, v in zip(recs, vals, strict=True)],
        # json.dumps(jsonable(value)) compactly: the text before jsonify.dumps took a default
        "value_json": [json.dumps(jsonable(r.value), ensure_ascii=False, separators=(",", ":"))
                       if r.value is not None else None for r in recs],
        "decode_status": [r.decode_status for r in recs],
    }
    schema = contract("group_metadata").arrow_schema
    return pa.table([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)


def _classic_member(m: dict) -> dict:
    sub = m.get("subscription") if isinstance(m.get("subscription"), dict) else {}
    asg = m.get("assignment") if isinstance(m.get("assignment"), dict) else {}
    return {
        "member_id": m.get("member_id"),
        "group_instance_id": m.get("group_instance_id"),
        "client_id": m.get("client_id"),
        "client_host": m.get("client_host"),
        "rebalance_timeout_ms": m.get("rebalance_timeout"),
        "session_timeout_ms": m.get("session_timeout"),
        "subscribed_topics": sub.get("topics"),
        "owned_partitions": sub.get("owned_partitions"),
        "assigned_partitions": asg.get("assigned_partitions"),
    }
