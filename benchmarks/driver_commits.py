"""The driver's commits of a history's micro-batches, without Spark, step by step, beside a
baseline checkout.

Why: on the group-heavy history the driver's commits are the run's critical path after the
first batch (py-spy and ``real_workload.py --breakdown``: ~10 s of a ~17 s run), but inside
a whole ``offsetlake ingest`` they share 2 cores with the decoding tasks and their timings
swing by +-20%. This runs them alone: each tree (this one and ``--baseline DIR``) first
decodes the history as its tasks do (``history_part``, the parts pickled as Spark hands them
over) into micro-batches of ``--batch-records`` (whole partitions), then, ``--repeat`` times
in a fresh copy of that lake, commits them (``pending.parts_of`` + ``commit_batch``, every
state and audit table), reporting each step's CPU seconds on the committing thread (best of
the repeats). Each tree runs in processes of its own, ``--rounds`` each, the trees
alternately (the baseline first in the first round).

    python benchmarks/driver_commits.py [--data DIR] [--baseline /tmp/before] [--repeat 3] [--rounds 2]

Without ``--data`` it generates the group-heavy history of ``benchmarks/group_heavy.py``
(scale 140 x 100 groups, ~2M records).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: (module, function) -> label of the steps timed inside a commit
STEPS = {("pipelines.history.pending", "parts_of"): "unpickle the parts (parts_of)",
         ("pipelines.micro_batch", "combined_state"): "combine the parts (combined_state)",
         ("pipelines.micro_batch", "apply_state"): "state tables (apply_state)",
         ("pipelines.state.apply", "_latest_group_record_changes"): "  group_records_latest changes",
         ("pipelines.state.apply", "_generation_changes"): "  ownership replay (_generation_changes)",
         ("pipelines.micro_batch", "audit_batch"): "commit audit (audit_batch)",
         ("pipelines.micro_batch", "commit_batch"): "whole commit (commit_batch)"}


def _child(data: str, work: str, batch_records: int, repeat: int) -> None:
    """In the tree on ``sys.path``: decode, then commit ``repeat`` times; print JSON."""
    import importlib
    import pickle
    import shutil
    import threading
    import time
    from datetime import datetime, timezone

    import pyarrow as pa

    from pipelines.history import pending
    from pipelines.history.parts import history_part
    from pipelines.history.tables import no_cyclic_gc
    from pipelines.ingest import IngestReport, ensure_tables
    from pipelines.lake.engines import make_engine
    from pipelines.lake.location import lake_location
    from pipelines.sources.record_batches.arrow_reader import read_segments_arrow
    from pipelines.sources.segments.files import find_segments

    now = datetime(2026, 11, 29, tzinfo=timezone.utc)
    decoded = Path(work) / "decoded"
    batches: list[list[bytes]] = [[]]
    rows = 0
    for plog in find_segments(data):
        raw = pa.Table.from_batches(list(read_segments_arrow(plog.segments, cluster_id="bench")))
        if rows >= batch_records:
            batches.append([])
            rows = 0
        with no_cyclic_gc():
            batches[-1].append(pickle.dumps(history_part(raw, len(batches) - 1, now, decoded)))
        rows += raw.num_rows
    spent: dict[str, float] = {}

    def timed(module: str, name: str, label: str) -> None:
        owner = importlib.import_module(module)
        inner = getattr(owner, name)

        def wrapper(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                return inner(*args, **kwargs)
            started = time.thread_time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - started
        setattr(owner, name, wrapper)

    for (module, name), label in STEPS.items():
        timed(module, name, label)
    commit = sys.modules["pipelines.micro_batch"].commit_batch  # the timed wrapper
    best: dict[str, float] = {}
    for run in range(repeat):
        lake = Path(work) / f"lake-{run}"
        shutil.copytree(decoded, lake)
        engine = make_engine("delta-rs", lake_location(lake))
        ensure_tables(engine)
        spent.clear()
        total = time.thread_time()
        for batch_id, cells in enumerate(batches):
            parts = pending.parts_of(cells)
            commit(engine, parts, batch_id, "bench-app", now, IngestReport())
        spent["all commits, unpickling included"] = time.thread_time() - total
        best = {k: min(v, best.get(k, v)) for k, v in spent.items()}
        shutil.rmtree(lake)
    print(json.dumps({"batches": [len(b) for b in batches], "best": best}))


def _run(tree: Path, data: Path, batch_records: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="driver-commits-") as work:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(data), work,
                               str(batch_records), str(repeat)], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="segment files (default: generate the group-heavy history)")
    parser.add_argument("--baseline", type=Path, help="an older checkout, run alternately")
    parser.add_argument("--repeat", type=int, default=3, help="commits of the decoded batches, best of N")
    parser.add_argument("--batch-records", type=int, default=1_000_000, help="records per micro-batch (about)")
    parser.add_argument("--rounds", type=int, default=1, help="fresh processes per tree, alternately")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], args.child[1], int(args.child[2]), int(args.child[3]))
        return
    trees = {"current": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    with tempfile.TemporaryDirectory(prefix="driver-commits-data-") as tmp:
        data = args.data
        if data is None:
            sys.path.insert(0, str(REPO))
            from pipelines.demo import generate_cluster

            data = Path(tmp) / "data"
            generate_cluster(data, scale=140, group_heavy=100, live=False)
        results: dict[str, dict] = {}
        for round_ in range(args.rounds):
            for name, tree in (list(trees.items()) if round_ % 2 else list(trees.items())[::-1]):
                got = _run(tree, data, args.batch_records, args.repeat)
                old = results.setdefault(name, got)["best"]
                old.update({k: min(v, old.get(k, v)) for k, v in got["best"].items()})
    print(f"micro-batches (parts each): {results['current']['batches']}; CPU seconds on the committing "
          f"thread, best of {args.repeat}")
    labels = list(results["current"]["best"])
    print(f"{'step':<44}" + "".join(f"{name:>12}" for name in results))
    for label in labels:
        print(f"{label:<44}" + "".join(f"{r['best'].get(label, float('nan')):12.3f}" for r in results.values()))


if __name__ == "__main__":
    main()
