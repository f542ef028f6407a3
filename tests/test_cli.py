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


#: A failure as the CLI received it from Spark (a cluster master whose Python, Spark's default
#: python3, had no offsetlake), cut to its first lines: Spark's exception, the traceback of
#: its Python process inside, the JVM's query description after it.
SPARK_WRAPPED_FAILURE = """[STREAM_FAILED] Query [id = 4611, runId = eb79] terminated with exception: \
[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback (most recent call last):
  File "/opt/spark/python/lib/pyspark.zip/pyspark/serializers.py", line 454, in loads
    return cloudpickle.loads(obj, encoding=encoding)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ModuleNotFoundError: No module named 'pipelines'
 SQLSTATE: 38000 SQLSTATE: XXKST
=== Streaming Query ===
Identifier: offsetlake_ingest [id = 4611, runId = eb79]
"""


def test_a_failure_wrapping_a_python_traceback_names_its_cause(monkeypatch, capsys) -> None:
    """The one line a failure prints ends with the Python exception inside Spark's message,
    not with "Traceback (most recent call last):"."""
    import pipelines.cli.decode as decode

    class StreamingQueryException(Exception):
        pass

    def fail(args):
        raise StreamingQueryException(SPARK_WRAPPED_FAILURE)

    monkeypatch.setattr(decode, "cmd_decode", fail)
    assert main(["decode", "x.log"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "offsetlake decode: failed: StreamingQueryException: [STREAM_FAILED] Query [id = 4611, runId = eb79] "
        "terminated with exception: [PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
        "ModuleNotFoundError: No module named 'pipelines' (rerun with --log-level DEBUG for details)")


def test_one_line_of_a_failure() -> None:
    from pipelines.cli import one_line

    assert one_line("") == ""
    assert one_line("no route to host\nmore") == "no route to host"
    task = ("An exception was thrown from the Python worker.\nTraceback (most recent call last):\n"
            '  File "x.py", line 1, in f\n    g()\nValueError: bad record\n\tat org.apache.spark.X')
    assert one_line(task) == "An exception was thrown from the Python worker. (ValueError: bad record)"
    chained = ("failed: Traceback (most recent call last):\n  File \"a\"\nKeyError: 'a'\n\nDuring handling of "
               "the above exception, another exception occurred:\n\nTraceback (most recent call last):\n"
               "  File \"b\"\nRuntimeError: while handling")
    assert one_line(chained) == "failed: RuntimeError: while handling"
