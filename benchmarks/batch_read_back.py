"""The commit audit's read-back of each batch's commits, put in log order, beside a baseline.

Why: the audit reads a batch's ``offset_commits`` back from the files its tasks wrote (each
file holds its task's ranges in log order, the files come in any order) and puts the rows in
(cluster, offsets partition, position) order: by ordering the files' runs, or, when runs
overlap, by sorting every row. Which path a batch takes depends on how Spark's tasks cut it,
so this reads the batches of a lake an ``offsetlake ingest`` wrote, file by file as the
engine lists them in each commit, and times ``audit._dedupe_positions`` of this tree and of
``--baseline`` (an older checkout, e.g. ``git worktree add --detach /tmp/before HEAD~1``),
alternately, best of ``--repeat``, CPU seconds; and checks that both give the same rows.

    offsetlake ingest --source segments --path DATA --lake LAKE --cluster-id bench
    python benchmarks/batch_read_back.py --lake LAKE [--baseline /tmp/before] [--repeat 3]

Measured (2026-11-29, 2 cores, the 10M-record generated history of ``benchmarks/ingest.py
--scale 2000``, its first 4 batches, 3,959,882 commits, beside 0e89f77): 0.71-1.42 s before
(each of the four made the runs overlap: a task's file ended with a partition below the one
the next file started with, and one run spanned both), 0.21 s after. Another run's lake of
the same history, whose tasks cut fewer batches that way (9 batches, 8,959,860 commits):
0.709 s before, 0.305 s after.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def batches(lake: Path, limit: int) -> list:
    """The ``offset_commits`` rows of each commit of the lake, its files in the log's order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = lake / "offset_commits"
    out = []
    for log in sorted((table / "_delta_log").glob("*.json"))[:limit]:
        adds = [json.loads(line)["add"]["path"] for line in log.read_text().splitlines() if '"add"' in line]
        if adds:
            out.append(pa.concat_tables([pq.read_table(table / urllib.parse.unquote(a),
                                                       read_dictionary=["cluster_id", "group_id", "topic"])
                                         for a in adds]))
    return out


def lake_arguments(doc: str, argv: list[str] | None, batches: int, repeat: int) -> argparse.Namespace:
    """The options of a benchmark over the first batches of a lake, beside a baseline."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--lake", type=Path, required=True, help="a lake written by offsetlake ingest")
    parser.add_argument("--batches", type=int, default=batches,
                        help=f"the first N commits of offset_commits (default {batches})")
    parser.add_argument("--repeat", type=int, default=repeat, help=f"best of N (default {repeat})")
    parser.add_argument("--baseline", type=Path, help="an older checkout, timed alternately")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = lake_arguments(__doc__, argv, batches=10, repeat=3)
    sys.path.insert(0, str(REPO))
    from pipelines.state import audit

    trees = {"current": audit}
    if args.baseline:
        spec = importlib.util.spec_from_file_location("baseline_audit", args.baseline / "pipelines/state/audit.py")
        trees["baseline"] = importlib.util.module_from_spec(spec)
        sys.modules["baseline_audit"] = trees["baseline"]
        spec.loader.exec_module(trees["baseline"])
    tables = batches(args.lake, args.batches)
    best: dict[str, float] = {}
    out: dict[str, list] = {}
    for _ in range(args.repeat):
        for name, module in trees.items():
            began = time.process_time()
            out[name] = [module._dedupe_positions(t) for t in tables]
            best[name] = min(time.process_time() - began, best.get(name, float("inf")))
    same = "" if len(out) < 2 else "  (same rows)" if all(
        a.to_pydict() == b.to_pydict() for a, b in zip(out["current"], out["baseline"], strict=True)) \
        else "  (ROWS DIFFER)"
    print(f"{len(tables)} batches, {sum(t.num_rows for t in tables):,} commits: "
          + "  ".join(f"{name} {seconds:.3f} s" for name, seconds in best.items()) + same)


if __name__ == "__main__":
    main()
