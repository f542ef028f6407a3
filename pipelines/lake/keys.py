"""Row filters on key columns, readable by both Delta engines.

Why: the state update reads only the rows of the keys a micro-batch changed. delta-rs
takes a pyarrow expression, delta-spark a SQL predicate that Spark pushes into Delta's
file skipping (column statistics) and Parquet row-group filters. One neutral description
of "these keys" gives both, so the two engines read exactly the same rows.

The predicate is exact, not an over-approximation: keys are grouped by all columns but
the last (``(cluster_id = 'a' AND group_id IN ('g1', 'g2')) OR ...``), which Delta can
still skip files with, and which never matches a key outside the set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class KeyFilter:
    """Rows whose ``columns`` equal one of ``keys`` (tuples in column order), whose
    ``null_columns`` are null (e.g. the open rows of ``group_generations``) and whose
    ``true_columns`` are true (a boolean partition column: both engines then read only that
    partition's files)."""

    columns: tuple[str, ...]
    keys: frozenset[tuple]
    null_columns: tuple[str, ...] = ()
    true_columns: tuple[str, ...] = ()

    @classmethod
    def of(cls, columns: Iterable[str], keys: Iterable[tuple], null_columns: Iterable[str] = (),
           true_columns: Iterable[str] = ()) -> KeyFilter:
        cols = tuple(columns)
        key_set = frozenset(tuple(k) for k in keys)
        for k in key_set:
            if len(k) != len(cols):
                raise ValueError(f"key {k!r} does not have one value per column of {cols}")
        return cls(cols, key_set, tuple(null_columns), tuple(true_columns))

    def _groups(self) -> dict[tuple, list]:
        """Keys grouped by their prefix (all columns but the last), deterministic order."""
        groups: dict[tuple, list] = {}
        for key in sorted(self.keys, key=repr):
            groups.setdefault(key[:-1], []).append(key[-1])
        return groups

    def to_sql(self, alias: str | None = None) -> str:
        """A Spark SQL predicate (``FALSE`` for no keys: nothing to read); columns are
        qualified with ``alias`` when given (e.g. a MERGE's target)."""
        if not self.keys:
            return "FALSE"
        qualified = [quote_identifier(c) if alias is None else f"{alias}.{quote_identifier(c)}"
                     for c in (*self.columns, *self.null_columns, *self.true_columns)]
        *prefix, last = qualified[:len(self.columns)]
        terms = []
        for values_prefix, lasts in self._groups().items():
            conds = [_sql_equals(col, v) for col, v in zip(prefix, values_prefix, strict=True)]
            conds.append(_sql_in(last, lasts))
            terms.append(conds[0] if len(conds) == 1 else "(" + " AND ".join(conds) + ")")
        predicate = terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")"
        nulls = len(self.columns) + len(self.null_columns)
        for col in qualified[len(self.columns):nulls]:
            predicate += f" AND {col} IS NULL"
        for col in qualified[nulls:]:
            predicate += f" AND {col} = TRUE"
        return predicate

    def to_arrow(self) -> pc.Expression:
        """The same filter as a pyarrow dataset expression (delta-rs' reads).

        String columns are compared as ``string``: delta-rs datasets prune on string_view
        statistics, which literal strings cannot be compared with directly.
        """
        if not self.keys:
            return pc.scalar(False)
        *prefix, last = self.columns
        expr = None
        for values_prefix, lasts in self._groups().items():
            term = _arrow_in(last, lasts)
            for col, v in zip(prefix, values_prefix, strict=True):
                term = _arrow_equals(col, v) & term
            expr = term if expr is None else expr | term
        for col in self.null_columns:
            expr = expr & pc.field(col).is_null()
        for col in self.true_columns:
            expr = expr & (pc.field(col) == pc.scalar(True))
        return expr


def distinct_keys(table: pa.Table, columns: Iterable[str]) -> set[tuple]:
    """The distinct values of ``columns`` in ``table`` as tuples (a batch's groups, clusters):
    Arrow finds them, only the few distinct keys become Python objects."""
    cols = list(columns)
    if table.num_rows == 0:
        return set()
    if len(cols) == 1:  # one column: a hash of it, no grouping
        return {(v,) for v in pc.unique(table.column(cols[0])).to_pylist()}
    distinct = table.select(cols).group_by(cols, use_threads=False).aggregate([])
    return set(zip(*(distinct.column(c).to_pylist() for c in cols), strict=True))


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_literal(value: Any) -> str:
    """A Spark SQL literal for a key value (strings with quotes and backslashes escaped)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot filter on {value!r}")
        return repr(value)
    if isinstance(value, datetime):
        return f"TIMESTAMP '{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise TypeError(f"no SQL literal for key value of type {type(value).__name__}")


def _sql_equals(col: str, value: Any) -> str:
    return f"{col} IS NULL" if value is None else f"{col} = {sql_literal(value)}"


def _sql_in(col: str, values: list) -> str:
    present = [v for v in values if v is not None]
    parts = []
    if present:
        parts.append(_sql_equals(col, present[0]) if len(present) == 1
                     else f"{col} IN ({', '.join(sql_literal(v) for v in present)})")
    if len(present) != len(values):
        parts.append(f"{col} IS NULL")
    return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"


def _arrow_field(col: str, sample: Any) -> pc.Expression:
    field = pc.field(col)
    return field.cast(pa.string()) if isinstance(sample, str) else field


def _arrow_equals(col: str, value: Any) -> pc.Expression:
    return pc.field(col).is_null() if value is None else _arrow_field(col, value) == value


def _arrow_in(col: str, values: list) -> pc.Expression:
    present = [v for v in values if v is not None]
    expr = None
    if len(present) == 1:  # an equality prunes files on their statistics; isin may not
        expr = _arrow_equals(col, present[0])
    elif present:
        expr = _arrow_field(col, present[0]).isin(present)
    if len(present) != len(values):
        null = pc.field(col).is_null()
        expr = null if expr is None else expr | null
    return expr
