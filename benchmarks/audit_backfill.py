"""Benchmark: the commit-audit backfill of a lake ingested before the audit existed.

Why: the backfill audits the whole history in chunks through the per-batch code path, so
its cost grows with the history and falls with the chunk size; this measures it on a
generated lake (pipelines/demo/ at ``--scale``, ingested, then stripped of the three audit
tables) or a copy of an existing one (``--lake``; its audit tables are rebuilt, as
``maintain --rebuild-audit`` does): offset commits per second, per ``--chunk`` size.

Usage: ``python benchmarks/audit_backfill.py [--scale N | --lake PATH] [--chunk N ...]``
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from pathlib import Path

from pipelines.lake.engines import DeltaRsEngine
from pipelines.state import audit


def run(lake: Path, chunks: list[int], work: Path) -> None:
    for chunk in chunks:
        copy = work / f"lake-{chunk}"
        shutil.copytree(lake, copy)
        for name in audit.TABLES:
            shutil.rmtree(copy / name, ignore_errors=True)
        engine = DeltaRsEngine(copy)
        clusters = audit.backfill_clusters(engine)
        start = time.perf_counter()
        commits = audit.backfill(engine, clusters, chunk=chunk)
        seconds = time.perf_counter() - start
        print(f"chunk {chunk:>9,}: {commits:,} offset commits in {seconds:.1f} s = "
              f"{commits / seconds:,.0f} commits/s")
        shutil.rmtree(copy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=200, help="demo generator scale (200 ~ 1M records)")
    parser.add_argument("--lake", type=Path, help="an existing lake (copied) instead of a generated one")
    parser.add_argument("--chunk", type=int, action="append", help="commits per chunk (repeatable)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    chunks = args.chunk or [audit.BACKFILL_CHUNK]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.lake:
            run(args.lake, chunks, root)
            return
        from pipelines.demo import generate_cluster
        from pipelines.ingest import ingest_segments_local

        start = time.perf_counter()
        generate_cluster(root / "data", scale=args.scale)
        report = ingest_segments_local(root / "data", root / "lake", cluster_id="bench")
        print(f"generated and ingested scale {args.scale} ({report.records:,} records) in "
              f"{time.perf_counter() - start:.1f} s")
        run(root / "lake", chunks, root)


if __name__ == "__main__":
    main()
