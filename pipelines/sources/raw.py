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

import pickle
from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np
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

#: The planning view of raw rows (what the vectorized reader's ``index_segments_arrow`` returns
#: per record): offsets, transaction facts and where each batch lies (``source_file``: the
#: file's place in the list read), no bytes.
INDEX_ARROW_SCHEMA: pa.Schema = pa.schema(
    [RAW_ARROW_SCHEMA.field(name) for name in
     ("offset", "producer_id", "is_transactional", "is_control", "control_type")]
    + [pa.field("source_file", pa.int32()), RAW_ARROW_SCHEMA.field("source_position")]
)

#: RAW_ARROW_SCHEMA as Spark hands it over: Spark exchanges timestamps as microseconds, so a
#: Python data source's batches carry ``timestamp("us", "UTC")``
#: (``to_arrow_schema(from_arrow_schema(RAW_ARROW_SCHEMA), timezone="UTC")``).
SPARK_RAW_SCHEMA: pa.Schema = pa.schema(
    [f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
     for f in RAW_ARROW_SCHEMA]
)

#: Column names in schema order.
RAW_COLUMNS: tuple[str, ...] = tuple(RAW_ARROW_SCHEMA.names)

#: The packed form of the raw schema: one row per Arrow batch of raw records, serialized as
#: Arrow IPC. Rows cross Python -> JVM -> Python at a fixed cost each, so a few wide rows
#: move a micro-batch several times faster than one row per record (PLATFORM.md). The
#: ingest job reads its sources packed; anyone else gets the raw schema.
PACKED_COLUMN = "raw_arrow_ipc"
PACKED_ARROW_SCHEMA: pa.Schema = pa.schema([pa.field(PACKED_COLUMN, pa.binary())])


#: Body compression of a packed cell. Spark's JVM copies every cell several times on its way
#: from the source's Python worker to the decoding one (Arrow -> rows -> Arrow); raw rows are
#: ~230 bytes a record (a segment file's path repeats on each) and LZ4 makes them ~6x smaller
#: for ~0.05 us a record each way. One 1M-record micro-batch's Spark job, 2 cores, loaded
#: (``benchmarks/executor_task.py --spark``): JVM CPU ~1.0 s -> ~0.4 s, job CPU 3.4 s -> 2.8 s.
#: Readers need nothing: Arrow IPC states a batch's codec and decompresses it on read.
PACKED_COMPRESSION = "lz4" if pa.Codec.is_available("lz4") else None


def pack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each non-empty raw batch as one packed row (Arrow IPC, LZ4-compressed body)."""
    options = pa.ipc.IpcWriteOptions(compression=PACKED_COMPRESSION)
    for batch in batches:
        if batch.num_rows:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
                writer.write_batch(batch)
            yield pa.RecordBatch.from_arrays([_one_cell(sink.getvalue())], schema=PACKED_ARROW_SCHEMA)


def _one_cell(data: pa.Buffer) -> pa.Array:
    """A one-value binary array over ``data`` itself (no copy into a bytes object and back)."""
    offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int32).tobytes())
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data])


class DeferredRead(Protocol):
    """What a deferred cell holds (pickled): a source's read of its raw records, made where the
    cell is consumed."""

    def read(self) -> Iterable[pa.RecordBatch]: ...


#: The deferred form: one row per Spark task naming what the task reads, the reading left to
#: whoever consumes the row (:func:`unpacked`, in the decoding task). For sources whose
#: records are files every executor reads alike (segment files): the records then cross no
#: process boundary at all, where packed cells are written by the source's Python worker,
#: copied by the JVM and read back by the decoding worker (one 1M-record micro-batch: LZ4
#: and IPC ~0.3 s of Python CPU, ~0.3 s of JVM CPU; ``benchmarks/executor_task.py --spark``).
DEFERRED_COLUMN = "raw_read"
DEFERRED_ARROW_SCHEMA: pa.Schema = pa.schema([pa.field(DEFERRED_COLUMN, pa.binary())])


def deferred(read: DeferredRead) -> pa.RecordBatch:
    """One deferred row: ``read`` pickled (a source's own object: nothing from outside)."""
    cell = pickle.dumps(read, protocol=pickle.HIGHEST_PROTOCOL)
    return pa.RecordBatch.from_arrays([pa.array([cell], pa.binary())], schema=DEFERRED_ARROW_SCHEMA)


def unpacked(table: pa.Table) -> pa.Table:
    """Raw records of ``table``: unpacked if it is packed, read if it is deferred, as it is
    otherwise."""
    if table.column_names == [DEFERRED_COLUMN]:
        parts = [pa.Table.from_batches([b]) for chunk in table.column(DEFERRED_COLUMN).chunks
                 for cell in chunk if cell.is_valid for b in pickle.loads(cell.as_buffer()).read() if b.num_rows]
    elif table.column_names == [PACKED_COLUMN]:
        parts = [pa.ipc.open_stream(cell.as_buffer()).read_all()
                 for chunk in table.column(PACKED_COLUMN).chunks for cell in chunk if cell.is_valid]
    else:
        return table
    return pa.concat_tables(parts) if parts else RAW_ARROW_SCHEMA.empty_table()
