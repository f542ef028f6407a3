"""``group_records_latest``'s change set, ranked before values are written as JSON (issue 9,
group-heavy histories), equals the old build (tests/support/latest_oracle.py) row for row:
on real broker-written data (golden scenarios A and D: classic, KIP-848, share and streams
groups) and on generated histories (the default demo and a group-heavy one, whose members
rejoin and whose records repeat), whole and cut into batches at arbitrary rows."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines.demo import generate_cluster
from pipelines.history.tables import build_history
from pipelines.model import StateInput
from pipelines.sources.record_batches.arrow_reader import read_arrow
from pipelines.state.apply import _latest_group_record_changes
from tests.conftest import corpus_path
from tests.support.latest_oracle import latest_group_record_changes

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("latest-changes")
    generate_cluster(base / "default", num_partitions=3, seed=5, live=False)
    generate_cluster(base / "heavy", scale=1, group_heavy=20, live=False)
    return {"default": base / "default", "heavy": base / "heavy"}


def _source(name: str, generated: dict[str, Path]) -> Path:
    return generated[name] if name in generated else corpus_path(*name.split("/"))


@pytest.mark.parametrize("source", ["default", "heavy", "golden/scenario-a/segments",
                                    "golden/scenario-d/segments"])
@pytest.mark.parametrize("cuts", [1, 3])
def test_latest_changes_equal_the_old_build(source: str, cuts: int,
                                            generated: dict[str, Path]) -> None:
    raw = pa.Table.from_batches(list(read_arrow(_source(source, generated), cluster_id="c1")))
    step = -(-raw.num_rows // cuts)
    compared = 0
    for i in range(cuts):
        batch = build_history(raw.slice(i * step, step), i, NOW).state_input()
        new = _latest_group_record_changes(batch, NOW)
        old = latest_group_record_changes(batch, NOW)
        assert new.schema == old.schema
        assert new.to_pylist() == old.to_pylist()
        compared += sum(v is not None for v in new.column("value_json").to_pylist())
    assert compared > 0, "no group record value was compared"


@pytest.mark.parametrize("source", ["heavy", "golden/scenario-d/segments"])
def test_latest_changes_pick_by_log_position_not_by_list_order(source: str,
                                                               generated: dict[str, Path]) -> None:
    """The winner per key is the record at the greatest log position, however the batch's
    records are ordered (here: last position first)."""
    raw = pa.Table.from_batches(list(read_arrow(_source(source, generated), cluster_id="c1")))
    batch = build_history(raw, 0, NOW).state_input()
    batch = StateInput(batch.offset_commits, batch.groups.take(np.arange(len(batch.groups))[::-1]),
                       batch.commit_ranges)
    assert batch.group_records[0].record.offset > batch.group_records[-1].record.offset
    new = _latest_group_record_changes(batch, NOW)
    assert new.to_pylist() == latest_group_record_changes(batch, NOW).to_pylist()
    assert sum(v is not None for v in new.column("value_json").to_pylist()) > 0
