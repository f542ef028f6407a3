"""The driver's state step on one group-heavy batch, function by function, beside a baseline.

Why: on group-heavy histories the driver's commit is the run's critical path (the replay of
ownership, the latest record per key, the last ended interval per key), and each of these
steps costs a few hundred milliseconds per million records, well inside the noise of a
whole ``offsetlake ingest`` on a shared 2-core machine. This times each step on the same
batch in one process: the current tree's function, then the same function of ``--baseline``
(an older checkout, e.g. ``git worktree add --detach /tmp/before HEAD~1``), alternately,
best of ``--repeat``, CPU seconds; and checks that both give the same table.

The baseline's modules are loaded from its files under other names, so they run their own
code with this tree's helpers (their imports); a step whose helpers changed is not
comparable this way.

The batch is the whole history as the driver receives it from the tasks (group records in
log order, offset commits already reduced to what the state needs):

    python benchmarks/state_step.py [--data DIR] [--repeat 5] [--baseline /tmp/before]

Without ``--data`` the demo generator writes the group-heavy history of
``benchmarks/group_heavy.py`` (scale 140 x 100 groups, ~2M records, 41% group records).

Measured (2026-11-28, evening, 2 cores, ``--data`` the group-heavy history as one batch:
559,742 group records, a 947,958-row ownership change set; ``--baseline`` e0f3aa7, best of
5): ``group_records_latest``'s change set 0.843 -> 0.347 s (its winners picked before any
column is built); ``ownership_last_ended``'s winners 0.375 -> 0.084 s (ranked where the rows
lie, only the winners copied); the ownership replay, unchanged, 6.63 / 7.01 s (the noise).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: module file -> the functions of it this script times
STEPS = {"pipelines/state/apply.py": "_latest_group_record_changes",
         "pipelines/state/last_ended.py": "_ended_last",
         "pipelines/state/generations.py": "generation_changes"}


def load(tree: Path, relative: str) -> ModuleType:
    """``tree``'s copy of a module, under a name of its own."""
    name = f"baseline_{relative.replace('/', '_').removesuffix('.py')}"
    spec = importlib.util.spec_from_file_location(name, tree / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def batch_of(data: Path) -> Any:
    """The history under ``data`` as one batch's state input, as the driver combines it."""
    import pyarrow as pa

    from pipelines.history.parts import HistoryPart, combined_state
    from pipelines.history.tables import build_history
    from pipelines.sources.record_batches.arrow_reader import read_segments_arrow
    from pipelines.sources.segments.files import find_segments

    parts = []
    for plog in find_segments(data):
        batches = list(read_segments_arrow(plog.segments, cluster_id="bench"))
        if batches:
            raw = pa.Table.from_batches(batches)
            parts.append(HistoryPart(build_history(raw, 0, datetime.now(timezone.utc)).state_input()))
    return combined_state(parts)


def _takes_columns(generations: ModuleType) -> bool:
    """Whether a tree's replay takes the batch's columns (else (group id, record) pairs)."""
    return "GroupColumns" in str(inspect.signature(generations.generation_changes).parameters["events"].annotation)


def best_alternately(repeat: int, runs: dict[str, Callable[[], Any]]) -> dict[str, tuple[float, Any]]:
    """Best CPU seconds of each callable, run in turn ``repeat`` times, and its last result."""
    best: dict[str, tuple[float, Any]] = {}
    for _ in range(repeat):
        for name, fn in runs.items():
            began = time.process_time()
            out = fn()
            spent = time.process_time() - began
            best[name] = (min(spent, best.get(name, (spent, None))[0]), out)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="segment files (default: generate the group-heavy history)")
    parser.add_argument("--repeat", type=int, default=5, help="best of N (default 5)")
    parser.add_argument("--baseline", type=Path, help="an older checkout, timed alternately")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import gc

    from pipelines.state import apply, generations, last_ended

    with tempfile.TemporaryDirectory(prefix="state-step-") as tmp:
        data = args.data
        if data is None:
            from pipelines.demo import generate_cluster

            data = Path(tmp) / "data"
            generate_cluster(data, scale=140, group_heavy=100, live=False)
        batch = batch_of(data)
    now = datetime.now(timezone.utc)
    replayed = batch.groups.take(batch.groups.rows_of(generations.REPLAYED_TYPES))
    # an older tree's replay took (group id, record) pairs, this one takes the columns
    events = [(g.group_id, g.record) for g in replayed.records()]
    gc.disable()  # as the driver's state step runs (pipelines.history.tables.no_cyclic_gc)
    change_set = generations.generation_changes(None, replayed, {}, "bench", now)
    print(f"{len(batch.groups):,} group records, {len(replayed):,} replayed, "
          f"a {change_set.num_rows:,}-row ownership change set")
    current = {relative: module for relative, module in zip(
        STEPS, (apply, last_ended, generations), strict=True)}
    trees = {"current": current}
    if args.baseline:
        trees["baseline"] = {relative: load(args.baseline.resolve(), relative) for relative in STEPS}
    calls = {
        "_latest_group_record_changes": lambda m: m._latest_group_record_changes(batch, now),
        "_ended_last": lambda m: m._ended_last(change_set),
        "generation_changes": lambda m: m.generation_changes(None, replayed if _takes_columns(m) else events,
                                                             {}, "bench", now),
    }
    for relative, function in STEPS.items():
        best = best_alternately(args.repeat, {
            name: (lambda m=modules[relative], call=calls[function]: call(m)) for name, modules in trees.items()})
        line = "  ".join(f"{name} {seconds:6.3f} s" for name, (seconds, _) in best.items())
        same = "" if len(best) < 2 else \
            ("  (same table)" if best["current"][1].equals(best["baseline"][1]) else "  (TABLES DIFFER)")
        print(f"{function:<30} {line}{same}")


if __name__ == "__main__":
    main()
