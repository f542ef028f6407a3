"""``offsetlake demo`` (the README's first command) end to end, in this test session's Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.cli import main

pytestmark = pytest.mark.spark


def test_demo_builds_the_lake_and_matches_the_generators_expectation(spark, tmp_path: Path, capsys) -> None:
    args = ["demo", "--lake", str(tmp_path / "lake"), "--data", str(tmp_path / "data")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "committed_offsets vs the generator's expected coordinator state: 95 of 95 equal, 0 unexpected" in out
    for table in ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets", "consumer_groups",
                  "group_members", "group_generations"):
        assert table in out
    assert main(args) == 0  # a second run finds nothing new and still checks out
    assert "95 of 95 equal, 0 unexpected" in capsys.readouterr().out


def test_demo_ends_with_next_commands_that_work_as_printed(spark, tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    """`make demo` -> snapshot --recorded -> reconcile -> report, exactly as printed, pass."""
    import shlex

    monkeypatch.chdir(tmp_path)  # the defaults of `make demo`: ./lake, ./demo-data
    assert main(["demo", "--lake", "lake", "--data", "demo-data"]) == 0
    out = capsys.readouterr().out
    commands = [line.strip() for line in out.splitlines() if line.startswith("  offsetlake ")]
    assert [c.split()[1] for c in commands] == ["snapshot", "reconcile", "report"]
    assert all("--cluster-id demo" in c for c in commands[:2])
    for command in commands:
        assert main(shlex.split(command)[1:]) == 0, command
    summary = capsys.readouterr().out
    assert '"passed": true' in summary
    assert (tmp_path / "offsetlake-report.html").exists()


def test_demo_regenerate_replaces_the_old_history(spark, tmp_path: Path, capsys) -> None:
    """A new history neither mixes with the old segment files nor with the old lake."""
    import json

    args = ["demo", "--lake", str(tmp_path / "lake"), "--data", str(tmp_path / "data")]
    assert main(args) == 0  # 10 partitions, seed 7
    capsys.readouterr()
    assert main([*args, "--regenerate", "--seed", "11", "--partitions", "7"]) == 0
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "data" / "demo-manifest.json").read_text())
    assert manifest["seed"] == 11 and manifest["num_partitions"] == 7
    n = len(manifest["committed_offsets"])
    assert f"{n} of {n} equal, 0 unexpected" in out
    assert sorted(p.name for p in (tmp_path / "data").glob("__consumer_offsets-*")) == sorted(
        f"__consumer_offsets-{i}" for i in range(7))


def test_next_commands_name_the_program_as_it_was_run(monkeypatch) -> None:
    """`python -m pipelines.cli` is printed as such; another module's __main__.py (pytest's
    `python -m pytest`) is not taken for ours."""
    import sys

    import pipelines.cli.demo as demo

    cli_main = str(Path(demo.__file__).with_name("__main__.py"))
    monkeypatch.setattr(sys, "argv", [cli_main, "demo"])
    assert demo._program().endswith(" -m pipelines.cli")
    monkeypatch.setattr(sys, "argv", ["/venv/lib/python3.11/site-packages/pytest/__main__.py"])
    assert demo._program() == "offsetlake"
