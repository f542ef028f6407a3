"""Both Delta engines mark micro-batches with Delta's standard ``txn`` action.

Why: replay protection must survive switching ``--delta-engine`` on a lake. delta-spark's
``txnAppId``/``txnVersion`` and DML transaction confs record a ``txn`` (SetTransaction)
action; these tests prove delta-rs' commits carry the same action in the log (read as
plain JSON, the way any Delta reader sees it) and that the delta-spark engine's replay check
reads it. (delta-spark writing and delta-rs reading: tests/test_optional_jvm_ends.py, which
needs delta-spark's jars.)
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaRsEngine, SparkDeltaEngine, transaction_version
from pipelines.model import OP


def _txn_actions(table_dir: Path) -> list[dict]:
    out = []
    for commit in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                out.append(action["txn"])
    return out


NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _raw(offset: int) -> pa.Table:
    """One offsets_raw row (an undecodable record: only the contract's required columns)."""
    return pa.Table.from_pylist([{"cluster_id": "c", "offsets_partition": 0, "offset": offset,
                                  "decode_status": "bad_key", "ingested_at": NOW,
                                  "ingest_batch_id": 0}], schema=contract("offsets_raw").arrow_schema)


def _group_row(group: str) -> dict:
    return {"cluster_id": "c", "group_id": group, "record_type": 0, "subkey": "",
            "is_tombstone": False, "value_version": None, "value_json": None,
            "offsets_partition": 0, "offset": 1, "record_timestamp": None, "updated_at": NOW}


def test_delta_rs_append_and_merge_write_a_txn_action(tmp_path: Path) -> None:
    engine = DeltaRsEngine(tmp_path)
    offsets_raw = contract("offsets_raw")
    assert engine.append(offsets_raw, _raw(5), "app-a", 3)
    latest = contract("group_records_latest")
    changes = pa.Table.from_pylist([_group_row("g")], schema=latest.change_schema)
    assert engine.merge(latest, changes.append_column(OP, pa.array(["upsert"])), "app-a", 4)

    assert [(t["appId"], t["version"]) for t in _txn_actions(tmp_path / "offsets_raw")] == [("app-a", 3)]
    assert [(t["appId"], t["version"]) for t in _txn_actions(tmp_path / "group_records_latest")] \
        == [("app-a", 4)]
    assert transaction_version(str(tmp_path / "offsets_raw"), "app-a") == 3
    assert transaction_version(str(tmp_path / "offsets_raw"), "another-app") is None
    assert transaction_version(str(tmp_path / "no_such_table"), "app-a") is None


def test_the_spark_engine_recognises_delta_rs_commits(tmp_path: Path) -> None:
    """Its replay check reads the log only: no JVM is involved, so it runs here."""
    DeltaRsEngine(tmp_path).append(contract("offsets_raw"), _raw(1), "app-b", 7)
    spark_engine = SparkDeltaEngine(None, tmp_path)
    assert spark_engine.committed("offsets_raw", "app-b", 7)
    assert spark_engine.committed("offsets_raw", "app-b", 6)
    assert not spark_engine.committed("offsets_raw", "app-b", 8)
    assert not spark_engine.committed("offsets_raw", "app-c", 0)
    assert not spark_engine.committed("offset_commits", "app-b", 0)


def test_a_replayed_delta_rs_batch_is_skipped(tmp_path: Path) -> None:
    engine = DeltaRsEngine(tmp_path)
    offsets_raw = contract("offsets_raw")
    assert engine.append(offsets_raw, _raw(1), "app", 0)
    assert not engine.append(offsets_raw, _raw(1), "app", 0)
    assert engine.read("offsets_raw").num_rows == 1
    assert len(_txn_actions(tmp_path / "offsets_raw")) == 1


def test_a_delta_rs_write_brings_its_table_up_to_date_once_and_sees_other_writers(
        tmp_path: Path, monkeypatch) -> None:
    """One bring-up of the table's log per write (the replay check and the write share it:
    each is a listing of the log, a round trip to an object store), and that one still
    sees a batch another writer committed meanwhile: the write is skipped."""
    from deltalake import DeltaTable

    mine, other = DeltaRsEngine(tmp_path), DeltaRsEngine(tmp_path)
    latest = contract("group_records_latest")

    def changes(group: str) -> pa.Table:
        rows = pa.Table.from_pylist([_group_row(group)], schema=latest.change_schema)
        return rows.append_column(OP, pa.array(["upsert"]))

    assert mine.merge(latest, changes("a"), "app", 0)
    assert mine.append(contract("offsets_raw"), _raw(1), "app", 0)
    bring_ups = []
    real = DeltaTable.update_incremental
    monkeypatch.setattr(DeltaTable, "update_incremental",
                        lambda self, *a, **k: bring_ups.append(1) or real(self, *a, **k))
    assert mine.merge(latest, changes("b"), "app", 1)
    assert mine.append(contract("offsets_raw"), _raw(2), "app", 1)
    assert len(bring_ups) == 2

    assert other.merge(latest, changes("c"), "app", 2)  # another writer, after mine last looked
    assert not mine.merge(latest, changes("d"), "app", 2)
    assert sorted(mine.read("group_records_latest").column("group_id").to_pylist()) == ["a", "b", "c"]
