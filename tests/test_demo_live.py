"""The demo's recorded "live answers": the lake built from the demo's segments reconciles with
them row for row. The answers are written from the generator's bookkeeping (its manifest),
never from the segments, so this checks decoder + replay against an independent answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.demo import CAPTURE_DELAY_MS, DemoManifest, generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.reconcile import run_reconcile

LIVE_FILES = ("list_groups.json", "describe_groups.json", "consumer_group_describe.json",
              "offset_fetch.json", "offset_fetch_require_stable.json", "log_end_offsets.json")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoManifest]:
    out = tmp_path_factory.mktemp("demo-live") / "demo-data"
    return out, generate_cluster(out)


def test_live_capture_files_follow_the_manifest(demo: tuple[Path, DemoManifest]) -> None:
    out, manifest = demo
    assert all((out / "live" / name).is_file() for name in LIVE_FILES)
    snap = snapshot_from_recorded(out / "live")
    assert snap.errors == []
    assert int(snap.captured_at.timestamp() * 1000) == manifest.end_ms + CAPTURE_DELAY_MS
    assert {p.offsets_partition: p.high_watermark for p in snap.points} == {
        p: info["next_offset"] for p, info in manifest.partitions.items()}
    assert {g.group_id for g in snap.groups} == set(manifest.groups)  # deleted groups absent
    assert {(r.group_id, r.topic, r.partition): (r.committed_offset, r.leader_epoch, r.metadata)
            for r in snap.offsets} == {k: tuple(c) for k, c in manifest.committed.items()}
    members = {(m.group_id, m.member_id): {a["topic"]: a["partitions"] for a in m.assignment}
               for m in snap.members}
    assert members == {(g, m["member_id"]): m["assignment"]
                       for g, info in manifest.groups.items() for m in info["members"]}
    assert all(r.lag is not None and r.lag >= 0 for r in snap.lag)
    stable = json.loads((out / "live" / "offset_fetch_require_stable.json").read_text())
    plain = json.loads((out / "live" / "offset_fetch.json").read_text())
    assert stable["groups"] == plain["groups"]  # every transaction ended


def test_demo_lake_reconciles_with_the_recorded_answers(demo: tuple[Path, DemoManifest],
                                                        tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out, manifest = demo
    lake = tmp_path / "lake"
    ingest_segments_local(out, lake, cluster_id="demo")
    argv = ["snapshot", "--recorded", str(out / "live"), "--lake", str(lake), "--cluster-id", "demo"]
    assert main(argv) == 0
    stored = json.loads(capsys.readouterr().out)
    assert stored["rows_written"]["snapshot_offsets"] == len(manifest.committed)
    assert stored["offsets_partitions"] == manifest.num_partitions and not stored["errors"]
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["already_stored"]

    result = run_reconcile(lake, cluster_id="demo", data_docs=False)
    s = result.summary
    assert result.passed, json.dumps(s, indent=1, default=str)
    assert s["offset_classes"] == {"match": len(manifest.committed)}
    assert s["group_classes"] == {"match": len(manifest.groups)}
    assert (s["num_partitions"], s["num_partitions_source"]) == (manifest.num_partitions, "snapshot")
    rows = result.reconciliation.table.to_pylist()
    assert all(r["lake_log_end"] == r["snapshot_high_watermark"] for r in rows)  # not behind

    engine = DeltaRsEngine(lake)  # members and their (decoded) assignments agree too
    lake_members = {(r["group_id"], r["member_id"]):
                    {a["topic"]: a["partitions"] for a in r["assigned_partitions"] or ()}
                    for r in engine.read("group_members").to_pylist()}
    broker_members = {(r["group_id"], r["member_id"]): {a["topic"]: a["partitions"]
                                                        for a in r["assignment"]}
                      for r in engine.read("snapshot_members").to_pylist()}
    assert lake_members == broker_members and len(broker_members) == sum(
        len(g["members"]) for g in manifest.groups.values())


def test_snapshot_recorded_rejects_what_is_not_a_capture(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--recorded", str(tmp_path), "--lake", str(tmp_path / "lake")]) == 2
    assert "not a recorded capture" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["snapshot", "--recorded", str(tmp_path), "--bootstrap-servers", "localhost:9092"])
