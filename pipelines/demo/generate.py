"""The generator's entry points: :func:`generate_cluster` and ``python -m pipelines.demo``.

Why: one function runs every story against one world, merges their events by timestamp
into the log (streaming: memory does not grow with ``scale``), and returns the manifest
with the state a coordinator would rebuild; the command line wraps it.
"""

from __future__ import annotations

import argparse
import heapq
import time
from collections.abc import Sequence
from pathlib import Path

from pipelines.demo.live import write_live_capture
from pipelines.demo.log import SEGMENT_BYTES, Log
from pipelines.demo.manifest import DemoManifest
from pipelines.demo.stories import STORIES, STORY_FUNCS
from pipelines.demo.stories.churn import churn_stories
from pipelines.demo.world import DEFAULT_START_MS, World
from pipelines.sources.record_batches.framing import CODEC_NAMES

__all__ = ["generate_cluster", "main"]

_DESCRIPTION = ("Generate a realistic ``__consumer_offsets`` history as Kafka log segments, "
                "with its answer.")


def generate_cluster(
    out_dir: Path | str,
    *,
    num_partitions: int = 10,
    seed: int = 7,
    scale: int = 1,
    start_ms: int | None = None,
    compression: str | Sequence[str] = "none",
    segment_bytes: int = SEGMENT_BYTES,
    live: bool = True,
    group_heavy: int = 0,
) -> DemoManifest:
    """Write a simulated cluster's ``__consumer_offsets`` log under ``out_dir`` and return
    what was written with the state the coordinator would rebuild from it.

    ``scale`` multiplies the commit rounds (about 5,000 records per unit); everything else
    (joins, rebalances, transactions, deletions) happens once. ``compression`` is one codec
    for every data batch or one per broker phase (the golden capture switched none -> gzip
    -> zstd across two restarts); control batches are never compressed, as on a broker.
    Existing files in ``out_dir`` partition directories are overwritten.

    ``live`` also writes the brokers' answers at the end of the history as a recorded
    capture under ``out_dir/live`` (:func:`write_live_capture`).

    ``group_heavy`` adds that many churning groups (:mod:`.stories.churn`: classic and
    KIP-848 groups rebalancing every round) after the default stories; 0 leaves the output
    exactly as without the option.
    """
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    codecs = [compression] if isinstance(compression, str) else list(compression)
    if not codecs or any(c not in CODEC_NAMES for c in codecs):
        raise ValueError(f"compression must be among {CODEC_NAMES}, got {compression!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    w = World(seed, scale, DEFAULT_START_MS if start_ms is None else start_ms)
    log = Log(out, w, num_partitions, codecs, segment_bytes)
    churn, churn_funcs = churn_stories(group_heavy)
    try:
        for ev in heapq.merge(*(f(w) for f in (*STORY_FUNCS, *churn_funcs)),
                              key=lambda e: e.ts):
            log.emit(ev)
    finally:
        log.close()
    if any(log.expected.pending.values()):
        # The live answers take LSO == high watermark and require_stable == plain fetch.
        raise AssertionError("a story left a transaction open; the live capture assumes none")
    stories = {**STORIES, **churn}
    groups, deleted = log.expected.final_groups(w, stories)
    counts, partitions = log.counts()
    manifest = DemoManifest(
        out_dir=str(out), num_partitions=num_partitions, seed=seed, scale=scale,
        start_ms=w.start, end_ms=log.last_ts, compression=codecs,
        topics={t.name: {"topic_id": t.topic_id, "partitions": t.partitions}
                for t in w.topics.values()},
        broker_restarts_ms=list(w.restarts), stories=stories, groups=groups,
        deleted_groups=deleted, committed=log.expected.final_committed(),
        aborted=list(log.expected.aborted), counts=counts, partitions=partitions, audit=w.audit,
    )
    if live:
        write_live_capture(manifest, out)
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pipelines.demo OUT_DIR [--partitions N] [--scale S] [--seed N]``."""
    ap = argparse.ArgumentParser(prog="python -m pipelines.demo", description=_DESCRIPTION)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--partitions", type=int, default=10, help="__consumer_offsets partitions")
    ap.add_argument("--scale", type=int, default=1, help="multiplies the commit rounds")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--start-ms", type=int, default=None)
    ap.add_argument("--compression", default="none",
                    help="codec, or comma-separated codecs per broker phase (e.g. none,gzip,zstd)")
    ap.add_argument("--group-heavy", type=int, default=0, metavar="N",
                    help="add N churning classic/KIP-848 groups (group-record-heavy history)")
    ap.add_argument("--manifest", type=Path, default=None,
                    help="where to write the manifest JSON (default OUT_DIR/demo-manifest.json)")
    args = ap.parse_args(argv)
    codecs = args.compression.split(",")
    began, began_cpu = time.perf_counter(), time.process_time()
    manifest = generate_cluster(args.out_dir, num_partitions=args.partitions, seed=args.seed,
                                scale=args.scale, start_ms=args.start_ms,
                                compression=codecs[0] if len(codecs) == 1 else codecs,
                                group_heavy=args.group_heavy)
    secs, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    path = manifest.write_manifest(args.manifest or args.out_dir / "demo-manifest.json")
    n = manifest.counts["records"]
    print(manifest.summary())
    print(f"generated in {secs:.2f} s wall / {cpu:.2f} s CPU ({n / secs:,.0f} records/s wall, "
          f"{n / max(cpu, 1e-9):,.0f} records/s CPU); manifest: {path}; live answers: "
          f"{args.out_dir / 'live'}")
    return 0

