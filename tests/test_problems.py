"""Every problem visible: summaries list unreadable regions and decode_status counts, problems
land in ``ingest_problems``, ``--strict`` fails the run, an empty or garbage source is never a
silent "records: 0, exit 0", each problem is logged once; and the decode command's bugs
(zero-uuid topic ids, ``.log.deleted`` files, ``decode | head``), the GX data docs with a
relative ``--lake``. All on data the project generates.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.cli import main
from pipelines.ingest import ingest_segments_local
from pipelines.sources.record_batches.writer import SegmentWriter
from tests.conftest import REPO
from tests.support.generated import generated_scenario, manifest

GARBAGE = bytes(range(256)) * 8  # 2 KiB that no reader can frame as a batch


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    return generated_scenario(tmp_path_factory.mktemp("gen"))


def _with_garbage(scenario: Path, where: Path) -> tuple[Path, Path]:
    """The generated segments plus one partition whose only segment is garbage."""
    shutil.copytree(scenario / "segments", where)
    bad = where / "__consumer_offsets-5" / "00000000000000000000.log"
    bad.parent.mkdir()
    bad.write_bytes(GARBAGE)
    return where, bad


def _unreadable_lines(caplog, path: Path) -> list[str]:
    """Log lines about ``path``'s unreadable regions (in-process, logging goes to caplog)."""
    return [r.getMessage() for r in caplog.records
            if "unreadable region" in r.getMessage() and str(path) in r.getMessage()]


# ----------------------------------------------------------------------------- ingest


@pytest.mark.spark
def test_ingest_lists_problems_records_them_and_strict_fails(spark, scenario: Path, tmp_path: Path,
                                                              capsys, caplog) -> None:
    data, bad = _with_garbage(scenario, tmp_path / "data")
    lake = tmp_path / "lake"
    args = ["ingest", "--source", "segments", "--path", str(data), "--lake", str(lake)]
    assert main(args) == 0  # without --strict: written, warned, listed
    out, err = capsys.readouterr()
    summary = json.loads(out)
    emitted = manifest(scenario)["counts"]["records"] - len(manifest(scenario)["aborted_commits"])
    assert summary["records"] == emitted
    assert summary["problems"] == [{"file": str(bad), "byte_range": [0, len(GARBAGE)],
                                    "bytes_skipped": len(GARBAGE),
                                    "reason": summary["problems"][0]["reason"]}]
    assert summary["bytes_skipped"] == len(GARBAGE) and summary["new_problems"] == 1
    assert sum(summary["decode_status"].values()) == emitted and summary["not_decoded"] == 0
    assert len(_unreadable_lines(caplog, bad)) == 1  # one log line per problem, not two
    caplog.clear()
    rows = DeltaTable(str(lake / "ingest_problems")).to_pyarrow_table().to_pylist()
    assert [(r["cluster_id"], r["source_kind"], r["source_file"], r["byte_position"], r["byte_end"],
             r["bytes_skipped"]) for r in rows] == [("default", "segments", str(bad), 0, len(GARBAGE),
                                                     len(GARBAGE))]
    assert rows[0]["source_identity"] == str(data.resolve()) and rows[0]["reason"]

    assert main([*args, "--strict"]) == 3  # the problem is still in the source
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["records"] == 0 and len(summary["problems"]) == 1 and summary["new_problems"] == 0
    assert "strict" in err and _unreadable_lines(caplog, bad) == []  # known: counted, not re-logged
    assert DeltaTable(str(lake / "ingest_problems")).to_pyarrow_table().num_rows == 1


@pytest.mark.spark
def test_empty_or_garbage_source_is_never_a_silent_zero(spark, tmp_path: Path, capsys,
                                                        caplog) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = ["ingest", "--source", "segments", "--path", str(empty), "--lake", str(tmp_path / "l1")]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["empty_source"] == \
        f"no __consumer_offsets-N segment files under {empty}"
    assert any("empty source" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)
    assert main([*args, "--strict"]) == 3
    capsys.readouterr()

    garbage = tmp_path / "garbage" / "__consumer_offsets-0" / "00000000000000000000.log"
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(GARBAGE)
    args = ["ingest", "--source", "segments", "--path", str(garbage.parent.parent),
            "--lake", str(tmp_path / "l2"), "--strict"]
    assert main(args) == 3
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 0 and summary["bytes_skipped"] == len(GARBAGE)
    assert summary["empty_source"].startswith("no readable record")


def test_local_ingest_reports_each_problem_once(scenario: Path, tmp_path: Path, caplog) -> None:
    data, bad = _with_garbage(scenario, tmp_path / "data")
    with caplog.at_level(logging.WARNING):
        report = ingest_segments_local(data, tmp_path / "lake")
    assert [(p.path, p.position, p.length_skipped) for p in report.problems] == [
        (str(bad), 0, len(GARBAGE))]
    logged = [r for r in caplog.records if str(bad) in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]


# ----------------------------------------------------------------------------- decode


def test_decode_summarises_problems_once_and_strict_fails(scenario: Path, tmp_path: Path,
                                                          capsys, caplog) -> None:
    data, bad = _with_garbage(scenario, tmp_path / "data")
    assert main(["decode", str(data)]) == 0
    out, err = capsys.readouterr()
    emitted = manifest(scenario)["counts"]["records"]
    assert len(out.splitlines()) == emitted  # decode shows aborted data too, as dump-log does
    assert len(_unreadable_lines(caplog, bad)) == 1
    assert f"{emitted} records" in err and f"1 problem(s), {len(GARBAGE)} bytes skipped" in err
    assert main(["decode", "--strict", str(data)]) == 3
    capsys.readouterr()
    assert main(["decode", "--stats", str(data)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["problems"] == 1 and stats["bytes_skipped"] == len(GARBAGE)
    assert stats["problem_list"][0]["file"] == str(bad)
    assert main(["decode", "--strict", str(scenario / "segments")]) == 0  # clean data passes


def test_decode_skips_deleted_segments_like_ingest(scenario: Path, tmp_path: Path, capsys) -> None:
    data = tmp_path / "data"
    shutil.copytree(scenario / "segments", data)
    part = data / "__consumer_offsets-0"
    seg = sorted(part.glob("*.log"))[0]
    shutil.copy(seg, part / (seg.name + ".deleted"))  # awaiting removal, as Kafka leaves it
    assert main(["decode", str(data)]) == 0
    decoded = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(decoded) == manifest(scenario)["counts"]["records"]
    assert len({(r["partition"], r["offset"]) for r in decoded}) == len(decoded)
    report = ingest_segments_local(data, tmp_path / "lake")
    assert report.records == len(decoded) - len(manifest(scenario)["aborted_commits"])
    assert main(["decode", str(part / (seg.name + ".deleted"))]) == 0  # named: read
    assert capsys.readouterr().out


def _v4_commit_value(offset: int, topic_id: bytes | None) -> bytes:
    """OffsetCommitValue v4 (flexible): topicId is tagged field 0, absent when None."""
    tags = b"\x00" if topic_id is None else b"\x01\x00\x10" + topic_id
    return (struct.pack(">hqi", 4, offset, 3) + b"\x03md" + struct.pack(">q", 1_700_000_000_000)
            + tags)


def _commit_key(group: str, topic: str, partition: int) -> bytes:
    return (struct.pack(">hh", 1, len(group)) + group.encode() + struct.pack(">h", len(topic))
            + topic.encode() + struct.pack(">i", partition))


def test_decode_topic_id_is_null_like_the_table_for_v4_without_the_tag(tmp_path: Path,
                                                                        capsys) -> None:
    tid = bytes(range(1, 17))
    with SegmentWriter(tmp_path / "data", 0) as writer:
        writer.append([(_commit_key("g", "orders", 0), _v4_commit_value(5, None)),
                       (_commit_key("g", "orders", 1), _v4_commit_value(6, tid))],
                      timestamp=1_700_000_000_000)
    assert main(["decode", str(tmp_path / "data")]) == 0
    printed = [json.loads(line)["value"]["fields"]["topic_id"]
               for line in capsys.readouterr().out.splitlines()]
    ingest_segments_local(tmp_path / "data", tmp_path / "lake")
    table = DeltaTable(str(tmp_path / "lake" / "offset_commits")).to_pyarrow_table().to_pylist()
    stored = [r["topic_id"] for r in sorted(table, key=lambda r: r["offset"])]
    assert printed == stored
    assert printed[0] is None and printed[1] not in (None, "AAAAAAAAAAAAAAAAAAAAAA")


def test_decode_into_a_closed_pipe_exits_quietly(scenario: Path) -> None:
    cmd = (f"set -o pipefail; {sys.executable} -m pipelines.cli decode "
           f"{scenario / 'segments'} | head -n 2")
    done = subprocess.run(["bash", "-c", cmd], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2
    assert "BrokenPipe" not in done.stderr and "failed" not in done.stderr


# ----------------------------------------------------------------------------- GX data docs


def test_data_docs_are_written_for_a_relative_lake(scenario: Path, tmp_path: Path,
                                                   monkeypatch) -> None:
    from pipelines.cli.snapshot import store_recorded
    from pipelines.reconcile.reconcile import run_reconcile

    monkeypatch.chdir(tmp_path)
    ingest_segments_local(scenario / "segments", "lake", cluster_id="demo")
    store_recorded(Path("lake"), scenario / "live", "demo", False)
    result = run_reconcile(Path("lake"), cluster_id="demo")
    index = Path(result.summary["gate"]["data_docs"])
    assert index.is_absolute() and index == tmp_path / "lake" / "_quality" / "data_docs" / "index.html"
    assert index.exists() and result.passed
