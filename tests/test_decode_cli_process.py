"""``offsetlake decode`` as a user runs it: a fresh process through ``run()``, the console
script's entry point.

Why a process: ``run()`` lets the command run without pandas (pyarrow would import it on its
first ``pa.array``/``pa.scalar``; see pipelines/cli/decode.py), which the in-process tests of
tests/test_decode_dump.py (``main()``) do not exercise. Here the process' JSON lines, stderr
summary and ``--stats`` report must be the per-record oracle's bytes
(tests/support/decode_oracle.py), and the process must not have imported the modules the
command has no use for (pandas, pyspark, deltalake, great_expectations, the Kafka client).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.demo import generate_cluster
from tests.support.decode_oracle import oracle_decode

REPO = Path(__file__).resolve().parents[1]
# importlib.metadata: reading installed distributions' metadata (~10-25 ms of the start) is for
# --version alone (pipelines/cli/parser.py; crc32c's own __init__ does it too: framing.py)
HEAVY = ("pandas", "pyspark", "deltalake", "great_expectations", "kafka", "pyarrow.dataset",
         "importlib.metadata")
# run() ends the process with os._exit: the probe reports sys.modules from inside that call
_PROBE = """
import os, sys
import pipelines.cli as cli
real_exit = os._exit
def report(code):
    heavy = [m for m in {heavy!r} if m in sys.modules]
    sys.stderr.write("IMPORTED " + ",".join(heavy) + "\\n")
    sys.stderr.flush()
    real_exit(code)
os._exit = report
cli.run(sys.argv[1:])
"""


def _decode_process(*args: str) -> tuple[bytes, list[str], list[str]]:
    """(stdout, stderr lines, heavy modules imported) of ``offsetlake decode ARGS``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY), "decode", *args],
                          capture_output=True, env=env, cwd=REPO, timeout=300, check=False)
    err = proc.stderr.decode("utf-8").splitlines()
    assert proc.returncode == 0, err
    reported = [line for line in err if line.startswith("IMPORTED ")]
    assert len(reported) == 1, err
    imported = [m for m in reported[0][len("IMPORTED "):].split(",") if m]
    return proc.stdout, [line for line in err if not line.startswith("IMPORTED ")], imported


def _assert_process_equals_oracle(paths: list[str], num_partitions: int,
                                  allowed: tuple[str, ...] = ()) -> None:
    expected, summary = oracle_decode(paths)
    out, err, imported = _decode_process(*paths)
    assert out.count(b"\n") == expected.count("\n") > 0
    assert out == expected.encode("utf-8")
    assert summary in err
    assert [m for m in imported if m not in allowed] == []
    for extra in (["--stats"], ["--stats", "--num-partitions", str(num_partitions)]):
        expected_stats, _ = oracle_decode(paths, stats=True,
                                          num_partitions=num_partitions if len(extra) > 1 else None)
        out, _, imported = _decode_process(*extra, *paths)
        assert out == expected_stats.encode("utf-8")
        assert [m for m in imported if m not in allowed] == []


def test_decode_process_on_generated_cluster_imports_nothing_heavy(tmp_path: Path) -> None:
    generate_cluster(tmp_path, num_partitions=3, live=False)
    _assert_process_equals_oracle([str(tmp_path)], 3)


def test_decode_process_on_compressed_generated_cluster(tmp_path: Path) -> None:
    generate_cluster(tmp_path, num_partitions=3, compression=["none", "gzip", "zstd"],
                     live=False)
    _assert_process_equals_oracle([str(tmp_path)], 3)


def test_decode_process_on_real_corpus(public_corpus: Path, golden_dir: Path) -> None:
    public = sorted(p for p in public_corpus.iterdir() if p.is_dir())[::8]
    _assert_process_equals_oracle([str(golden_dir), *map(str, public)], 50)


@pytest.mark.parametrize("extra", [[], ["--stats"]])
def test_decode_process_without_records_says_so(tmp_path: Path, extra: list[str]) -> None:
    (tmp_path / "__consumer_offsets-0").mkdir()
    expected, _ = oracle_decode([str(tmp_path)], stats=bool(extra))
    out, err, imported = _decode_process(*extra, str(tmp_path))
    assert out == expected.encode("utf-8")
    assert any("no record in" in line for line in err)
    assert imported == []
