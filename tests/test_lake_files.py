"""History files written by tasks and committed by the driver: what Delta readers rely on."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.lake.contracts import contract
from pipelines.lake.engines import DeltaRsEngine
from pipelines.lake.files import STATS_STRING_LIMIT, delta_rs_writer, write_data_file

UTC = timezone.utc


def _commits(n: int = 50) -> pa.Table:
    return contract("offset_commits").conform(pa.table({
        "cluster_id": ["c"] * n,
        "group_id": [f"group-{i % 7}" if i != 3 else "group-9-" + "x" * 40 for i in range(n)],
        "topic": [f"topic-{i % 3}" for i in range(n)],
        "partition": [i % 4 for i in range(n)],
        "committed_offset": [None if i % 10 == 0 else i * 100 for i in range(n)],
        "is_tombstone": [i % 10 == 0 for i in range(n)],
        "record_type": [1] * n,
        "offsets_partition": [i % 2 for i in range(n)],
        "offset": list(range(1000, 1000 + n)),
        "record_timestamp": [datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC) for i in range(n)],
        # sub-millisecond: Delta states timestamps in ms, so max must round up to stay a bound
        "ingested_at": [datetime(2026, 1, 2, 0, 0, 0, 1500 + i, tzinfo=UTC) for i in range(n)],
    }))


def _value(stat):
    """A stated value; timestamps as instants (writers differ in how many zero digits they print)."""
    if isinstance(stat, str) and stat.endswith("Z") and stat[:4].isdigit() and "T" in stat:
        return datetime.fromisoformat(stat)
    return stat


def _stats(table_dir: Path) -> dict:
    adds = [json.loads(line)["add"] for log in sorted((table_dir / "_delta_log").glob("*.json"))
            for line in log.read_text().splitlines() if '"add"' in line]
    assert len(adds) == 1
    return json.loads(adds[0]["stats"])


def test_file_statistics_agree_with_delta_rs_own(tmp_path: Path) -> None:
    data = _commits()
    write_deltalake(str(tmp_path / "theirs"), data)
    engine = DeltaRsEngine(tmp_path / "lake")
    engine.ensure(contract("offset_commits"))
    engine.commit_files(contract("offset_commits"),
                        [write_data_file(engine.path("offset_commits"), data)], "app", 0)
    ours, theirs = _stats(tmp_path / "lake" / "offset_commits"), _stats(tmp_path / "theirs")
    assert ours["numRecords"] == theirs["numRecords"] == 50
    assert ours["nullCount"] == theirs["nullCount"]
    for column, low in theirs["minValues"].items():
        if column == "group_id":  # we state at most a prefix of the limit's length
            assert ours["minValues"][column] == low[:STATS_STRING_LIMIT]
        else:
            assert _value(ours["minValues"][column]) == _value(low), column
    for column, high in theirs["maxValues"].items():
        if column == "ingested_at":
            assert (_value(high), _value(ours["maxValues"][column])) == (
                datetime(2026, 1, 2, 0, 0, 0, 1000, tzinfo=UTC), datetime(2026, 1, 2, 0, 0, 0, 2000, tzinfo=UTC))
        elif column == "group_id":
            assert column not in ours["maxValues"]  # a truncated maximum would not be an upper bound
        else:
            assert _value(ours["maxValues"][column]) == _value(high), column


def test_committed_files_read_back_skip_correctly_and_replay_is_a_no_op(tmp_path: Path) -> None:
    engine = DeltaRsEngine(tmp_path)
    spec = contract("offset_commits")
    engine.ensure(spec)
    data = _commits()
    halves = [write_data_file(engine.path(spec.name), data.slice(0, 25)),
              write_data_file(engine.path(spec.name), data.slice(25))]
    assert engine.commit_files(spec, halves, "app", 0)
    assert engine.commit_files(spec, [], "app", 1)  # an empty batch still records its id
    table = DeltaTable(engine.path(spec.name))
    assert (table.version(), table.count(), table.transaction_version("app")) == (2, 50, 1)
    assert table.to_pyarrow_table().sort_by("offset").equals(data)
    late = datetime(2026, 1, 2, 0, 0, 0, 1540, tzinfo=UTC)  # only in the second file, 1 µs before its max
    hits = table.to_pyarrow_dataset().to_table(filter=pa.compute.field("ingested_at") >= late)
    assert hits.column("offset").to_pylist() == list(range(1040, 1050))
    replay = [write_data_file(engine.path(spec.name), data)]
    assert not engine.commit_files(spec, replay, "app", 1)
    assert DeltaTable(engine.path(spec.name)).version() == 2


@pytest.mark.parametrize("name", ["offsets_raw", "group_metadata"])
def test_every_history_contract_writes_as_a_committable_file(tmp_path: Path, name: str) -> None:
    engine = DeltaRsEngine(tmp_path)
    spec = contract(name)
    engine.ensure(spec)
    empty = spec.arrow_schema.empty_table()
    assert engine.commit_files(spec, [write_data_file(engine.path(name), empty)], "app", 0)
    assert DeltaTable(engine.path(name)).count() == 0


def test_files_the_driver_cannot_see_are_refused_not_committed(tmp_path: Path) -> None:
    engine = DeltaRsEngine(tmp_path / "lake")
    spec = contract("offset_commits")
    engine.ensure(spec)
    elsewhere = write_data_file(tmp_path, _commits())  # as if on an executor's own disk
    with pytest.raises(FileNotFoundError, match="not visible here"):
        engine.commit_files(spec, [elsewhere], "app", 0)
    table = DeltaTable(engine.path(spec.name))
    assert (table.version(), table.transaction_version("app")) == (0, None)


def _dictionary_encoded(path: Path) -> dict[str, bool]:
    """Per column of a Parquet file: whether its pages are dictionary-encoded."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    chunks = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
    return {c.path_in_schema: any("DICTIONARY" in e for e in c.encodings) for c in chunks}


def test_both_writers_use_dictionary_pages_for_string_columns_only(tmp_path: Path) -> None:
    """Strings repeat (group ids, topics); offsets and timestamps are near-unique, where a
    dictionary page costs time and space. Task-written files and delta-rs appends and merges
    follow the same rule."""
    data = _commits()
    written = write_data_file(tmp_path / "task", data)
    engine = DeltaRsEngine(tmp_path / "lake")
    assert engine.append(contract("offset_commits"), data, "app", 0)
    state = contract("committed_offsets")
    rows = [{"cluster_id": "c", "group_id": f"g{i % 3}", "topic": "t", "partition": i, "committed_offset": i * 10,
             "leader_epoch": -1, "metadata": "", "value_version": 3, "offsets_partition": 0, "offset": i,
             "updated_at": datetime(2026, 1, 1, tzinfo=UTC)} for i in range(40)]
    assert engine.merge(state, state.change_set(rows, ["upsert"] * len(rows)), "app", 0)
    files = [tmp_path / "task" / written.path, *(tmp_path / "lake" / "offset_commits").glob("*.parquet"),
             *(tmp_path / "lake" / "committed_offsets").glob("*.parquet")]
    assert len(files) == 3
    for path, schema in zip(files, [data.schema, data.schema, state.arrow_schema], strict=True):
        encoded = _dictionary_encoded(path)
        assert encoded.keys() == set(schema.names), path
        want = {f.name for f in schema if pa.types.is_string(f.type)}
        assert {name for name, yes in encoded.items() if yes} == want, path


def _as_dictionaries(data: pa.Table, unused: str) -> pa.Table:
    """``data`` with every string column an Arrow dictionary whose values also hold ``unused``
    (a value no row takes: the statistics must not state it)."""
    columns = []
    for column in data.columns:
        if pa.types.is_string(column.type):
            encoded = column.combine_chunks().dictionary_encode()
            values = pa.concat_arrays([encoded.dictionary, pa.array([unused])])
            column = pa.DictionaryArray.from_arrays(encoded.indices, values)
        columns.append(column)
    return pa.table(columns, names=data.column_names)


@pytest.mark.parametrize("unused", ["", "~~~~"])  # below and above every value rows take
def test_appended_dictionary_columns_are_stored_as_plain_strings(tmp_path: Path, unused: str) -> None:
    """The audit appends its attribution with dictionary columns (owners shared by a million
    commits): the table must hold exactly what plain strings give, stated the same way."""
    spec = contract("offset_commits")
    data = _commits()
    engine = DeltaRsEngine(tmp_path / "lake")
    assert engine.append(spec, _as_dictionaries(data, unused), "app", 0)
    assert not engine.append(spec, _as_dictionaries(data, unused), "app", 0)  # a replay: skipped
    write_deltalake(str(tmp_path / "plain"), data)

    table = DeltaTable(str(tmp_path / "lake" / "offset_commits"))
    assert table.to_pyarrow_table().schema == spec.arrow_schema.remove_metadata()
    assert table.to_pyarrow_table().to_pylist() == data.to_pylist()
    ours, theirs = _stats(tmp_path / "lake" / "offset_commits"), _stats(tmp_path / "plain")
    assert ours["nullCount"] == theirs["nullCount"]
    for column in ("cluster_id", "topic"):
        assert ours["minValues"][column] == theirs["minValues"][column]
        assert ours["maxValues"][column] == theirs["maxValues"][column]
    # the file itself: plain strings for any Parquet reader, no Arrow dictionary schema kept
    (path,) = table.file_uris()
    assert pq.read_table(path).column("group_id").type == pa.string()
    assert pq.read_table(path).to_pylist() == data.to_pylist()
    # Parquet's own bounds: none for the dictionaries (their values interleave: a row group's
    # bounds skip nothing), every other column's as usual; plain strings keep theirs
    group = pq.read_metadata(path).row_group(0)
    stated = {group.column(i).path_in_schema: group.column(i).is_stats_set for i in range(group.num_columns)}
    strings = {f.name for f in spec.arrow_schema if pa.types.is_string(f.type)}
    assert strings and {c for c, yes in stated.items() if not yes} == strings
    plain = pq.read_metadata(tmp_path / "loose" / write_data_file(tmp_path / "loose", data).path).row_group(0)
    assert all(plain.column(i).is_stats_set for i in range(plain.num_columns))


def test_conform_keeps_only_dictionaries_without_null_values() -> None:
    spec = contract("offset_commits")
    data = _commits(4)
    clean = pa.DictionaryArray.from_arrays(pa.array([0, None, 1, 0], pa.int32()), pa.array(["a", "b"]))
    holed = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1, 0], pa.int32()), pa.array(["a", None]))
    kept = spec.conform(data.set_column(1, "group_id", clean), keep_dictionaries=True)
    cast = spec.conform(data.set_column(1, "group_id", holed), keep_dictionaries=True)
    assert pa.types.is_dictionary(kept.schema.field("group_id").type)
    assert cast.schema.field("group_id").type == pa.string()
    assert cast.column("group_id").null_count == 2
    assert spec.conform(data.set_column(1, "group_id", clean)).schema == spec.arrow_schema


def _encodings(path: Path) -> dict[str, set[str]]:
    """Per column of a Parquet file: the encodings its pages use."""
    meta = pq.ParquetFile(path).metadata
    return {meta.row_group(0).column(i).path_in_schema: set(meta.row_group(0).column(i).encodings)
            for i in range(meta.num_columns)}


def test_positions_are_delta_packed_and_every_reader_reads_them_back(tmp_path: Path, spark) -> None:
    """The contract's ``delta_encoded`` columns (log positions, batch ids) are written
    DELTA_BINARY_PACKED by our writer (tasks' files, the driver's appends) and by delta-rs
    (compaction); pyarrow, delta-rs, DuckDB and Spark read the values back as written, runs
    that fall back (a task's file holds several partitions) and extreme values included."""
    import duckdb

    spec = contract("offset_commits")
    assert spec.delta_encoded == ("offset",)
    data = _commits(60)
    offsets = [*range(2**40, 2**40 + 20), *range(5, 25), 0, 2**63 - 1, -(2**63), *range(17)]
    data = data.set_column(data.schema.get_field_index("offset"), "offset", pa.array(offsets, pa.int64()))
    written = write_data_file(tmp_path / "task", data, spec.delta_encoded)
    engine = DeltaRsEngine(tmp_path / "lake")
    assert engine.append(spec, data, "app", 0) and engine.append(spec, data, "app", 1)
    appended = sorted((tmp_path / "lake" / spec.name).glob("*.parquet"))
    assert len(appended) == 2
    assert DeltaTable(str(tmp_path / "lake" / spec.name)).optimize.compact(
        writer_properties=delta_rs_writer(spec))["numFilesAdded"] == 1
    compacted = set((tmp_path / "lake" / spec.name).glob("*.parquet")) - set(appended)
    files = [tmp_path / "task" / written.path, *appended, *compacted]
    assert len(files) == 4
    for path in files:
        encodings = _encodings(path)
        assert "DELTA_BINARY_PACKED" in encodings["offset"], path
        assert not any("DELTA_BINARY_PACKED" in e for c, e in encodings.items() if c != "offset"), path
        want = offsets if path not in compacted else sorted(offsets * 2)  # both appends, in some order
        got = [pq.read_table(path).column("offset").to_pylist(),
               [r[0] for r in duckdb.sql(f"select \"offset\" from read_parquet('{path}')").fetchall()],
               [r.offset for r in spark.read.parquet(str(path)).select("offset").collect()]]
        assert [g if path not in compacted else sorted(g) for g in got] == [want] * 3, path
    assert sorted(DeltaTable(str(tmp_path / "lake" / spec.name)).to_pyarrow_table().column("offset").to_pylist()) \
        == sorted(offsets * 2)


def test_the_contracts_delta_encode_only_integer_columns_they_have() -> None:
    from pipelines.lake.contracts import contracts

    named = {name: spec.delta_encoded for name, spec in contracts().items() if spec.delta_encoded}
    assert set(named) == {"offsets_raw", "offset_commits", "group_metadata", "commit_attribution"}
    for name, columns in named.items():
        types = {f.name: f.type for f in contract(name).arrow_schema}
        assert all(types[c] == pa.int64() for c in columns), name


def test_statistics_from_the_writer_hold_across_row_groups_nulls_and_long_strings(tmp_path: Path) -> None:
    """Bounds taken from the Parquet writer's statistics: over every row group, a column
    all null in one row group, a string too long for the writer's statistics (4 KB), a
    dictionary column (no writer statistics): each as computed from the rows, and as
    written out here by hand."""
    import io

    from pipelines.lake.files import file_stats

    long = "a" + "z" * 5000  # the least value, and too long for the writer's statistics
    data = pa.table({
        "i": pa.array([5, -4, 7, None, 2, 9], pa.int64()),
        "s": pa.array(["b", "é", None, None, "a", "c"]),  # all null in the second row group
        "long": pa.array(["k", "l", long, "n", "j", "o"]),  # no writer bounds in row group 2
        "t": pa.array([3_000, None, 1_500, 9_999, 2_000, 4_000], pa.timestamp("us", tz="UTC")),
        "flag": pa.array([True, True, None, True, True, True]),
        "d": pa.array(["y", "x", "y", None, "w", "y"]).dictionary_encode(),
        "none": pa.nulls(6, pa.string()),
    })
    collected: list = []
    pq.write_table(data, io.BytesIO(), row_group_size=2, metadata_collector=collected,
                   write_statistics=["i", "s", "long", "t", "flag", "none"], store_schema=False)
    meta = collected[0]
    assert meta.num_row_groups == 3
    assert not meta.row_group(1).column(2).statistics.has_min_max  # the long string's
    stated = json.loads(file_stats(data, meta))
    assert stated == json.loads(file_stats(data))
    assert stated == {
        "numRecords": 6,
        "minValues": {"i": -4, "s": "a", "long": long[:STATS_STRING_LIMIT], "t": "1970-01-01T00:00:00.001Z", "flag": True, "d": "w"},
        "maxValues": {"i": 9, "s": "é", "long": "o", "t": "1970-01-01T00:00:00.010Z", "flag": True, "d": "y"},
        "nullCount": {"i": 1, "s": 2, "long": 0, "t": 1, "flag": 1, "d": 1, "none": 6},
    }


def test_record_bytes_have_no_parquet_bounds_and_delta_states_the_rest(tmp_path: Path) -> None:
    """``offsets_raw``'s key and value bytes are written without Parquet statistics (nobody
    filters row groups by them); every other column keeps its bounds, and the Delta log's
    per-file statistics are what delta-rs states for the same rows (binary: none)."""
    n = 40
    raw = contract("offsets_raw").conform(pa.table({
        "cluster_id": ["c"] * n,
        "offsets_partition": [i % 3 for i in range(n)],
        "offset": list(range(500, 500 + n)),
        "key": [bytes([0, 1, i]) for i in range(n)],
        "value": [None if i % 9 == 0 else bytes([0, 3, 255 - i]) for i in range(n)],
        "timestamp": [datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC) for i in range(n)],
        "record_type": [1] * n,
        "decode_status": ["ok"] * n,
        "ingested_at": [datetime(2026, 1, 2, tzinfo=UTC)] * n,
        "ingest_batch_id": [4] * n,
    }))
    lake = tmp_path / "offsets_raw"
    written = write_data_file(lake, raw)
    meta = pq.ParquetFile(lake / written.path).metadata.row_group(0)
    stated = {meta.column(i).path_in_schema: meta.column(i).statistics for i in range(meta.num_columns)}
    assert stated["key"] is None or not stated["key"].has_min_max
    assert stated["value"] is None or not stated["value"].has_min_max
    assert (stated["offset"].min, stated["offset"].max) == (500, 539)
    assert (stated["cluster_id"].min, stated["record_type"].max) == ("c", 1)
    write_deltalake(str(tmp_path / "theirs"), raw)
    ours, theirs = json.loads(written.stats), _stats(tmp_path / "theirs")
    for kind in ("minValues", "maxValues"):
        assert "key" not in ours[kind] and "value" not in ours[kind]
        assert {c: _value(v) for c, v in ours[kind].items()} == {c: _value(v) for c, v in theirs[kind].items()}
    assert ours["nullCount"] == {c: k for c, k in theirs["nullCount"].items() if c not in ("key", "value")}
