"""The project's raw-record schema: one row per record of ``__consumer_offsets``, undecoded.

Every source (segment files, a Kafka consumer, Spark's Kafka source) lands its records in this
shape, so the decoder and the history tables have one input contract. Columns a source cannot
know are filled with a sentinel (``-1`` / ``None``) rather than dropped, so the schema never
varies by source.

Conventions:

* ``timestamp`` is null when Kafka had none (magic 0 messages, ``NO_TIMESTAMP = -1``); a
  ``-1`` epoch instant would be a plausible-looking lie.
* ``timestamp_type``: 0 CreateTime, 1 LogAppendTime, -1 none (magic 0).
* ``value`` null is a tombstone; ``key`` null only happens in control records of broken logs.
* ``control_type`` is ``"COMMIT"``, ``"ABORT"`` or ``"UNKNOWN(n)"`` on control records, null on
  data records.
* ``source`` is the segment file path, or e.g. ``"kafka"``; ``source_position`` is the byte
  position of the record's batch in that file, ``-1`` when unknown.
* All fields are nullable: Arrow's default, and what Spark and delta-rs produce, so schemas
  from different writers compare equal.
"""

from __future__ import annotations

import pyarrow as pa

#: Sentinel for ``source_position`` when the record did not come from a file.
NO_POSITION = -1

RAW_ARROW_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("cluster_id", pa.string()),
        pa.field("offsets_partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("timestamp_type", pa.int8()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("producer_id", pa.int64()),
        pa.field("producer_epoch", pa.int16()),
        pa.field("is_transactional", pa.bool_()),
        pa.field("is_control", pa.bool_()),
        pa.field("control_type", pa.string()),
        pa.field("partition_leader_epoch", pa.int32()),
        pa.field("magic", pa.int8()),
        pa.field("compression", pa.string()),
        pa.field("batch_base_offset", pa.int64()),
        pa.field("crc_valid", pa.bool_()),
        pa.field("source", pa.string()),
        pa.field("source_position", pa.int64()),
    ]
)

#: Column names in schema order.
RAW_COLUMNS: tuple[str, ...] = tuple(RAW_ARROW_SCHEMA.names)
