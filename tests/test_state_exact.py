"""Coordinator-exact group state on data the project writes itself (no ../shared needed):
no group from an empty record set, record timestamps as real timestamps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.decode.records import encode_key, encode_value
from pipelines.ingest import IngestReport, ensure_tables, process_batch
from pipelines.lake.engines import DeltaRsEngine
from pipelines.sources.record_batches.writer import SegmentWriter
from pipelines.sources.segments.files import find_segments
from pipelines.sources.segments.index import cluster_of, read_range
from tests.conftest import table_rows

T0 = 1_795_000_000_000  # ms


def _commit(group: str, topic: str, partition: int, offset: int | None) -> tuple[bytes, bytes | None]:
    key = encode_key(1, {"group": group, "topic": topic, "partition": partition})
    if offset is None:
        return key, None
    return key, encode_value(1, 3, {"offset": offset, "leader_epoch": -1, "metadata": "",
                                    "commit_timestamp": T0 + offset})


def raw_records(data: Path, cluster_id: str = "default") -> pa.Table:
    """Every record of a segment directory, in per-partition log order."""
    return pa.concat_tables(
        pa.Table.from_batches(list(read_range(plog, 0, 1 << 62, cluster_of(plog, cluster_id))))
        for plog in find_segments(data))


def ingest_split(raw: pa.Table, lake: Path, cuts: list[int]) -> DeltaRsEngine:
    """process_batch over ``raw`` cut at row indices ``cuts`` (the no-Spark path)."""
    engine = DeltaRsEngine(lake)
    ensure_tables(engine)
    bounds = [0, *sorted(set(cuts)), raw.num_rows]
    report = IngestReport()
    for i, (lo, hi) in enumerate(pairwise(bounds)):
        if hi > lo:
            process_batch(engine, raw.slice(lo, hi - lo), i, "test", report)
    return engine


@pytest.mark.parametrize("cuts", [[], [1], [2], [3]], ids=["one-batch", "cut1", "cut2", "cut3"])
def test_offset_only_group_whose_offsets_were_all_deleted_is_gone(tmp_path: Path, cuts: list[int]) -> None:
    """OffsetDelete of every offset of an assign()-only group leaves no record that would load
    the group: the coordinator's replay creates none, so consumer_groups holds none. A simple
    group that keeps one offset stays."""
    with SegmentWriter(tmp_path / "data", 0) as w:
        w.append([_commit("gone", "t", 0, 5), _commit("kept", "t", 0, 7)], timestamp=T0)
        w.append([_commit("gone", "t", 1, 6), _commit("kept", "t", 1, 8)], timestamp=T0 + 1)
        w.append([_commit("gone", "t", 0, None), _commit("gone", "t", 1, None),
                  _commit("kept", "t", 0, None)], timestamp=T0 + 2)
    raw = raw_records(tmp_path / "data")
    lake = tmp_path / "lake"
    ingest_split(raw, lake, [c * 2 for c in cuts])
    groups = {r["group_id"]: r for r in table_rows(lake, "consumer_groups")}
    assert set(groups) == {"kept"}
    assert (groups["kept"]["group_type"], groups["kept"]["group_state"]) == ("simple", "Empty")
    offsets = {(r["group_id"], r["partition"]) for r in table_rows(lake, "committed_offsets")}
    assert offsets == {("kept", 1)}


def test_current_state_timestamp_is_the_records_millisecond_time(tmp_path: Path) -> None:
    """GroupMetadataValue.currentStateTimestamp is epoch milliseconds; the column is a timestamp."""
    state_ms = T0 - 1234
    value = {"protocol_type": "consumer", "generation": 1, "protocol": "range", "leader": None,
             "current_state_timestamp": state_ms, "members": []}
    with SegmentWriter(tmp_path / "data", 0) as w:
        w.append([(encode_key(2, {"group": "g"}), encode_value(2, 3, value))], timestamp=T0)
    lake = tmp_path / "lake"
    ingest_split(raw_records(tmp_path / "data"), lake, [])
    (row,) = table_rows(lake, "consumer_groups")
    expected = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=state_ms)
    assert row["current_state_timestamp"] == expected
    assert row["last_record_timestamp"] == expected + timedelta(milliseconds=1234)
