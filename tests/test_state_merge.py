"""The state step's cost follows the batch: the audit reads the batch's own history files,
and a MERGE skips the state files its changed keys cannot be in (issue 9, benchmark (c)).

Why these tests: both are speed-ups that must not change what is computed. The audit's
read of its own files is checked against the old read of the whole table by position
ranges (kept as the oracle: ``DeltaRsEngine.read`` with the same filter) on every batch of
data the project generates, and of golden scenario-a when ../shared is there; the MERGE's
file skipping is checked in the Delta log (files removed) and by the rows it leaves.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.ingest import ingest_segments_local
from pipelines.lake import merge_writes
from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaRsEngine
from pipelines.lake.files import write_data_file
from pipelines.model import OP
from pipelines.state.audit import PositionRanges
from tests.conftest import corpus_path, table_rows
from tests.support.generated import generated_scenario
from tests.test_ingest import ALL_TABLES

_ORDER = [("cluster_id", "ascending"), ("offsets_partition", "ascending"), ("offset", "ascending")]


class OracleEngine(DeltaRsEngine):
    """delta-rs whose every read of a batch's own files is compared, on the spot, with the
    read of the whole table by the same filter (the code path it replaces)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.own_reads = 0

    def read_own_batch(self, table, app_id, version, columns=None, filter_expr=None, dictionaries=()):
        own = super().read_own_batch(table, app_id, version, columns, filter_expr, dictionaries)
        if own is not None:
            self.own_reads += 1
            whole = self.read(table, columns, filter_expr)
            assert own.num_rows > 0
            for name in dictionaries:  # as asked, with one dictionary for the whole read
                assert pa.types.is_dictionary(own.schema.field(name).type), name
                first = own.column(name).chunk(0).dictionary
                assert all(c.dictionary.equals(first) for c in own.column(name).chunks), name
            own = own.cast(whole.schema)
            assert own.sort_by(_ORDER).to_pylist() == whole.sort_by(_ORDER).to_pylist()
        return own


def _scenario(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if name == "scenario-a":
        return corpus_path("golden", "scenario-a")  # skips with the reason when ../shared is absent
    return generated_scenario(tmp_path_factory.mktemp("generated"))


@pytest.mark.parametrize("name", ["generated", "scenario-a"])
def test_audit_reads_its_own_batch_files_and_they_equal_the_table_read(
        name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    data = _scenario(name, tmp_path_factory)
    lake, oracle_lake = tmp_path / "lake", tmp_path / "plain"
    engine = OracleEngine(lake)
    report = ingest_segments_local(data / "segments", lake, engine=engine, max_records_per_batch=1)
    assert report.batches > 1
    # every batch with offset commits took the own-files path (and matched the oracle)
    assert engine.own_reads >= report.batches - 1 > 0
    # a lake written through the table reads (a fresh engine per batch: nothing of its own)
    ingest_segments_local(data / "segments", oracle_lake, engine=_ForgetfulEngine(oracle_lake),
                          max_records_per_batch=1)
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(oracle_lake, table), table


class _ForgetfulEngine(DeltaRsEngine):
    """delta-rs that never reads a batch from its own files (the code path before issue 9)."""

    def read_own_batch(self, *args, **kwargs):
        return None


def _commits(n: int, partition: int, start: int) -> pa.Table:
    spec = contract("offset_commits")
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return spec.conform(pa.table({
        "cluster_id": ["c"] * n, "group_id": [f"g{i % 3}" for i in range(n)], "topic": ["t"] * n,
        "partition": pa.array([0] * n, pa.int32()), "committed_offset": pa.array(range(n), pa.int64()),
        "leader_epoch": pa.array([-1] * n, pa.int32()), "metadata": [""] * n,
        "record_type": pa.array([1] * n, pa.int16()), "is_tombstone": [False] * n,
        "offsets_partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(range(start, start + n), pa.int64()), "ingested_at": [now] * n}))


def test_own_batch_read_only_for_the_batch_this_engine_committed(tmp_path: Path) -> None:
    spec = contract("offset_commits")
    engine = DeltaRsEngine(tmp_path)
    first = write_data_file(tmp_path / "offset_commits", _commits(5, 0, 0))
    assert engine.commit_files(spec, [first], "app", 0)
    second = write_data_file(tmp_path / "offset_commits", _commits(4, 0, 5))
    assert engine.commit_files(spec, [second], "app", 1)
    got = engine.read_own_batch("offset_commits", "app", 1, ["offset"])
    assert got.column("offset").to_pylist() == [5, 6, 7, 8]
    ranges = pa.table({"cluster_id": ["c"], "offsets_partition": pa.array([0], pa.int32()),
                       "min_offset": pa.array([6], pa.int64()), "max_offset": pa.array([7], pa.int64())})
    got = engine.read_own_batch("offset_commits", "app", 1, ["offset"], PositionRanges.of_ranges(ranges))
    assert got.column("offset").to_pylist() == [6, 7]
    # an earlier batch, another app, another engine (a restart): read the table instead
    assert engine.read_own_batch("offset_commits", "app", 0) is None
    assert engine.read_own_batch("offset_commits", "other", 1) is None
    assert DeltaRsEngine(tmp_path).read_own_batch("offset_commits", "app", 1) is None
    # a replayed commit is skipped and does not become "its own"
    third = write_data_file(tmp_path / "offset_commits", _commits(2, 0, 9))
    assert not engine.commit_files(spec, [third], "app", 1)
    assert engine.read_own_batch("offset_commits", "app", 1, ["offset"]).num_rows == 4
    # the file gone (vacuumed after a rewrite): read the table instead
    (tmp_path / "offset_commits" / second.path).unlink()
    assert engine.read_own_batch("offset_commits", "app", 1) is None


def _offset_rows(groups: list[str], value: int) -> pa.Table:
    n = len(groups)
    return pa.table({
        "cluster_id": ["c"] * n, "group_id": groups, "topic": ["t"] * n,
        "partition": pa.array([0] * n, pa.int32()), "committed_offset": pa.array([value] * n, pa.int64()),
        "leader_epoch": pa.array([-1] * n, pa.int32()), "metadata": [""] * n,
        "value_version": pa.array([3] * n, pa.int16()), "offsets_partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array([value] * n, pa.int64()),
        "updated_at": [datetime(2026, 1, 1, tzinfo=timezone.utc)] * n,
        OP: ["upsert"] * n})


def test_merge_rewrites_only_the_files_its_keys_can_be_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(merge_writes, "REWRITE_BYTES", 0)  # every table too large for a rewrite: MERGEs
    spec = contract("committed_offsets")
    engine = DeltaRsEngine(tmp_path)
    # four files, each one key range of groups (the batches that inserted them)
    for i in range(4):
        engine.merge(spec, _offset_rows([f"g{i}-{j:03d}" for j in range(100)], 1), "app", i)
    assert len(DeltaTable(str(tmp_path / "committed_offsets")).file_uris()) == 4
    changes = _offset_rows(["g2-005", "g2-050"], 7)
    changes = pa.concat_tables([changes, _offset_rows(["g2-999"], 8)])
    deletes = _offset_rows(["g2-010"], 0)
    deletes = deletes.set_column(deletes.schema.get_field_index(OP), OP, pa.array(["delete"]))
    assert engine.merge(spec, pa.concat_tables([changes, deletes]), "app", 4)
    metrics = DeltaTable(str(tmp_path / "committed_offsets")).history(1)[0]["operationMetrics"]
    assert metrics["num_target_files_removed"] == 1
    assert metrics["num_target_files_skipped_during_scan"] == 3
    rows = {r["group_id"]: r["committed_offset"] for r in engine.read("committed_offsets").to_pylist()}
    assert len(rows) == 400 and "g2-010" not in rows
    assert rows["g2-005"] == rows["g2-050"] == 7 and rows["g2-999"] == 8
    assert all(v == 1 for g, v in rows.items() if g not in ("g2-005", "g2-050", "g2-999"))


def _with_op(rows: pa.Table, op: str) -> pa.Table:
    return rows.set_column(rows.schema.get_field_index(OP), OP, pa.array([op] * rows.num_rows))


def _sorted_rows(root: Path) -> list[dict]:
    return sorted(DeltaRsEngine(root).read("committed_offsets").to_pylist(), key=lambda r: r["group_id"])


def test_a_small_table_merges_by_a_rewrite_with_the_rows_a_merge_leaves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same change sets through delta-rs' MERGE (every table over the rewrite size) and
    through the rewrite of a small table: the same rows after every batch; the rewrite
    leaves one file, commits the batch's transaction (a replay is skipped) and removes the
    files it read."""
    spec = contract("committed_offsets")
    batches = [
        _offset_rows([f"g{j:02d}" for j in range(30)], 1),  # inserts into an empty table
        pa.concat_tables([_offset_rows(["g03", "g07", "new-1"], 2),  # updates and an insert
                          _with_op(_offset_rows(["g05", "g06", "absent"], 0), "delete")]),
        _with_op(_offset_rows(["g08"], 0), "delete"),  # a delete alone
        _offset_rows(["g09", "new-2"], 3),
    ]
    merged, rewritten = tmp_path / "merged", tmp_path / "rewritten"
    for version, changes in enumerate(batches):
        with monkeypatch.context() as m:
            m.setattr(merge_writes, "REWRITE_BYTES", 0)
            assert DeltaRsEngine(merged).merge(spec, changes, "app", version)
        assert DeltaRsEngine(rewritten).merge(spec, changes, "app", version)
        assert _sorted_rows(rewritten) == _sorted_rows(merged), version
    rows = {r["group_id"]: r["committed_offset"] for r in _sorted_rows(rewritten)}
    assert len(rows) == 30 - 3 + 2 and rows["g03"] == rows["g07"] == rows["new-1"] == 2 and rows["new-2"] == 3
    assert not {"g05", "g06", "g08", "absent"} & rows.keys()
    table = DeltaTable(str(rewritten / "committed_offsets"))
    assert [h["operation"] for h in table.history()][:4] == ["WRITE"] * 4  # not one MERGE
    assert DeltaTable(str(merged / "committed_offsets")).history(1)[0]["operation"] == "MERGE"
    assert len(table.file_uris()) == 1
    assert table.transaction_version("app") == 3
    last = [line for line in (rewritten / "committed_offsets" / "_delta_log" / "00000000000000000004.json")
            .read_text().splitlines()]
    assert sum('"remove"' in line for line in last) == 1 and sum('"add"' in line for line in last) == 1
    # a replay of the last batch is skipped, and changes nothing
    assert not DeltaRsEngine(rewritten).merge(spec, _offset_rows(["g09"], 99), "app", 3)
    assert {r["group_id"]: r["committed_offset"] for r in _sorted_rows(rewritten)} == rows


def test_a_key_named_twice_is_left_to_the_merge(tmp_path: Path) -> None:
    """Two changes of one stored key: MERGE refuses them; the rewrite does not decide
    otherwise (it hands the change set to the MERGE, which raises, and nothing is written)."""
    spec = contract("committed_offsets")
    engine = DeltaRsEngine(tmp_path)
    engine.merge(spec, _offset_rows(["a", "b"], 1), "app", 0)
    with pytest.raises(Exception, match="multiple source rows"):
        engine.merge(spec, _offset_rows(["a", "a"], 2), "app", 1)
    assert {r["group_id"]: r["committed_offset"] for r in _sorted_rows(tmp_path)} == {"a": 1, "b": 1}


def test_a_table_with_columns_other_than_the_contracts_keeps_its_merge(tmp_path: Path) -> None:
    """A column the contract does not know (a newer writer's) survives: no rewrite drops it."""
    from deltalake import write_deltalake

    spec = contract("committed_offsets")
    rows = spec.conform(_offset_rows(["a", "b"], 1).drop_columns([OP]))
    write_deltalake(str(tmp_path / "committed_offsets"), rows.append_column("extra", pa.array(["x", "y"])))
    assert DeltaRsEngine(tmp_path).merge(spec, _offset_rows(["a"], 2), "app", 0)
    table = DeltaTable(str(tmp_path / "committed_offsets"))
    assert table.history(1)[0]["operation"] == "MERGE"
    got = {r["group_id"]: (r["committed_offset"], r["extra"]) for r in table.to_pyarrow_table().to_pylist()}
    assert got == {"a": (2, "x"), "b": (1, "y")}


def test_only_plain_tables_are_rewritten(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    spec = contract("committed_offsets")
    rows = spec.conform(_offset_rows(["a"], 1).drop_columns([OP]))
    write_deltalake(str(tmp_path / "plain"), rows)
    write_deltalake(str(tmp_path / "append_only"), rows, configuration={"delta.appendOnly": "true"})
    write_deltalake(str(tmp_path / "cdf"), rows, configuration={"delta.enableChangeDataFeed": "true"})
    assert merge_writes.plain_table(DeltaTable(str(tmp_path / "plain")))
    assert not merge_writes.plain_table(DeltaTable(str(tmp_path / "append_only")))
    # a change data feed: the MERGE writes the changes a rewrite would not
    assert not merge_writes.plain_table(DeltaTable(str(tmp_path / "cdf")))
    engine = DeltaRsEngine(tmp_path)
    cdf = contract("committed_offsets")
    write_deltalake(str(tmp_path / "committed_offsets"), rows, configuration={"delta.enableChangeDataFeed": "true"})
    assert engine.merge(cdf, _offset_rows(["a"], 2), "app", 0)
    assert DeltaTable(str(tmp_path / "committed_offsets")).history(1)[0]["operation"] == "MERGE"


class _MergeOnlyEngine(DeltaRsEngine):
    """delta-rs whose every change set goes through its MERGE (the code path before)."""

    def _merge_as_write(self, *args, **kwargs) -> bool:
        return False


class _CountingEngine(DeltaRsEngine):
    """delta-rs counting the MERGEs it did as writes: into empty tables, and as rewrites."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.as_writes: list[tuple[str, bool]] = []

    def _merge_as_write(self, table, contract, *args) -> bool:
        was_empty = not table.file_uris()
        done = super()._merge_as_write(table, contract, *args)
        if done:
            self.as_writes.append((contract.name, was_empty))
        return done


@pytest.mark.parametrize("name", ["generated", "scenario-a"])
def test_state_tables_from_merges_done_as_writes_equal_those_from_merges(
        name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every table of a lake whose MERGEs into empty and small tables were writes equals, row
    for row, the lake ingested through MERGEs alone, batch after batch (40 records a batch)."""
    data = _scenario(name, tmp_path_factory)
    lake, oracle = tmp_path / "lake", tmp_path / "merged"
    engine = _CountingEngine(lake)
    report = ingest_segments_local(data / "segments", lake, engine=engine, max_records_per_batch=40)
    assert report.batches > 3
    ingest_segments_local(data / "segments", oracle, engine=_MergeOnlyEngine(oracle), max_records_per_batch=40)
    for table in ALL_TABLES:
        assert table_rows(lake, table) == table_rows(oracle, table), table
    # both kinds happened: the partitioned ownership table's first batch appended, small
    # tables rewritten (each more than once)
    assert ("group_generations", True) in engine.as_writes
    rewritten = [t for t, empty in engine.as_writes if not empty]
    assert {"committed_offsets", "consumer_groups", "offset_audit_cursor"} <= {t for t in rewritten if rewritten.count(t) > 1}


def test_a_merge_of_deletes_into_an_empty_table_commits_its_transaction(tmp_path: Path) -> None:
    spec = contract("group_generations")
    engine = DeltaRsEngine(tmp_path)
    gone = spec.change_set([{"cluster_id": "c", "group_id": "g", "generation": 1, "member_id": "m", "topic": "t",
                             "partition": 0, "group_type": "classic", "valid_from_offset": 5}], "delete")
    assert engine.merge(spec, gone, "app", 0)
    table = DeltaTable(str(tmp_path / "group_generations"))
    assert table.transaction_version("app") == 0 and table.to_pyarrow_table().num_rows == 0
    assert table.history(1)[0]["operation"] == "WRITE"
    assert not engine.merge(spec, gone, "app", 0)  # a replay: skipped


@pytest.mark.parametrize("stored", [0, 3], ids=["empty table", "small table"])
def test_a_commit_between_the_read_and_the_write_fails_the_write_loudly(
        stored: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer's commit to the table after this write read it (here: while its file
    is written): the write is not retried onto the newer version, which could leave a key
    twice or undo the other's change. It fails, naming the table, and nothing of it lands
    (its transaction neither): a rerun replays it. A MERGE fails the same way."""
    spec = contract("committed_offsets")
    if stored:
        DeltaRsEngine(tmp_path).merge(spec, _offset_rows([f"s{i}" for i in range(stored)], 1), "app", 0)
    ours, theirs = DeltaRsEngine(tmp_path), DeltaRsEngine(tmp_path)
    write = merge_writes.write_data_file
    raced: list[bool] = []

    def racing_write(*args, **kwargs):
        if not raced:  # the other writer commits the same key meanwhile
            raced.append(False)
            raced[0] = theirs.merge(spec, _offset_rows(["k"], 5), "other", 0)
        return write(*args, **kwargs)

    monkeypatch.setattr(merge_writes, "write_data_file", racing_write)
    with pytest.raises(merge_writes.ConcurrentWriteError, match="committed_offsets: another writer committed"):
        ours.merge(spec, _offset_rows(["k"], 7), "app", 1)
    assert raced == [True]
    table = DeltaTable(str(tmp_path / "committed_offsets"))
    rows = sorted((r["group_id"], r["committed_offset"]) for r in table.to_pyarrow_table().to_pylist())
    assert rows == sorted([(f"s{i}", 1) for i in range(stored)] + [("k", 5)])
    assert table.transaction_version("app") == (0 if stored else None)
    monkeypatch.setattr(merge_writes, "write_data_file", write)
    assert DeltaRsEngine(tmp_path).merge(spec, _offset_rows(["k"], 7), "app", 1)  # the rerun
    assert {r["group_id"]: r["committed_offset"] for r in _sorted_rows(tmp_path)}["k"] == 7
