"""``offsetlake snapshot`` and ``maintain`` on delta-rs run without pandas, and store and
compact exactly what they do with it.

Why: pyarrow's first question imports pandas (~0.2 s of a ~0.6 s command), though neither
command holds a pandas object; a process that ends with the command
(``pipelines.cli.run``) blocks it (``without_pandas_on_delta_rs``). Each way runs here in a
fresh process on its own copy of one lake, and the tables they leave are compared row for row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.snapshot import RUNS_TABLE, SNAPSHOT_TABLES
from tests.conftest import REPO

_PROBE = """
import json, sys
lake, live, out, standalone = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "cli"
from pipelines.cli import main
codes = [main(["snapshot", "--lake", lake, "--cluster-id", "demo", "--recorded", live], standalone=standalone),
         main(["maintain", "--lake", lake, "--retention-hours", "168"], standalone=standalone)]
with open(out, "w") as fh:
    json.dump({"codes": codes, "pandas": "pandas" in sys.modules}, fh)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    """A generated cluster ingested as cluster 'demo', in several micro-batches (so that
    ``maintain`` has small files to compact)."""
    root = tmp_path_factory.mktemp("cli-without-pandas")
    generate_cluster(root / "data", num_partitions=4, seed=5)
    ingest_segments_local(root / "data", root / "lake", cluster_id="demo", max_records_per_batch=2000)
    return root


def _run(cluster: Path, work: Path, how: str) -> tuple[dict, Path]:
    copy = work / f"lake-{how}"
    shutil.copytree(cluster / "lake", copy)
    out = work / f"{how}.json"
    probe = work / "probe.py"
    probe.write_text(_PROBE)
    done = subprocess.run([sys.executable, str(probe), str(copy), str(cluster / "data" / "live"), str(out), how],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), copy


def _rows(lake: Path, table: str, drop: tuple[str, ...] = ()) -> list[str]:
    """The table's rows (but the ``drop`` columns), each as JSON text, in order."""
    data = DeltaRsEngine(lake).read(table)
    data = data.drop_columns([c for c in drop if c in data.column_names])
    return sorted(json.dumps(row, sort_keys=True, default=repr) for row in data.to_pylist())


def test_snapshot_and_maintain_run_without_pandas_and_leave_the_same_tables(cluster: Path, tmp_path: Path) -> None:
    cli, cli_lake = _run(cluster, tmp_path, "cli")
    library, library_lake = _run(cluster, tmp_path, "library")

    assert cli == {"codes": [0, 0], "pandas": False}
    assert library == {"codes": [0, 0], "pandas": True}  # the probe sees pandas where it is loaded

    # a run's own id and clock differ between the two processes; everything else is equal
    stamps = ("snapshot_id", "taken_at", "captured_at", "stored_at", "run_id", "started_at",
              "finished_at", "watermarks_read_at")
    for table in (*SNAPSHOT_TABLES, RUNS_TABLE):
        assert _rows(cli_lake, table, stamps) == _rows(library_lake, table, stamps), table
    assert len(_rows(cli_lake, "snapshot_offsets")) > 0
    for table in ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets"):
        files = [len(DeltaTable(str(lake / table)).file_uris()) for lake in (cli_lake, library_lake, cluster / "lake")]
        assert files[0] == files[1], table  # compacted alike
        if table != "committed_offsets":  # the history, one file per micro-batch, was compacted
            assert files[0] < files[2], table
        assert _rows(cli_lake, table) == _rows(library_lake, table), table
