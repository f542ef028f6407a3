"""``key_ids`` (pipelines.state.key_ids), the integer keys of the audit's vectorized joins:
equal keys get equal ids in every table, different keys different ids (values holding the
old join separator included), numbered by first appearance, whatever the column widths."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.state.key_ids import key_ids


def _expected(*tables: list[tuple]) -> list[list[int]]:
    """The ids by definition: first appearance over the tables' rows in order."""
    seen: dict[tuple, int] = {}
    return [[seen.setdefault(row, len(seen)) for row in rows] for rows in tables]


def _columns(rows: list[tuple], types: list[pa.DataType]) -> list[pa.ChunkedArray]:
    return [pa.chunked_array([pa.array([r[i] for r in rows], t)]) for i, t in enumerate(types)]


def test_equal_keys_equal_ids_across_tables_by_first_appearance() -> None:
    a = [("c", "g1", "t", 0), ("c", "g2", "t", 0), ("c", "g1", "t", 0), ("c", "g1", "t", 1)]
    b = [("c", "g1", "t", 1), ("c", "g3", "t", 0), ("d", "g1", "t", 0)]
    types = [pa.string(), pa.string(), pa.string(), pa.int32()]
    b_types = [pa.large_string(), pa.string(), pa.string(), pa.int64()]  # other widths, same keys
    got = key_ids(_columns(a, types), _columns(b, b_types))
    assert [g.tolist() for g in got] == _expected(a, b)
    assert all(g.dtype == np.int64 for g in got)


def test_values_holding_a_separator_do_not_collide() -> None:
    rows = [("a\x1fb", "c"), ("a", "b\x1fc"), ("a\x1fb", "c")]
    got = key_ids(_columns(rows, [pa.string(), pa.string()]))[0]
    assert got.tolist() == [0, 1, 0]


def test_nulls_are_one_more_value_and_one_table_works() -> None:
    rows = [("x", None), ("x", 1), ("x", None), (None, 1)]
    got = key_ids(_columns(rows, [pa.string(), pa.int32()]))[0]
    assert got.tolist() == _expected(rows)[0]


def test_dictionary_columns_key_as_their_strings() -> None:
    """A batch's commits read back as dictionaries (each chunk its own, nulls in the indices)
    key exactly as the same strings do, beside plain and other-width tables."""
    a = [("c", "g1", "t", 0), ("c", None, "t", 0), ("c", "g1", "t", 0), ("c", "g2", "u", 1), ("d", None, "t", 0)]
    b = [("c", "g2", "u", 1), (None, "g1", "t", 0), ("c", None, "t", 0)]
    types = [pa.string(), pa.string(), pa.string(), pa.int32()]

    def as_dictionaries(rows: list[tuple]) -> list[pa.ChunkedArray]:
        cols = _columns(rows, types)
        halves = [(0, 2), (2, len(rows) - 2)]  # two chunks with different dictionaries
        return [pa.chunked_array([pc.dictionary_encode(c.slice(o, n).combine_chunks()) for o, n in halves])
                if i < 3 else c for i, c in enumerate(cols)]

    got = key_ids(as_dictionaries(a), _columns(b, [pa.large_string(), *types[1:]]))
    assert [g.tolist() for g in got] == _expected(a, b)
    assert key_ids(as_dictionaries(a), as_dictionaries(b))[1].tolist() == _expected(a, b)[1]


def test_many_keys_do_not_overflow() -> None:
    rng = np.random.default_rng(7)
    rows = [(f"g{a}", f"t{b}", int(c), f"m{d}") for a, b, c, d in
            rng.integers(0, 3000, size=(20_000, 4))]
    got = key_ids(_columns(rows, [pa.string(), pa.string(), pa.int32(), pa.string()]))[0]
    assert got.tolist() == _expected(rows)[0]


def test_keys_whose_distinct_counts_multiply_past_2_to_the_64() -> None:
    """65 two-valued columns: folded without a renumbering on the way, the first column's
    place value would be 2**64 and its two keys would wrap onto one id."""
    rows = [(0,) * 65, (1,) + (0,) * 64, (1,) * 65]
    got = key_ids(_columns(rows, [pa.int8()] * 65))[0]
    assert got.tolist() == [0, 1, 2]


def test_picked_ownership_columns_equal_a_plain_take() -> None:
    """The attribution's owner columns (dictionaries of the distinct values of the ownership
    rows picked) read as the rows a plain take of the ownership table gives, nulls included."""
    from pipelines.state.attribution import _Picked

    rng = np.random.default_rng(11)
    n_rows = 300
    table = pa.table({
        "member_id": pa.chunked_array([pa.array([None if i % 7 == 0 else f"m{i % 40}" for i in range(150)]),
                                       pa.array([f"m{i}" for i in range(150)])]),
        "generation": pa.array([None if i % 5 == 0 else i for i in range(n_rows)], pa.int32()),
        "valid_to_offset": pa.array([None if i % 3 == 0 else i << 33 for i in range(n_rows)], pa.int64()),
    })
    for _ in range(20):
        rows = rng.integers(0, n_rows, size=1000)
        where = rng.random(1000) < rng.random()
        got = _Picked(rows, where).columns(table, ["member_id", "generation", "valid_to_offset"])
        expected = table.take(pa.array(rows, mask=~where))
        assert got["member_id"].cast(pa.string()).to_pylist() == expected.column("member_id").to_pylist()
        for name in ("generation", "valid_to_offset"):
            assert got[name].type == table.schema.field(name).type
            assert got[name].to_pylist() == expected.column(name).to_pylist()
            assert got[name].null_count == expected.column(name).null_count
        # each value once in the dictionary (Parquet writes it as it is), no null among them
        dictionary = got["member_id"].dictionary
        assert len(dictionary) == len(pc.unique(dictionary)) and dictionary.null_count == 0
