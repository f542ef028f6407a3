"""A task ships the driver only the group records the state depends on (``GroupRows.for_state``):
every record of the types read in log order, the last per key of the others. Those are the
records the record-by-record oracle keeps, and the lake built from them equals, table for
table and row for row, the lake built from every group record: on real broker-written
recordings (Kafka 4.0 classic and KIP-848; Kafka 4.2 share and streams groups) when
../shared is there, and on a generated group-heavy history always."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipelines.history.tables as history_tables
from pipelines.demo import generate_cluster
from pipelines.history.group_rows import GroupRows
from pipelines.history.tables import build_history
from pipelines.ingest import IngestReport, ensure_tables, process_batch
from pipelines.lake.engines import DeltaRsEngine
from pipelines.model import (
    EVERY_RECORD_TYPES,
    GroupColumns,
    GroupRecord,
    LatestRecord,
    classic_columns,
)
from pipelines.sources.record_batches.arrow_reader import read_arrow
from pipelines.state.audit import GROUP_RECORD_TYPES
from pipelines.state.generations import REPLAYED_TYPES
from pipelines.state.topics import NAMING_TYPES
from tests.conftest import corpus_path, table_rows
from tests.support.state_records_oracle import last_record_indices, state_records

TABLES = ("committed_offsets", "group_records_latest", "consumer_groups", "group_members",
          "group_generations", "topic_names", "commit_attribution", "offset_anomalies",
          "offset_audit_cursor", "group_metadata", "offsets_raw", "offset_commits")



def test_every_type_read_in_log_order_is_kept_whole() -> None:
    assert set(REPLAYED_TYPES) | set(NAMING_TYPES) | set(GROUP_RECORD_TYPES) == EVERY_RECORD_TYPES


def _source(name: str, tmp_path: Path) -> Path:
    if name == "generated":
        generate_cluster(tmp_path / "data", num_partitions=3, seed=5, live=False, group_heavy=8)
        return tmp_path / "data"
    return corpus_path("golden", name)


def _ingest(raw: pa.Table, lake: Path) -> dict[str, list[dict]]:
    engine = DeltaRsEngine(lake)
    ensure_tables(engine)
    report = IngestReport()
    half = raw.num_rows // 2
    for i, part in enumerate((raw.slice(0, half), raw.slice(half))):
        process_batch(engine, part, i, "state-records-test", report)
    return {t: table_rows(lake, t) for t in TABLES if (lake / t).exists()}


@pytest.mark.parametrize("source", ["scenario-a", "scenario-d", "generated"])
def test_the_lake_from_state_records_equals_the_lake_from_every_record(
        source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = pa.Table.from_batches(list(read_arrow(_source(source, tmp_path), cluster_id="c1")))
    history = build_history(raw, 0, history_tables.datetime.now(history_tables.timezone.utc))
    every, shipped = history.group_records, history.state_input().group_records
    assert shipped == state_records(every)
    assert len(shipped) < len(every), "nothing to leave out: the test would prove nothing"
    assert {g.record.record_type for g in every} - EVERY_RECORD_TYPES  # types of which the last counts

    reduced = _ingest(raw, tmp_path / "reduced")
    monkeypatch.setattr(GroupRows, "for_state", GroupRows.columns)  # every record shipped
    whole = _ingest(raw, tmp_path / "whole")
    assert reduced.keys() == whole.keys()
    for table in whole:
        assert reduced[table] == whole[table], table
    assert whole["group_generations"] and whole["group_records_latest"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["g", "h"]),
                          st.sampled_from([2, 5, 6, 7, 12]), st.sampled_from(["", "m1", "m2"]),
                          st.integers(0, 2), st.integers(0, 4)), max_size=40))
def test_the_records_kept_are_the_oracles_whatever_the_keys_and_positions(rows: list[tuple]) -> None:
    """Drawn rows of kept and last-per-key types, of two clusters, groups and members, at
    positions that repeat (one key at one position twice, a key in two offsets partitions):
    the rows ``for_state`` keeps are those the record-by-record oracle keeps, in order."""
    from pipelines.decode import DecodedRecord

    uniq = [DecodedRecord(t, "T", {"group_id": g}, 0, {"v": i}, "ok") for i, (_, g, t, *_) in enumerate(rows)]
    raw = pa.table({"cluster_id": pa.array([r[0] for r in rows], pa.string()),
                    "offsets_partition": pa.array([r[4] for r in rows], pa.int32()),
                    "offset": pa.array([r[5] for r in rows], pa.int64()),
                    "timestamp": pa.array([0] * len(rows), pa.timestamp("ms", tz="UTC"))})
    classic = classic_columns([r.record_type for r in uniq], [r.value for r in uniq])
    group_rows = GroupRows(uniq, [r[1] for r in rows], [r[3] for r in rows], np.arange(len(rows)), raw,
                           dict(zip(("classic_generation", "classic_members"), classic, strict=True)))
    assert group_rows.for_state().records() == state_records(group_rows.records())


_DRAWN_RECORDS = st.lists(st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["g", "h"]),
                                    st.sampled_from([2, 5, 8]), st.sampled_from(["", "m1", "m2"]),
                                    st.integers(0, 2), st.integers(0, 4)), max_size=40)


def _drawn_columns(rows: list[tuple]) -> GroupColumns:
    return GroupColumns.of([GroupRecord(c, g, LatestRecord(t, m, False, {"v": i}, p, o))
                            for i, (c, g, t, m, p, o) in enumerate(rows)])


@settings(max_examples=150, deadline=None)
@given(_DRAWN_RECORDS)
def test_the_driver_finds_the_last_record_per_key_as_the_oracle(rows: list[tuple]) -> None:
    """The winners of ``group_records_latest`` (numpy over the batch's columns) are the rows
    the record-by-record oracle picks: per (cluster, group, type, member) the greatest log
    position, of two at one position the later row; in row order."""
    from pipelines.state.apply import _last_per_key

    groups = _drawn_columns(rows)
    assert _last_per_key(groups).tolist() == sorted(last_record_indices(groups.records()))


@settings(max_examples=150, deadline=None)
@given(_DRAWN_RECORDS)
def test_the_batch_records_come_in_log_order_as_a_stable_sort(rows: list[tuple]) -> None:
    """``combined_state``'s order of the parts' records: by (cluster, offsets partition,
    offset), ties in the order the parts gave them."""
    groups = _drawn_columns(rows)
    expected = sorted(groups.records(), key=lambda g: (g.cluster_id, g.record.offsets_partition, g.record.offset))
    assert groups.in_log_order().records() == expected
