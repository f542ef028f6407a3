"""Changed-key filters: the predicate both Delta engines push into their scans and MERGEs.

Why: delta-spark's state update reads only the changed keys' rows and restricts each MERGE's
target to them; a predicate that is too wide costs reads, one that is too narrow loses state.
Expected strings and row sets here are written out by hand, not derived from the code.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.lake.contracts import contract
from pipelines.lake.engines import (
    changed_keys,
    idempotent_write_options,
    merge_condition,
    stored_partitions,
)
from pipelines.lake.keys import KeyFilter, distinct_keys, sql_literal
from pipelines.model import OP


def test_one_cluster_is_an_in_list_on_the_last_column() -> None:
    f = KeyFilter.of(("cluster_id", "group_id"), {("c1", "g2"), ("c1", "g1")})
    assert f.to_sql() == "(`cluster_id` = 'c1' AND `group_id` IN ('g1', 'g2'))"


def test_several_clusters_are_or_ed_and_exact() -> None:
    f = KeyFilter.of(("cluster_id", "group_id"), {("a", "g"), ("b", "h"), ("b", "g")})
    assert f.to_sql() == ("((`cluster_id` = 'a' AND `group_id` = 'g') OR "
                          "(`cluster_id` = 'b' AND `group_id` IN ('g', 'h')))")


def test_null_columns_alias_and_no_keys() -> None:
    f = KeyFilter.of(("cluster_id", "group_id"), {("c", "g")}, ("valid_to",))
    assert f.to_sql(alias="t") == "(t.`cluster_id` = 'c' AND t.`group_id` = 'g') AND t.`valid_to` IS NULL"
    assert KeyFilter.of(("a", "b"), ()).to_sql() == "FALSE"


def test_true_columns_select_one_partition_in_both_engines() -> None:
    """A boolean partition column required true: Spark's SQL and pyarrow's expression read
    the same rows (and both can prune the other partition's files by it)."""
    f = KeyFilter.of(("cluster_id", "group_id"), {("c", "g")}, ("valid_to",), ("is_open",))
    assert f.to_sql(alias="t") == ("(t.`cluster_id` = 'c' AND t.`group_id` = 'g') AND t.`valid_to` IS NULL"
                                   " AND t.`is_open` = TRUE")
    rows = pa.table({"cluster_id": ["c", "c", "c"], "group_id": ["g", "g", "h"],
                     "valid_to": pa.array([None, None, None], pa.int64()), "is_open": [True, False, True]})
    assert rows.filter(f.to_arrow()).to_pylist() == [{"cluster_id": "c", "group_id": "g", "valid_to": None,
                                                      "is_open": True}]


def test_single_column_keys_and_null_values() -> None:
    assert KeyFilter.of(("group_id",), {("x",), ("y",)}).to_sql() == "`group_id` IN ('x', 'y')"
    assert KeyFilter.of(("c", "g"), {("a", None)}).to_sql() == "(`c` = 'a' AND `g` IS NULL)"


def test_literals_escape_quotes_and_backslashes() -> None:
    assert sql_literal("it's") == "'it\\'s'"
    assert sql_literal("a\\b") == "'a\\\\b'"
    assert sql_literal(7) == "7"
    assert sql_literal(None) == "NULL"
    with pytest.raises(TypeError):
        sql_literal(object())


def test_keys_must_have_one_value_per_column() -> None:
    with pytest.raises(ValueError):
        KeyFilter.of(("cluster_id", "group_id"), {("only-one",)})


def test_distinct_keys_are_the_tuples_of_the_table() -> None:
    table = pa.table({"cluster_id": ["a", "a", "b", "a", None], "group_id": ["g", "g", "g", "h", "g"],
                      "n": [1, 2, 3, 4, 5]})
    assert distinct_keys(table, ("cluster_id", "group_id")) == {("a", "g"), ("b", "g"), ("a", "h"), (None, "g")}
    assert distinct_keys(table, ["cluster_id"]) == {("a",), ("b",), (None,)}
    assert distinct_keys(table.slice(0, 0), ["cluster_id"]) == set()


def test_arrow_filter_selects_exactly_the_keys() -> None:
    table = pa.table({
        "cluster_id": ["a", "a", "b", "b", "c", "a"],
        "group_id": ["g", "h", "g", "h", "g", None],
        "valid_to": [None, None, None, 1, None, None],
    })
    f = KeyFilter.of(("cluster_id", "group_id"), {("a", "g"), ("b", "h"), ("a", None)})
    got = table.filter(f.to_arrow()).to_pylist()
    assert [(r["cluster_id"], r["group_id"]) for r in got] == [("a", "g"), ("b", "h"), ("a", None)]
    open_only = KeyFilter.of(("cluster_id", "group_id"), {("a", "g"), ("b", "h")}, ("valid_to",))
    assert [(r["cluster_id"], r["group_id"]) for r in table.filter(open_only.to_arrow()).to_pylist()] \
        == [("a", "g")]
    assert table.filter(KeyFilter.of(("cluster_id", "group_id"), ()).to_arrow()).num_rows == 0


def test_merge_condition_restricts_the_target_to_the_batch_groups() -> None:
    key = ("cluster_id", "group_id", "topic", "partition")
    changes = pa.table({"cluster_id": ["c", "c"], "group_id": ["g", "g"], "topic": ["t", "t"],
                       "partition": [0, 1], OP: ["upsert", "delete"]})
    assert changed_keys(changes, key).keys == frozenset({("c", "g", "t", 0), ("c", "g", "t", 1)})
    assert merge_condition(key, changed_keys(changes, key)) == (
        "t.cluster_id = s.cluster_id AND t.group_id = s.group_id AND t.topic = s.topic AND "
        "t.partition = s.partition AND "
        "(t.`cluster_id` = 'c' AND t.`group_id` = 'g')")


def test_merge_condition_of_a_two_column_key_pushes_the_whole_key() -> None:
    changes = pa.table({"cluster_id": ["c", "c", "d"], "group_id": ["g", "h", "g"]})
    assert merge_condition(("cluster_id", "group_id"), changed_keys(changes, ("cluster_id", "group_id"))) \
        == ("t.cluster_id = s.cluster_id AND t.group_id = s.group_id AND "
            "((t.`cluster_id` = 'c' AND t.`group_id` IN ('g', 'h')) OR "
            "(t.`cluster_id` = 'd' AND t.`group_id` = 'g'))")


def test_merge_condition_of_a_one_column_key_is_the_plain_join() -> None:
    changes = pa.table({"k": ["a"]})
    assert merge_condition(("k",), changed_keys(changes, ("k",))) == "t.k = s.k"


def test_idempotent_write_options_are_deltas_names() -> None:
    assert idempotent_write_options("app-1", 12) == {"txnAppId": "app-1", "txnVersion": "12"}


def test_a_merge_matches_changed_rows_only_in_the_partition_they_are_stored_in() -> None:
    """Both engines add the same term to their MERGE condition when a change set names each
    row's stored partition, and nothing when it does not (every partition is matched)."""
    spec = contract("group_generations")
    changes = spec.arrow_schema.empty_table()
    assert stored_partitions(spec, changes) == ("", [])
    named = changes.append_column("_stored_is_open", pa.array([], pa.bool_()))
    assert stored_partitions(spec, named) == (" AND t.is_open = s._stored_is_open", ["_stored_is_open"])
    assert stored_partitions(contract("committed_offsets"), named) == ("", [])  # not partitioned
