"""History decoded and written by Spark's executors, for the delta-spark engine.

Why: delta-spark has no API to commit files it did not write, so the delta-rs path (tasks
write Parquet, the driver commits the files) does not apply; and collecting a micro-batch
to the driver (``toArrow``) does not scale. Instead one Spark job decodes the batch on the
executors and keeps the result cached; each history table is then a DataFrame over that
cache which Spark's Delta writer writes from the executors, in one Delta commit per table
carrying Delta's ``txnAppId``/``txnVersion`` (a replayed batch is skipped by Delta itself).
Only each task's small state input (the rows the current-state tables depend on, counts)
reaches the driver.

Plan per micro-batch (:func:`write_history_with_spark`)::

    raw batch --mapInArrow(decode_task)--> cells (table, data) [persisted]
        cells[table = "_state"]   -> collect: per-task StateInput, record and status counts
        cells[table = T] --mapInArrow(unpack_task(T))--> T's rows --Delta writer--> lake/T

Each cell holds one task's rows of one table as Arrow IPC, already in the Arrow types
Spark reads back (:func:`spark_arrow_schema`), so unpacking is a zero-copy read.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.arrow_memory import use_offsetlake_pool
from pipelines.history.parts import HistoryPart
from pipelines.history.tables import HISTORY_TABLES, build_history, no_cyclic_gc
from pipelines.lake.contracts import contract
from pipelines.model import StateInput
from pipelines.sources.raw import unpacked

TABLE, DATA = "table", "data"
STATE = "_state"  # the tag of a task's summary cell
CELLS_DDL = f"{TABLE} string, {DATA} binary"
CELLS_SCHEMA = pa.schema([pa.field(TABLE, pa.string()), pa.field(DATA, pa.binary())])


@dataclass
class TaskSummary:
    """What one task hands the driver: the state input of its rows and its counts."""

    state: StateInput
    records: int = 0
    statuses: Counter = field(default_factory=Counter)
    rows: dict[str, int] = field(default_factory=dict)


def spark_schema(table: str):
    """The Spark schema of a history table (what its DataFrame and the Delta table hold)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(contract(table).arrow_schema)


def spark_arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema Spark expects back from ``mapInArrow`` for ``table`` (microsecond
    timestamps in UTC, Spark's nullability), so no cast is needed on the JVM side."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(table), timezone="UTC")


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_cells(raw: pa.Table, batch_id: int, ingested_at: datetime,
                 tables: tuple[str, ...] = HISTORY_TABLES) -> pa.RecordBatch:
    """One task's raw records as cells: one per non-empty history table, one summary."""
    with no_cyclic_gc():  # see pending.parts_of
        return _decode_cells(raw, batch_id, ingested_at, tables)


def _decode_cells(raw: pa.Table, batch_id: int, ingested_at: datetime,
                  tables: tuple[str, ...]) -> pa.RecordBatch:
    history = build_history(raw, batch_id, ingested_at)
    names, cells = [], []
    rows = {}
    for name in tables:
        data = getattr(history, name)
        rows[name] = data.num_rows
        if data.num_rows:
            names.append(name)
            cells.append(_ipc(data.cast(spark_arrow_schema(name))))
    summary = TaskSummary(history.state_input(), raw.num_rows, Counter(history.status_counts()), rows)
    names.append(STATE)
    cells.append(pickle.dumps(summary))
    return pa.RecordBatch.from_arrays([pa.array(names, pa.string()), pa.array(cells, pa.binary())],
                                      schema=CELLS_SCHEMA)


def decode_task(batch_id: int, ingested_at: datetime, tables: tuple[str, ...]
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function decoding a task's (packed or plain) raw records."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        use_offsetlake_pool()
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        raw = unpacked(pa.Table.from_batches(batches))
        if raw.num_rows:
            yield decode_cells(raw, batch_id, ingested_at, tables)

    return task


def unpack_task(table: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function turning ``table``'s cells back into its rows."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            tags, cells = batch.column(0), batch.column(1)
            for tag, cell in zip(tags, cells, strict=True):
                if tag.as_py() != table or not cell.is_valid:
                    continue
                yield from pa.ipc.open_stream(cell.as_buffer()).read_all().to_batches()

    return task


def summaries(cells_df) -> list[TaskSummary]:
    """The tasks' summaries (state inputs and counts: large on a group-heavy batch), brought
    to the driver as Arrow (``toArrow``, as :func:`pipelines.micro_batch.cells_to_driver`
    does for the same reason)."""
    from pyspark.sql import functions as F

    cells = cells_df.where(F.col(TABLE) == STATE).select(DATA).toArrow().column(DATA).to_pylist()
    with no_cyclic_gc():
        return [pickle.loads(cell) for cell in cells]


def table_frame(cells_df, table: str):
    """``table``'s rows of the batch as a DataFrame computed on the executors."""
    from pyspark.sql import functions as F

    return cells_df.where(F.col(TABLE) == table).mapInArrow(unpack_task(table), spark_schema(table))


def write_history_with_spark(engine: Any, df, batch_id: int, ingested_at: datetime,
                             tables: tuple[str, ...], app_id: str) -> list[HistoryPart]:
    """Decode ``df`` (the micro-batch) on the executors and append each pending history
    table through ``engine.append_frame`` (Spark's Delta writer, idempotent per
    ``(app_id, batch_id)``); returns the parts for the state update and the report."""
    from pyspark import StorageLevel

    cells = df.mapInArrow(decode_task(batch_id, ingested_at, tables), CELLS_DDL)
    cells = cells.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        done = summaries(cells)  # runs the decode once; the writes below read the cache
        if not any(s.records for s in done):
            return []
        written = {name: engine.append_frame(contract(name), table_frame(cells, name), app_id, batch_id)
                   for name in tables}
    finally:
        cells.unpersist()
    return [HistoryPart(s.state, s.records, s.statuses,
                        written={n: s.rows.get(n, 0) for n in tables if written[n]}) for s in done]
