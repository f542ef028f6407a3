"""The commit audit's steps on a lake's batches, one by one, beside a baseline.

Why: on the 10M history the audit is the driver's largest cost (~8.7 s of its ~27 s under
py-spy), made of a dozen vectorized steps. Each step costs a few tens of milliseconds per
million commits, well inside the noise of a whole ``offsetlake ingest`` on a shared 2-core
machine. This runs each step on the same batches in one process:

- ``_dedupe_positions``: the read-back rows put in log order;
- ``attribute``: the ``commit_attribution`` rows;
- ``sequence_anomalies``: rewinds and epoch regressions;
- ``ownership_anomalies``;
- ``write_data_file``: the ``commit_attribution`` file.

Each step of this tree runs alternately with the same step of ``--baseline`` (an older
checkout, e.g. ``git worktree add --detach /tmp/before HEAD~1``). It prints the best CPU
seconds of ``--repeat`` runs and checks that both trees give the same result. Each batch's
commits are read back as the audit reads them, string keys as dictionaries. The ownership
rows are the lake's own, read once.

    offsetlake ingest --source segments --path DATA --lake LAKE
    python benchmarks/audit_steps.py --lake LAKE [--batches 3] [--repeat 5] [--baseline /tmp/before]

Measured (2026-11-29, 2 cores, the 10M-record generated history of ``benchmarks/ingest.py
--scale 2000``, its first 2 batches, 1,959,899 commits, beside e6a764f, the same code; best of 5):

- ``_dedupe_positions``: 0.039 s;
- ``attribute``: 0.234 s;
- ``sequence_anomalies``: 0.201 s;
- ``ownership_anomalies``: 0.008 s;
- ``write_data_file``: 0.425 s.

No step stands out: each of them is a dozen vectorized operations of a few milliseconds per
million commits. For the write, Parquet dictionary pages for ``owner_valid_from_offset``
would save ~6 ms per million rows, and DELTA_BINARY_PACKED for ``committed_offset`` ~8 ms,
but at 1.6x its bytes.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from batch_read_back import batches, lake_arguments
from state_step import load

REPO = Path(__file__).resolve().parents[1]
MODULES = ("pipelines/state/audit.py", "pipelines/state/attribution.py", "pipelines/state/anomalies.py",
           "pipelines/lake/files.py")


def _rows_written(out: Path, written: list[Any]) -> list[Any]:
    """The rows of the files a write step wrote (their names are random), read back and
    removed; the file statistics too (each written file's JSON)."""
    import pyarrow.parquet as pq

    rows = [(pq.read_table(out / w.path).to_pydict(), w.stats, w.num_records) for w in written]
    for w in written:
        (out / w.path).unlink()
    return rows


def main(argv: list[str] | None = None) -> None:
    args = lake_arguments(__doc__, argv, batches=3, repeat=5)
    sys.path.insert(0, str(REPO))
    import gc

    from pipelines.lake import files
    from pipelines.lake.contracts import contract
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.state import anomalies, attribution, audit

    trees = {"current": dict(zip(MODULES, (audit, attribution, anomalies, files), strict=True))}
    if args.baseline:
        trees["baseline"] = {relative: load(args.baseline.resolve(), relative) for relative in MODULES}
    engine = DeltaRsEngine(args.lake)
    now = datetime.now(timezone.utc)
    delta_encoded = contract("commit_attribution").delta_encoded
    # one dictionary per column, as the engine reads a batch back (read_own_batch)
    read_back = [t.unify_dictionaries() for t in batches(args.lake, args.batches)]
    commits = [audit._dedupe_positions(t) for t in read_back]
    live = [audit._live(c) for c in commits]
    gens = [attribution.generation_rows(engine, c) for c in live]
    owners = [attribution.attribute(c, g, now) for c, g in zip(live, gens, strict=True)]
    print(f"{len(commits)} batches, {sum(c.num_rows for c in commits):,} commits, "
          f"{sum(g.num_rows for g in gens):,} ownership rows")
    gc.disable()  # as the driver's commit runs its steps: no collection inside a timing
    with tempfile.TemporaryDirectory(prefix="audit-steps-") as tmp:
        out = Path(tmp)
        steps: dict[str, Callable[[dict[str, Any]], list[Any]]] = {
            "_dedupe_positions": lambda m: [m["pipelines/state/audit.py"]._dedupe_positions(t) for t in read_back],
            "attribute": lambda m: [m["pipelines/state/attribution.py"].attribute(c, g, now)
                                    for c, g in zip(live, gens, strict=True)],
            "sequence_anomalies": lambda m: [m["pipelines/state/anomalies.py"].sequence_anomalies(c, [], [], o, now)
                                             for c, o in zip(commits, owners, strict=True)],
            "ownership_anomalies": lambda m: [m["pipelines/state/anomalies.py"].ownership_anomalies(o, now)
                                              for o in owners],
            "write_data_file": lambda m: [m["pipelines/lake/files.py"].write_data_file(out, o, delta_encoded)
                                          for o in owners],
        }
        for step, run in steps.items():
            best: dict[str, float] = {}
            result: dict[str, list[Any]] = {}
            for _ in range(args.repeat):
                for name, modules in trees.items():
                    began = time.process_time()
                    result[name] = run(modules)
                    best[name] = min(time.process_time() - began, best.get(name, float("inf")))
                    if step == "write_data_file":  # compared by what was written, not where
                        result[name] = _rows_written(out, result[name])
            same = "" if len(result) < 2 else "  (same)" if all(
                _equal(a, b) for a, b in zip(result["current"], result["baseline"], strict=True)) else "  (DIFFER)"
            print(f"{step:<22} " + "  ".join(f"{name} {seconds:6.3f} s" for name, seconds in best.items()) + same)


def _equal(a: Any, b: Any) -> bool:
    """Arrow tables by their rows (chunking and dictionaries aside), anything else by ``==``."""
    if hasattr(a, "to_pydict"):
        return a.to_pydict() == b.to_pydict()
    return a == b


if __name__ == "__main__":
    main()
