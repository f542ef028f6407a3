"""The command line: JSON decode output, stats, and one-line errors instead of stack traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pipelines.cli import main
from tests.conftest import REPO


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_decode_prints_one_json_object_per_record(scenario_a: Path, capsys) -> None:
    seg = scenario_a / "segments" / "__consumer_offsets-3" / "00000000000000000000.log"
    assert main(["decode", str(seg)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 65  # the MANIFEST's record count for partition 3
    first = lines[0]
    assert set(first) >= {"partition", "offset", "timestamp", "key", "value", "batch", "decode_status"}
    assert first["partition"] == 3 and first["offset"] == 0
    markers = [r for r in lines if r["batch"]["control"]]
    assert markers and all(r["decode_status"] == "control" and r["batch"]["control_type"] in ("COMMIT", "ABORT")
                           for r in markers)
    txn = [r for r in lines if r["batch"]["transactional"] and not r["batch"]["control"]]
    assert txn and all(r["batch"]["producer_id"] >= 0 for r in txn)
    commit = next(r for r in lines if r["key"] and r["key"]["type"] == 1 and r["value"])
    assert set(commit["key"]["fields"]) == {"group", "topic", "partition"}
    assert {"offset", "leader_epoch", "metadata", "commit_timestamp"} <= set(commit["value"]["fields"])


def test_decode_stats_histogram(scenario_a: Path, capsys) -> None:
    assert main(["decode", "--stats", "--num-partitions", "5", str(scenario_a / "segments")]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["status"] == {"ok": 16324, "tombstone": 42, "control": 7}
    assert stats["problems"] == 0 and stats["partition_for_mismatches"] == 0
    assert stats["version"]["OffsetCommit v3"] == 16211  # the MANIFEST's count


def test_every_command_has_help() -> None:
    for command in ("decode", "ingest", "demo", "snapshot", "reconcile", "maintain", "report",
                    "state"):
        done = run_cli(command, "--help")
        assert done.returncode == 0 and "usage: offsetlake" in done.stdout, command


def test_bad_arguments_give_one_line(tmp_path: Path) -> None:
    done = run_cli("decode", str(tmp_path / "missing.log"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"offsetlake decode: error: no such file or directory: "
                                                f"{tmp_path / 'missing.log'}"]
    done = run_cli("ingest", "--source", "kafka", "--lake", str(tmp_path / "lake"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "--bootstrap-servers" in done.stderr


def test_unreachable_cluster_gives_one_line(tmp_path: Path) -> None:
    done = run_cli("snapshot", "--bootstrap-servers", "127.0.0.1:1", "--lake", str(tmp_path / "lake"))
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if "offsetlake snapshot" in line]
    assert len(lines) == 1 and "cannot reach" in lines[0] and "Traceback" not in done.stderr
