"""What a read_committed reader of a tree of segment files emits, and how to read it in pieces.

Why a module of its own: planning is where exactly-once is decided. Per partition directory,
:func:`index_partition` lists the offsets a ``read_committed`` consumer would be handed
(transaction markers applied as the coordinator does: aborted data dropped, committed kept in
place, reading stopped at the last stable offset; control records kept, flagged, for the
audit trail) and where in the files each one's batch lies; :func:`plan_end_offsets`,
:func:`split_ranges` and :func:`pack_ranges` cut that into bounded micro-batches and tasks, and
:func:`read_regions` / :func:`read_range` read one piece back, byte regions only. No Spark here:
:mod:`.spark_source` adapts this to Spark's DataSource API.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.model import distinct_sorted, kept_rows
from pipelines.sources.batching import even_budget, spread_budget
from pipelines.sources.raw import INDEX_ARROW_SCHEMA, RAW_ARROW_SCHEMA, SPARK_RAW_SCHEMA
from pipelines.sources.record_batches.arrow_reader import (
    bytes_to_arrow,
    index_segments_arrow,
    read_segments_arrow,
)
from pipelines.sources.record_batches.problems import Problem
from pipelines.sources.record_batches.transactions import fold_arrow, unique_offsets
from pipelines.sources.segments.files import PartitionLog, find_segments

log = logging.getLogger(__name__)

T = TypeVar("T")

# ----------------------------------------------------------------------------- pure helpers


def log_key(root: Path, plog: PartitionLog) -> str:
    """Stable id of a partition directory relative to the root (the checkpoint's offset key)."""
    try:
        return str(plog.directory.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(plog.directory.resolve())


def cluster_of(plog: PartitionLog, option: str) -> str:
    """``auto``: the data dir's ``meta.properties`` cluster.id, else the data dir's path."""
    if option != "auto":
        return option
    meta = plog.directory.parent / "meta.properties"
    if meta.exists():
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    return str(plog.directory.parent)


@dataclass
class PartitionIndex:
    """Offsets a reader will emit for one partition directory, where it must stop, and
    where in the files each emitted record's batch lies (so a task reads only its bytes)."""

    offsets: np.ndarray  # sorted log offsets of emitted records
    last_stable_offset: int
    signature: tuple
    aborted: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # dropped data rows
    files: tuple[str, ...] = ()  # segment paths, in read order
    run_row: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # first row of a batch
    run_file: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # its file
    run_pos: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # its byte position

    def before(self, end: int) -> PartitionIndex:
        """The offsets below ``end``, for planning: a view (offsets are sorted), no copy of a
        big partition's offsets at every micro-batch."""
        return PartitionIndex(self.offsets[:int(np.searchsorted(self.offsets, end))],
                              self.last_stable_offset, self.signature)

    def regions(self, lo: int, hi: int) -> list[tuple[str, int, int]]:
        """(path, from byte, to byte) holding emitted rows ``lo:hi``; to = -1 for the file end.

        A region may also hold aborted data or copies another file wins; the reader drops
        those as a full read would (``aborted``, first copy wins).
        """
        first = int(np.searchsorted(self.run_row, lo, side="right")) - 1
        stop = int(np.searchsorted(self.run_row, hi - 1, side="right"))
        files, positions = self.run_file[first:stop], self.run_pos[first:stop]
        out = []
        for f in distinct_sorted(files):
            mine = positions[files == f]
            begin, top = int(mine.min()), int(mine.max())
            out.append((self.files[f], begin, self._next_batch(int(f), top)))
        return out

    def _next_batch(self, file: int, position: int) -> int:
        """Where the file's first emitted batch after byte ``position`` starts (-1: none):
        a region ends there. One pass of array compares over the partition's batches, not
        a sorted copy of every file's positions: a small run's planning over a big
        partition paid that sort (7.2M records in 782k batches: 0.26-0.32 s per process)."""
        later = self.run_pos[(self.run_file == file) & (self.run_pos > position)]
        return int(later.min()) if len(later) else -1


def _signature(plog: PartitionLog) -> tuple:
    stats = []
    for seg in plog.segments:
        st = os.stat(seg.path)
        stats.append((str(seg.path), st.st_size, st.st_mtime_ns))
    return tuple(stats)


def emitted_table(segments: list, cluster_id: str | None,
                  problems: list[Problem] | None = None) -> pa.Table:
    """What a read_committed reader hands on from these segment files, in offset order.

    Files can overlap (Kafka's ``.swap``/``.cleaned``/``.deleted`` leftovers, or copies of
    one segment taken at different times); an offset always holds the same record
    (compaction only removes), so their union by offset is the log. Aborted data is
    dropped, markers are kept, and nothing at or after the last stable offset is emitted.
    """
    batches = list(read_segments_arrow(segments, cluster_id=cluster_id, problems=problems))
    table = pa.Table.from_batches(batches, schema=RAW_ARROW_SCHEMA)
    kept, lso = fold_arrow(unique_offsets(table))
    return _offsets_between(kept, 0, lso)


def _offsets_between(table: pa.Table, start: int, end: int) -> pa.Table:
    """Rows with ``start <= offset < end`` (rows are in offset order; no copy when all are)."""
    offsets = table.column("offset").to_numpy()
    lo, hi = np.searchsorted(offsets, [start, end], side="left")
    return table if (lo, hi) == (0, len(offsets)) else table.slice(lo, hi - lo)


class SegmentIndexCache:
    """Index rows of segment files kept on disk between runs, one small parquet file each,
    and each partition directory's finished :class:`PartitionIndex` beside them.

    A segment file never changes once rolled, so a rerun (the next Airflow run) re-reads only
    new or grown files; the rest of its planning reads these instead of the logs. The
    partition entry is what the planning of a run whose files did not change since the
    index was built reads: the driver indexes ahead while the JVM starts
    (:func:`pipelines.ingest.index_ahead`), and the streaming source's process, which
    starts later, loads the result instead of folding every segment's rows again (10M
    records in 10 partitions: 0.66 s of the first batch's planning, 2 s beside the Python
    workers starting).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.used: set[str] = set()

    def _entry(self, path: Path) -> Path:
        st = os.stat(path)
        ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()
        return self.directory / f"{hashlib.sha1(ident).hexdigest()}.parquet"

    def _partition_entry(self, plog: PartitionLog, signature: tuple) -> Path:
        ident = f"{plog.directory.resolve()}|{signature!r}".encode()
        return self.directory / f"partition-{hashlib.sha1(ident).hexdigest()}.arrow"

    def keep(self, plog: PartitionLog) -> None:
        """Keep this partition's entries at the next :meth:`prune`."""
        self.used.update(self._entry(seg.path).name for seg in plog.segments)
        self.used.add(self._partition_entry(plog, _signature(plog)).name)

    def partition(self, plog: PartitionLog, signature: tuple) -> PartitionIndex | None:
        """The partition's index as stored for exactly these files, or None."""
        entry = self._partition_entry(plog, signature)
        try:
            with pa.memory_map(str(entry)) as source:
                table = pa.ipc.open_file(source).read_all()
        except FileNotFoundError:
            return None
        except (pa.ArrowException, OSError) as exc:  # damaged: built again from the segments' rows
            log.warning("segment index cache: %s unreadable (%s); indexing the partition again", entry, exc)
            return None
        if table.schema != _PARTITION_ENTRY or table.column("signature")[0].as_py() != repr(signature):
            return None

        def ints(name: str) -> np.ndarray:
            return table.column(name).combine_chunks().flatten().to_numpy().astype(np.int64)

        starts, lengths = ints("offset_starts"), ints("offset_lengths")
        offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
        return PartitionIndex(offsets, table.column("last_stable_offset")[0].as_py(), signature,
                              ints("aborted"), tuple(table.column("files")[0].as_py()),
                              np.cumsum(ints("run_row_steps")), ints("run_file"), ints("run_pos"))

    def stored(self, plogs: list[PartitionLog]) -> list[PartitionIndex] | None:
        """Each partition's index as stored for its files as they are now; None when one was
        never indexed or its files changed since (a grown or new segment), which is looked
        for first, before any index is read."""
        signatures = [_signature(plog) for plog in plogs]
        if not all(self._partition_entry(p, s).exists() for p, s in zip(plogs, signatures, strict=True)):
            return None
        found = [self.partition(p, s) for p, s in zip(plogs, signatures, strict=True)]
        return None if any(index is None for index in found) else found

    def keep_partition(self, plog: PartitionLog, index: PartitionIndex) -> None:
        """Store the partition's index (whole or not at all); its offsets as runs of
        consecutive offsets, the batches' first rows as steps (zstd does the rest)."""
        entry = self._partition_entry(plog, index.signature)
        offsets = index.offsets.astype(np.int64)
        cuts = np.flatnonzero(np.diff(offsets) != 1) + 1
        firsts = np.r_[0, cuts] if len(offsets) else cuts
        row = {"signature": repr(index.signature), "last_stable_offset": index.last_stable_offset,
               "offset_starts": offsets[firsts], "offset_lengths": np.diff(np.r_[firsts, len(offsets)]),
               "aborted": index.aborted, "files": list(index.files),
               "run_row_steps": np.diff(index.run_row, prepend=0), "run_file": index.run_file,
               "run_pos": index.run_pos}
        table = pa.table({k: [v] for k, v in row.items()}, schema=_PARTITION_ENTRY)
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        with pa.OSFile(str(partial), "wb") as sink, pa.ipc.new_file(
                sink, _PARTITION_ENTRY, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
            writer.write_table(table)
        os.replace(partial, entry)

    def rows(self, segment) -> pa.Table:
        """The file's index rows: read from its entry, or indexed now and stored.

        A file another live process (or thread) is indexing right now is waited for, not
        indexed twice: the ingest's driver indexes ahead while the streaming source's
        process plans, and neither waits for the other to start (:meth:`made_once`)."""
        return self._rows(segment, wait=True)

    def rows_of(self, segments: list) -> list[pa.Table]:
        """:meth:`rows` of each file, in order; the files another process is indexing are
        taken last, so that two processes going through the same files share the work."""
        return claimed_last(len(segments), lambda i, wait: self._rows(segments[i], wait))

    def _rows(self, segment, wait: bool) -> pa.Table | None:
        entry = self._entry(segment.path)

        def stored() -> pa.Table | None:  # one file, read as such (pq.read_table would import pyarrow.dataset)
            return pq.ParquetFile(entry).read().cast(INDEX_ARROW_SCHEMA) if entry.exists() else None

        return self.made_once(entry, stored, lambda: self._index(segment, entry), wait)

    def made_once(self, entry: Path, stored: Callable[[], T | None], make: Callable[[], T],
                  wait: bool = True) -> T | None:
        """What ``stored`` reads of ``entry``, else what ``make`` builds (and stores there)
        under this process's claim on it. While another live process holds the claim, its
        result is waited for (None at once with ``wait=False``): nothing is built twice. A
        claim whose process is gone, or older than :data:`STALE_CLAIM_SECONDS`, is taken
        over."""
        while (found := stored()) is None:
            claim = self._claim(entry)
            if claim is not None:
                try:
                    found = stored()  # finished while this one looked
                    return found if found is not None else make()
                finally:
                    claim.unlink(missing_ok=True)
            if not wait:
                return None
            time.sleep(CLAIM_POLL_SECONDS)
        return found

    def _claim(self, entry: Path) -> Path | None:
        """The claim file on ``entry``, created naming this process; None while another live
        process's claim holds it (a dead one's is removed and taken)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        claim = entry.with_suffix(".indexing")
        for _ in range(2):
            try:
                fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if _live_claim(claim):
                    return None
                claim.unlink(missing_ok=True)  # its process died
                continue
            with os.fdopen(fd, "w") as out:
                out.write(str(os.getpid()))
            return claim
        return None

    def _index(self, segment, entry: Path) -> pa.Table:
        found: list[Problem] = []
        rows = _index_rows(segment, found)
        # the file's problems beside its index (written first: an index entry implies them);
        # the driver reports them, once, from here (tasks re-reading regions stay silent)
        sidecar = entry.with_suffix(".problems.json")
        partial = sidecar.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_text(json.dumps([list(astuple(p)) for p in found]))
        os.replace(partial, sidecar)
        partial = entry.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        pq.write_table(rows, partial, compression="zstd", use_dictionary=["control_type"],
                       column_encoding={"offset": "DELTA_BINARY_PACKED",
                                        "source_position": "DELTA_BINARY_PACKED"})
        os.replace(partial, entry)  # whole or absent, even if this run dies
        return rows

    def problems(self, segment) -> list[Problem]:
        """The problems met while indexing ``segment`` (indexing it now if it never was)."""
        sidecar = self._entry(segment.path).with_suffix(".problems.json")
        if not sidecar.exists():
            self._entry(segment.path).unlink(missing_ok=True)  # an index from before sidecars
            self.rows(segment)
        return [Problem(*p) for p in json.loads(sidecar.read_text())]

    def prune(self) -> None:
        """Forget files no longer kept in any partition (deleted by retention, compacted) and
        partition indexes of files that changed since (a grown active segment)."""
        for entry in self.directory.glob("*.parquet"):
            if entry.name not in self.used:
                entry.unlink(missing_ok=True)
                entry.with_suffix(".problems.json").unlink(missing_ok=True)
        for entry in self.directory.glob("partition-*.arrow"):
            if entry.name not in self.used:
                entry.unlink(missing_ok=True)
        for claim in self.directory.glob("*.indexing"):  # left by a process that died
            if not _live_claim(claim):
                claim.unlink(missing_ok=True)
        self.used = set()


_INTS = pa.list_(pa.int64())
_PARTITION_ENTRY = pa.schema([
    ("signature", pa.string()), ("last_stable_offset", pa.int64()), ("offset_starts", _INTS),
    ("offset_lengths", _INTS), ("aborted", _INTS), ("files", pa.list_(pa.string())),
    ("run_row_steps", _INTS), ("run_file", _INTS), ("run_pos", _INTS)])


#: how often a process waiting for another's index of a file looks for it
CLAIM_POLL_SECONDS = 0.02
#: a claim older than this was left by a process that hung (a 1 GiB segment indexes in ~3 s)
STALE_CLAIM_SECONDS = 600


def _live_claim(claim: Path) -> bool:
    """Whether ``claim``'s process still runs (on this machine: the cache is the
    checkpoint's, which the driver and the source's process share) and the claim is fresh."""
    try:
        text, age = claim.read_text(), time.time() - claim.stat().st_mtime
    except OSError:
        return True  # gone this instant: the caller looks again
    if age > STALE_CLAIM_SECONDS:
        return False
    if not text.strip().isdigit():  # created, its process id not written yet
        return age < 5
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    return True


def _index_rows(segment, problems: list[Problem] | None = None) -> pa.Table:
    return pa.Table.from_batches(list(index_segments_arrow([segment], problems)),
                                 schema=INDEX_ARROW_SCHEMA)


def source_problems(root: str | Path, cache_dir: str | Path | None) -> list[Problem]:
    """Every problem in the segment files under ``root``, in log order, each file read at
    most once (the index cache already holds what the ingest's planning found)."""
    cache = SegmentIndexCache(cache_dir) if cache_dir else None
    found: list[Problem] = []
    for plog in find_segments(root):
        for seg in plog.segments:
            if cache is not None:
                found.extend(cache.problems(seg))
            else:
                _index_rows(seg, found)
    return found


def index_partitions(plogs: list[PartitionLog], cache: SegmentIndexCache | None = None,
                     cached: list[PartitionIndex | None] | None = None) -> list[PartitionIndex]:
    """:func:`index_partition` of each partition directory, in order; those another process is
    indexing are taken last, so that the driver indexing ahead and the source's planner,
    going through the same partitions at once, share the work instead of repeating it."""
    cached = cached or [None] * len(plogs)
    return claimed_last(len(plogs), lambda i, wait: index_partition(plogs[i], cached[i], cache, wait))


def claimed_last(count: int, get: Callable[[int, bool], T | None]) -> list[T]:
    """``get(i, wait)`` for i in ``range(count)``, in order: first each without waiting, then,
    waiting, those another process held (``get`` gave None), so that two processes going
    through the same entries build different ones first."""
    got = [get(i, False) for i in range(count)]
    return [found if found is not None else get(i, True) for i, found in enumerate(got)]


def index_partition(plog: PartitionLog, cached: PartitionIndex | None = None,
                    cache: SegmentIndexCache | None = None, wait: bool = True) -> PartitionIndex | None:
    """The partition's index: ``cached`` if its files did not change, else the cache's, else
    built (and stored). A partition another live process is building is waited for (None
    at once with ``wait=False``), not built twice."""
    sig = _signature(plog)
    if cached is not None and cached.signature == sig:
        return cached
    if cache is None:
        return _build_index(plog, sig, None)
    return cache.made_once(cache._partition_entry(plog, sig), lambda: cache.partition(plog, sig),
                           lambda: _build_index(plog, sig, cache), wait)


def _build_index(plog: PartitionLog, sig: tuple, cache: SegmentIndexCache | None) -> PartitionIndex:
    per_file = cache.rows_of(plog.segments) if cache else [_index_rows(seg) for seg in plog.segments]
    rows = pa.concat_tables([
        t.set_column(t.schema.get_field_index("source_file"), "source_file",
                     pa.array(np.full(t.num_rows, i, np.int32)))
        for i, t in enumerate(per_file)
    ]) if per_file else INDEX_ARROW_SCHEMA.empty_table()
    every = unique_offsets(rows)
    kept, lso = fold_arrow(every)
    emitted = _offsets_between(kept, 0, lso)
    offsets = emitted.column("offset").to_numpy()
    last_stable = int(offsets[-1]) + 1 if len(offsets) else 0
    all_offsets = every.column("offset").to_numpy()  # sorted and unique, like offsets (a subset)
    stable = all_offsets[:int(np.searchsorted(all_offsets, last_stable))]
    if len(stable) == len(offsets):  # nothing dropped below the LSO (no aborted transaction)
        aborted = stable[:0]
    else:
        dropped = np.ones(len(stable), dtype=bool)
        dropped[np.searchsorted(stable, offsets)] = False
        aborted = stable[dropped]
    files = tuple(str(seg.path) for seg in plog.segments)
    file_of = emitted.column("source_file").to_numpy()
    pos = emitted.column("source_position").to_numpy()
    starts = np.ones(len(offsets), dtype=bool)
    starts[1:] = (file_of[1:] != file_of[:-1]) | (pos[1:] != pos[:-1])
    run_row = np.flatnonzero(starts)
    index = PartitionIndex(offsets, last_stable, sig, aborted, files, run_row,
                           file_of[run_row].astype(np.int64), pos[run_row].astype(np.int64))
    if cache is not None:
        cache.keep_partition(plog, index)
    return index


def plan_end_offsets(
    indexes: dict[str, PartitionIndex], start: dict[str, int], max_rows: int | None
) -> dict[str, int]:
    """End offsets (exclusive) per partition, taking at most ``max_rows`` records in total:
    the backlog's share of a run of evenly sized micro-batches (:func:`even_budget`)."""
    end = dict(start)
    first = {key: int(np.searchsorted(idx.offsets, start.get(key, 0), side="left"))
             for key, idx in indexes.items()}
    backlog = {key: len(idx.offsets) - first[key] for key, idx in indexes.items()}
    grants = backlog if max_rows is None else spread_budget(backlog, even_budget(sum(backlog.values()), max_rows))
    for key, take in grants.items():
        if take <= 0:
            continue
        offsets, stop = indexes[key].offsets, first[key] + take
        end[key] = int(offsets[stop]) if stop < len(offsets) else max(int(offsets[-1]) + 1, start.get(key, 0))
    return end


def read_range(
    plog: PartitionLog, start: int, end: int, cluster_id: str, rows_per_batch: int = 65536,
    problems: list[Problem] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Emitted records with ``start <= offset < end``, as Spark-ready raw-schema batches.

    Reading starts at the segment holding ``start``: a transaction decided later is still
    resolved by its marker, which lies further on in the log.
    """
    segs = plog.segments
    first_base = max((seg.base_offset for seg in segs if seg.base_offset <= start), default=0)
    table = emitted_table([seg for seg in segs if seg.base_offset >= first_base], cluster_id, problems)
    table = _offsets_between(table, start, end)
    for batch in table.to_batches(max_chunksize=rows_per_batch):
        yield batch.cast(SPARK_RAW_SCHEMA)


def read_regions(
    offsets_partition: int, regions: list[tuple[str, int, int]], start: int, end: int,
    aborted: list[int], cluster_id: str, rows_per_batch: int = 65536,
) -> Iterator[pa.RecordBatch]:
    """What :func:`read_range` emits, reading only the byte regions the driver's index named.

    ``aborted`` lists the offsets in ``[start, end)`` whose transaction aborted (the index
    saw their markers, which may lie past ``end``); copies in several files resolve as in a
    full read: files in the same order, the first copy wins.
    """
    tables = []
    for path, begin, stop in regions:
        with open(path, "rb") as fh:
            fh.seek(begin)
            data = fh.read() if stop < 0 else fh.read(stop - begin)
        floor = int.from_bytes(data[:8], "big", signed=True) if len(data) >= 8 else 0
        table = pa.Table.from_batches(
            list(bytes_to_arrow(data, path=path, offsets_partition=offsets_partition,
                                base_offset=floor, cluster_id=cluster_id, rows_per_batch=None,
                                problems=[])),  # reported once, from the index (the driver)
            schema=RAW_ARROW_SCHEMA)
        where = table.schema.get_field_index("source_position")
        tables.append(table.set_column(where, "source_position",
                                       pc.add(table.column(where), pa.scalar(begin, pa.int64()))))
    table = _offsets_between(unique_offsets(pa.concat_tables(tables)), start, end)
    if aborted:
        table = kept_rows(table, pa.array(~np.isin(table.column("offset").to_numpy(), aborted)))
    for batch in table.to_batches(max_chunksize=rows_per_batch):
        yield batch.cast(SPARK_RAW_SCHEMA)


def split_ranges(indexes: dict[str, PartitionIndex], start: dict[str, int], end: dict[str, int],
                 tasks: int, min_rows: int = 20_000) -> list[tuple[int, str, int, int]]:
    """Cut each partition's ``[start, end)`` into pieces of about total/``tasks`` rows:
    (rows, partition key, first row, end row). One busy partition (real clusters often
    have one) then still keeps every core busy."""
    spans = []
    for key, stop in sorted(end.items()):
        offsets = indexes[key].offsets
        lo, hi = (int(i) for i in np.searchsorted(offsets, [start.get(key, 0), stop]))
        if hi > lo:
            spans.append((key, lo, hi))
    piece = max(min_rows, -(-sum(hi - lo for _, lo, hi in spans) // max(1, tasks)))
    return [(min(a + piece, hi) - a, key, a, min(a + piece, hi))
            for key, lo, hi in spans for a in range(lo, hi, piece)]


def pack_ranges(sized: list[tuple[int, tuple]], tasks: int) -> list[list[tuple]]:
    """Spread ranges over at most ``tasks`` Spark tasks, largest first onto the lightest.

    Hundreds of small partition directories (typical of a broker's 50 partitions, and of
    backups) would otherwise pay a task's fixed cost each.
    """
    bins: list[list[tuple]] = [[] for _ in range(max(1, min(tasks, len(sized))))]
    load = [0] * len(bins)
    for size, item in sorted(sized, key=lambda s: -s[0]):
        lightest = load.index(min(load))
        bins[lightest].append(item)
        load[lightest] += max(size, 1)
    return bins
