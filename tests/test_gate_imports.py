"""The CLI's ``reconcile`` imports GX without the integrations the gate never uses (and
without running SciPy's and Altair's modules, which it imports for expectations the gate
never runs), and its gate decides exactly as GX imported as it is does.

Why: importing GX is most of a scheduled reconcile's own time, and GX imports every optional
integration installed (pyspark with pyspark.ml, SQLAlchemy, cloud SDKs). The CLI's process
hides them while GX is imported (``import_gx_without_unused_integrations``); a library
caller (a notebook, an Airflow worker) gets GX as it is. Both run here, each in a fresh
process on its own copy of one lake, with anomaly kinds that fail the gate, so the verdicts
compared hold failures as well as passes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.quality import GX_UNUSED_INTEGRATIONS
from pipelines.reconcile.snapshot import store_snapshot
from tests.conftest import REPO

_PROBE = """
import json, sys
lake, out, standalone = sys.argv[1], sys.argv[2], sys.argv[3] == "cli"
if standalone:
    from pipelines.cli import main
    code = main(["reconcile", "--lake", lake, "--cluster-id", "demo",
                 "--fail-on-anomalies", "all"], standalone=True)
else:
    from pipelines.reconcile.reconcile import run_reconcile
    code = 0 if run_reconcile(lake, cluster_id="demo", fail_on_anomalies=("all",)).passed else 1
watched = sys.argv[4].split(",")
imported = sorted(m for m in watched if m in sys.modules)
from scipy import stats  # what GX's import left unloaded works at its first use
import altair
with open(out, "w") as fh:
    json.dump({"code": code, "imported": imported,
               "finders": [type(f).__name__ for f in sys.meta_path],
               "entropy": float(stats.entropy([0.25, 0.75], [0.5, 0.5])),
               "chart": altair.Chart.__name__}, fh)
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """A generated cluster ingested as cluster 'demo' (it has offset anomalies), with its
    recorded live answers stored as the snapshot."""
    root = tmp_path_factory.mktemp("gate-imports")
    generate_cluster(root / "data", num_partitions=4, seed=3)
    ingest_segments_local(root / "data", root / "lake", cluster_id="demo")
    store_snapshot(DeltaRsEngine(root / "lake"), snapshot_from_recorded(root / "data" / "live"), "demo")
    return root / "lake"


def _run(lake: Path, work: Path, how: str) -> tuple[dict, list[tuple]]:
    """Reconcile a copy of ``lake`` in a fresh process; what it imported, and its gate's
    outcomes as stored in ``quality_results``."""
    copy = work / f"lake-{how}"
    shutil.copytree(lake, copy)
    out = work / f"{how}.json"
    # SciPy's statistics and Altair run these when they load (GX_LOADED_ON_FIRST_USE)
    watched = ",".join([*GX_UNUSED_INTEGRATIONS, "kafka", "great_expectations",
                        "scipy.stats._stats_py", "altair.vegalite"])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    probe = work / "probe.py"  # a file: under -c, pyspark's connect module exits (its doctest guard)
    probe.write_text(_PROBE)
    done = subprocess.run([sys.executable, str(probe), str(copy), str(out), how, watched],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = DeltaRsEngine(copy).read("quality_results").to_pylist()
    outcomes = sorted((r["suite"], r["expectation"], r["success"], r["observed_value"],
                       r["element_count"], r["unexpected_count"]) for r in rows)
    return json.loads(out.read_text()), outcomes


def test_the_cli_gate_hides_unused_integrations_and_decides_as_gx_does(lake: Path, tmp_path: Path) -> None:
    cli, cli_outcomes = _run(lake, tmp_path, "cli")
    library, library_outcomes = _run(lake, tmp_path, "library")

    # no pyspark, SQLAlchemy, Kafka client; SciPy's statistics and Altair not loaded
    assert cli["imported"] == ["great_expectations"]
    assert "NotInstalled" not in cli["finders"]  # gone once GX is imported
    assert "LoadedOnFirstUse" not in cli["finders"]
    # a library caller's GX is left as it is
    assert {"pyspark", "scipy.stats._stats_py", "altair.vegalite"} <= set(library["imported"])
    # and what the CLI's GX left unloaded loads and works at its first use
    assert cli["entropy"] == library["entropy"] == pytest.approx(0.1308120, abs=1e-6)
    assert cli["chart"] == library["chart"] == "Chart"

    assert cli["code"] == library["code"] == 1  # the anomalies fail the gate either way
    assert cli_outcomes == library_outcomes
    assert any(not success for _, _, success, *_ in cli_outcomes)
    assert sum(success for _, _, success, *_ in cli_outcomes) >= 20  # and the rest passes
