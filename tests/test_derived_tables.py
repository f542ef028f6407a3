"""Derived tables on a fresh lake: ``ingest_progress`` (from ``offsets_raw``) and
``ownership_last_ended`` (from ``group_generations``) are created, empty, with their sources,
and each batch folds its own rows into them. A lake from before them builds each from the
whole of its source at its next batch instead. Both ways must give the same tables, and
the commit audit, which reads ``ownership_last_ended`` once it exists and every ended
ownership row before, the same rows. On a generated group-heavy history always, on the
Kafka 4.2 recording when ../shared is there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa

from pipelines.demo import generate_cluster
from pipelines.ingest import DERIVED_TABLES, IngestReport, ensure_tables, process_batch
from pipelines.lake.engines import DeltaRsEngine
from tests.conftest import corpus_path, table_rows
from tests.test_batch_independence import batches, partitions_of

COMPARED = (*DERIVED_TABLES, "commit_attribution", "offset_anomalies", "offset_audit_cursor",
            "group_generations", "committed_offsets")


def _ingest(batch_list: list[pa.Table], lake: Path, as_before_the_tables: bool) -> Path:
    engine = DeltaRsEngine(lake)
    ensure_tables(engine)
    if as_before_the_tables:  # what a fresh lake's first batch did before: build them
        for name in DERIVED_TABLES:
            shutil.rmtree(lake / name)
    engine = DeltaRsEngine(lake)
    for i, raw in enumerate(batch_list):
        process_batch(engine, raw, i, "derived-test", IngestReport())
    return lake


def test_a_fresh_lake_has_its_derived_tables_created_empty(tmp_path: Path) -> None:
    engine = DeltaRsEngine(tmp_path / "lake")
    ensure_tables(engine)
    for name, source in DERIVED_TABLES.items():
        assert engine.exists(source)
        assert engine.exists(name)
        assert engine.read(name).num_rows == 0


def test_a_lake_with_history_but_no_derived_table_is_left_to_build_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=2, seed=5, live=False)
    lake = _ingest([pa.concat_tables(partitions_of(data))], tmp_path / "lake", False)
    for name in DERIVED_TABLES:
        assert table_rows(lake, name), f"{name} should hold rows"
        shutil.rmtree(lake / name)
    engine = DeltaRsEngine(lake)
    ensure_tables(engine)  # empty would claim the history holds nothing
    for name in DERIVED_TABLES:
        assert not engine.exists(name)


def _same_either_way(data: Path, tmp_path: Path) -> None:
    parts = partitions_of(data)
    cut = batches(parts, [[t.num_rows // 3, 2 * t.num_rows // 3] for t in parts], [0] * len(parts))
    assert len(cut) == 3
    created = _ingest(cut, tmp_path / "created", False)
    built = _ingest(cut, tmp_path / "built", True)
    for table in COMPARED:
        rows = table_rows(created, table)
        assert rows == table_rows(built, table), table
        if table in DERIVED_TABLES:
            assert rows, f"{table} should hold rows"


def test_created_or_built_the_tables_are_the_same_on_a_generated_history(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate_cluster(data, num_partitions=2, scale=2, group_heavy=4, seed=7, live=False)
    _same_either_way(data, tmp_path)


def test_created_or_built_the_tables_are_the_same_on_kafka_4_2(tmp_path: Path) -> None:
    _same_either_way(corpus_path("golden", "scenario-d", "segments"), tmp_path)
