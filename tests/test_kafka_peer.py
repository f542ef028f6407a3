"""The harness that times Kafka's own ``kafka-dump-log.sh`` beside our commands
(``benchmarks/kafka_peer.py``, used by ``decode_cli.py`` and ``real_workload.py``).

No Kafka distribution can be installed here, so the tool is a stand-in script: these tests
check what the harness controls (the files handed over, named as Kafka's tool reads them, in
our decoder's order; the flags; the records counted; failures named), never a figure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.demo import generate_cluster
from pipelines.sources.segments.files import find_segments

REPO = Path(__file__).resolve().parents[1]


def _benchmark_module(name: str):
    """A module of ``benchmarks/`` (scripts import their helpers by bare name), registered
    under that name, without putting the folder on ``sys.path`` for the whole session."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_benchmark_module("machine_cpu")
kafka_peer = _benchmark_module("kafka_peer")

#: a stand-in for Kafka's tool: keeps its arguments, prints each file's header and two
#: record lines per file, as the real tool prints records with --print-data-log
STAND_IN = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/../args.txt"
[ -n "$FAIL" ] && { echo "$FAIL" >&2; exit 1; }
files=$(printf '%s' "$4" | tr ',' ' ')
for f in $files; do
  echo "Dumping $f"
  echo "Log starting offset: 0"
  echo "baseOffset: 0 lastOffset: 1 count: 2"
  echo "| offset: 0 CreateTime: 1 keySize: 8 valueSize: 20 key: x payload: y"
  echo "| offset: 1 CreateTime: 1 keySize: 8 valueSize: 20 key: x payload: y"
done
"""


@pytest.fixture
def kafka_home(tmp_path: Path) -> Path:
    home = tmp_path / "kafka"
    (home / "bin").mkdir(parents=True)
    tool = home / "bin" / "kafka-dump-log.sh"
    tool.write_text(STAND_IN)
    tool.chmod(0o755)
    return home


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=3, live=False)
    return data


def test_files_are_named_as_kafkas_tool_reads_them_in_our_order(tmp_path: Path, cluster: Path) -> None:
    # a corpus-style version of a segment (``<base>.log@<commit>``), which the tool would skip
    version = tmp_path / "corpus" / "__consumer_offsets-7" / "00000000000000000042.log@0a1b2c"
    version.parent.mkdir(parents=True)
    shutil.copyfile(next(cluster.rglob("*.log")), version)
    paths = [str(cluster), str(version.parent.parent)]
    ours = [s.path for plog in find_segments(*paths) for s in plog.segments]
    links = kafka_peer.tool_files(paths, tmp_path / "links")
    assert [link.resolve() for link in links] == [p.resolve() for p in ours]
    assert len(ours) >= 4
    for link, seg in zip(links, (s for plog in find_segments(*paths) for s in plog.segments), strict=True):
        assert link.name == f"{seg.base_offset:020d}.log"
    assert links[-1].name == "00000000000000000042.log"


def test_no_segment_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no segment files"):
        kafka_peer.tool_files([str(tmp_path)], tmp_path / "links")


def test_a_home_without_the_tool_is_an_error(tmp_path: Path) -> None:
    assert kafka_peer.dump_log_tool(None) is None
    assert kafka_peer.dump_log_tool("") is None
    with pytest.raises(SystemExit, match=r"bin/kafka-dump-log\.sh: --kafka-home"):
        kafka_peer.dump_log_tool(tmp_path)


def test_the_tool_gets_the_flags_and_files_and_its_records_are_counted(
        tmp_path: Path, kafka_home: Path, cluster: Path) -> None:
    tool = kafka_peer.dump_log_tool(kafka_home)
    files = kafka_peer.tool_files([str(cluster)], tmp_path / "links")
    wall, cpu, printed = kafka_peer.run_dump_log(tool, files, tmp_path / "kafka.out")
    args = (kafka_home / "args.txt").read_text().splitlines()
    assert args == ["--offsets-decoder", "--print-data-log", "--files", ",".join(map(str, files))]
    assert printed == 2 * len(files)
    assert wall > 0 and cpu >= 0


def test_a_failing_tool_is_an_error_with_its_message(
        tmp_path: Path, kafka_home: Path, cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL", "Exception in thread main: no such option")
    tool = kafka_peer.dump_log_tool(kafka_home)
    files = kafka_peer.tool_files([str(cluster)], tmp_path / "links")
    with pytest.raises(SystemExit, match="exited 1: Exception in thread main: no such option"):
        kafka_peer.run_dump_log(tool, files, tmp_path / "kafka.out")


def test_decode_cli_prints_each_command_beside_the_tool(tmp_path: Path, kafka_home: Path,
                                                       cluster: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decode_cli.py"), "--repeat", "1",
                           "--commands", "json,stats", "--kafka-home", str(kafka_home), str(cluster)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    files = len([s for plog in find_segments(cluster) for s in plog.segments])
    assert f"on {files} segment files" in done.stdout
    assert done.stdout.count(f"(kafka-dump-log --offsets-decoder --print-data-log, {2 * files} records)") == 2
    assert "vs Kafka: CPU" in done.stdout
    assert "(issue 9 goal: CPU >= 5x)" in done.stdout and "(issue 9 goal: CPU >= 20x)" in done.stdout


def test_decode_cli_without_a_kafka_home_says_so(tmp_path: Path, cluster: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_HOME"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decode_cli.py"), "--repeat", "1",
                           "--commands", "stats", str(cluster)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Kafka's tool: none" in done.stdout and "vs Kafka" not in done.stdout
