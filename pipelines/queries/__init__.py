"""Analyst queries over the lake: one portable SQL file per question, for DuckDB and Spark SQL.

Why one text for two engines: analysts query the lake with Spark SQL on the cluster, while
developers, tests and the HTML report use DuckDB with no JVM. Each ``*.sql`` file here is
written in the subset both dialects agree on: standard window functions, CASE/COALESCE,
``x * INTERVAL '1' HOUR``, ``array_agg``/``array_sort``/``cardinality``, and ``alias.offset``
always qualified (DuckDB reserves OFFSET). That way the two engines give the same answers, and
``tests/test_queries.py`` checks it.

Parameters are written ``:name`` in the SQL and declared in the file's header, one line each::

    --   :name  type  default  description

with type ``string``, ``int``, ``double``, ``boolean`` or ``timestamp`` and default
``required``, ``null`` or a literal. The runner substitutes each value as a *typed literal*
of the target dialect (quotes escaped per dialect, timestamps as explicit UTC instants,
numbers validated), never as raw text, so a value cannot change the statement.

Tables are read as the Delta tables' *current* files through delta-rs (no delta-spark jars or
DuckDB ``delta_scan`` needed): DuckDB gets lazy Arrow datasets, Spark gets
``spark.read.parquet`` over ``DeltaTable.file_uris()`` with the contract's schema. A table that
does not exist yet reads as empty, so a query over a lake without snapshots still runs.

Public API: :func:`run_duckdb`, :func:`run_spark`, :func:`load`, :func:`names`,
:func:`render`, :func:`duckdb_connection`, :func:`register_spark_views`, :func:`arrow_source`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timezone
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from pipelines.lake.contracts import TableContract, contract, contracts
from pipelines.lake.location import LakeLocation, lake_location

if TYPE_CHECKING:
    import duckdb
    import pyarrow.dataset as pads
    from pyspark.sql import DataFrame, SparkSession

QUERIES_DIR = Path(__file__).resolve().parent
Dialect = Literal["duckdb", "spark"]
PARAM_TYPES = ("string", "int", "double", "boolean", "timestamp")

_SQL_TYPES: dict[Dialect, dict[str, str]] = {
    "duckdb": {"string": "VARCHAR", "int": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN",
               "timestamp": "TIMESTAMPTZ"},
    "spark": {"string": "STRING", "int": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN",
              "timestamp": "TIMESTAMP"},
}
_PARAM_LINE = re.compile(r"^--\s+:(\w+)\s+(\w+)\s+(\S+)\s*(.*)$")


# ----------------------------------------------------------------------------- query files


@dataclass(frozen=True)
class Param:
    """One declared parameter: its type, whether it must be given, and its default."""

    name: str
    type: str
    required: bool
    default: Any
    description: str


@dataclass(frozen=True)
class Query:
    """A parsed ``*.sql`` file: header (title, declared parameters) and body."""

    name: str
    path: Path
    title: str
    params: dict[str, Param]
    tables: tuple[str, ...]
    sql: str

    def bind(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Declared defaults overlaid with ``values``; rejects unknown and missing names."""
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            raise TypeError(f"query {self.name!r} has no parameter(s) {', '.join(unknown)}; "
                            f"it takes: {', '.join(self.params) or 'none'}")
        missing = [p.name for p in self.params.values() if p.required and values.get(p.name) is None]
        if missing:
            raise TypeError(f"query {self.name!r} needs parameter(s) {', '.join(missing)}")
        return {name: values.get(name, p.default) for name, p in self.params.items()}


def _default(text: str, type_: str, where: str) -> tuple[bool, Any]:
    """A header default: ``required``, ``null`` or a literal of the parameter's type."""
    if text == "required":
        return True, None
    if text == "null":
        return False, None
    try:
        if type_ == "int":
            return False, int(text)
        if type_ == "double":
            return False, float(text)
        if type_ == "boolean" and text.lower() in ("true", "false"):
            return False, text.lower() == "true"
        if type_ == "string":
            return False, text.strip("'")
    except ValueError:
        pass
    raise ValueError(f"{where}: bad default {text!r} for a {type_} parameter")


def _parse(path: Path) -> Query:
    text = path.read_text()
    header = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    title = header[0].lstrip("- ").strip() if header else path.stem
    params: dict[str, Param] = {}
    for line in header:
        m = _PARAM_LINE.match(line)
        if not m:
            continue
        name, type_, default_text, description = m.groups()
        if type_ not in PARAM_TYPES:
            raise ValueError(f"{path.name}: parameter :{name} has unknown type {type_!r}")
        required, default = _default(default_text, type_, f"{path.name} :{name}")
        params[name] = Param(name, type_, required, default, description.strip())
    used = {tok for kind, tok in _tokens(text) if kind == "param"}
    if used != set(params):
        raise ValueError(f"{path.name}: parameters used {sorted(used)} != declared {sorted(params)}")
    code = " ".join(tok for kind, tok in _tokens(text) if kind == "code")
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
    tables = tuple(sorted(words & set(contracts())))
    return Query(path.stem, path, title, params, tables, text)


@cache
def load(name: str) -> Query:
    """The query ``pipelines/queries/<name>.sql``, parsed and checked."""
    path = QUERIES_DIR / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no query {name!r}; available: {', '.join(names())}")
    return _parse(path)


def names() -> list[str]:
    """Every query name (the ``*.sql`` files here)."""
    return sorted(p.stem for p in QUERIES_DIR.glob("*.sql"))


# ----------------------------------------------------------------------------- rendering


def _tokens(sql: str) -> Iterator[tuple[str, str]]:
    """Split SQL into ``code``, ``quoted`` (strings, quoted names), ``comment`` and ``param``
    pieces, so ``:name`` is only recognised in code: never inside a literal or a comment,
    and never as the second colon of a ``::`` cast."""
    i, n, start = 0, len(sql), 0
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            if start < i:
                yield "code", sql[start:i]
            j = i + 1
            while j < n:
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:  # doubled quote inside the literal
                        j += 2
                        continue
                    break
                j += 1
            yield "quoted", sql[i:j + 1]
            i = start = j + 1
        elif sql.startswith("--", i) or sql.startswith("/*", i):
            if start < i:
                yield "code", sql[start:i]
            if ch == "-":
                end = sql.find("\n", i)
                end = n if end < 0 else end
            else:
                end = sql.find("*/", i + 2)
                end = n if end < 0 else end + 2
            yield "comment", sql[i:end]
            i = start = end
        elif (ch == ":" and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_")
              and (i == 0 or sql[i - 1] != ":")):
            if start < i:
                yield "code", sql[start:i]
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", sql[i + 1:])
            assert m is not None
            yield "param", m.group(0)
            i = start = i + 1 + m.end()
        else:
            i += 1
    if start < n:
        yield "code", sql[start:]


def _utc(value: Any) -> datetime:
    """A timestamp parameter as an aware UTC datetime. Naive datetimes and ISO strings
    without an offset are taken as UTC; ints/floats are Unix epoch milliseconds (Kafka's)."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        dt = datetime.fromtimestamp(value / 1000, tz=timezone.utc)
    else:
        raise TypeError(f"cannot use {value!r} as a timestamp")
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def literal(value: Any, type_: str, dialect: Dialect) -> str:
    """``value`` as a typed SQL literal of ``dialect`` (NULL as a typed NULL)."""
    if value is None:
        return f"CAST(NULL AS {_SQL_TYPES[dialect][type_]})"
    if type_ == "string":
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        if "'" not in value and "\\" not in value:
            return f"'{value}'"
        if dialect == "duckdb":  # standard strings: no backslash escapes, quotes doubled
            return "'" + value.replace("'", "''") + "'"
        # Spark's string escapes depend on spark.sql.parser.escapedStringLiterals; hex is
        # immune to both modes (and constant-folded, so filters still push down).
        return f"decode(unhex('{value.encode().hex()}'), 'UTF-8')"
    if type_ == "int":
        if isinstance(value, bool):
            raise TypeError(f"expected an int, got {value!r}")
        return f"CAST({operator.index(value)} AS BIGINT)"
    if type_ == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {value!r}")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return f"CAST({number!r} AS DOUBLE)"
    if type_ == "boolean":
        if not isinstance(value, bool):
            raise TypeError(f"expected a bool, got {value!r}")
        return "TRUE" if value else "FALSE"
    if type_ == "timestamp":
        text = _utc(value).strftime("%Y-%m-%d %H:%M:%S.%f") + "+00:00"
        return f"{'TIMESTAMPTZ' if dialect == 'duckdb' else 'TIMESTAMP'} '{text}'"
    raise ValueError(f"unknown parameter type {type_!r}")


def render(name: str | Query, dialect: Dialect, **params: Any) -> str:
    """The query's SQL for ``dialect`` with every ``:name`` replaced by a typed literal."""
    query = load(name) if isinstance(name, str) else name
    values = query.bind(params)
    out = []
    for kind, tok in _tokens(query.sql):
        if kind == "param":
            p = query.params[tok]
            out.append(literal(values[tok], p.type, dialect))
        else:
            out.append(tok)
    return "".join(out)


# ----------------------------------------------------------------------------- reading Delta


def _open(lake: Path | str | LakeLocation, table: str) -> tuple[LakeLocation, Any]:
    """The table's location and its DeltaTable (None when there is no table yet)."""
    from deltalake import DeltaTable

    where = lake_location(lake).child(table)
    options = where.delta_options()
    if not DeltaTable.is_deltatable(where.uri, storage_options=options):
        return where, None
    return where, DeltaTable(where.uri, storage_options=options)


def _plain_files(dt: Any) -> list[str] | None:
    """The table's current Parquet files when reading them directly is exact: local paths,
    no partition columns (their values live in the log, not the files), no deletion vectors,
    no column mapping. None means: go through delta-rs instead."""
    if dt.metadata().partition_columns:
        return None
    if dt.metadata().configuration.get("delta.columnMapping.mode", "none") != "none":
        return None
    features = dt.protocol().reader_features or []
    if "deletionVectors" in features or "columnMapping" in features:
        return None
    return list(dt.file_uris())


def _is_remote(uri: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*://", uri)) and not uri.startswith("file://")


def _string_view(schema: pa.Schema) -> pa.Schema:
    """Top-level strings as ``string_view``: DuckDB pushes string filters down to Arrow
    datasets as string_view scalars, which pyarrow cannot compare with plain strings."""
    return pa.schema([f.with_type(pa.string_view()) if f.type == pa.string() else f
                      for f in schema], metadata=schema.metadata)


def arrow_source(lake: Path | str | LakeLocation, table: str) -> pa.Table | pads.Dataset:
    """A lake table for DuckDB: a lazy Arrow dataset over its current files (projection
    and filters push down; object stores read through the lake's filesystem), or an Arrow
    table where direct file reads would be wrong; an empty table with the contract's schema
    when the Delta table does not exist."""
    spec = contract(table)
    where, dt = _open(lake, table)
    if dt is None:
        return spec.arrow_schema.empty_table()
    files = _plain_files(dt)
    if files is None:
        return spec.conform(dt.to_pyarrow_table())
    if not files:
        return spec.arrow_schema.empty_table()
    import pyarrow.dataset as pads

    if any(_is_remote(f) for f in files):
        return pads.dataset([where.fs_path(f) for f in files], filesystem=where.filesystem(),
                            schema=_string_view(spec.arrow_schema), format="parquet")
    return pads.dataset(files, schema=_string_view(spec.arrow_schema), format="parquet")


def duckdb_connection(lake: Path | str | LakeLocation, tables: Iterable[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (session time zone UTC) with ``tables`` registered."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for table in tables:
        con.register(table, arrow_source(lake, table))
    return con


def _spark_ddl(spec: TableContract) -> str:
    return ", ".join(f"`{c.name}` {c.type}" for c in spec.columns)


def spark_frame(spark: SparkSession, lake: Path | str | LakeLocation, table: str) -> DataFrame:
    """A lake table as a Spark DataFrame over its current files, typed by the contract
    (read through delta-rs when the files are on an object store Spark may not reach)."""
    spec = contract(table)
    ddl = _spark_ddl(spec)
    _, dt = _open(lake, table)
    if dt is None:
        return spark.createDataFrame([], ddl)
    files = _plain_files(dt)
    if files is None or any(_is_remote(f) for f in files):
        data = spec.conform(dt.to_pyarrow_table())
        return spark.createDataFrame(data) if data.num_rows else spark.createDataFrame([], ddl)
    if not files:
        return spark.createDataFrame([], ddl)
    return spark.read.schema(ddl).parquet(*files)


def register_spark_views(spark: SparkSession, lake: Path | str | LakeLocation, tables: Iterable[str]) -> None:
    """Temp views named like the lake tables (replacing same-named temp views)."""
    for table in tables:
        spark_frame(spark, lake, table).createOrReplaceTempView(table)


# ----------------------------------------------------------------------------- running


def run_duckdb(lake: Path | str | LakeLocation, name: str, **params: Any) -> pa.Table:
    """Run query ``name`` over ``lake`` in an in-memory DuckDB; the result as Arrow."""
    query = load(name)
    sql = render(query, "duckdb", **params)
    con = duckdb_connection(lake, query.tables)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def run_spark(spark: SparkSession, lake: Path | str | LakeLocation, name: str, **params: Any) -> DataFrame:
    """Query ``name`` over ``lake`` as a Spark DataFrame (temp views over current files)."""
    query = load(name)
    sql = render(query, "spark", **params)
    register_spark_views(spark, lake, query.tables)
    return spark.sql(sql)


__all__ = ["PARAM_TYPES", "QUERIES_DIR", "Param", "Query", "arrow_source", "duckdb_connection",
           "literal", "load", "names", "register_spark_views", "render", "run_duckdb",
           "run_spark", "spark_frame"]
