"""A run over segment files that did not change since the last one answers without Spark,
exactly as the query would have; any change, or a batch left to replay, runs the query.

Why: a scheduled ``availableNow`` run over an unchanged directory planned no batch, yet
started Spark to learn it (~2.3 s of a ~3 s run). ``pipelines.sources.segments.caught_up``
reads Spark's checkpoint (the last planned batch's end offsets, and its commit) and asks the
source's own planner. On data the project generates: the checkpoint Spark itself wrote, a
segment that grew in place (as a broker's active segment does), a new rolled segment, a
planned batch without its commit, and logs in a format this does not read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.sources.record_batches.exact_reader import read_records
from pipelines.sources.record_batches.writer import SegmentWriter
from pipelines.sources.segments.caught_up import committed_end, nothing_new
from tests.conftest import REPO
from tests.support.generated import generated_scenario, manifest

TABLES = ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets",
          "ingest_problems", "ingest_progress")

#: runs the CLI as the console script does and says whether a Spark session was started
_PROBE = """
import json, sys
from pipelines.cli import main
code = main(sys.argv[2:], standalone=True)
started = "pyspark" in sys.modules and sys.modules["pyspark"].SparkContext._active_spark_context is not None
with open(sys.argv[1], "w") as fh:
    json.dump({"code": code, "spark_started": started}, fh)
"""


def _spark_log(folder: Path, entries: dict[int, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n, text in entries.items():
        (folder / str(n)).write_text(text)


_META = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def test_committed_end_reads_spark_logs_and_declines_what_it_cannot_trust(tmp_path: Path) -> None:
    spark = tmp_path / "spark"
    assert committed_end(spark) is None  # no checkpoint yet
    _spark_log(spark / "offsets", {0: f'v1\n{_META}\n{{"__consumer_offsets-0": 5}}',
                                   1: f'v1\n{_META}\n{{"__consumer_offsets-0": 9, "__consumer_offsets-1": 2}}'})
    _spark_log(spark / "commits", {0: 'v1\n{"nextBatchWatermarkMs":0}'})
    (spark / "offsets" / ".1.crc").write_bytes(b"x")
    assert committed_end(spark) is None  # batch 1 planned, not committed: Spark replays it
    _spark_log(spark / "commits", {1: 'v1\n{"nextBatchWatermarkMs":0}'})
    assert committed_end(spark) == {"__consumer_offsets-0": 9, "__consumer_offsets-1": 2}

    for text in (f'v2\n{_META}\n{{"a": 1}}',  # another log version
                 f'v1\n{_META}\n{{"a": 1}}\n{{"b": 2}}',  # two sources
                 f'v1\n{_META}\n{{"a": 1',  # cut short
                 f'v1\n{_META}\n{{"a": "1"}}',  # not offsets
                 f'v1\n{_META}\n[1, 2]'):
        _spark_log(spark / "offsets", {2: text})
        _spark_log(spark / "commits", {2: 'v1\n{"nextBatchWatermarkMs":0}'})
        assert committed_end(spark) is None, text


def _probe(tmp_path: Path, args: list[str]) -> tuple[dict, dict]:
    """The CLI run in a fresh process: (its summary, {code, spark_started})."""
    out = tmp_path / "probe.json"
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE)
    done = subprocess.run([sys.executable, str(probe), str(out), *args], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), json.loads(out.read_text())


def _versions(lake: Path) -> dict[str, int]:
    return {t: DeltaTable(str(lake / t)).version() for t in TABLES}


def _add_commits(data: Path, partition: int, commits: int, *, roll: bool) -> None:
    """``commits`` copies of the partition's last offset commit at its next offsets: appended
    to its last segment file, as a broker appends to its active segment, or (``roll``) as a
    new segment file."""
    directory = data / f"__consumer_offsets-{partition}"
    records = list(read_records(directory))
    last_commit = next(r for r in reversed(records) if r.key and r.key[:2] == b"\x00\x01" and r.value)
    scratch = data.parent / f"scratch-{partition}"
    with SegmentWriter(data if roll else scratch, partition, base_offset=records[-1].offset + 1) as writer:
        writer.append([(last_commit.key, last_commit.value)] * commits,
                      timestamp=max(r.timestamp for r in records) + 1000)
    if not roll:
        (segment,) = (scratch / directory.name).glob("*.log")
        with sorted(directory.glob("*.log"))[-1].open("ab") as fh:
            fh.write(segment.read_bytes())


@pytest.mark.spark
@pytest.mark.slow
def test_an_unchanged_source_answers_without_spark_and_any_change_runs_the_query(tmp_path: Path) -> None:
    scenario = generated_scenario(tmp_path / "gen")
    data, lake = scenario / "segments", tmp_path / "lake"
    args = ["ingest", "--source", "segments", "--path", str(data), "--lake", str(lake)]
    emitted = manifest(scenario)["counts"]["records"] - len(manifest(scenario)["aborted_commits"])

    first, ran = _probe(tmp_path, args)
    assert ran == {"code": 0, "spark_started": True} and first["records"] == emitted
    versions = _versions(lake)

    again, ran = _probe(tmp_path, args)
    assert ran == {"code": 0, "spark_started": False}
    # what the query planning no batch reported (test_ingest.py: it writes nothing)
    assert {**again, "seconds": None} == {**first, "seconds": None, "batches": 0, "records": 0,
                                          "records_per_second": 0, "decode_status": {},
                                          "not_decoded": 0, "rows_written": {}, "new_problems": 0}
    assert _versions(lake) == versions

    _add_commits(data, 0, 7, roll=False)  # the active segment grew
    assert not nothing_new(str(data), lake / "_checkpoints" / "default" / "ingest")
    grown, ran = _probe(tmp_path, args)
    assert ran["spark_started"] and grown["records"] == 7
    assert DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table(columns=["offset"]).num_rows == emitted + 7

    again, ran = _probe(tmp_path, args)
    assert not ran["spark_started"] and again["records"] == 0

    checkpoint = lake / "_checkpoints" / "default" / "ingest" / "spark"
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # as if the run had stopped before its commit
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    _, ran = _probe(tmp_path, args)
    assert ran["spark_started"]  # the batch replayed: Delta's transaction ids keep it once
    assert DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table(columns=["offset"]).num_rows == emitted + 7
    _, ran = _probe(tmp_path, args)
    assert ran == {"code": 0, "spark_started": False}  # committed now
    ingest_checkpoint = checkpoint.parent
    assert nothing_new(str(data), ingest_checkpoint)
    kept = ingest_checkpoint / "pending_batches" / "00000000000000000009.batch"
    kept.write_bytes(b"")  # a batch Spark counted done whose commit had not landed
    assert not nothing_new(str(data), ingest_checkpoint)
    kept.unlink()

    _add_commits(data, 1, 5, roll=True)  # a segment rolled
    rolled, ran = _probe(tmp_path, args)
    assert ran["spark_started"] and rolled["records"] == 5
