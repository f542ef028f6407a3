"""A gate that cannot be fooled (issue 12 item 2), on data the project generates itself.

After ``make demo`` the lake holds cluster ``demo``; reconciling ``default`` used to call
every row ``lake_behind`` ("ingested up to 0"), explain it and pass. Now: no lake data for
the snapshot's cluster fails; ``lake_behind`` needs evidence (the lake's ingested position
in the partition below the snapshot point); ``--snapshot-id`` picks a snapshot; snapshots
captured at the same instant are ordered as they were stored.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pipelines.cli import main as cli_main
from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.engines import DeltaRsEngine
from pipelines.reconcile.cluster.recorded import snapshot_from_recorded
from pipelines.reconcile.cluster.rows import ClusterSnapshot, GroupRow, OffsetRow, PointRow
from pipelines.reconcile.inputs import LakeState, SnapshotState
from pipelines.reconcile.reconcile import classify, reconcile, run_reconcile
from pipelines.reconcile.snapshot import (
    SnapshotInfo,
    latest_snapshot,
    read_snapshot,
    store_snapshot,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, Path]:
    """A generated cluster ingested as cluster 'demo', with its recorded live answers."""
    root = tmp_path_factory.mktemp("gate")
    generate_cluster(root / "data", num_partitions=4, seed=3)
    ingest_segments_local(root / "data", root / "lake", cluster_id="demo")
    return root / "data", root / "lake"


def _store(lake: Path, data: Path, cluster_id: str) -> str:
    snap = snapshot_from_recorded(data / "live")
    store_snapshot(DeltaRsEngine(lake), snap, cluster_id)
    return snap.snapshot_id


def test_reconcile_of_a_cluster_the_lake_does_not_hold_fails(demo: tuple[Path, Path], tmp_path: Path) -> None:
    data, lake = demo
    shutil.copytree(lake, tmp_path / "lake")
    _store(tmp_path / "lake", data, "default")  # the snapshot of the wrong cluster name
    result = run_reconcile(tmp_path / "lake", cluster_id="default", data_docs=False)
    assert not result.passed
    assert any("holds no data of cluster 'default'" in b for b in result.summary["blocked_by"])
    assert result.reconciliation.counts().get("lake_behind", 0) == 0  # nothing explained by default
    # the right cluster passes: the gate is not simply always failing
    _store(tmp_path / "lake", data, "demo")
    good = run_reconcile(tmp_path / "lake", cluster_id="demo", data_docs=False)
    assert good.passed, good.summary["unexplained"]
    assert good.summary["blocked_by"] == []


def test_cli_reconcile_wrong_cluster_exits_1(demo: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    data, lake = demo
    shutil.copytree(lake, tmp_path / "lake")
    _store(tmp_path / "lake", data, "default")
    code = cli_main(["reconcile", "--lake", str(tmp_path / "lake"), "--cluster-id", "default"])
    assert code == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["passed"] is False and summary["blocked_by"]


def test_lake_behind_needs_evidence() -> None:
    """A partition the lake holds nothing of is no evidence of being behind: the difference
    stays unexplained. With an ingested position below the snapshot point it is lake_behind."""
    snap = SnapshotState(info=SnapshotInfo("s", "default", NOW, "t", False, 1))
    snap.offsets[("g", "t", 0)] = {"committed_offset": 9, "leader_epoch": -1, "metadata": "",
                                   "error_code": 0, "error_name": None}
    snap.points[0] = (120, 120)
    nothing = classify(LakeState(), snap, 1)
    (row,) = [r for r in nothing if r["level"] == "offset"]
    assert (row["classification"], row["explained"]) == ("missing_in_lake", False)
    behind = classify(LakeState(log_end={0: 100}), snap, 1)
    (row,) = [r for r in behind if r["level"] == "offset"]
    assert (row["classification"], row["explained"]) == ("lake_behind", True)
    assert "up to 100" in row["detail"] and "120" in row["detail"]
    caught_up = classify(LakeState(log_end={0: 120}), snap, 1)
    (row,) = [r for r in caught_up if r["level"] == "offset"]
    assert (row["classification"], row["explained"]) == ("missing_in_lake", False)


def _snapshot(snapshot_id: str, captured_at: datetime, offset: int) -> ClusterSnapshot:
    return ClusterSnapshot(
        snapshot_id=snapshot_id, captured_at=captured_at, source="t",
        groups=[GroupRow("g", "classic", "Empty", "", None, 1)],
        offsets=[OffsetRow("g", "t", 0, offset, -1, "")], points=[PointRow(0, 10, 10)])


def test_snapshot_id_and_ties_in_capture_time(tmp_path: Path, capsys) -> None:
    engine = DeltaRsEngine(tmp_path / "lake")
    # same capture instant; stored z-first then a-second: the one stored last is the latest,
    # whatever the ids spell
    store_snapshot(engine, _snapshot("z-first", NOW, 1), stored_at=NOW + timedelta(seconds=1))
    store_snapshot(engine, _snapshot("a-second", NOW, 2), stored_at=NOW + timedelta(seconds=2))
    assert latest_snapshot(engine).snapshot_id == "a-second"
    store_snapshot(engine, _snapshot("older", NOW - timedelta(hours=1), 3),
                   stored_at=NOW + timedelta(seconds=3))
    assert latest_snapshot(engine).snapshot_id == "a-second"  # captured earlier: never the latest
    # --snapshot-id picks one explicitly (its offsets, not the latest's)
    rec = reconcile(engine, snapshot_id="z-first")
    assert rec.snapshot.snapshot_id == "z-first"
    assert read_snapshot(engine, "z-first")["snapshot_offsets"].column("committed_offset").to_pylist() == [1]
    with pytest.raises(LookupError, match="no complete snapshot 'nope'"):
        reconcile(engine, snapshot_id="nope")
    assert cli_main(["reconcile", "--lake", str(tmp_path / "lake"), "--snapshot-id", "z-first",
                     "--no-gate"]) == 0
    assert json.loads(capsys.readouterr().out)["snapshot_id"] == "z-first"


def _group_state(lake_group: dict, broker: GroupRow, lake_members: set[str] = frozenset(),
                 broker_members: set[str] | None = None) -> dict:
    lake = LakeState(log_end={0: 10})
    lake.groups["g"] = {"group_id": "g", "offsets_partition": 0, "last_record_offset": 1,
                        "num_members": len(lake_members), **lake_group}
    lake.members["g"] = set(lake_members)
    snap = SnapshotState(info=SnapshotInfo("s", "default", NOW, "t", False, 1))
    snap.groups["g"] = {"group_type": broker.group_type, "group_state": broker.group_state,
                        "protocol_type": broker.protocol_type, "error_code": 0, "error_name": None,
                        "group_epoch": broker.group_epoch, "assignment_epoch": broker.assignment_epoch}
    if broker_members is not None:
        snap.members["g"] = set(broker_members)
    snap.points[0] = (10, 10)
    (row,) = [r for r in classify(lake, snap, 1) if r["level"] == "group"]
    return row


def test_offset_only_group_maps_simple_to_classic_with_empty_protocol_type() -> None:
    simple = {"group_type": "simple", "group_state": "Empty", "protocol_type": ""}
    row = _group_state(simple, GroupRow("g", "classic", "Empty", "", None, 1))
    assert row["classification"] == "match" and "simple" in row["detail"]
    row = _group_state(simple, GroupRow("g", "classic", "Empty", "consumer", None, 1))
    assert (row["classification"], row["explained"]) == ("type_mismatch", False)
    row = _group_state(simple, GroupRow("g", "consumer", "Empty", "consumer", None, 1))
    assert row["classification"] == "type_mismatch"


@pytest.mark.parametrize("group_type", ["share", "streams"])
def test_share_and_streams_states_and_members_are_compared(group_type: str) -> None:
    lake = {"group_type": group_type, "group_state": "Stable", "protocol_type": group_type}
    same = _group_state(lake, GroupRow("g", group_type, "Stable", group_type, None, 1), {"m1"}, {"m1"})
    assert (same["classification"], same["detail"]) == ("match", None)
    state = _group_state(lake, GroupRow("g", group_type, "Empty", group_type, None, 1), {"m1"})
    assert (state["classification"], state["explained"]) == ("state_mismatch", False)
    members = _group_state(lake, GroupRow("g", group_type, "Stable", group_type, None, 1), {"m1"}, {"m2"})
    assert (members["classification"], members["explained"]) == ("member_mismatch", False)


@pytest.mark.parametrize("group_type", ["consumer", "share", "streams"])
def test_described_epochs_are_compared(group_type: str) -> None:
    """Where the broker described the group (ConsumerGroupDescribe, ShareGroupDescribe,
    StreamsGroupDescribe), its group and assignment epochs must equal the log's."""
    lake = {"group_type": group_type, "group_state": "Stable", "protocol_type": group_type,
            "generation": 4, "assignment_epoch": 4}
    broker = GroupRow("g", group_type, "Stable", group_type, None, 1)
    assert _group_state(lake, broker)["classification"] == "match"  # not described: not compared
    same = _group_state(lake, GroupRow("g", group_type, "Stable", group_type, None, 1,
                                       group_epoch=4, assignment_epoch=4))
    assert same["classification"] == "match"
    behind = _group_state(lake, GroupRow("g", group_type, "Stable", group_type, None, 1,
                                         group_epoch=5, assignment_epoch=4))
    assert (behind["classification"], behind["explained"]) == ("state_mismatch", False)
    assert "group epoch: lake 4 vs broker 5" in behind["detail"]
