"""Does a batch's cost follow the batch, or the history? The ownership table, batch by batch.

Why: ``group_generations`` is history, and every micro-batch reads and rewrites its open rows
(issue 9, item 4: cost follows new data). This ingests a group-heavy history without Spark,
``--batch`` records at a time, partition after partition, so that each batch closes rows
that earlier batches opened. For every batch it prints the commit (history files, state,
audit) and the ``group_generations`` reads and MERGE, CPU seconds. ``--baseline DIR`` runs
an older checkout in a fresh process first (its own code and table contracts), then this
one, and prints both side by side.

    python benchmarks/ownership_growth.py [--data DIR] [--batch 100000] [--baseline /tmp/before]

Without ``--data`` the demo generator writes the group-heavy history of
``benchmarks/group_heavy.py`` (scale 140 x 100 groups, ~2M records) into a temporary
directory first.

Measured (2026-11-28, 2 cores, the group-heavy history in 27 batches of up to 100k
records, beside be37d15, the tree before the table was partitioned by ``is_open``):

- the ``group_generations`` MERGE: 0.15 s at batch 1, 1.18-1.33 s by batch 23-26 before;
  0.06-0.20 s throughout after;
- its reads: 0.06 -> 0.96-1.10 s before, 0.06 -> 0.71-0.88 s after. What still grows is the
  audit's read: the attribution reads every ownership row of the committing groups (a
  commit's last owner may have lost the partition long ago). The replay's own reads (open
  partition; rows waiting for metadata) took 0.02 -> 0.18 s over those batches;
- a 100k-record batch's whole commit: 2.5 -> 4.6-4.9 s before, 2.6 -> 3.5-3.8 s after.

Later that day the audit stopped reading ended rows (``ownership_last_ended``): beside
0af2f9e, over the last five batches the reads (both tables) took 0.57-0.70 s before and
0.27-0.30 s after, the merges 0.06-0.17 -> 0.12-0.23 s, a 100k batch's commit 3.26-3.61 ->
2.43-2.83 s; what is still read follows the open rows, which grow with the groups, not with
the history (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP_ID = "offsetlake-bench-ownership-growth"
#: the tables whose reads and merges are timed: the ownership history, and each key's last
#: ended interval, which the audit reads instead of the ended rows (since 2026-11-28)
OWNERSHIP_TABLES = ("group_generations", "ownership_last_ended")


def child(tree: Path, data: Path, lake: Path, batch: int) -> None:
    """Ingest ``data`` with the code (and table contracts) of ``tree``; one JSON line per batch."""
    sys.path.insert(0, str(tree))
    import pyarrow as pa

    import pipelines.decode.formats as formats
    import pipelines.lake.contracts as contracts
    from pipelines import ingest
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.sources.segments.files import find_segments
    from pipelines.sources.segments.index import read_range

    # the checkout's own schemas, not those of the offsetlake installed in this interpreter
    contracts.schema_dir = formats.schema_dir = lambda kind: tree / "schemas" / kind
    spent: dict[str, float] = defaultdict(float)
    for name in ("read", "merge"):
        original = getattr(DeltaRsEngine, name)

        def timed(self, table, *args, _original=original, _name=name, **kwargs):
            started = time.process_time()
            try:
                return _original(self, table, *args, **kwargs)
            finally:
                if getattr(table, "name", table) in OWNERSHIP_TABLES:
                    spent[_name] += time.process_time() - started
        setattr(DeltaRsEngine, name, timed)

    engine = DeltaRsEngine(lake)
    ingest.ensure_tables(engine)
    report, batch_id = ingest.IngestReport(), 0
    for plog in find_segments(data):
        raw = pa.Table.from_batches(list(read_range(plog, 0, 1 << 62, "bench")))
        for start in range(0, raw.num_rows, batch):
            spent.clear()
            began = time.process_time()
            ingest.process_batch(engine, raw.slice(start, batch), batch_id, APP_ID, report)
            print(json.dumps({"batch": batch_id, "records": min(batch, raw.num_rows - start),
                              "cpu": time.process_time() - began, **spent}), flush=True)
            batch_id += 1


def run(tree: Path, data: Path, work: Path, batch: int) -> list[dict]:
    lake = Path(tempfile.mkdtemp(prefix="lake-", dir=work))
    out = subprocess.run([sys.executable, __file__, "--child", str(tree), "--data", str(data),
                          "--lake", str(lake), "--batch", str(batch)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    if out.returncode:
        raise SystemExit(f"the run of {tree} failed:\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="segment files (default: generate the group-heavy history)")
    parser.add_argument("--batch", type=int, default=100_000, help="records per batch (default 100k)")
    parser.add_argument("--baseline", type=Path, help="an older checkout, run first")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--lake", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.data, args.lake, args.batch)
        return
    with tempfile.TemporaryDirectory(prefix="ownership-growth-") as tmp:
        work = Path(tmp)
        data = args.data
        if data is None:
            from pipelines.demo import generate_cluster

            data = work / "data"
            generate_cluster(data, scale=140, group_heavy=100, live=False)
        trees = {"baseline": args.baseline.resolve()} if args.baseline else {}
        trees["current"] = REPO
        runs = {name: run(tree, data, work, args.batch) for name, tree in trees.items()}
    print(f"{'batch':>5} {'records':>8}  " + "  ".join(
        f"{name + ': commit, ownership read, merge (CPU s)':<44}" for name in runs))
    for rows in zip(*runs.values(), strict=True):
        print(f"{rows[0]['batch']:>5} {rows[0]['records']:>8}  " + "  ".join(
            f"{r['cpu']:7.2f} {r.get('read', 0):7.2f} {r.get('merge', 0):7.2f}{'':<21}" for r in rows))


if __name__ == "__main__":
    main()
