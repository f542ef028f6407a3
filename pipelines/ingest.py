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
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from pipelines.history.parts import history_part
from pipelines.history.tables import HISTORY_TABLES
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaEngine, make_engine
from pipelines.lake.location import LakeLocation, lake_location
from pipelines.micro_batch import Handover, commit_batch, commit_kept, pending_history
from pipelines.source_identity import (
    SourceIdentity,
    claim,
    default_checkpoint,
    kafka_identity,
    segments_identity,
)
from pipelines.sources.batching import DEFAULT_MAX_RECORDS_PER_BATCH
from pipelines.sources.raw import DEFERRED_ARROW_SCHEMA, PACKED_ARROW_SCHEMA
from pipelines.sources.record_batches.problems import Problem
from pipelines.sources.segments.index import source_problems
from pipelines.spark_workers import WarmWorkers
from pipelines.state import last_ended
from pipelines.state.audit import TABLES as AUDIT_TABLES
from pipelines.state.audit import backfill as audit_backfill
from pipelines.state.audit import backfill_clusters as audit_backfill_clusters
from pipelines.state.progress import TABLE as PROGRESS
from pipelines.state.progress import log_ends

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
    max_records_per_batch: int = DEFAULT_MAX_RECORDS_PER_BATCH
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


#: how many of the groups found in several offsets partitions the summary names
SPLIT_GROUPS_LISTED = 10


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
    #: (cluster, offsets partition) -> the log end below which the state tables held this
    #: run's records already (another query over the same log): added to the history only
    already_applied: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (cluster, group) -> the offsets partitions holding its records, where more than one
    #: (several clusters' logs under one cluster id: pipelines/state/split_groups.py)
    split_groups: dict[tuple[str, str], set[int]] = field(default_factory=dict)

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
            "history_only_below": [{"cluster_id": c, "offsets_partition": p, "log_end": e}
                                   for (c, p), e in sorted(self.already_applied.items())],
            "groups_in_several_offsets_partitions": len(self.split_groups),
            "groups_in_several_offsets_partitions_first": [
                {"cluster_id": c, "group_id": g, "offsets_partitions": sorted(p)}
                for (c, g), p in sorted(self.split_groups.items())[:SPLIT_GROUPS_LISTED]],
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


#: tables kept from another table's rows batch by batch: where one is missing (a lake from
#: before it) the next batch builds it from the whole of its source
DERIVED_TABLES = {PROGRESS: "offsets_raw", last_ended.TABLE: "group_generations"}


def ensure_tables(engine: DeltaEngine) -> None:
    """Create every table the job writes (tasks write files into their directories); a lake
    whose history predates the commit audit has it backfilled first (before any new batch).

    A derived table (:data:`DERIVED_TABLES`) is created, empty, only with its source: empty
    is all there is to derive from an empty source, and every batch then folds in its own
    rows. Without it the first batch of a fresh lake built both from the tables it had just
    written (0.3-0.4 s of a 680k-record first commit). A crash between the two creations
    leaves the derived table to be built, as for a lake from before it."""
    audit_backfill(engine, audit_backfill_clusters(engine))  # before the audit tables exist
    fresh = [derived for derived, source in DERIVED_TABLES.items() if not engine.exists(source)]
    for name in (*HISTORY_TABLES, "committed_offsets", "group_records_latest", "consumer_groups",
                 "group_members", "group_generations", PROBLEMS_TABLE, *AUDIT_TABLES, *fresh):
        engine.ensure(contract(name))


def process_batch(engine: DeltaEngine, raw: pa.Table, batch_id: int, app_id: str,
                  report: IngestReport) -> None:
    """Write one micro-batch (an Arrow table of raw records) to every table, in this process."""
    if raw.num_rows == 0:
        return
    now = datetime.now(timezone.utc)
    lake = getattr(engine, "location", engine.root) if engine.commits_files else None
    part = history_part(raw, batch_id, now, lake, pending_history(engine, app_id, batch_id))
    commit_batch(engine, [part], batch_id, app_id, now, report)


def open_stream(spark, cfg: IngestConfig):
    """The raw-record streaming DataFrame of the configured source: segment files as deferred
    reads (each decoding task reads its ranges itself), a Kafka consumer's records packed.

    The schema is given up front: Spark then needs no Python worker to ask the source for
    it (~1 s of every run's start-up).
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    packed = from_arrow_schema(PACKED_ARROW_SCHEMA)
    if cfg.source == "segments":
        from pipelines.sources.segments import spark_source

        spark_source.register(spark)
        return (spark.readStream.format(spark_source.NAME).schema(from_arrow_schema(DEFERRED_ARROW_SCHEMA))
                .option("path", cfg.path).option("defer_read", "true")
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
    its JVM): the streaming source's planner then loads each partition's finished index
    from the cache instead of indexing every file itself, on the critical path of the
    query's start. The cache's entries are written whole or not at all
    (:class:`SegmentIndexCache`), and whatever this thread did not reach the source indexes
    itself, so its outcome changes no result. The query does not wait for it: a file the
    thread is indexing when the source plans is waited for, the rest the source indexes
    itself. The checkpoint is claimed first: one made for another source is refused here,
    before Spark starts.
    """
    if cfg.source != "segments" or not cfg.path:
        return None
    checkpoint = Path(os.path.abspath(cfg.checkpoint_dir))
    claim(checkpoint, cfg.identity())

    def index() -> None:
        from pipelines.sources.segments.files import find_segments
        from pipelines.sources.segments.index import SegmentIndexCache, index_partitions

        try:
            index_partitions(find_segments(os.path.abspath(cfg.path)), SegmentIndexCache(checkpoint / "segment_index"))
        except Exception as exc:  # the source indexes what is missing (and reports problems)
            log.debug("indexing ahead stopped: %s", exc)

    thread = threading.Thread(target=index, name="offsetlake-index-ahead", daemon=True)
    thread.start()
    return thread


def _records_past_the_lake(cfg: IngestConfig, engine: DeltaEngine) -> bool:
    """Whether the source may hold records the lake has not ingested: for segment files, a
    partition whose last record lies past ``ingest_progress``'s log end for it (read from
    the checkpoint's index cache, which ``index_ahead`` filled); any other source, always
    (a live cluster's ``__consumer_offsets`` always grows). A guess that changes no result,
    only whether the Python workers get a head start (:class:`WarmWorkers`)."""
    if cfg.source != "segments":
        return True
    engine = make_engine("delta-rs", engine.location)  # this thread's own: tables are not shared
    if not engine.exists(PROGRESS):
        return True
    from pipelines.sources.segments.files import find_segments
    from pipelines.sources.segments.index import SegmentIndexCache, cluster_of, index_partition

    ends: dict[str, dict[int, int]] = {}  # cluster -> partition -> log end, read once each
    cache = SegmentIndexCache(cfg.checkpoint_dir / "segment_index")
    for plog in find_segments(cfg.path):
        cluster = cluster_of(plog, cfg.cluster_id)
        if cluster not in ends:
            ends[cluster] = log_ends(engine, cluster)
        offsets = index_partition(plog, cache=cache).offsets
        if len(offsets) and int(offsets[-1]) >= ends[cluster].get(plog.offsets_partition, 0):
            return True
    return False


def _absolute(cfg: IngestConfig) -> IngestConfig:
    """Checkpoint and path absolute, since Spark's JVM and its Python workers may run
    elsewhere than here; not resolved, so source file names in the history stay the paths
    the user gave (symlinks too)."""
    return replace(cfg, checkpoint=Path(os.path.abspath(cfg.checkpoint_dir)),
                   path=os.path.abspath(cfg.path) if cfg.path else cfg.path)


def report_if_caught_up(cfg: IngestConfig) -> IngestReport | None:
    """The report of an ``availableNow`` run over segment files that finds nothing new,
    made without starting Spark; None when the run may find something (then Spark runs).

    Only with the delta-rs engine: the source's problems and emptiness are checked and
    recorded as :func:`run_ingest` does after a query that planned no batch
    (:mod:`pipelines.sources.segments.caught_up` says how "nothing new" is decided).
    Refuses (:class:`CheckpointMismatch`) a checkpoint made for another source.
    """
    if cfg.source != "segments" or cfg.trigger != "available-now" or cfg.delta_engine != "delta-rs":
        return None
    from pipelines.sources.segments.caught_up import nothing_new

    started = time.perf_counter()
    cfg = _absolute(cfg)
    if not nothing_new(cfg.path, cfg.checkpoint_dir):  # read only: the query path claims
        return None
    identity = cfg.identity()
    claim(cfg.checkpoint_dir, identity)
    log.info("nothing new in %s since the last committed batch: Spark not started", cfg.path)
    engine = make_engine(cfg.delta_engine, lake_location(cfg.lake))
    ensure_tables(engine)
    report = IngestReport()
    _source_facts(cfg, identity, engine, report, fresh=False)
    report.seconds = time.perf_counter() - started
    return report


def run_ingest(spark, cfg: IngestConfig, engine: DeltaEngine | None = None) -> IngestReport:
    """Run the streaming query (availableNow by default) and report what it wrote
    (through ``engine``, default: the one ``cfg.delta_engine`` names).

    Refuses (:class:`CheckpointMismatch`) a checkpoint made for another source.
    """
    cfg = _absolute(cfg)
    identity = cfg.identity()
    claim(cfg.checkpoint_dir, identity)
    engine = engine or make_engine(cfg.delta_engine, lake_location(cfg.lake), spark=spark)
    ensure_tables(engine)
    app_id = app_id_for(cfg.checkpoint_dir)
    report = IngestReport()
    started = time.perf_counter()
    progress = _progress_bar(cfg.progress)
    fresh = not any((cfg.checkpoint_dir / "spark" / "offsets").glob("[0-9]*"))

    # Python workers started while the query plans its first batch
    warm = WarmWorkers(spark, _cores(spark), lambda: _records_past_the_lake(cfg, engine))
    kept = cfg.checkpoint_dir / "pending_batches"
    commit_kept(engine, kept, app_id, report)  # what a stopped run handed to Spark uncommitted
    handover = Handover(engine, app_id, kept, report, progress, started)
    writer = (open_stream(spark, cfg).writeStream.foreachBatch(handover.on_batch)
              .option("checkpointLocation", str(cfg.checkpoint_dir / "spark"))
              .queryName("offsetlake_ingest"))
    if cfg.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=cfg.trigger)
    query = writer.start()
    try:
        handover.serve(query)
    finally:
        warm.stop()
        report.seconds = time.perf_counter() - started
        if progress is not None:
            progress.close()
    if query.exception() is not None:
        raise RuntimeError(f"ingest query failed: {query.exception()}")
    _source_facts(cfg, identity, engine, report, fresh)
    warn_history_only(report)
    return report


def warn_history_only(report: IngestReport) -> None:
    """One warning when the run read records whose state the lake holds already (a fresh or
    lost checkpoint over a log the lake has): the history tables hold them twice now."""
    if report.already_applied:
        where = ", ".join(f"{c} partition {p} below offset {e}" for (c, p), e in sorted(report.already_applied.items()))
        log.warning("this run read records the lake holds already (its checkpoint is new to them: a "
                    "replay, or a checkpoint lost since the last run): the history tables took them "
                    "again, the state tables did not (%s); keep --checkpoint between runs", where)


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
                          first_batch_id: int = 0,
                          max_records_per_batch: int = DEFAULT_MAX_RECORDS_PER_BATCH) -> IngestReport:
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
    warn_history_only(report)
    return report
