"""Arrow's memory pool in offsetlake's processes (pipelines.arrow_memory): malloc unless the
user chose one with ARROW_DEFAULT_MEMORY_POOL, set by the command line in the driver and by
offsetlake's own Spark tasks in the executors' Python workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.arrow_memory import USER_SETTING
from pipelines.demo import generate_cluster
from pipelines.micro_batch import part_cells_on_executors
from pipelines.sources.raw import SPARK_RAW_SCHEMA
from pipelines.sources.record_batches.arrow_reader import read_arrow

REPO = Path(__file__).resolve().parents[1]


def _pool_in_fresh_process(setting: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != USER_SETTING}
    if setting is not None:
        env[USER_SETTING] = setting
    code = ("import json, pyarrow as pa; before = pa.default_memory_pool().backend_name; "
            "from pipelines.arrow_memory import use_offsetlake_pool; now = use_offsetlake_pool(); "
            "print(json.dumps([before, now, pa.default_memory_pool().backend_name]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def test_malloc_unless_the_user_chose_a_pool() -> None:
    before, now, default = _pool_in_fresh_process(None)
    assert before != "system"  # pyarrow's own default (mimalloc in its wheels): something to change
    assert now == default == "system"
    assert _pool_in_fresh_process("mimalloc") == ["mimalloc", "mimalloc", "mimalloc"]
    assert _pool_in_fresh_process("jemalloc")[1:] == ["jemalloc", "jemalloc"]


def test_the_command_line_sets_the_pool_in_the_driver(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=1, scale=1, live=False)
    env = {k: v for k, v in os.environ.items() if k != USER_SETTING}
    code = ("import json, sys, pyarrow as pa; from pipelines.cli import main; "
            "code = main(['decode', sys.argv[1], '--stats']); "
            "print(json.dumps([code, pa.default_memory_pool().backend_name]), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(data)], env=env, cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert json.loads(out.stderr.strip().splitlines()[-1]) == [0, "system"]


def _set_mimalloc(batches):
    import os as _os
    import time as _time

    import pyarrow as _pa

    for _ in batches:
        pass
    _pa.set_memory_pool(_pa.mimalloc_memory_pool())
    _time.sleep(0.5)  # both tasks at once: each in its own worker
    yield _pa.RecordBatch.from_pylist([{"pid": _os.getpid(), "pool": _pa.default_memory_pool().backend_name}])


def _pools(batches):
    import os as _os
    import time as _time

    import pyarrow as _pa

    for _ in batches:
        pass
    _time.sleep(0.5)
    yield _pa.RecordBatch.from_pylist([{"pid": _os.getpid(), "pool": _pa.default_memory_pool().backend_name}])


@pytest.mark.skipif(os.environ.get(USER_SETTING) is not None, reason=f"{USER_SETTING} is set for this run")
def test_the_decoding_tasks_set_the_pool_in_their_workers(spark, tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=2, scale=2, live=False)
    raw = pa.Table.from_batches(list(read_arrow(data, cluster_id="c"))).cast(SPARK_RAW_SCHEMA)
    reset = spark.range(2, numPartitions=2).mapInArrow(_set_mimalloc, "pid long, pool string").collect()
    workers = {r.pid for r in reset}
    assert len(workers) == 2 and {r.pool for r in reset} == {"mimalloc"}
    df = spark.createDataFrame(raw).repartition(2)
    cells = part_cells_on_executors(df, 0, datetime.now(timezone.utc), tmp_path / "lake", ("offsets_raw",))
    assert len(cells) == 2
    # Probe the idle workers until one that ran a decoding task answers: the reset left
    # mimalloc in every worker it used, and a worker Spark forked meanwhile starts with
    # pyarrow's default (mimalloc too), so "system" was set by a decoding task. Spark hands
    # out its idle workers in turn, and on a loaded machine a decoding task may have run in a
    # worker forked for it (CI once probed the reset's two workers alone).
    seen: dict[int, str] = {}
    for probe in range(6):
        time.sleep(0.1)
        answers = spark.range(2, numPartitions=2).mapInArrow(_pools, "pid long, pool string").collect()
        if probe == 0:  # the reset's two workers, idle between the jobs, answer first
            assert {r.pid for r in answers} == workers
        seen.update((r.pid, r.pool) for r in answers)
        if "system" in seen.values():
            break
    assert "system" in seen.values(), seen
