"""The group_generations replay with its indexes equals the replay it replaced, row for row,
on real broker-written group records (classic, KIP-848, share, streams) and on a generated
group-heavy history, in one batch and cut into two (open rows, rows waiting for their
member's metadata and the members carried from the first batch into the second)."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.demo import generate_cluster
from pipelines.history.tables import build_history
from pipelines.lake.contracts import contract
from pipelines.model import GroupColumns, GroupRecord, LatestRecord
from pipelines.sources.record_batches.arrow_reader import read_arrow
from pipelines.state.generations import STORED_COLUMN, generation_changes
from tests.conftest import corpus_path
from tests.support import generations_oracle

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _events(path: Path) -> dict[str, list]:
    raw = pa.Table.from_batches(list(read_arrow(path, cluster_id="c1")))
    events: dict[str, list] = {}
    for g in build_history(raw, 0, NOW).group_records:
        if g.record.record_type in (2, 3, 5, 8, 17, 19, 22, 23):
            events.setdefault(g.cluster_id, []).append((g.group_id, g.record))
    return events


def _key(r: dict) -> tuple:
    """A row's identity: one ownership interval (key and start)."""
    return (r["group_id"], r["generation"], r["member_id"], r["topic"], r["partition"], r["group_type"],
            r["valid_from_offset"])


def _both(open_rows: list[dict], events: list, names: dict, cluster_id: str, now: datetime,
          members: dict, unfilled: list[dict], topologies: dict) -> list[dict]:
    """The replay (stored rows in and changed rows out as Arrow tables, as the lake holds
    them) and the oracle (dicts) on the same records: the same rows, value for value."""
    spec = contract("group_generations")
    columns = GroupColumns.of([GroupRecord(cluster_id, g, r) for g, r in events])
    new = generation_changes(spec.from_rows(open_rows), columns, names, cluster_id, now, members,
                             spec.from_rows(unfilled), topologies)
    assert new.drop_columns([STORED_COLUMN]).schema == spec.arrow_schema
    _check_stored(new, open_rows, unfilled)
    new = new.drop_columns([STORED_COLUMN])
    old = generations_oracle.generation_changes(open_rows, events, names, cluster_id, now, members,
                                                unfilled, topologies)
    assert all(set(r) == set(spec.column_names) for r in old)
    new_rows = new.to_pylist()
    assert all(r["is_open"] == (r["valid_to"] is None) for r in new_rows)
    # the rows not stored are in the order they opened (the log's)
    stored_keys = {_key(r) for r in open_rows + unfilled}
    opened = [(r["offsets_partition"], r["valid_from_offset"]) for r in new_rows if _key(r) not in stored_keys]
    assert opened == sorted(opened)
    assert len({_key(r) for r in new_rows}) == len(new_rows)
    assert sorted(new_rows, key=_key) == sorted(spec.from_rows(old).to_pylist(), key=_key)
    return new_rows


def _check_stored(new: pa.Table, open_rows: list[dict], unfilled: list[dict]) -> None:
    """Each changed row names the partition its stored version is in, the one MERGE reads:
    the closed one for a stored closed row, the open one for every other row (a stored open
    row, or a row not stored yet, whose interval nothing in the lake has)."""
    closed = {_key(r) for r in unfilled if r["valid_to"] is not None} - {_key(r) for r in open_rows}
    for row, stored in zip(new.to_pylist(), new.column(STORED_COLUMN).to_pylist(), strict=True):
        assert stored is (_key(row) not in closed), row


def _stored(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """What a batch's rows leave in the lake for the next one's replay: the open rows, and
    the closed KIP-848/streams rows still waiting for their member's metadata."""
    open_rows = [r for r in rows if r["valid_to"] is None]
    waiting = [r for r in rows if r["valid_to"] is not None and r["client_id"] is None
               and r["group_type"] in ("consumer", "streams")]
    return open_rows, waiting


def _carried(events: list) -> tuple[dict, dict]:
    """The members' metadata and the topologies a batch of ``events`` leaves for the next."""
    members, topologies = {}, {}
    for group_id, rec in events:
        if rec.record_type in (5, 19):
            if rec.is_tombstone or not rec.value:
                members.pop((group_id, rec.subkey), None)
            else:
                members[(group_id, rec.subkey)] = rec.value
        elif rec.record_type == 23 and rec.value:
            topologies[group_id] = rec.value
    return members, topologies


def _replay_in_two(events: list, names: dict) -> tuple[list[dict], list[dict]]:
    """Replay the first half, then the second with what the first leaves behind: the rows
    each batch changed."""
    events = sorted(events, key=lambda e: (e[1].offsets_partition, e[1].offset))
    half = len(events) // 2
    first = _both([], events[:half], names, "c1", NOW, {}, [], {})
    open_rows, waiting = _stored(first)
    members, topologies = _carried(events[:half])
    second = _both(open_rows, events[half:], names, "c1", NOW, members, waiting, topologies)
    return first, second


@pytest.mark.parametrize("scenario", ["scenario-a", "scenario-d"])
def test_replay_equals_the_old_one_on_real_broker_records(scenario: str) -> None:
    events = _events(corpus_path("golden", scenario))
    assert events, f"{scenario} has no group records"
    for evs in events.values():
        assert _both([], evs, {}, "c1", NOW, {}, [], {})
        assert any(_replay_in_two(evs, {}))


def _source(scenario: str, tmp_path: Path) -> Path:
    """A golden recording's segments, or ("generated") a group-heavy history written here."""
    if scenario != "generated":
        return corpus_path("golden", scenario)
    generate_cluster(tmp_path / "data", num_partitions=2, seed=3, live=False, group_heavy=6)
    return tmp_path / "data"


def test_replay_equals_the_old_one_on_a_group_heavy_history(tmp_path: Path) -> None:
    events = _events(_source("generated", tmp_path))
    kinds = {rec.record_type for evs in events.values() for _, rec in evs}
    assert {2, 5, 8} <= kinds  # classic generations, KIP-848 members and their assignments
    for evs in events.values():
        rows = _both([], evs, {}, "c1", NOW, {}, [], {})
        assert any(r["client_id"] is not None and r["group_type"] == "consumer" for r in rows)
        assert any(_replay_in_two(evs, {}))


@pytest.mark.parametrize("scenario", ["scenario-a", "generated"])
def test_replay_equals_the_old_one_on_records_it_already_replayed(scenario: str, tmp_path: Path) -> None:
    """Another query over the same log (its own checkpoint, the lake shared) replays records
    whose rows the lake already holds: a record reopens an interval the stored rows have,
    after an earlier record closed it, and the change set must still name each interval
    once (a MERGE refuses a target row matched twice)."""
    source = _source(scenario, tmp_path)
    reopened = 0
    for evs in _events(source).values():
        first = _both([], evs, {}, "c1", NOW, {}, [], {})
        open_rows, waiting = _stored(first)
        again = _both(open_rows, evs, {}, "c1", NOW, {}, waiting, {})
        stored = {_key(r) for r in open_rows}
        reopened += sum(1 for r in again if _key(r) in stored and r["valid_to"] is None)
    assert reopened > 0  # some stored interval was closed and opened again by the replay


def _metadata_last(events: list) -> list:
    """The same records with every member-metadata record moved after all the others (as when
    it lands in a later batch): KIP-848 rows open without their member's client id and host,
    and the metadata records fill them in later."""
    last = max(rec.offset for _, rec in events) + 1
    return [(g, rec._replace(offset=rec.offset + last) if rec.record_type in (5, 19) else rec)
            for g, rec in events]


@pytest.mark.parametrize("scenario", ["scenario-a", "scenario-d", "generated"])
def test_replay_equals_the_old_one_when_metadata_comes_after_assignments(
        scenario: str, tmp_path: Path) -> None:
    source = _source(scenario, tmp_path)
    filled = 0
    for evs in _events(source).values():
        late = _metadata_last(evs)
        rows = _both([], late, {}, "c1", NOW, {}, [], {})
        filled += sum(1 for r in rows if r["group_type"] in ("consumer", "streams")
                      and r["client_id"] is not None)
        assert any(_replay_in_two(late, {}))
    assert filled > 0  # rows opened without metadata were filled in by the later records


def test_replay_equals_the_old_one_on_one_large_group() -> None:
    """One KIP-848 group of 300 members whose assignments move every round, classic
    generations of the same group id, member tombstones and a group tombstone: each record
    now touches only its member's open rows (the old replay scanned the whole group's)."""
    from pipelines.model import LatestRecord

    events, offset = [], 0

    def add(record_type: int, subkey: str, value: dict | None) -> None:
        nonlocal offset
        # one offsets partition holds a group: its records in log order
        events.append(("big", LatestRecord(record_type, subkey, value is None, value, 4, offset, NOW)))
        offset += 1

    for epoch in range(1, 4):
        for m in range(300):
            if epoch == 1:
                add(5, f"m{m}", {"client_id": f"c{m}", "client_host": "/10.0.0.1", "instance_id": None,
                                 "subscribed_topic_names": ["orders"]})
            if m % 50 == 7 and epoch == 3:
                add(8, f"m{m}", None)  # the member left
                continue
            add(8, f"m{m}", {"member_epoch": epoch, "assigned_partitions": [
                {"topic_id": "t1", "partitions": [(m + epoch + p) % 900 for p in range(3)]}],
                "partitions_pending_revocation": [{"topic_id": "t1", "partitions": [m]}] if m % 9 == 0 else []})
        add(2, "", {"generation": epoch, "members": [
            {"member_id": f"k{j}", "client_id": "legacy", "client_host": "/h", "group_instance_id": None,
             "subscription": {"topics": ["orders"]},
             "assignment": {"assigned_partitions": [{"topic": "orders", "partitions": [j, j + epoch]}]}}
            for j in range(20)]})
    add(3, "", None)  # the group is deleted: every consumer row closes
    rows = _both([], events, {"t1": "orders"}, "c1", NOW, {}, [], {})
    assert sum(r["valid_to"] is None for r in rows if r["group_type"] == "consumer") == 0
    assert sum(1 for r in rows if r["group_type"] == "classic" and r["valid_to"] is None) == 40
    assert any(_replay_in_two(events, {"t1": "orders"}))


def _random_events(rnd: random.Random, n: int) -> list:
    """Records of two groups and three members, every replayed type, drawn so that the rare
    paths come up: a generation or epoch written again with some of its partitions, a
    classic member listed twice, metadata without a client id or after the assignments,
    tombstones of members and groups, streams tasks before and after their topology."""
    from pipelines.model import LatestRecord

    events = []
    for offset in range(n):
        group, member = f"g{rnd.randrange(2)}", f"m{rnd.randrange(3)}"
        kind = rnd.choice([2, 2, 8, 8, 8, 5, 5, 3, 22, 23, 17, 19])
        value = None
        if rnd.random() >= 0.12:
            if kind == 2:
                value = {"generation": rnd.randrange(3), "members": [
                    {"member_id": f"k{rnd.randrange(3)}", "client_id": rnd.choice(["a", "b", None]),
                     "client_host": "/h", "group_instance_id": None, "subscription": {"topics": ["t"]},
                     "assignment": {"assigned_partitions": [{"topic": rnd.choice(["t", "u"]),
                                                             "partitions": rnd.sample(range(4), rnd.randrange(3))}]}
                     if rnd.random() < 0.9 else b"unparsed"}
                    for _ in range(rnd.randrange(4))]}
            elif kind == 8:
                value = {"member_epoch": rnd.randrange(3), "assigned_partitions": [
                    {"topic_id": rnd.choice(["id1", "id2"]), "partitions": [rnd.randrange(4) for _ in range(rnd.randrange(4))]}],
                    "partitions_pending_revocation": [{"topic_id": "id1", "partitions": [rnd.randrange(4)]}]
                    if rnd.random() < 0.3 else []}
            elif kind in (5, 19):
                value = {"client_id": rnd.choice(["c1", "c2", None]), "client_host": "/x", "instance_id": None,
                         "subscribed_topic_names": ["t"]} if rnd.random() < 0.9 else {}
            elif kind == 22:
                value = {"member_epoch": rnd.randrange(3),
                         "active_tasks": [{"subtopology_id": "s0", "partitions": [rnd.randrange(3)]}]}
            elif kind == 23:
                value = {"subtopologies": [{"subtopology_id": "s0", "source_topics": ["in"],
                                            "repartition_source_topics": [{"name": "rp"}]}]}
            else:
                value = {"epoch": 1}
        subkey = member if kind in (5, 8, 19, 22) else ""
        events.append((group, LatestRecord(kind, subkey, value is None, value, 0, offset, 1_000_000 + offset * 1000)))
    return events


def test_replay_on_random_records_equals_the_old_one_and_ignores_batch_boundaries() -> None:
    """Drawn records (seeded), for the rare paths real logs seldom show: replayed whole, and
    each half of them in turn (the second on what the first leaves in the lake), row for row
    as the oracle; and the lake (the first batch's rows upserted by the second's) holds what
    one batch writes.

    A key closed and opened again under the same generation is two rows, one per interval.
    When the later one overwrote the earlier, a stored closed row waiting for its member's
    metadata and reopened before the metadata arrived made the oracle depend on the batch
    boundary (it filled the stored row last and wrote it back over the newer one)."""
    for seed in range(300):
        rnd = random.Random(seed)
        events = _random_events(rnd, rnd.randrange(1, 60))  # in log order
        whole = _both([], events, {"id1": "t1"}, "c1", NOW, {}, [], {})
        first, second = _replay_in_two(events, {"id1": "t1"})
        lake = {_key(r): r for r in first} | {_key(r): r for r in second}
        assert sorted(lake.values(), key=_key) == sorted(whole, key=_key), seed


@pytest.mark.parametrize("scenario", ["scenario-a", "scenario-d", "generated"])
def test_replay_again_with_the_metadata_the_first_replay_lacked(scenario: str, tmp_path: Path) -> None:
    """A first replay without the member-metadata records leaves rows waiting for them, the
    closed ones among them; a second query replays the same records with the metadata last.
    Its assignment records reopen intervals the stored waiting rows have, and the metadata
    then fills both the stored row and the reopened one: the change set must still name
    each interval once, as the row the oracle changed last."""
    source = _source(scenario, tmp_path)
    clashed = 0
    for evs in _events(source).values():
        late = _metadata_last(evs)
        first = _both([], [e for e in late if e[1].record_type not in (5, 19)], {}, "c1", NOW, {}, [], {})
        open_rows, waiting = _stored(first)
        again = _both(open_rows, late, {}, "c1", NOW, {}, waiting, {})
        stored_closed = {_key(r) for r in waiting if r["valid_to"] is not None}
        clashed += sum(1 for r in again if _key(r) in stored_closed and r["client_id"] is not None)
    assert clashed > 0  # a stored closed waiting row's interval was reopened and filled


def test_stored_open_rows_of_one_key_keep_the_later() -> None:
    """Two stored open rows of one key (a key is open once, but a renamed topic id can make
    two): the replay holds the later, as the oracle does, and closes only that one."""
    from pipelines.model import LatestRecord

    spec = contract("group_generations")
    row = {c: None for c in spec.column_names} | {
        "cluster_id": "c1", "group_id": "g", "group_type": "consumer", "generation": 3, "member_id": "m",
        "client_id": "c", "topic": "t", "partition": 0, "valid_from": NOW, "valid_from_offset": 5,
        "is_open": True, "offsets_partition": 0, "updated_at": NOW}
    open_rows = [row, {**row, "valid_from_offset": 9}]
    events = [("g", LatestRecord(8, "m", False, {"member_epoch": 4, "assigned_partitions": [
        {"topic_id": "t", "partitions": [1]}]}, 0, 20, NOW))]
    rows = _both(open_rows, events, {}, "c1", NOW, {}, [], {})
    assert {(r["valid_from_offset"], r["valid_to_offset"]) for r in rows} == {(9, 20), (20, None)}


def test_a_stored_row_filled_after_its_interval_reopened_is_the_row_kept() -> None:
    """A stored closed row still waiting for its member's metadata, whose interval a record
    replayed again reopens (already with metadata: the batch knew the member), then filled
    by the member's next metadata record: that fill is the interval's last change, so the
    stored row, filled, is the one kept, in its closed partition, as the oracle keeps it."""
    from pipelines.model import LatestRecord

    spec = contract("group_generations")
    stored = {c: None for c in spec.column_names} | {
        "cluster_id": "c1", "group_id": "g", "group_type": "consumer", "generation": 4, "member_id": "m",
        "topic": "t", "partition": 1, "valid_from": NOW, "valid_from_offset": 20, "valid_to": NOW,
        "valid_to_offset": 30, "is_open": False, "offsets_partition": 0, "updated_at": NOW}
    meta = {"client_id": "c", "client_host": "/h", "instance_id": None, "subscribed_topic_names": ["t"]}
    events = [("g", LatestRecord(8, "m", False, {"member_epoch": 4, "assigned_partitions": [
                  {"topic_id": "t", "partitions": [1]}]}, 0, 20, NOW)),
              ("g", LatestRecord(5, "m", False, {**meta, "client_id": "later"}, 0, 25, NOW))]
    rows = _both([], events, {}, "c1", NOW, {("g", "m"): meta}, [stored], {})
    assert [(r["client_id"], r["valid_to_offset"]) for r in rows] == [("later", 30)]


def test_a_stored_interval_read_twice_is_changed_once() -> None:
    """The same stored open row read twice (the lake holds it twice), waiting for its
    member's metadata: the metadata and then a tombstone change one row, as the oracle
    does, and the change set names the interval once (a MERGE refuses a target row
    matched twice)."""
    from pipelines.model import LatestRecord

    spec = contract("group_generations")
    row = {c: None for c in spec.column_names} | {
        "cluster_id": "c1", "group_id": "g", "group_type": "consumer", "generation": 3, "member_id": "m",
        "topic": "t", "partition": 0, "valid_from": NOW, "valid_from_offset": 5,
        "is_open": True, "offsets_partition": 0, "updated_at": NOW}
    meta = {"client_id": "c", "client_host": "/h", "instance_id": None, "subscribed_topic_names": ["t"]}
    events = [("g", LatestRecord(5, "m", False, meta, 0, 19, NOW)), ("g", LatestRecord(8, "m", True, None, 0, 20, NOW))]
    rows = _both([row, dict(row)], events, {}, "c1", NOW, {}, [row, dict(row)], {})
    assert [(r["client_id"], r["valid_from_offset"], r["valid_to_offset"]) for r in rows] == [("c", 5, 20)]


def test_one_groups_records_from_two_offsets_partitions_at_one_offset() -> None:
    """A group's records in two offsets partitions (the log read as two partitions' copies):
    the second partition's record reopens, at the same offset, the interval the first
    partition's opened and closed. The change set names it once, as the later row (the
    oracle's), never twice."""
    from pipelines.model import LatestRecord

    assignment = {"member_epoch": 1, "assigned_partitions": [{"topic_id": "t", "partitions": [0]}]}
    events = [("g", LatestRecord(8, "m", False, assignment, 0, 5, 1_000)),
              ("g", LatestRecord(8, "m", True, None, 0, 6, 2_000)),
              ("g", LatestRecord(8, "m", False, assignment, 1, 5, 3_000))]
    rows = _both([], events, {}, "c1", NOW, {}, [], {})
    assert [(r["offsets_partition"], r["valid_from_offset"], r["valid_to_offset"]) for r in rows] == [(1, 5, None)]


def test_a_static_members_rows_opened_without_a_client_id_wait_for_it() -> None:
    """A static member (instance id known) whose metadata record holds no client id yet:
    its rows open with the instance id and no client, and the member's next metadata
    record fills them in, as the oracle does (a check of the instance id instead of the
    client id left them unfilled)."""
    from pipelines.model import LatestRecord

    partial = {"client_id": None, "client_host": None, "instance_id": "static-1", "subscribed_topic_names": ["t"]}
    full = {**partial, "client_id": "c", "client_host": "/h"}
    assignment = {"member_epoch": 1, "assigned_partitions": [{"topic_id": "t", "partitions": [0, 1]}]}
    events = [("g", LatestRecord(5, "m", False, partial, 0, 4, 1_000)),
              ("g", LatestRecord(8, "m", False, assignment, 0, 5, 2_000)),
              ("g", LatestRecord(5, "m", False, full, 0, 6, 3_000))]
    rows = _both([], events, {}, "c1", NOW, {}, [], {})
    assert [(r["partition"], r["group_instance_id"], r["client_id"]) for r in rows] == \
        [(0, "static-1", "c"), (1, "static-1", "c")]


def _assignment(group_id: str, partition: int, offset: int) -> tuple[str, LatestRecord]:
    value = {"member_epoch": 1, "assigned_partitions": [{"topic_id": "T", "partitions": [0]}],
             "partitions_pending_revocation": []}
    return group_id, LatestRecord(8, "m", False, value, partition, offset, 1_700_000_000_000_000)


@pytest.mark.parametrize(("event", "shared"), [
    (_assignment("h", 5, 7), False),  # the offset a stored row starts at, in another partition
    (_assignment("g", 3, 7), True),   # the stored row's own position: a record replayed again
    (_assignment("g", 5, 9), True),   # the stored row's group in another partition
])
def test_a_record_is_taken_for_replayed_only_at_a_stored_rows_own_position(event: tuple, shared: bool) -> None:
    """Two changed rows may be one interval (and only then are they ranked against each other
    and their stored partitions looked up) where a record starts a stored row again or a
    group's records or rows name two offsets partitions; an offset alone, meeting a stored
    row's start in another partition, is not one (it made every batch after the first look
    replayed)."""
    from pipelines.state.ownership_runs import _Listing
    from pipelines.state.ownership_stored import Stored

    spec = contract("group_generations")
    stored_rows = generation_changes(None, GroupColumns.of([GroupRecord("c1", *_assignment("g", 3, 7))]), {}, "c1",
                                     NOW).drop_columns([STORED_COLUMN])
    assert stored_rows.num_rows == 1 and stored_rows.column("is_open").to_pylist() == [True]
    stored = Stored.of(stored_rows.cast(spec.arrow_schema), None)
    listing = _Listing({}, None, None)
    listing.add_stored(stored)
    listing.add_events(GroupColumns.of([GroupRecord("c1", *event)]), stored)
    assert listing.shared is shared
