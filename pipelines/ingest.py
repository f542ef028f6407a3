"""The ingest job: a Structured Streaming query from a source into the Delta lake.

Per micro-batch: each Spark task decodes its raw rows and writes them as history files
(:mod:`pipelines.history.parts`); the driver commits each history table's files in one
Delta transaction and merges the few rows the state depends on into the state tables,
every commit tagged with the query's Delta transaction id and the batch id. Spark's
checkpoint keeps source positions; Delta's transaction ids make any replayed batch a
no-op, so reruns and crashes leave no duplicates and no gaps.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from pipelines.history import pending
from pipelines.history.parts import HistoryPart, combined_state, history_part
from pipelines.history.spark_writes import write_history_with_spark
from pipelines.history.tables import HISTORY_TABLES, no_cyclic_gc
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine, make_engine
from pipelines.lake.location import LakeLocation, lake_location
from pipelines.source_identity import (
    SourceIdentity,
    claim,
    default_checkpoint,
    kafka_identity,
    segments_identity,
)
from pipelines.sources.raw import PACKED_ARROW_SCHEMA, unpacked
from pipelines.sources.record_batches.problems import Problem
from pipelines.sources.segments.index import source_problems
from pipelines.state.apply import apply_state
from pipelines.state.audit import TABLES as AUDIT_TABLES
from pipelines.state.audit import audit_batch
from pipelines.state.audit import backfill as audit_backfill
from pipelines.state.audit import backfill_clusters as audit_backfill_clusters
from pipelines.state.progress import TABLE as PROGRESS
from pipelines.state.progress import record_progress

log = logging.getLogger(__name__)

SOURCES = ("segments", "kafka", "spark-kafka")
PROBLEMS_TABLE = "ingest_problems"


class CheckpointError(ValueError):
    """No usable checkpoint location (e.g. a lake at a URI and no ``--checkpoint``)."""


def checkpoint_path(checkpoint: str | Path) -> Path:
    """A ``--checkpoint`` location as a local directory (``file://`` accepted).

    Spark's checkpoint, the app id marker and the segment index cache live there; the
    Spark here has no Hadoop connector for object stores, so a local or shared (NFS,
    mounted) directory is the place for them.
    """
    text = str(checkpoint)
    if text.startswith("file://"):
        return Path(text[len("file://"):])
    if "://" in text:
        raise CheckpointError(
            f"--checkpoint {text.split('://', 1)[0]}://... is not supported: give a local or "
            "shared directory (Spark's checkpoint, the app id marker and the segment index "
            "cache live there)")
    return Path(text)


@dataclass
class IngestConfig:
    source: str
    lake: Path | str | LakeLocation
    path: str | None = None
    bootstrap_servers: str | None = None
    cluster_id: str = "default"
    delta_engine: str = "delta-rs"
    trigger: str = "available-now"  # or a processing-time interval such as "30 seconds"
    max_records_per_batch: int = 500_000
    kafka_options: dict[str, str] = field(default_factory=dict)
    checkpoint: Path | str | None = None
    allow_data_loss: bool = False  # records the source no longer has: fail (default) or skip
    progress: bool = False  # records, batches and rate on stderr (a terminal)

    @property
    def checkpoint_dir(self) -> Path:
        """``--checkpoint``, else ``<lake>/_checkpoints/ingest`` for a local lake; a lake at a
        URI needs an explicit checkpoint (:class:`CheckpointError` otherwise)."""
        if self.checkpoint is not None:
            return checkpoint_path(self.checkpoint)
        where = lake_location(self.lake)
        if not where.is_local:
            raise CheckpointError(
                f"the lake is at {where.scheme}://...: give --checkpoint DIR (env "
                "OFFSETLAKE_CHECKPOINT), a local or shared directory for Spark's checkpoint, "
                "the app id marker and the segment index cache; this Spark cannot write "
                f"checkpoints to {where.scheme}:// (no Hadoop connector for it)")
        return default_checkpoint(where.local_path, self.cluster_id)  # one per cluster

    def identity(self) -> SourceIdentity:
        """(cluster id, source kind, source identity): what the checkpoint belongs to."""
        if self.source == "segments":
            return segments_identity(self.cluster_id, self.path or ".")
        return kafka_identity(self.cluster_id, self.source, self.bootstrap_servers or "",
                              self.kafka_options)


@dataclass
class IngestReport:
    batches: int = 0
    records: int = 0
    skipped_batches: int = 0
    statuses: Counter = field(default_factory=Counter)
    rows: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    problems: list[Problem] = field(default_factory=list)  # every one in the source, this run
    new_problems: int = 0  # of which first seen (and recorded in ingest_problems) this run
    empty_source: str | None = None  # why the source held nothing to read, if it did not

    def summary(self) -> dict:
        """What the CLI prints: counts per decode_status and every problem, by file."""
        bad = {k: v for k, v in self.statuses.items() if k not in ("ok", "tombstone", "control")}
        return {
            "batches": self.batches, "records": self.records,
            "records_per_second": round(self.records_per_second), "seconds": round(self.seconds, 2),
            "decode_status": dict(self.statuses), "not_decoded": sum(bad.values()),
            "rows_written": dict(self.rows), "skipped_replayed_batches": self.skipped_batches,
            "problems": [problem_json(p) for p in self.problems],
            "bytes_skipped": sum(p.length_skipped for p in self.problems),
            "new_problems": self.new_problems, "empty_source": self.empty_source,
        }

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def problem_json(p: Problem) -> dict:
    return {"file": p.path, "byte_range": [p.position, p.position + p.length_skipped],
            "bytes_skipped": p.length_skipped, "reason": p.reason}


def app_id_for(checkpoint: Path) -> str:
    """The Delta transaction app id of the query that owns ``checkpoint``.

    Stored beside Spark's checkpoint: a fresh checkpoint (a deliberate full replay) gets a
    fresh id, so its batch numbers starting again at 0 are not mistaken for replays.
    """
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker = checkpoint / "offsetlake_app_id"
    if not marker.exists():
        marker.write_text(f"offsetlake-ingest-{uuid.uuid4()}\n")
    return marker.read_text().strip()


def ensure_tables(engine: DeltaEngine) -> None:
    """Create every table the job writes (tasks write files into their directories); a lake
    whose history predates the commit audit has it backfilled first (before any new batch)."""
    audit_backfill(engine, audit_backfill_clusters(engine))  # before the audit tables exist
    for name in (*HISTORY_TABLES, "committed_offsets", "group_records_latest", "consumer_groups",
                 "group_members", "group_generations", PROBLEMS_TABLE, *AUDIT_TABLES):
        engine.ensure(contract(name))


def pending_history(engine: DeltaEngine, app_id: str, batch_id: int) -> tuple[str, ...]:
    """History tables that do not hold this batch yet (all of them, unless this is a replay)."""
    return tuple(name for name in HISTORY_TABLES if not engine.committed(name, app_id, batch_id))


def process_batch(engine: DeltaEngine, raw: pa.Table, batch_id: int, app_id: str,
                  report: IngestReport) -> None:
    """Write one micro-batch (an Arrow table of raw records) to every table, in this process."""
    if raw.num_rows == 0:
        return
    now = datetime.now(timezone.utc)
    lake = getattr(engine, "location", engine.root) if engine.commits_files else None
    part = history_part(raw, batch_id, now, lake, pending_history(engine, app_id, batch_id))
    commit_batch(engine, [part], batch_id, app_id, now, report)


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
        state_rows = apply_state(engine, state, app_id, batch_id, now)
        audit_rows = audit_batch(engine, state, app_id, batch_id, now)  # after the state
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
        batches = [b for b in batches if b.num_rows]
        raw = unpacked(pa.Table.from_batches(batches)) if batches else None
        if raw is not None and raw.num_rows:
            # the collector paused while the part's group records are built and pickled: it
            # kept walking them (pickling a 204k-record group-heavy part: 0.8 -> 0.3 s CPU)
            with no_cyclic_gc():
                cell = pickle.dumps(history_part(raw, batch_id, now, lake_dir, tables))
            yield pa.RecordBatch.from_arrays([pa.array([cell], pa.binary())], names=["part"])

    return [row.part for row in df.mapInArrow(task, "part binary").collect()]


def open_stream(spark, cfg: IngestConfig):
    """The raw-record streaming DataFrame of the configured source (packed where it can be).

    The packed schema is given up front: Spark then needs no Python worker to ask the
    source for it (~1 s of every run's start-up).
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    packed = from_arrow_schema(PACKED_ARROW_SCHEMA)
    if cfg.source == "segments":
        from pipelines.sources.segments import spark_source

        spark_source.register(spark)
        return (spark.readStream.format(spark_source.NAME).schema(packed).option("path", cfg.path)
                .option("packed", "true")
                .option("index_cache_dir", str(cfg.checkpoint_dir / "segment_index"))
                .option("cluster_id", cfg.cluster_id)
                .option("max_records_per_batch", str(cfg.max_records_per_batch))
                .option("max_tasks", str(_cores(spark))).load())
    if cfg.source == "kafka":
        from pipelines.sources.kafka import spark_source

        spark_source.register(spark)
        reader = (spark.readStream.format(spark_source.SOURCE_NAME).schema(packed)
                  .option("bootstrap_servers", cfg.bootstrap_servers)
                  .option("cluster_id", cfg.cluster_id)
                  .option("include_batch_metadata", "true")  # markers + producer ids for the audit
                  .option("packed", "true")
                  .option("max_records_per_batch", str(cfg.max_records_per_batch)))
        for key, value in cfg.kafka_options.items():
            reader = reader.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
        if cfg.allow_data_loss:
            reader = reader.option("fail_on_data_loss", "false")
        return reader.load()
    if cfg.source == "spark-kafka":
        from pipelines.sources.kafka import spark_connector

        return spark_connector.read_stream(spark, cfg.bootstrap_servers, cfg.cluster_id,
                                           cfg.max_records_per_batch, cfg.kafka_options,
                                           allow_data_loss=cfg.allow_data_loss)
    raise ValueError(f"unknown source {cfg.source!r}; choose one of {', '.join(SOURCES)}")


def _cores(spark) -> int:
    """At most this many tasks per micro-batch of the segments source, fewer for small
    batches (``task_count``): a local session's cores; on a cluster, its default parallelism
    but never fewer than 8 (executors that have not registered yet when the query starts
    are not counted in it, and the option holds for the whole run)."""
    try:
        context = spark.sparkContext
        cores = max(1, int(context.defaultParallelism))
        return cores if str(context.master).startswith("local") else max(cores, 8)
    except Exception:  # a session without a SparkContext (Spark Connect): the source's default
        return 8


def index_ahead(cfg: IngestConfig) -> threading.Thread | None:
    """Index the segment files into the checkpoint's index cache on a background thread.

    Meant to run while the Spark session starts (seconds in which the driver only waits for
    its JVM): the streaming source's planner then reads the cache instead of indexing every
    file itself, on the critical path of the query's start. The cache's entries are written
    whole or not at all (:class:`SegmentIndexCache`), and whatever this thread did not reach
    the source indexes itself, so its outcome changes no result. The checkpoint is claimed
    first: one made for another source is refused here, before Spark starts.
    """
    if cfg.source != "segments" or not cfg.path:
        return None
    checkpoint = Path(os.path.abspath(cfg.checkpoint_dir))
    claim(checkpoint, cfg.identity())

    def index() -> None:
        from pipelines.sources.segments.files import find_segments
        from pipelines.sources.segments.index import SegmentIndexCache

        try:
            cache = SegmentIndexCache(checkpoint / "segment_index")
            for plog in find_segments(os.path.abspath(cfg.path)):
                for segment in plog.segments:
                    cache.rows(segment)
        except Exception as exc:  # the source indexes what is missing (and reports problems)
            log.debug("indexing ahead stopped: %s", exc)

    thread = threading.Thread(target=index, name="offsetlake-index-ahead", daemon=True)
    thread.start()
    return thread


def run_ingest(spark, cfg: IngestConfig, engine: DeltaEngine | None = None) -> IngestReport:
    """Run the streaming query (availableNow by default) and report what it wrote
    (through ``engine``, default: the one ``cfg.delta_engine`` names).

    Refuses (:class:`CheckpointMismatch`) a checkpoint made for another source.
    """
    # absolute, since Spark's JVM and its Python workers may run elsewhere than here; not
    # resolved, so source file names in the history stay the paths the user gave (symlinks too)
    cfg = replace(cfg, checkpoint=Path(os.path.abspath(cfg.checkpoint_dir)),
                  path=os.path.abspath(cfg.path) if cfg.path else cfg.path)
    identity = cfg.identity()
    claim(cfg.checkpoint_dir, identity)
    engine = engine or make_engine(cfg.delta_engine, lake_location(cfg.lake), spark=spark)
    ensure_tables(engine)
    app_id = app_id_for(cfg.checkpoint_dir)
    report = IngestReport()
    started = time.perf_counter()
    progress = _progress_bar(cfg.progress)
    fresh = not any((cfg.checkpoint_dir / "spark" / "offsets").glob("[0-9]*"))

    kept = cfg.checkpoint_dir / "pending_batches"
    commit_kept(engine, kept, app_id, report)  # what a stopped run handed to Spark uncommitted
    # Engines whose executors write the history files overlap batches: the driver commits
    # batch N while the executors decode N+1.
    overlap = engine.commits_files
    handoff: queue.Queue[HandedBatch] = queue.Queue()
    last: list[HandedBatch] = []  # the batch handed over last (overlapping)
    planner: list[DeltaEngine] = []

    def tables_to_write(batch_id: int) -> tuple[str, ...]:
        """The history tables batch ``batch_id`` still needs, asked on the callback thread:
        through the main engine before the first hand-over (the main thread is idle), then
        through an engine of its own (the main one is busy committing the previous batch)."""
        if not last:
            return pending_history(engine, app_id, batch_id)
        if not planner:
            planner.append(make_engine("delta-rs", engine.location))
        return pending_history(planner[0], app_id, batch_id)

    def on_batch(df, batch_id: int) -> None:
        """Runs on py4j's callback thread; every Python step of a commit runs on the main
        thread (Python code on the callback thread ran ~3x slower there: 11 s vs 4 s for one
        1M-record batch).

        Overlapping: the executors decode and write the batch's history files, the parts are
        kept in the checkpoint (:mod:`pipelines.history.pending`) and handed over; this
        returns when the previous batch is committed, so one commit at most is in flight and
        its failure fails this batch. Otherwise: hand the batch over and wait until it is
        committed, so Spark's commit comes after the Delta writes.
        """
        if not overlap:
            batch = HandedBatch(batch_id, df=df)
            handoff.put(batch)
            batch.wait()
            return
        now = datetime.now(timezone.utc)
        cells = part_cells_on_executors(df, batch_id, now, engine.location, tables_to_write(batch_id))
        pending.keep(kept, batch_id, now, cells)
        batch = HandedBatch(batch_id, now=now, parts=pending.parts_of(cells))
        handoff.put(batch)
        previous, last[:] = last[:], [batch]
        for earlier in previous:
            earlier.wait()

    writer = (open_stream(spark, cfg).writeStream.foreachBatch(on_batch)
              .option("checkpointLocation", str(cfg.checkpoint_dir / "spark"))
              .queryName("offsetlake_ingest"))
    if cfg.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=cfg.trigger)
    query = writer.start()
    try:
        while query.isActive or not handoff.empty():
            try:  # a short poll: the query's end is noticed here, after its last batch
                batch = handoff.get(timeout=0.05)
            except queue.Empty:
                continue
            log.debug("batch %d handed over %.2fs after the query started", batch.batch_id,
                      time.perf_counter() - started)
            try:
                if batch.parts is not None:
                    _commit_handed(engine, batch, kept, app_id, report, progress)
                else:
                    _write_batch(engine, batch.df, batch.batch_id, app_id, report, progress)
            except BaseException as exc:  # surfaces through Spark as the batch's failure
                batch.error = exc
                if overlap:  # Spark counts this batch done already: stop, and say why here
                    raise
            finally:
                batch.done.set()
        query.awaitTermination()
    except BaseException:  # e.g. Ctrl-C: fail the waiting batches, stop the query, re-raise
        while not handoff.empty():
            waiting = handoff.get_nowait()
            waiting.error = RuntimeError("ingest interrupted")
            waiting.done.set()
        if query.isActive:
            query.stop()
        raise
    finally:
        report.seconds = time.perf_counter() - started
        if progress is not None:
            progress.close()
    if query.exception() is not None:
        raise RuntimeError(f"ingest query failed: {query.exception()}")
    _source_facts(cfg, identity, engine, report, fresh)
    return report


@dataclass
class HandedBatch:
    """A micro-batch handed from Spark's callback thread to the main thread: its DataFrame
    (to decode and commit there) or the parts the executors decoded (to commit)."""

    batch_id: int
    df: object = None
    now: datetime | None = None
    parts: list[HistoryPart] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def wait(self) -> None:
        """Until the main thread is done with the batch; its failure raised here."""
        self.done.wait()
        if self.error is not None:
            raise self.error


def commit_kept(engine: DeltaEngine, kept: Path, app_id: str, report: IngestReport) -> None:
    """Commit the batches a stopped run kept (Spark counted them done; their commits had
    not all landed), in batch order, before this run's query starts."""
    for batch_id, now, parts in pending.kept(kept):
        log.info("batch %d: committing what the last run decoded but had not committed", batch_id)
        commit_batch(engine, parts, batch_id, app_id, now, report)
        pending.drop(kept, batch_id)


def _commit_handed(engine: DeltaEngine, batch: HandedBatch, kept: Path, app_id: str,
                   report: IngestReport, progress) -> None:
    """Commit a batch the executors decoded (the next one is decoded meanwhile)."""
    started = time.perf_counter()
    assert batch.parts is not None and batch.now is not None
    commit_batch(engine, batch.parts, batch.batch_id, app_id, batch.now, report)
    pending.drop(kept, batch.batch_id)
    log.debug("batch %d: committed %.2fs", batch.batch_id, time.perf_counter() - started)
    _show_progress(progress, report)


def _write_batch(engine: DeltaEngine, df, batch_id: int, app_id: str, report: IngestReport,
                 progress) -> None:
    """One micro-batch, on the main thread: its history written (through delta-spark, or
    here), then the batch committed to the state tables."""
    batch_started = time.perf_counter()
    now = datetime.now(timezone.utc)
    tables = pending_history(engine, app_id, batch_id)
    if hasattr(engine, "append_frame"):  # delta-spark: executors write through Delta
        parts = write_history_with_spark(engine, df, batch_id, now, tables, app_id)
    else:
        parts = [history_part(unpacked(df.toArrow()), batch_id, now, None, tables)]
    decoded = time.perf_counter()
    commit_batch(engine, parts, batch_id, app_id, now, report)
    log.debug("batch %d: decoded and written %.2fs, committed %.2fs", batch_id,
              decoded - batch_started, time.perf_counter() - decoded)
    _show_progress(progress, report)


def _show_progress(progress, report: IngestReport) -> None:
    if progress is not None:
        progress.set_postfix(batches=report.batches, refresh=False)
        progress.update(report.records - progress.n)


def _source_facts(cfg: IngestConfig, identity: SourceIdentity, engine: DeltaEngine,
                  report: IngestReport, fresh: bool) -> None:
    """After the query: the source's unreadable regions and whether it held nothing, into
    the report and the ``ingest_problems`` table (``--strict`` decides on them)."""
    if cfg.source == "segments":
        report.problems = source_problems(cfg.path, cfg.checkpoint_dir / "segment_index")
        report.empty_source = empty_segments(cfg.path, report)
    elif fresh and report.records == 0:
        report.empty_source = f"the first read of {identity.describe()} found no record"
    record_problems(engine, identity, report)


def _progress_bar(wanted: bool):
    """A tqdm bar of records (batches and rate beside) on a terminal's stderr, else None."""
    if not wanted or not sys.stderr.isatty():
        return None
    import shutil

    from tqdm import tqdm

    # a pty without a size (ssh -T, script) reports 0 x 0, and tqdm then prints nothing
    width, height = shutil.get_terminal_size((100, 20))
    return tqdm(desc="ingest", unit=" records", unit_scale=True, file=sys.stderr, leave=False,
                ncols=width if width >= 40 else 100, nrows=height if height >= 2 else 20)


def empty_segments(path: str | Path, report: IngestReport) -> str | None:
    """Why a segments source held no record at all, or None (an incremental run that finds
    nothing new is not empty: the files hold records it read before)."""
    from pipelines.sources.segments.files import find_segments

    logs = find_segments(path)
    if not logs:
        return f"no __consumer_offsets-N segment files under {path}"
    if report.records == 0 and not any(seg.path.stat().st_size for pl in logs for seg in pl.segments):
        return f"every segment file under {path} is empty"
    if report.records == 0 and report.problems and all(
            p.position == 0 and p.length_skipped == Path(p.path).stat().st_size
            for p in report.problems):
        return f"no readable record in the segment files under {path}"
    return None


def record_problems(engine: DeltaEngine, identity: SourceIdentity, report: IngestReport) -> None:
    """Log each problem the lake has not recorded yet (one line each) and append it to
    ``ingest_problems``; problems seen by earlier runs are only counted."""
    if not report.problems:
        return
    spec = contract(PROBLEMS_TABLE)
    seen = engine.read(PROBLEMS_TABLE, ["cluster_id", "source_identity", "source_file",
                                        "byte_position", "reason"]).to_pylist()
    known = {(r["cluster_id"], r["source_identity"], r["source_file"], r["byte_position"], r["reason"])
             for r in seen}
    now = datetime.now(timezone.utc)
    rows = []
    for p in report.problems:
        if (identity.cluster_id, identity.source, p.path, p.position, p.reason) in known:
            continue
        log.warning("unreadable region in %s, bytes %d-%d (%d bytes skipped): %s", p.path,
                    p.position, p.position + p.length_skipped, p.length_skipped, p.reason)
        rows.append({"cluster_id": identity.cluster_id, "source_kind": identity.source_kind,
                     "source_identity": identity.source, "source_file": p.path,
                     "byte_position": p.position, "byte_end": p.position + p.length_skipped,
                     "bytes_skipped": p.length_skipped, "reason": p.reason, "detected_at": now})
    report.new_problems = len(rows)
    if rows:
        engine.append(spec, pa.Table.from_pylist(rows, schema=spec.arrow_schema),
                      f"offsetlake-problems-{uuid.uuid4()}", 0)


def ingest_segments_local(path: str | Path, lake: str | Path, cluster_id: str = "default",
                          engine: DeltaEngine | None = None, app_id: str = "offsetlake-local",
                          first_batch_id: int = 0, max_records_per_batch: int = 500_000) -> IngestReport:
    """The same per-batch processing without Spark, in batches of whole partition directories.

    For tests and tools where Spark is not the point (building a lake from a recording to
    reconcile against it); the streaming job remains the way to ingest incrementally.
    """
    from pipelines.sources.segments.files import find_segments
    from pipelines.sources.segments.index import cluster_of, read_range

    engine = engine or make_engine("delta-rs", lake)
    ensure_tables(engine)
    report = IngestReport()
    started = time.perf_counter()
    pending: list = []
    rows = 0
    batch_id = first_batch_id

    def flush() -> None:
        nonlocal pending, rows, batch_id
        if pending:
            process_batch(engine, pa.Table.from_batches(pending), batch_id, app_id, report)
            batch_id += 1
        pending, rows = [], 0

    everything = 1 << 62
    for plog in find_segments(path):
        for batch in read_range(plog, 0, everything, cluster_of(plog, cluster_id),
                                problems=report.problems):
            pending.append(batch)
            rows += batch.num_rows
        if rows >= max_records_per_batch:
            flush()
    flush()
    for p in report.problems:  # one line each (the reader leaves them to us)
        log.warning("unreadable region in %s, bytes %d-%d (%d bytes skipped): %s", p.path,
                    p.position, p.position + p.length_skipped, p.length_skipped, p.reason)
    report.seconds = time.perf_counter() - started
    return report
