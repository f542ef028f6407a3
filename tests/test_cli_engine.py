"""``--delta-engine``: one setting shared by every command that reads or writes the lake.

Why: a lake kept by delta-spark on a cluster must be snapshotted, reconciled and maintained
by delta-spark too, and the choice must not silently fall back to delta-rs in one command.
Here (no delta-spark jars) choosing spark must reach each command and stop it with the
jar message, not run it with delta-rs; report, which cannot use it, says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipelines.cli import build_parser, main

JAR_MESSAGE = "needs delta-spark's jars visible to Spark"


@pytest.mark.parametrize(("argv", "expected"), [
    (["reconcile"], "delta-rs"),
    (["--delta-engine", "spark", "reconcile"], "spark"),
    (["reconcile", "--delta-engine", "spark"], "spark"),
    (["--delta-engine", "spark", "maintain", "--delta-engine", "delta-rs"], "delta-rs"),
    (["--delta-engine", "spark", "ingest", "--source", "segments"], "spark"),
    (["snapshot", "--delta-engine", "spark", "--recorded", "x"], "spark"),
    (["report", "--delta-engine", "spark"], "spark"),
    (["demo", "--delta-engine", "spark"], "spark"),
])
def test_the_setting_is_parsed_for_every_lake_command(argv: list[str], expected: str) -> None:
    assert build_parser().parse_args(argv).delta_engine == expected


def test_the_environment_sets_it_for_all_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFSETLAKE_DELTA_ENGINE", "spark")
    for command in ("ingest", "snapshot", "reconcile", "maintain", "report", "demo"):
        assert build_parser().parse_args([command]).delta_engine == "spark", command


def test_report_says_it_cannot_use_delta_spark(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--delta-engine", "spark", "report", "--lake", str(tmp_path)]) == 2
    assert "report renders locally with DuckDB" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.parametrize("argv", [
    ["snapshot", "--recorded", "{live}", "--cluster-id", "c"],
    ["reconcile", "--cluster-id", "c"],
    ["maintain"],
    ["ingest", "--source", "segments", "--path", "{data}"],
])
def test_delta_spark_reaches_each_command(spark: Any, argv: list[str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    """Without delta-spark's jars the command stops with the jar message (exit 2): the
    choice reached it. (The suite's SparkSession is the one the command gets.)"""
    from pipelines.spark import has_delta_jars

    if has_delta_jars(spark):
        pytest.skip("delta-spark's jars are present: tests/test_optional_jvm_ends.py runs the engine")
    from pipelines.demo import generate_cluster

    data = tmp_path / "data"
    generate_cluster(data, num_partitions=2, seed=3)
    lake = tmp_path / "lake"
    lake.mkdir()
    args = [a.format(live=data / "live", data=data) for a in argv]
    assert main(["--delta-engine", "spark", *args[:1], "--lake", str(lake), *args[1:]]) == 2
    assert JAR_MESSAGE in capsys.readouterr().err
