"""A batch's state input crosses from each Spark task to the driver pickled, its group records
as columns and values (pipelines.model.GroupColumns): what arrives equals what was sent, on
real broker-written records (golden scenarios A and D) and generated ones, values shared
between records stay shared, and empty or audit-less inputs survive the trip."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.demo import generate_cluster
from pipelines.history.tables import build_history
from pipelines.model import GroupColumns, LatestRecord, StateInput
from pipelines.sources.record_batches.arrow_reader import read_arrow
from tests.conftest import corpus_path

NOW = datetime(2026, 11, 24, 13, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("state-input") / "heavy"
    generate_cluster(path, scale=1, group_heavy=10, live=False)
    return path


@pytest.mark.parametrize("source", ["heavy", "golden/scenario-a/segments", "golden/scenario-d/segments"])
def test_state_input_survives_pickling(source: str, heavy: Path) -> None:
    path = heavy if source == "heavy" else corpus_path(*source.split("/"))
    raw = pa.Table.from_batches(list(read_arrow(path, cluster_id="c1")))
    sent = build_history(raw, 0, NOW).state_input()
    got = pickle.loads(pickle.dumps(sent))
    assert len(sent.group_records) > 0
    assert got.group_records == sent.group_records
    assert repr(got.group_records) == repr(sent.group_records)  # same types, tz, key order
    assert got.offset_commits.equals(sent.offset_commits)
    assert got.commit_ranges.equals(sent.commit_ranges)
    # a value several records share arrives once, shared as before
    shared = {id(g.record.value) for g in sent.group_records if g.record.value is not None}
    arrived = {id(g.record.value) for g in got.group_records if g.record.value is not None}
    assert len(arrived) == len(shared)


def test_empty_state_input_survives_pickling() -> None:
    empty = StateInput(pa.table({"x": pa.array([], pa.int64())}))
    got = pickle.loads(pickle.dumps(empty))
    assert got.group_records == [] and got.commit_ranges is None
    assert got.offset_commits.equals(empty.offset_commits)


def test_a_state_input_the_version_before_pickled_still_loads(heavy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch a stopped run kept in its checkpoint is committed by the next run, maybe after
    an upgrade: its state input, pickled as the version before pickled it (the group records
    as one list per field, 26e63b3's ``StateInput.__getstate__``), loads as the same batch."""
    raw = pa.Table.from_batches(list(read_arrow(heavy, cluster_id="c1")))
    history = build_history(raw, 0, NOW)
    # that version sent every classic record's value: every group record, each with its value
    state = history.state_input()
    sent = StateInput(state.offset_commits, GroupColumns.of(history.group_records), state.commit_ranges)
    records = sent.group_records
    assert records

    def old_getstate(self: StateInput) -> tuple:
        recs = self.group_records
        columns = ([g.cluster_id for g in recs], [g.group_id for g in recs],
                   *(map(list, zip(*(g.record for g in recs), strict=True)) if recs
                     else ([] for _ in LatestRecord._fields)))
        return self.offset_commits, self.commit_ranges, columns

    monkeypatch.setattr(StateInput, "__getstate__", old_getstate, raising=False)
    old = pickle.dumps(sent)
    monkeypatch.undo()
    got = pickle.loads(old)
    assert got.group_records == records
    assert got.groups.table.equals(sent.groups.table)
    assert got.offset_commits.equals(sent.offset_commits) and got.commit_ranges.equals(sent.commit_ranges)


@pytest.mark.parametrize("source", ["heavy", "golden/scenario-a/segments", "golden/scenario-d/segments"])
def test_group_columns_the_version_before_pickled_load_with_their_classic_columns(source: str, heavy: Path) -> None:
    """A state input the version before pickled (its group columns without ``classic_generation``
    and ``classic_members``, 895f0fc) loads with the classic columns the tasks now send, made
    from its values; and those are the tasks' columns, on real classic GroupMetadata records."""
    path = heavy if source == "heavy" else corpus_path(*source.split("/"))
    raw = pa.Table.from_batches(list(read_arrow(path, cluster_id="c1")))
    history = build_history(raw, 0, NOW)
    sent = history.group_rows.columns()  # every group record, each with its value
    members = sent.table.column("classic_members").drop_null()
    assert pc.sum(pc.list_value_length(members)).as_py() > 0, "no classic member: the test would prove nothing"
    older = StateInput(history.offset_commits, GroupColumns(
        sent.table.drop_columns(["classic_generation", "classic_members"]), sent.values))
    got = pickle.loads(pickle.dumps(older))
    assert got.groups.table.equals(sent.table)
    assert GroupColumns.of(sent.records()).table.equals(sent.table)
