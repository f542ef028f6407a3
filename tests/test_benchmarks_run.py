"""The driver-side benchmarks still run against the code they time (tiny sizes, nothing timed).

Why: a benchmark reaches into the pipeline's modules (it patches or loads functions by
name), and a refactor that moves one breaks it silently until someone needs its figure:
``benchmarks/state_merge.py`` failed for days after the commit step moved to
``pipelines.micro_batch``. Each runs here as a user runs it, in a fresh process, with this
checkout as its own baseline where it takes one (so its side-by-side path runs too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local

REPO = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small group-heavy history and the lake ``ingest_segments_local`` makes of it."""
    work = tmp_path_factory.mktemp("bench-run")
    generate_cluster(work / "data", num_partitions=2, seed=3, live=False, group_heavy=2)
    ingest_segments_local(work / "data", work / "lake", cluster_id="bench", app_id="bench",
                          max_records_per_batch=2_000)
    return work / "data", work / "lake"


def test_state_merge_runs(tmp_path: Path) -> None:
    out = _run("state_merge.py", "--groups", "20", "--partitions", "2", "--batch", "200", "--touched", "10",
               "--repeat", "1", "--work", str(tmp_path))
    assert "apply_state (all state merges)" in out and "audit_batch (the commit audit)" in out
    assert "merge committed_offsets" in out


def test_state_step_runs_beside_a_baseline(history: tuple[Path, Path]) -> None:
    out = _run("state_step.py", "--data", str(history[0]), "--repeat", "1", "--baseline", str(REPO))
    assert out.count("(same table)") == 3, out


def test_batch_read_back_runs_beside_a_baseline(history: tuple[Path, Path]) -> None:
    out = _run("batch_read_back.py", "--lake", str(history[1]), "--repeat", "1", "--baseline", str(REPO))
    assert "(same rows)" in out and " 0 commits" not in out, out


def test_audit_steps_run_beside_a_baseline(history: tuple[Path, Path]) -> None:
    out = _run("audit_steps.py", "--lake", str(history[1]), "--repeat", "1", "--baseline", str(REPO))
    assert out.count("(same)") == 5 and " 0 commits" not in out, out


def test_non_ascii_decode_runs_beside_a_baseline() -> None:
    out = _run("non_ascii_decode.py", "--commits", "2000", "--repeat", "1", "--baseline", str(REPO))
    assert out.count("(same table)") == 2 and "2,000 of 2,000 ok" in out, out


def test_part_cells_runs_beside_collect() -> None:
    out = _run("part_cells.py", "--cells", "2", "--megabytes", "0.1", "--repeat", "1")
    assert "collect (baseline)" in out and "cells_to_driver (toArrow)" in out, out


def test_driver_commits_run_beside_a_baseline(history: tuple[Path, Path]) -> None:
    out = _run("driver_commits.py", "--data", str(history[0]), "--repeat", "1", "--baseline", str(REPO),
               "--batch-records", "1000")
    assert "baseline" in out and "current" in out and "nan" not in out, out
    for step in ("unpickle the parts (parts_of)", "ownership replay (_generation_changes)",
                 "commit audit (audit_batch)", "all commits, unpickling included"):
        assert step in out, out


@pytest.mark.spark
def test_scheduled_run_runs_every_task_of_the_dag() -> None:
    out = _run("scheduled_run.py", "--scale", "1", "--runs", "1")
    lines = [line for line in out.splitlines() if line.startswith("best of 1 current")]
    assert len(lines) == 2 and all(t in lines[0] for t in ("ingest", "snapshot", "reconcile", "maintain")), out
