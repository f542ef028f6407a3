"""Benchmark (c): one incremental micro-batch against a state of a million committed keys.

Why: the state tables are updated by MERGEs keyed on the batch's changed keys; their cost
must follow the batch, not the state. This builds a lake of ``--groups`` groups x
``--partitions`` partitions committed keys (default 100k x 10 = 1M) from segment files written
with the shared writer (``pipelines/sources/record_batches/writer.py``) and ingested in one
batch, then ingests one incremental batch of ``--batch`` offset commits touching
``--touched`` keys (default 100k records, 10k keys) into a fresh copy of that lake, ``--repeat``
times: wall and CPU time of the whole batch (history + state + audit, no Spark: the driver's
share of a micro-batch) and of each state table's MERGE. Goal: the batch <= 3 s.

Usage: ``python benchmarks/state_merge.py [--groups N] [--partitions N] [--batch N]
[--touched N] [--repeat N] [--work DIR] [--baseline DIR]`` (``--work`` keeps the base lake
between runs). ``--baseline /tmp/before`` runs a baseline checkout and this one alternately,
each run a fresh process importing its checkout's ``pipelines`` with its own base lake, and
prints both side by side (best of ``--repeat``, wall and CPU).

Measured (2 cores shared with other jobs, load 6-10: CPU is the steadier figure), best of 5,
baseline = /tmp/before (before issue 9's third wave), 1M keys / 100k groups, 100k records
touching 10k keys (1,000 random groups): whole batch 3.00 -> 2.36 s CPU (2.46 s wall at the
best moment), of which the audit 1.47 -> 0.89 s CPU (its read of the batch's commits 0.54 ->
0.05 s) and the state merges 1.01 -> 0.91 s. The two million-row MERGEs (committed_offsets
~0.7 s, offset_audit_cursor ~0.45 s CPU) rewrite the whole table because 1,000 random groups
fall in every file of any layout with fewer than thousands of files: delta-rs copies each
touched file. A batch whose keys sit in few files of a key-ordered table (e.g. after a
z-order by group_id) now reads and rewrites only those (tests/test_state_merge.py): on this
lake's committed_offsets laid out as 20 key-ordered files, a change set of 10 adjacent groups
(100 keys) merged in 0.435 -> 0.047 s CPU (1.72 -> 0.07 s wall), 20 -> 1 files scanned.

2026-11-29, a slower day of the machine (same defaults, best of 3): the whole batch 2.95 s
wall / 3.81 s CPU beside 66d70b5's 3.13 / 4.02 s, alternated (audit 1.08 s, state merges
0.91 s wall); alone, 3.34 s wall / 4.30 s CPU. The goal (<= 3 s) holds only on the
machine's better minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines import ingest, micro_batch
from pipelines.decode import encode_key, encode_value, partition_for
from pipelines.lake.engines import DeltaRsEngine
from pipelines.sources.record_batches.writer import SegmentWriter, encode_pairs_batch

log = logging.getLogger("benchmarks.state_merge")

NUM_OFFSETS_PARTITIONS = 50
TOPIC = "orders"
APP_ID = "offsetlake-bench-state-merge"
_HEAD = struct.Struct(">hqih")  # OffsetCommitValue v3: version, offset, leader epoch, metadata length
_TS = struct.Struct(">q")
_BATCH = 1_000  # records per Kafka record batch


def commit_value(offset: int, timestamp: int) -> bytes:
    """An OffsetCommitValue v3 (no metadata), packed directly: the same bytes as
    ``encode_value`` (checked once in :func:`write_commits`), ~20x cheaper."""
    return _HEAD.pack(3, offset, 0, 0) + _TS.pack(timestamp)


def write_commits(data: Path, keys: list[tuple[str, int]], rounds: int, base_ts: int,
                  start_offsets: dict[int, int] | None = None, first_round: int = 0
                  ) -> dict[int, int]:
    """``rounds`` commits of every (group, partition) key (committed offsets growing with
    the round), as segment files under ``data``; returns each offsets partition's next
    offset (where an incremental batch continues)."""
    assert commit_value(5, 7) == encode_value(1, 3, {"offset": 5, "leader_epoch": 0, "metadata": "",
                                                    "commit_timestamp": 7})
    by_partition: dict[int, list[bytes]] = defaultdict(list)
    for group, part in keys:
        by_partition[partition_for(group, NUM_OFFSETS_PARTITIONS)].append(
            encode_key(1, {"group": group, "topic": TOPIC, "partition": part}))
    ends = {}
    for p, pkeys in sorted(by_partition.items()):
        base = (start_offsets or {}).get(p, 0)
        with SegmentWriter(data, p, base_offset=base) as writer:
            pairs = [(k, commit_value((first_round + r) * 10_000_000 + i, base_ts + r))
                     for r in range(rounds) for i, k in enumerate(pkeys)]
            for i in range(0, len(pairs), _BATCH):
                chunk = pairs[i:i + _BATCH]
                writer.write_raw(encode_pairs_batch(chunk, base_offset=writer.next_offset,
                                                    timestamp=base_ts + i),
                                 writer.next_offset + len(chunk))
            ends[p] = writer.next_offset
    return ends


def _best(results: list[tuple[float, float]]) -> str:
    wall = min(w for w, _ in results)
    cpu = min(c for _, c in results)
    return f"{wall:6.2f} s wall, {cpu:6.2f} s CPU (best of {len(results)})"


@contextmanager
def timed_merges(into: dict[str, list[tuple[float, float]]]) -> Iterator[None]:
    """Time every ``DeltaRsEngine.merge`` by table (and the state and audit steps) while inside."""
    original_merge = DeltaRsEngine.merge
    # looked up by the commit step (pipelines.micro_batch.commit_batch) in its own module
    original_apply = micro_batch.apply_state
    original_audit = micro_batch.audit_batch

    def timed(fn: Callable, name: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                into[name(args)].append((time.perf_counter() - w, time.process_time() - c))
        return wrapper

    DeltaRsEngine.merge = timed(original_merge, lambda a: f"merge {a[1].name}")  # type: ignore[method-assign]
    micro_batch.apply_state = timed(original_apply, lambda a: "apply_state (all state merges)")
    micro_batch.audit_batch = timed(original_audit, lambda a: "audit_batch (the commit audit)")
    try:
        yield
    finally:
        DeltaRsEngine.merge = original_merge  # type: ignore[method-assign]
        micro_batch.apply_state = original_apply
        micro_batch.audit_batch = original_audit


def build_base(work: Path, groups: int, partitions: int) -> tuple[Path, dict[int, int]]:
    """The million-key lake (kept under ``work`` between runs) and the partitions' ends."""
    lake, data = work / "base_lake", work / "base_data"
    keys = [(f"group-{g:06d}", p) for g in range(groups) for p in range(partitions)]
    ends_file = work / "base_ends.txt"
    if lake.exists() and ends_file.exists():
        ends = {int(a): int(b) for a, b in (line.split() for line in ends_file.read_text().split("\n")
                                            if line)}
        return lake, ends
    start = time.perf_counter()
    ends = write_commits(data, keys, 1, 1_700_000_000_000)
    written = time.perf_counter()
    report = ingest.ingest_segments_local(data, lake, cluster_id="bench", app_id=APP_ID,
                                          max_records_per_batch=len(keys) + 1)
    print(f"base lake: {len(keys):,} committed keys / {groups:,} groups: segments written in "
          f"{written - start:.1f} s, ingested ({report.records:,} records, one batch) in "
          f"{time.perf_counter() - written:.1f} s")
    ends_file.write_text("".join(f"{p} {e}\n" for p, e in sorted(ends.items())))
    return lake, ends


def incremental(work: Path, base: Path, ends: dict[int, int], groups: int, partitions: int,
                batch: int, touched: int, repeat: int, seed: int, quiet: bool = False
                ) -> dict[str, list[tuple[float, float]]]:
    rng = random.Random(seed)
    touched_groups = rng.sample(range(groups), max(1, touched // partitions))
    keys = [(f"group-{g:06d}", p) for g in touched_groups for p in range(partitions)]
    data = work / "batch_data"
    shutil.rmtree(data, ignore_errors=True)
    write_commits(data, keys, max(1, batch // len(keys)), 1_700_000_100_000, ends, first_round=1)
    timings: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for i in range(repeat):
        lake = work / "lake_copy"
        shutil.rmtree(lake, ignore_errors=True)
        shutil.copytree(base, lake)
        with timed_merges(timings):
            w, c = time.perf_counter(), time.process_time()
            report = ingest.ingest_segments_local(data, lake, cluster_id="bench", app_id=APP_ID,
                                                  first_batch_id=1, max_records_per_batch=batch * 2)
            timings["whole incremental batch"].append((time.perf_counter() - w,
                                                      time.process_time() - c))
        if i == 0 and not quiet:
            print(f"incremental batch: {report.records:,} records touching {len(keys):,} keys "
                  f"({len(touched_groups):,} groups); rows written {dict(report.rows)}")
    if not quiet:
        for name, results in sorted(timings.items(), key=lambda kv: -min(w for w, _ in kv[1])):
            print(f"  {name:<40} {_best(results)}")
    return timings


def side_by_side(args: argparse.Namespace, work: Path) -> None:
    """Baseline and current checkouts alternately, one fresh process per run; best of N each."""
    checkouts = {"baseline": args.baseline.resolve(), "current": Path(__file__).resolve().parents[1]}
    runs: dict[str, dict[str, list[list[float]]]] = {k: {} for k in checkouts}
    for i in range(args.repeat):
        for label, root in checkouts.items():
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--work", str(work / label),
                   "--repeat", "1", *(f"--{k}={getattr(args, k)}" for k in
                                      ("groups", "partitions", "batch", "touched", "seed"))]
            env = {**os.environ, "PYTHONPATH": str(root)}
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            if i == 0:
                print(f"{label}: pipelines from {result['pipelines']}")
            for name, values in result["timings"].items():
                runs[label].setdefault(name, []).extend(values)
    names = sorted(runs["current"], key=lambda n: -min(w for w, _ in runs["current"][n]))
    print(f"\n{'':40} {'baseline wall / CPU':>22} {'current wall / CPU':>22}  (best of {args.repeat})")
    for name in names:
        cells = []
        for label in checkouts:
            got = runs[label].get(name)
            cells.append(f"{min(w for w, _ in got):8.2f} / {min(c for _, c in got):6.2f} s" if got else
                         f"{'-':>22}")
        print(f"  {name:<38} {cells[0]:>22} {cells[1]:>22}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=10, help="committed partitions per group")
    parser.add_argument("--batch", type=int, default=100_000, help="records in the incremental batch")
    parser.add_argument("--touched", type=int, default=10_000, help="keys the batch commits")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--work", type=Path, help="keep the base lake here between runs")
    parser.add_argument("--baseline", type=Path, help="a checkout to run alternately (e.g. /tmp/before)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.baseline:
            side_by_side(args, work)
            return
        if args.worker:  # one run for side_by_side: its figures as the last line, JSON
            import pipelines

            with contextlib.redirect_stdout(sys.stderr):
                base, ends = build_base(work, args.groups, args.partitions)
                timings = incremental(work, base, ends, args.groups, args.partitions, args.batch,
                                      args.touched, args.repeat, args.seed, quiet=True)
            print(json.dumps({"pipelines": str(Path(pipelines.__file__).parent), "timings": timings}))
            return
        base, ends = build_base(work, args.groups, args.partitions)
        incremental(work, base, ends, args.groups, args.partitions, args.batch, args.touched,
                    args.repeat, args.seed)


if __name__ == "__main__":
    main()
