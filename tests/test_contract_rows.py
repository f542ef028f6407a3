"""``TableContract.from_rows`` (Arrow's struct converter) builds exactly the table
``Table.from_pylist(rows, schema=...)`` builds, for every contract: on the rows of a real
lake ingested from a generated history (group-heavy, so every state table has rows), and
with keys missing, keys the contract lacks, and every value null."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.demo import generate_cluster
from pipelines.ingest import ingest_segments_local
from pipelines.lake.contracts import contracts


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("contract-rows")
    generate_cluster(root / "data", num_partitions=2, seed=5, live=False, group_heavy=3)
    ingest_segments_local(root / "data", root / "lake", cluster_id="c1")
    return root / "lake"


def _same(rows: list[dict], spec) -> None:
    expected = pa.Table.from_pylist(rows, schema=spec.arrow_schema)
    built = spec.from_rows(rows)
    assert built.schema.equals(expected.schema, check_metadata=True)
    assert built.equals(expected)


@pytest.mark.parametrize("name", sorted(contracts()))
def test_from_rows_is_from_pylist(name: str, lake: Path) -> None:
    spec = contracts()[name]
    rows = DeltaTable(str(lake / name)).to_pyarrow_table().to_pylist() if (lake / name).exists() else []
    _same(rows, spec)
    first = dict(rows[0]) if rows else {}
    dropped = dict(list(first.items())[1:])  # a key missing: null
    _same([first, dropped, {"not_a_column": 1}, {f.name: None for f in spec.arrow_schema}], spec)
    _same([], spec)


def test_the_lake_has_rows_in_the_state_tables(lake: Path) -> None:
    """The comparison above ran on real rows where it matters most."""
    for name in ("group_generations", "consumer_groups", "group_members", "committed_offsets",
                 "offset_audit_cursor", "commit_attribution"):
        assert DeltaTable(str(lake / name)).to_pyarrow_table().num_rows > 0, name
