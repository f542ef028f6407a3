"""The wheel is the product: built, installed outside the checkout, it decodes and ingests.

Nothing here runs from the checkout: the commands run with the fresh virtualenv's
interpreter, from a directory outside the repository, on data the project generates.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
import tomllib
from deltalake import DeltaTable

from pipelines.decode.formats import load_record_formats
from pipelines.demo import DemoManifest, generate_cluster
from pipelines.lake.contracts import load_contracts
from pipelines.shipped_schemas import MissingSchemas
from tests.conftest import REPO, corpus_path
from tests.support.wheel import WheelInstall, clean_env, installed_wheel

pytestmark = pytest.mark.slow

DECODED = {"ok", "tombstone", "control"}  # a healthy record's possible statuses


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> WheelInstall:
    return installed_wheel(tmp_path_factory.getbasetemp() / "wheel-install")


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A working directory outside the checkout."""
    path = tmp_path_factory.mktemp("outside")
    assert REPO not in path.parents
    return path


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, DemoManifest]:
    data = tmp_path_factory.mktemp("generated") / "data"
    return data, generate_cluster(data, num_partitions=4, seed=11)


def run(cmd: list, cwd: Path, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def test_wheel_holds_every_package_and_schema(install: WheelInstall) -> None:
    names = set(zipfile.ZipFile(install.wheel).namelist())
    packages = {str(p.parent.relative_to(REPO)) for p in (REPO / "pipelines").rglob("__init__.py")}
    missing = sorted(p for p in packages if f"{p}/__init__.py" not in names)
    assert not missing, f"packages missing from the wheel (list them in pyproject.toml): {missing}"
    for kind in ("records", "tables"):
        shipped = {Path(n).name for n in names if n.startswith(f"pipelines/schemas/{kind}/")}
        assert shipped == {p.name for p in (REPO / "schemas" / kind).glob("*.json")}, kind
    assert "pipelines/queries/lag_by_group.sql" in names
    shipped_views = {n for n in names if n.startswith("pipelines/queries/views/")}
    assert shipped_views == {f"pipelines/queries/views/{p.name}"
                             for p in (REPO / "pipelines" / "queries" / "views").glob("*.sql")}
    assert shipped_views, "the queries' shared views are not in the wheel"
    # the launcher of Spark's Python processes: a shell script, installed executable
    assert any(n.endswith(".data/scripts/offsetlake-spark-python") for n in names)
    launcher = install.bin_dir / "offsetlake-spark-python"
    assert launcher.read_bytes().startswith(b"#!/bin/sh\n") and os.access(launcher, os.X_OK)
    assert b"OFFSETLAKE_SPARK_FORK_CLIENT" in launcher.read_bytes()
    # what it runs for `-m` commands, by path (pipelines/spark_fork_server.py)
    assert "pipelines/spark_fork_client.py" in names
    # the JVM's quiet logging settings, named by path (no file written at run time)
    assert "pipelines/log4j2-quiet.properties" in names


def test_imports_only_from_the_wheel(install: WheelInstall, outside: Path) -> None:
    probe = ("import json, sys, pipelines, pipelines.schemas, pyspark, deltalake; "
             "print(json.dumps([pipelines.__file__, pipelines.schemas.__file__, "
             "[type(f).__name__ for f in sys.meta_path]]))")
    out = run([install.python, "-c", probe], outside)
    assert out.returncode == 0, out.stderr
    package, schemas, finders = json.loads(out.stdout)
    assert Path(package).is_relative_to(install.site_packages)
    assert Path(schemas).is_relative_to(install.site_packages)
    assert not any("Editable" in f for f in finders), finders
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    out = run([install.offsetlake, "--version"], outside)
    assert out.returncode == 0 and out.stdout.strip() == f"offsetlake {version}", out


def test_decode_stats_on_a_generated_tree(install: WheelInstall, outside: Path,
                                          generated: tuple[Path, DemoManifest]) -> None:
    data, manifest = generated
    out = run([install.offsetlake, "decode", data, "--stats"], outside)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    counts = manifest.counts
    tombstones = sum(counts["tombstones_by_type"].values())
    assert stats["status"] == {"ok": counts["data_records"] - tombstones, "tombstone": tombstones,
                               "control": counts["control_records"]}
    assert not [t for t in stats["type"] if t.startswith("unknown")]
    assert stats["problems"] == 0


def test_decode_from_the_wheel_as_a_zip(install: WheelInstall, outside: Path,
                                        generated: tuple[Path, DemoManifest]) -> None:
    """The wheel on sys.path as a zip (what --py-files gives executors) reads its schemas."""
    data, manifest = generated
    probe = ("import sys, pipelines; assert pipelines.__file__.startswith(sys.argv[1]), "
             "pipelines.__file__; from pipelines.cli import run; run(sys.argv[2:])")
    out = run([install.python, "-c", probe, install.wheel, "decode", data, "--stats"], outside,
              PYTHONPATH=str(install.wheel))
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert set(stats["status"]) == DECODED
    assert sum(stats["status"].values()) == manifest.counts["records"]


def test_wheel_without_its_formats_refuses_to_start(install: WheelInstall, outside: Path,
                                                    generated: tuple[Path, DemoManifest],
                                                    tmp_path: Path) -> None:
    """A build that lost schemas/records exits non-zero with one clear line, decodes nothing."""
    broken = tmp_path / install.wheel.name
    with zipfile.ZipFile(install.wheel) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            if not item.filename.startswith("pipelines/schemas/records/"):
                dst.writestr(item, src.read(item))
    data, _ = generated
    out = run([install.python, "-m", "pipelines.cli", "decode", data, "--stats"], outside,
              PYTHONPATH=str(broken))
    assert out.returncode == 2
    assert "broken installation" in out.stderr and "schemas/records" in out.stderr.replace("\\", "/")
    assert "unknown" not in out.stdout and out.stdout == ""


def test_empty_or_missing_format_sets_raise(tmp_path: Path) -> None:
    with pytest.raises(MissingSchemas, match="is missing"):
        load_record_formats(tmp_path / "absent")
    with pytest.raises(MissingSchemas, match=r"no \*\.json files"):
        load_record_formats(tmp_path)
    (tmp_path / "consumer_protocol.json").write_text("{}")
    with pytest.raises(MissingSchemas, match="no record formats"):
        load_record_formats(tmp_path)
    for name in ("00_legacy_offset_commit.json", "02_group_metadata.json"):
        (tmp_path / name).write_text((REPO / "schemas" / "records" / name).read_text())
    with pytest.raises(MissingSchemas, match=r"types \[1\] are missing"):
        load_record_formats(tmp_path)
    tables = tmp_path / "tables"
    tables.mkdir()
    with pytest.raises(MissingSchemas, match=r"no \*\.json files"):
        load_contracts(tables)


def test_ingest_snapshot_reconcile_from_the_wheel(install: WheelInstall, outside: Path,
                                                  generated: tuple[Path, DemoManifest]) -> None:
    """The demo's path, run by the installed package: ingest, recorded snapshot, gate."""
    data, manifest = generated
    lake = outside / "lake"
    out = run([install.offsetlake, "ingest", "--source", "segments", "--path", data,
               "--lake", lake, "--cluster-id", "gen"], outside, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr == ""  # quiet as from the checkout: the JVM's settings ship in the wheel
    summary = json.loads(out.stdout)
    counts = manifest.counts
    tombstones = sum(counts["tombstones_by_type"].values())
    aborted = len(manifest.aborted)  # records of aborted transactions are never ingested
    assert summary["decode_status"] == {"ok": counts["data_records"] - tombstones - aborted,
                                        "tombstone": tombstones, "control": counts["control_records"]}
    assert summary["rows_written"]["offsets_raw"] == counts["records"] - aborted
    rows = DeltaTable(str(lake / "committed_offsets")).to_pyarrow_table().to_pylist()
    lake_offsets = {(r["group_id"], r["topic"], r["partition"]): (r["committed_offset"], r["leader_epoch"],
                                                                  r["metadata"])
                    for r in rows}
    assert lake_offsets == {k: (c.offset, c.leader_epoch, c.metadata)
                            for k, c in manifest.committed.items()}

    out = run([install.offsetlake, "snapshot", "--recorded", data / "live", "--lake", lake,
               "--cluster-id", "gen"], outside)
    assert out.returncode == 0, out.stderr[-3000:]
    out = run([install.offsetlake, "reconcile", "--lake", lake, "--cluster-id", "gen"], outside,
              timeout=600)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    result = json.loads(out.stdout)
    assert result["passed"] is True, result


def test_wheel_decodes_the_real_golden_corpus(install: WheelInstall, outside: Path) -> None:
    segments = corpus_path("golden", "scenario-a", "segments")
    out = run([install.offsetlake, "decode", segments, "--stats"], outside)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert set(stats["status"]) <= DECODED and stats["status"]["ok"] > 0
    assert not [t for t in stats["type"] if t.startswith("unknown")]

