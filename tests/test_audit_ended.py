"""The commit audit of a micro-batch reads no ended ownership row (``ownership_last_ended``).

The audit attributes a batch's commits from the open rows, the rows the batch changed and,
per key, the ended interval that started last before the batch (the table, which takes each
batch after its audit). These tests build logs in which that last interval ended batches
before the commit, one in which the same batch first needs it and then replaces it, one
whose interval is filled in or renamed by a later batch; every split into micro-batches must
give the one-batch attribution (which has no earlier batch to depend on) and the same table,
and the attributions are the ones the log implies, written out here. A lake from before the
table gets it built on its next ingest.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.decode.records import encode_key, encode_value
from pipelines.ingest import IngestReport, process_batch
from pipelines.lake.engines import DeltaRsEngine
from pipelines.sources.record_batches.writer import SegmentWriter
from pipelines.state import audit, last_ended
from pipelines.state.topics import store_cluster_names
from tests.conftest import table_rows
from tests.test_audit import raw_records
from tests.test_state_exact import ingest_split

T0 = 1_795_000_000_000  # ms
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # a KIP-848 assignment's topic, never named in this log


def _classic(group: str, generation: int, owners: dict[str, list[int]]) -> tuple[bytes, bytes]:
    members = [{"member_id": m, "group_instance_id": None, "client_id": f"client-{m}",
                "client_host": "/10.0.0.1", "rebalance_timeout": 300000, "session_timeout": 45000,
                "subscription": {"version": 0, "topics": ["t"], "user_data": b""},
                "assignment": {"version": 0, "user_data": b"",
                               "assigned_partitions": [{"topic": "t", "partitions": ps}] if ps else []}}
               for m, ps in owners.items()]
    value = {"protocol_type": "consumer", "generation": generation, "protocol": "range" if members else None,
             "leader": next(iter(owners), None), "current_state_timestamp": T0, "members": members}
    return encode_key(2, {"group": group}), encode_value(2, 3, value)


def _member(group: str, member: str, epoch: int, partitions: list[int]) -> tuple[bytes, bytes]:
    assigned = [{"topic_id": TOPIC_ID, "partitions": partitions, "assignment_epochs": None}] if partitions else []
    return encode_key(8, {"group_id": group, "member_id": member}), encode_value(8, 0, {
        "member_epoch": epoch, "previous_member_epoch": epoch - 1, "state": 0,
        "assigned_partitions": assigned, "partitions_pending_revocation": []})


def _commit(group: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    return encode_key(1, {"group": group, "topic": "t", "partition": partition}), encode_value(
        1, 3, {"offset": offset, "leader_epoch": -1, "metadata": "", "commit_timestamp": T0})


RECORDS = [
    _classic("g", 1, {"A": [0], "B": [1]}),  # 0
    _commit("g", 0, 10),  # 1: A owns t-0
    _classic("g", 2, {"B": [1]}),  # 2: A loses t-0
    _commit("g", 0, 11),  # 3: zombie, last owner A
    _commit("g", 0, 12),  # 4: zombie, last owner A
    _classic("g", 3, {"C": [0], "B": [1]}),  # 5: C takes t-0
    _classic("g", 4, {"B": [1]}),  # 6: C loses it again
    _commit("g", 0, 13),  # 7: zombie, last owner C
    (encode_key(2, {"group": "g"}), None),  # 8: the group is deleted: every row ends
    _commit("g", 1, 14),  # 9: no member, members before: group_empty
    _member("k", "M", 1, [0]),  # 10: a KIP-848 member holds partition 0 of a topic known by id
    _member("k", "M", 2, []),  # 11: and then nothing (it stays a member)
    _commit("k", 0, 20),  # 12: topic_unresolved (the id-named row ended at 11)
]
EXPECTED = {  # offset commit position -> (attribution, last owner, where it lost the partition)
    1: ("owner", None, None), 3: ("zombie", "A", 2), 4: ("zombie", "A", 2), 7: ("zombie", "C", 6),
    9: ("group_empty", "B", 8), 12: ("topic_unresolved", None, None),
}
SPLITS = [[3], [4], [5], [6], [7], [8], [9], [12], [3, 7, 9], list(range(1, len(RECORDS)))]


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    data = tmp_path_factory.mktemp("ended") / "data"
    with SegmentWriter(data, 0) as w:
        for i, rec in enumerate(RECORDS):
            w.append([rec], timestamp=T0 + i)
    return raw_records(data)


@pytest.fixture(scope="module")
def one(raw: pa.Table, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RECORDS ingested as one batch."""
    lake = tmp_path_factory.mktemp("one") / "lake"
    ingest_split(raw, lake, [])
    return lake


def _attribution(lake: Path) -> list[dict]:
    return table_rows(lake, audit.ATTRIBUTION, drop=("updated_at",))


def test_one_batch_attribution_is_the_logs(one: Path) -> None:
    got = {r["offset"]: (r["attribution"], r["last_owner_member_id"], r["last_owner_lost_at_offset"])
           for r in _attribution(one)}
    assert got == EXPECTED


@pytest.mark.parametrize("cuts", SPLITS, ids=lambda c: "-".join(map(str, c)))
def test_any_split_attributes_as_one_batch(raw: pa.Table, one: Path, tmp_path: Path, cuts: list[int]) -> None:
    ingest_split(raw, tmp_path / "split", cuts)
    assert _attribution(tmp_path / "split") == _attribution(one)
    assert table_rows(tmp_path / "split", "offset_anomalies") == table_rows(one, "offset_anomalies")
    assert table_rows(tmp_path / "split", last_ended.TABLE) == table_rows(one, last_ended.TABLE)


def test_the_table_holds_each_keys_last_ended_interval(raw: pa.Table, one: Path, tmp_path: Path) -> None:
    ingest_split(raw, tmp_path / "lake", list(range(1, len(RECORDS))))
    rows = {(r["group_id"], r["topic"], r["partition"]): r for r in table_rows(tmp_path / "lake", last_ended.TABLE)}
    assert set(rows) == {("g", "t", 0), ("g", "t", 1), ("k", TOPIC_ID, 0)}  # M still holds ("", -1)
    t0 = rows[("g", "t", 0)]
    assert (t0["member_id"], t0["client_id"], t0["valid_from_offset"], t0["valid_to_offset"]) == ("C", "client-C", 5, 6)
    # B held t-1 through generations 1-4: the interval of generation 4, ended by the tombstone
    assert (rows[("g", "t", 1)]["generation"], rows[("g", "t", 1)]["valid_to_offset"]) == (4, 8)
    # the table depends on the history, not on the batches it came in
    assert table_rows(tmp_path / "lake", last_ended.TABLE) == table_rows(one, last_ended.TABLE)


def test_a_lake_from_before_the_table_gets_it_built(raw: pa.Table, one: Path, tmp_path: Path) -> None:
    """The first batches ingested, the table removed (a lake written before it existed),
    then the rest: the next batch is audited from every row and builds the table, the one
    after reads it, and both the audit and the table equal a one-batch run's."""
    lake = tmp_path / "lake"
    ingest_split(raw.slice(0, 8), lake, [3, 5])
    shutil.rmtree(lake / last_ended.TABLE)
    engine = DeltaRsEngine(lake)
    assert not last_ended.ready(engine)
    report = IngestReport()
    process_batch(engine, raw.slice(8, 1), 10, "test", report)  # the tombstone: every interval ends
    assert last_ended.ready(DeltaRsEngine(lake))
    process_batch(DeltaRsEngine(lake), raw.slice(9), 11, "test", report)
    assert _attribution(lake) == _attribution(one)
    assert table_rows(lake, last_ended.TABLE) == table_rows(one, last_ended.TABLE)


NAMED = [*RECORDS,
         (encode_key(4, {"group_id": "k"}), encode_value(4, 0, {"topics": [  # 13: k's topic id named "n"
             {"topic_id": TOPIC_ID, "topic_name": "n", "num_partitions": 1, "partition_metadata": []}]})),
         (encode_key(1, {"group": "k", "topic": "n", "partition": 0}), encode_value(  # 14: zombie, last owner M
             1, 3, {"offset": 21, "leader_epoch": -1, "metadata": "", "commit_timestamp": T0}))]


def test_a_topic_named_later_renames_its_last_ended_interval(tmp_path: Path) -> None:
    """k's interval on a topic id ends (11); the log names the id later (13): the table
    keeps it under the name only, in any split, and the commit on the name finds it. The
    commit at 12 waits as topic_unresolved until the name is learned, then is "unassigned"
    (no member of k ever held t), also when the name comes in a batch of its own."""
    data = tmp_path / "data"
    with SegmentWriter(data, 0) as w:
        for i, rec in enumerate(NAMED):
            w.append([rec], timestamp=T0 + i)
    raw = raw_records(data)
    ingest_split(raw, tmp_path / "one", [])
    (unassigned,) = [r for r in _attribution(tmp_path / "one") if r["offset"] == 12]
    assert unassigned["attribution"] == "unassigned"
    (zombie,) = [r for r in _attribution(tmp_path / "one") if r["offset"] == 14]
    assert (zombie["attribution"], zombie["last_owner_member_id"], zombie["last_owner_lost_at_offset"]) == \
        ("zombie", "M", 11)
    ended = table_rows(tmp_path / "one", last_ended.TABLE)
    assert {(r["group_id"], r["topic"], r["partition"]) for r in ended if r["group_id"] == "k"} == {("k", "n", 0)}
    for cuts in ([12], [13], [14], list(range(1, len(NAMED)))):
        lake = tmp_path / f"lake-{'-'.join(map(str, cuts))}"
        ingest_split(raw, lake, cuts)
        assert table_rows(lake, last_ended.TABLE) == ended, cuts
        assert _attribution(lake) == _attribution(tmp_path / "one"), cuts


def test_an_interval_filled_in_by_late_metadata_is_read_as_filled(tmp_path: Path) -> None:
    """A KIP-848 member's interval ends before its metadata record arrives; the batch that
    fills it in also holds a zombie commit on it: the audit names the member's client, as
    the one-batch audit does (the filled row, not the stored one, is the batch's)."""
    topic_id = "AAAAAAAAAAAAAAAAAAAAAg"
    records = [
        (encode_key(4, {"group_id": "f"}), encode_value(4, 0, {"topics": [
            {"topic_id": topic_id, "topic_name": "t", "num_partitions": 1, "partition_metadata": []}]})),
        _member("f", "N", 1, [0]),  # 1: N holds t-0 (its rows wait for N's metadata)
        _member("f", "N", 2, []),  # 2: and loses it
        (encode_key(5, {"group_id": "f", "member_id": "N"}), encode_value(5, 0, {
            "instance_id": None, "rack_id": None, "client_id": "client-N", "client_host": "/10.0.0.2",
            "subscribed_topic_names": ["t"], "subscribed_topic_regex": None, "rebalance_timeout_ms": -1,
            "server_assignor": None, "classic_member_metadata": None})),  # 3: N's metadata, late
        _commit("f", 0, 30),  # 4: zombie: N lost t-0 at 2
    ]
    records[1] = (records[1][0], encode_value(8, 0, {
        "member_epoch": 1, "previous_member_epoch": 0, "state": 0, "partitions_pending_revocation": [],
        "assigned_partitions": [{"topic_id": topic_id, "partitions": [0], "assignment_epochs": None}]}))
    data = tmp_path / "data"
    with SegmentWriter(data, 0) as w:
        for i, rec in enumerate(records):
            w.append([rec], timestamp=T0 + i)
    raw = raw_records(data)
    for cuts in ([], [3], [4], [1, 2, 3, 4]):
        lake = tmp_path / f"lake-{'-'.join(map(str, cuts))}"
        ingest_split(raw, lake, cuts)
        (row,) = _attribution(lake)
        assert (row["attribution"], row["last_owner_member_id"], row["last_owner_client_id"],
                row["last_owner_lost_at_offset"]) == ("zombie", "N", "client-N", 2), cuts


def test_a_topic_named_by_a_snapshot_renames_its_last_ended_interval(tmp_path: Path) -> None:
    """The same log without the name record: a snapshot names the id (topics.store_cluster_names);
    the table then holds k's interval under the name, as an in-log name leaves it, and the
    next batch's commit on the name finds it."""
    data = tmp_path / "data"
    with SegmentWriter(data, 0) as w:
        for i, rec in enumerate(NAMED[:13] + NAMED[14:]):
            w.append([rec], timestamp=T0 + i)
    raw = raw_records(data)
    lake = tmp_path / "lake"
    ingest_split(raw.slice(0, 13), lake, [12])
    engine = DeltaRsEngine(lake)
    store_cluster_names(engine, {("default", TOPIC_ID): "n"}, "snapshot-1", datetime.now(timezone.utc))
    ended = {(r["group_id"], r["topic"], r["partition"]) for r in table_rows(lake, last_ended.TABLE)}
    assert ("k", "n", 0) in ended and ("k", TOPIC_ID, 0) not in ended
    process_batch(DeltaRsEngine(lake), raw.slice(13), 20, "test", IngestReport())
    (zombie,) = [r for r in _attribution(lake) if r["offset"] == 13]
    assert (zombie["attribution"], zombie["last_owner_member_id"]) == ("zombie", "M")


def test_a_snapshot_on_a_lake_from_before_the_table_builds_it_renamed(tmp_path: Path) -> None:
    """A lake from before the table, whose first write to it is a snapshot naming the id:
    the table is built with the snapshot's renames applied (they are merged after it)."""
    data = tmp_path / "data"
    with SegmentWriter(data, 0) as w:
        for i, rec in enumerate(NAMED[:13]):
            w.append([rec], timestamp=T0 + i)
    lake = tmp_path / "lake"
    ingest_split(raw_records(data), lake, [12])
    shutil.rmtree(lake / last_ended.TABLE)
    store_cluster_names(DeltaRsEngine(lake), {("default", TOPIC_ID): "n"}, "snapshot-1", datetime.now(timezone.utc))
    ended = {(r["group_id"], r["topic"], r["partition"]): r["member_id"] for r in table_rows(lake, last_ended.TABLE)}
    assert ended == {("g", "t", 0): "C", ("g", "t", 1): "B", ("k", "n", 0): "M"}
