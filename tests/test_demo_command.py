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
    assert "committed_offsets vs the generator's expected coordinator state: 90 of 90 equal, 0 unexpected" in out
    for table in ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets", "consumer_groups",
                  "group_members", "group_generations"):
        assert table in out
    assert main(args) == 0  # a second run finds nothing new and still checks out
    assert "90 of 90 equal, 0 unexpected" in capsys.readouterr().out
