"""Benchmark: the exact per-record segment reader vs kafka-python's record parsing.

Why: :mod:`pipelines.sources.record_batches.exact_reader` is the reference reader (the
oracle the vectorized reader is tested against, and the decoder of every batch the vectorized
reader declines: compressed, control, damaged). It is hand-written because it is ~2x faster
than kafka-python's ``MemoryRecords`` on ``__consumer_offsets`` data; this script measures that
claim. Both sides validate CRCs and materialise offset, timestamp, key and value; best of
``--repeat`` runs; one thread.

Usage: ``python benchmarks/exact_reader.py [PATH ...] [--repeat N] [--module M]``
(default PATH: the public corpus beside the checkout; ``--module`` names another module with
``find_segments`` and ``decode_segment_bytes``, e.g. a saved copy of an older reader, to compare
before/after a change).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.sources.record_batches.exact_reader import decode_segment_bytes
from pipelines.sources.segments.files import find_segments

log = logging.getLogger("benchmarks.exact_reader")

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "public"


def _best(repeat: int, fn: Callable[[], int]) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - t0)
    return best, count


def benchmark(
    *paths: str | os.PathLike[str], repeat: int = 3, decode: Callable[..., Any] | None = None
) -> dict[str, float]:
    """Records/s of the exact reader (or ``decode``) and of kafka-python on the same files."""
    from kafka.record import MemoryRecords

    decode = decode or decode_segment_bytes
    files = [seg.path for plog in find_segments(*paths) for seg in plog.segments]
    blobs = [(str(f), f.read_bytes()) for f in files]

    def ours() -> int:
        n = 0
        for path, data in blobs:
            for _, recs in decode(data, path=path, problems=[]):
                n += len(recs)
        return n

    def theirs() -> int:
        n = 0
        for _, data in blobs:
            mr = MemoryRecords(data)
            while mr.has_next():
                batch = mr.next_batch()
                batch.validate_crc()
                for r in batch:
                    _ = (r.offset, r.timestamp, r.key, r.value)
                    n += 1
        return n

    result: dict[str, float] = {"files": len(blobs), "bytes": sum(len(d) for _, d in blobs)}
    for name, fn in (("hand_written", ours), ("kafka_python", theirs)):
        seconds, count = _best(repeat, fn)
        result[f"{name}_records"] = count
        result[f"{name}_records_per_s"] = count / seconds if seconds else 0.0
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[DEFAULT_CORPUS])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--module", help="module providing decode_segment_bytes (before/after)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    missing = [p for p in args.paths if not p.exists()]
    if missing:
        raise SystemExit(f"not found: {', '.join(map(str, missing))}")
    decode = importlib.import_module(args.module).decode_segment_bytes if args.module else None
    for key, value in benchmark(*args.paths, repeat=args.repeat, decode=decode).items():
        log.info("%s: %s", key, f"{value:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
