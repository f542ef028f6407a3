"""The ``group_records_latest`` change set as ``pipelines.state.apply`` built it before issue 9's
group-heavy work (a dict per group record, every value written as JSON, then ranked), kept
verbatim as the oracle of tests/test_latest_changes.py."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode.jsonify import dumps
from pipelines.lake.contracts import contract
from pipelines.model import OP, StateInput
from pipelines.state.groups import OFFSET_ACTIVITY
from pipelines.state.offsets import last_per_key

TS = pa.timestamp("us", tz="UTC")


def latest_group_record_changes(batch: StateInput, now: datetime) -> pa.Table:
    rows = [{
        "cluster_id": g.cluster_id, "group_id": g.group_id, "record_type": g.record.record_type,
        "subkey": g.record.subkey, "is_tombstone": g.record.is_tombstone,
        "value_version": g.record.value_version,
        "value_json": None if g.record.value is None else dumps(g.record.value),
        "offsets_partition": g.record.offsets_partition, "offset": g.record.offset,
        "record_timestamp": g.record.record_timestamp, "updated_at": now,
    } for g in batch.group_records]
    table = pa.Table.from_pylist(rows, schema=contract("group_records_latest").arrow_schema) if rows \
        else contract("group_records_latest").arrow_schema.empty_table()
    commits = batch.offset_commits.filter(pc.invert(batch.offset_commits.column("is_tombstone")))
    if commits.num_rows:
        last = last_per_key(commits.select(["cluster_id", "group_id", "offsets_partition", "offset",
                                            "record_timestamp"]), ["cluster_id", "group_id"])
        n = last.num_rows
        activity = pa.table({
            "cluster_id": last.column("cluster_id"), "group_id": last.column("group_id"),
            "record_type": pa.array([OFFSET_ACTIVITY] * n, pa.int16()),
            "subkey": pa.array([""] * n), "is_tombstone": pa.array([False] * n),
            "value_version": pa.nulls(n, pa.int16()), "value_json": pa.nulls(n, pa.string()),
            "offsets_partition": last.column("offsets_partition"), "offset": last.column("offset"),
            "record_timestamp": last.column("record_timestamp").cast(TS),
            "updated_at": pa.array([now] * n, TS),
        })
        table = pa.concat_tables([table, activity.cast(table.schema)])
    table = last_per_key(table, ["cluster_id", "group_id", "record_type", "subkey"])
    return table.append_column(OP, pa.array(["upsert"] * table.num_rows, pa.string()))
