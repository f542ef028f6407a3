"""Raw records -> the three append-only history tables, in Arrow.

Offset commits (the bulk) are decoded column-wise by :mod:`pipelines.decode.columnar`;
the few group records go through the per-record codec. Nothing is dropped: a record
that does not decode keeps its bytes in ``offsets_raw`` with its ``decode_status``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode import CONTROL, OK, TOMBSTONE, decode_record
from pipelines.decode.columnar import decode_offset_commits
from pipelines.decode.jsonify import dumps
from pipelines.decode.wire import ZERO_UUID
from pipelines.lake.contracts import contract
from pipelines.state.groups import LatestRecord

GROUP_SUBKEYS = ("member_id", "regular_expression")


@dataclass
class GroupRecord:
    """A decoded group record (type 2 and up), kept for the state replay."""

    cluster_id: str
    group_id: str
    record: LatestRecord


@dataclass
class HistoryBatch:
    offsets_raw: pa.Table
    offset_commits: pa.Table
    group_metadata: pa.Table
    group_records: list[GroupRecord] = field(default_factory=list)

    def status_counts(self) -> dict[str, int]:
        counts = pc.value_counts(self.offsets_raw.column("decode_status")).to_pylist()
        return {c["values"]: c["counts"] for c in counts}


def _ms_to_ts(arr: pa.Array) -> pa.Array:
    return pc.cast(arr, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))


def build_history(raw: pa.Table, batch_id: int, ingested_at: datetime) -> HistoryBatch:
    """Decode one micro-batch of raw records into the history tables."""
    raw = raw.combine_chunks()
    n = raw.num_rows
    offsets = decode_offset_commits(raw.column("key"), raw.column("value"))
    if isinstance(offsets, pa.RecordBatch):
        offsets = pa.Table.from_batches([offsets])

    record_type = offsets.column("record_type").to_pylist()
    status = offsets.column("decode_status").to_pylist()
    error = offsets.column("decode_error").to_pylist()
    is_control = raw.column("is_control").to_pylist()
    is_offset = [False] * n
    group_rows: list[dict] = []
    group_records: list[GroupRecord] = []
    keys = raw.column("key")
    values = raw.column("value")
    parts = raw.column("offsets_partition").to_pylist()
    log_offsets = raw.column("offset").to_pylist()
    stamps = raw.column("timestamp")
    clusters = raw.column("cluster_id").to_pylist()
    for i in range(n):
        if is_control[i]:
            status[i], error[i], record_type[i] = CONTROL, None, None
            continue
        if record_type[i] in (0, 1):
            is_offset[i] = status[i] in (OK, TOMBSTONE)
            continue
        rec = decode_record(keys[i].as_py(), values[i].as_py())
        record_type[i], status[i], error[i] = rec.record_type, rec.decode_status, rec.decode_error
        if rec.decode_status not in (OK, TOMBSTONE):
            continue
        group_id = rec.group_id
        subkey = next((rec.key[k] for k in GROUP_SUBKEYS if k in rec.key), "")
        ts = stamps[i].as_py()
        latest = LatestRecord(rec.record_type, subkey, rec.value is None, rec.value,
                              parts[i], log_offsets[i], ts)
        group_records.append(GroupRecord(clusters[i], group_id, latest))
        row = _group_metadata_row(group_id, subkey, rec, parts[i], log_offsets[i], ts)
        row.update(cluster_id=clusters[i], ingested_at=ingested_at)
        group_rows.append(row)

    stamp = pa.scalar(ingested_at, pa.timestamp("us", tz="UTC"))
    offsets_raw = raw.append_column("record_type", pa.array(record_type, pa.int16()))
    offsets_raw = offsets_raw.append_column("decode_status", pa.array(status, pa.string()))
    offsets_raw = offsets_raw.append_column("decode_error", pa.array(error, pa.string()))
    offsets_raw = offsets_raw.append_column("ingested_at", pa.array([ingested_at] * n, stamp.type))
    offsets_raw = offsets_raw.append_column("ingest_batch_id", pa.array([batch_id] * n, pa.int64()))

    mask = pa.array(is_offset, pa.bool_())
    oc = offsets.filter(mask)
    src = raw.filter(mask)
    topic_id = oc.column("topic_id")
    topic_id = pc.if_else(pc.equal(topic_id, ZERO_UUID), pa.nulls(len(topic_id), pa.string()), topic_id)
    offset_commits = pa.table({
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
        "ingested_at": pa.array([ingested_at] * src.num_rows, stamp.type),
    })
    gm_contract = contract("group_metadata")
    group_metadata = pa.Table.from_pylist(group_rows, schema=gm_contract.arrow_schema) if group_rows \
        else gm_contract.arrow_schema.empty_table()
    return HistoryBatch(
        offsets_raw=contract("offsets_raw").conform(offsets_raw),
        offset_commits=contract("offset_commits").conform(offset_commits),
        group_metadata=group_metadata,
        group_records=group_records,
    )


def _epoch_of(value: dict) -> int | None:
    for name in ("generation", "epoch", "member_epoch", "assignment_epoch"):
        if name in value:
            return value[name]
    return None


def _group_metadata_row(group_id: str, subkey: str, rec, part: int, offset: int, ts) -> dict:
    v = rec.value or {}
    members = None
    if rec.record_type == 2 and rec.value is not None:
        members = [_classic_member(m) for m in v.get("members") or ()]
    cst = v.get("current_state_timestamp")
    return {
        "group_id": group_id,
        "record_type": rec.record_type,
        "record_type_name": rec.type_name,
        "member_id": subkey or None,
        "is_tombstone": rec.value is None,
        "value_version": rec.value_version,
        "protocol_type": v.get("protocol_type"),
        "generation": _epoch_of(v),
        "protocol": v.get("protocol"),
        "leader": v.get("leader"),
        "current_state_timestamp": datetime.fromtimestamp(cst / 1000, tz=timezone.utc) if cst and cst > 0 else None,
        "members": members,
        "value_json": dumps(rec.value) if rec.value is not None else None,
        "offsets_partition": part,
        "offset": offset,
        "record_timestamp": ts,
        "decode_status": rec.decode_status,
    }


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
