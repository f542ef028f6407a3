"""One micro-batch of the streaming ingest, from Spark's callback thread to the lake.

The executors decode the batch and write its history files (:func:`part_cells_on_executors`);
the driver commits them, one Delta transaction per table, then merges the state and runs the
commit audit (:func:`commit_batch`), every commit tagged with the query's transaction id and
the batch id. :class:`Handover` runs each commit on the main thread and, where the executors
write the files, overlaps it with the decoding of the next batch.
"""

from __future__ import annotations

import logging
import pickle
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from pipelines import jvm_output
from pipelines.arrow_memory import use_offsetlake_pool
from pipelines.history import pending
from pipelines.history.parts import HistoryPart, combined_state, history_part
from pipelines.history.spark_writes import write_history_with_spark
from pipelines.history.tables import HISTORY_TABLES, no_cyclic_gc
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine, make_engine
from pipelines.lake.location import LakeLocation, lake_location
from pipelines.sources.raw import unpacked
from pipelines.state import last_ended
from pipelines.state.apply import apply_state
from pipelines.state.audit import audit_batch
from pipelines.state.progress import TABLE as PROGRESS
from pipelines.state.progress import not_yet_applied, record_progress
from pipelines.state.split_groups import described, split_groups

if TYPE_CHECKING:
    from pipelines.ingest import IngestReport

log = logging.getLogger(__name__)


def pending_history(engine: DeltaEngine, app_id: str, batch_id: int) -> tuple[str, ...]:
    """History tables that do not hold this batch yet (all of them, unless this is a replay)."""
    return tuple(name for name in HISTORY_TABLES if not engine.committed(name, app_id, batch_id))


def commit_batch(engine: DeltaEngine, parts: list[HistoryPart], batch_id: int, app_id: str,
                 now: datetime, report: IngestReport) -> None:
    """Commit a micro-batch's history (one Delta transaction per table), then its state.

    Every commit carries ``(app_id, batch_id)``; a replay skips what is already in.
    """
    records = sum(p.records for p in parts)
    if records == 0:
        return
    wrote = False
    for name in HISTORY_TABLES:
        if any(name in p.files for p in parts):
            files = [f for p in parts for f in p.files.get(name, ())]
            written = engine.commit_files(contract(name), files, app_id, batch_id)
            rows = sum(f.num_records for f in files)
        elif any(name in p.tables for p in parts):
            data = pa.concat_tables([p.tables[name] for p in parts])
            written, rows = engine.append(contract(name), data, app_id, batch_id), data.num_rows
        elif any(name in p.written for p in parts):  # written by the executors (delta-spark)
            written, rows = True, sum(p.written.get(name, 0) for p in parts)
        else:  # already committed when the batch was decoded
            continue
        if written:
            wrote = True
            report.rows[name] += rows
    with no_cyclic_gc():
        state = combined_state(parts)
        # the audit cuts what it audited already by its own cursor: it takes the whole batch
        fresh, applied = not_yet_applied(engine, state, app_id, batch_id)
        for (cluster_id, partition), end in applied.items():
            report.already_applied[(cluster_id, partition)] = end
            log.info("batch %d: records of %s partition %d below offset %d are in the state tables "
                     "already (another query over the same log): added to the history only",
                     batch_id, cluster_id, partition, end)
        _report_split_groups(split_groups(engine, state), batch_id, report)  # before the state merges
        state_rows, ownership = apply_state(engine, fresh, app_id, batch_id, now)
        audit_rows = audit_batch(engine, state, app_id, batch_id, now, ownership)  # after the state
        # after the audit, which reads it as the batches before left it
        if ended := last_ended.update(engine, ownership, app_id, batch_id, now):
            state_rows[last_ended.TABLE] = ended
    for table, n in state_rows.items():
        wrote = True
        report.rows[table] += n
    for table, n in audit_rows.items():
        wrote = True
        report.rows[table] += n
    if progressed := record_progress(engine, app_id, batch_id, now):  # reconcile reads it
        wrote = True
        report.rows[PROGRESS] += progressed
    statuses = sum((p.statuses for p in parts), Counter())
    report.batches += 1
    report.records += records
    report.statuses.update(statuses)
    if not wrote:
        report.skipped_batches += 1
    bad = {k: v for k, v in statuses.items() if k not in ("ok", "tombstone", "control")}
    log.info("batch %d: %d records%s", batch_id, records, f", not decoded: {bad}" if bad else "")


def _report_split_groups(found: dict[tuple[str, str], tuple[int, ...]], batch_id: int,
                         report: IngestReport) -> None:
    """Add the batch's groups seen in several offsets partitions to the run's report; those
    new to this run are logged now (a continuous run has no end to say it at)."""
    new = [k for k, parts in found.items() if not set(parts) <= report.split_groups.get(k, set())]
    for key, parts in found.items():
        report.split_groups.setdefault(key, set()).update(parts)
    if new:
        log.warning("batch %d: %s: the logs of several clusters under one --cluster-id?", batch_id,
                    described({k: report.split_groups[k] for k in new}))


def part_cells_on_executors(df, batch_id: int, now: datetime, lake: Path | str | LakeLocation,
                            tables: tuple[str, ...]) -> list[bytes]:
    """Each Spark task decodes its share of the batch and writes its history files itself,
    straight into the lake (a shared directory or the object store, reached with the
    lake's storage options, which travel inside the task and are never logged).

    Only the parts (file names, counts, the rows the state needs) come back to the
    driver, pickled in one binary cell per task (:func:`pending.parts_of` reads them): no
    history row crosses to the driver.
    """
    lake_dir = lake_location(lake)

    def task(batches):
        use_offsetlake_pool()
        batches = [b for b in batches if b.num_rows]
        raw = unpacked(pa.Table.from_batches(batches)) if batches else None
        if raw is not None and raw.num_rows:
            # the collector paused while the part's group records are built and pickled: it
            # kept walking them (pickling a 204k-record group-heavy part: 0.8 -> 0.3 s CPU)
            with no_cyclic_gc():
                cell = pickle.dumps(history_part(raw, batch_id, now, lake_dir, tables))
            yield pa.RecordBatch.from_arrays([pa.array([cell], pa.binary())], names=["part"])

    return cells_to_driver(df.mapInArrow(task, "part binary"))


def cells_to_driver(cells) -> list[bytes]:
    """The ``part`` cells of a DataFrame, on the driver, as Arrow (``toArrow``).

    Why not ``collect``: the JVM pickles each binary cell for Python byte by byte, through a
    string (``benchmarks/part_cells.py``: two 40 MB cells, a group-heavy batch's, took
    2.4-2.6 s and 0.8 s of the driver's CPU, against 0.7-0.9 s and 0.1 s)."""
    return cells.toArrow().column("part").to_pylist()


@dataclass
class HandedBatch:
    """A micro-batch handed from Spark's callback thread to the main thread: its DataFrame
    (to decode and commit there) or the pickled parts the executors decoded (to read and
    commit there: unpickling a group-heavy batch's records took ~1 s of the callback
    thread, on the path of the next batch's start)."""

    batch_id: int
    df: object = None
    now: datetime | None = None
    cells: list[bytes] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def wait(self) -> None:
        """Until the main thread is done with the batch; its failure raised here.

        On py4j's callback thread, a failure that is no ``Exception`` (Ctrl-C's
        KeyboardInterrupt) is raised as one: py4j answers the JVM only for an Exception, and
        any other ended its thread without an answer, so the query's stop waited forever."""
        self.done.wait()
        if isinstance(self.error, Exception):
            raise self.error
        if self.error is not None:
            raise RuntimeError("ingest interrupted") from self.error


class Handover:
    """Spark's ``foreachBatch`` (:meth:`on_batch`, on py4j's callback thread) and the main
    thread's loop (:meth:`serve`) that runs every commit: Python code on the callback thread
    ran ~3x slower (11 s vs 4 s for one 1M-record batch).

    Where the executors write the history files (``engine.commits_files``), batches overlap:
    the executors decode batch N+1 while the main thread commits N. Spark counts N done when
    ``on_batch`` returns, before N's commits land, so N's parts are kept in the checkpoint
    first (:mod:`pipelines.history.pending`; the next run commits what a stopped one kept).
    Otherwise ``on_batch`` waits until its batch is committed.
    """

    def __init__(self, engine: DeltaEngine, app_id: str, kept: Path, report: IngestReport,
                 progress, started: float) -> None:
        self.engine, self.app_id, self.kept, self.report = engine, app_id, kept, report
        self.progress, self.started = progress, started
        self.overlap = engine.commits_files
        self.handoff: queue.Queue[HandedBatch] = queue.Queue()
        self.last: HandedBatch | None = None  # handed over last (overlapping)
        self.planner: DeltaEngine | None = None

    def on_batch(self, df, batch_id: int) -> None:
        """Overlapping: decode on the executors, keep, hand over, and return once the previous
        batch is committed (one commit in flight at most; its failure fails this batch).
        Otherwise: hand the DataFrame over and wait until the batch is committed."""
        if not self.overlap:
            batch = HandedBatch(batch_id, df=df)
            self.handoff.put(batch)
            batch.wait()
            return
        now, began = datetime.now(timezone.utc), time.perf_counter()
        cells = part_cells_on_executors(df, batch_id, now, self.engine.location, self._tables_to_write(batch_id))
        log.debug("batch %d decoded by the executors in %.2fs", batch_id, time.perf_counter() - began)
        pending.keep(self.kept, batch_id, now, cells)
        batch = HandedBatch(batch_id, now=now, cells=cells)
        self.handoff.put(batch)
        previous, self.last = self.last, batch
        if previous is not None:
            previous.wait()

    def _tables_to_write(self, batch_id: int) -> tuple[str, ...]:
        """The history tables the batch still needs, asked through the main engine before the
        first hand-over (the main thread is idle), then through an engine of the callback
        thread's own (the main one is busy committing the previous batch)."""
        if self.last is None:
            return pending_history(self.engine, self.app_id, batch_id)
        if self.planner is None:
            self.planner = make_engine("delta-rs", self.engine.location)
        return pending_history(self.planner, self.app_id, batch_id)

    def serve(self, query) -> None:
        """Commit handed batches until the query ends; on any failure (Ctrl-C too) fail the
        waiting batches, stop the query and re-raise."""
        try:
            while query.isActive or not self.handoff.empty():
                try:  # a short poll: the query's end is noticed here, after its last batch
                    batch = self.handoff.get(timeout=0.05)
                except queue.Empty:
                    continue
                log.debug("batch %d handed over %.2fs after the query started", batch.batch_id,
                          time.perf_counter() - self.started)
                try:
                    self._commit(batch)
                except BaseException as exc:  # surfaces through Spark as the batch's failure
                    batch.error = exc
                    if self.overlap:  # Spark counts this batch done already: stop, say why here
                        raise
                finally:
                    batch.done.set()
            query.awaitTermination()
        except BaseException:
            while not self.handoff.empty():
                waiting = self.handoff.get_nowait()
                waiting.error = RuntimeError("ingest interrupted")
                waiting.done.set()
            if query.isActive:  # what the JVM says while it stops is the failure's echo
                with jvm_output.hushed():
                    query.stop()
            raise

    def _commit(self, batch: HandedBatch) -> None:
        began = time.perf_counter()
        if batch.cells is None:
            decoded = _write_batch(self.engine, batch.df, batch.batch_id, self.app_id, self.report)
            log.debug("batch %d: decoded and written %.2fs, committed %.2fs", batch.batch_id,
                      decoded - began, time.perf_counter() - decoded)
        else:  # decoded by the executors (the next batch is decoded meanwhile)
            parts = pending.parts_of(batch.cells)
            commit_batch(self.engine, parts, batch.batch_id, self.app_id, batch.now, self.report)
            pending.drop(self.kept, batch.batch_id)
            log.debug("batch %d: committed %.2fs", batch.batch_id, time.perf_counter() - began)
        if self.progress is not None:
            self.progress.set_postfix(batches=self.report.batches, refresh=False)
            self.progress.update(self.report.records - self.progress.n)


def commit_kept(engine: DeltaEngine, kept: Path, app_id: str, report: IngestReport) -> None:
    """Commit the batches a stopped run kept (Spark counted them done; their commits had
    not all landed), in batch order, before this run's query starts."""
    for batch_id, now, parts in pending.kept(kept):
        log.info("batch %d: committing what the last run decoded but had not committed", batch_id)
        commit_batch(engine, parts, batch_id, app_id, now, report)
        pending.drop(kept, batch_id)


def _write_batch(engine: DeltaEngine, df, batch_id: int, app_id: str, report: IngestReport) -> float:
    """One micro-batch on the main thread: its history written (through delta-spark, or
    here), then committed; returns when the decoding ended (perf_counter)."""
    now = datetime.now(timezone.utc)
    tables = pending_history(engine, app_id, batch_id)
    if hasattr(engine, "append_frame"):  # delta-spark: executors write through Delta
        parts = write_history_with_spark(engine, df, batch_id, now, tables, app_id)
    else:
        parts = [history_part(unpacked(df.toArrow()), batch_id, now, None, tables)]
    decoded = time.perf_counter()
    commit_batch(engine, parts, batch_id, app_id, now, report)
    return decoded
