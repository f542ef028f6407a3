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
``required``, ``null`` or a literal. The engines bind the values themselves, never as SQL
text: Spark through ``spark.sql(sql, args=...)`` (its named markers are the same ``:name``),
DuckDB through ``$name`` markers and a parameter dict. Each declared marker is wrapped in a
``CAST`` to its type (a NULL stays typed), values are checked against the declared types and
timestamps are bound as aware UTC instants, so no session setting (time zone, string escapes)
changes what a value means and no value can change the statement.

Tables are read as the Delta tables' *current* files through delta-rs (no delta-spark jars or
DuckDB ``delta_scan`` needed): DuckDB gets lazy Arrow datasets, Spark gets
``spark.read.parquet`` over ``DeltaTable.file_uris()`` with the contract's schema. A table that
does not exist yet reads as empty, so a query over a lake without snapshots still runs.

Public API: :func:`run_duckdb`, :func:`run_spark`, :func:`load`, :func:`names`,
:func:`bound_sql`, :func:`parameters`, :func:`run_bound_duckdb`, :func:`run_bound_spark`,
:func:`duckdb_connection`, :func:`register_spark_views`, :func:`arrow_source`.
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
# Views the queries share (one definition of a rule several queries need), registered by the
# runner next to the lake tables; never queries themselves.
VIEWS_DIR = QUERIES_DIR / "views"
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
    #: the shared views (``views/*.sql``) the query reads, directly or through another view,
    #: each after the views it reads; their tables are in ``tables``
    views: tuple[str, ...] = ()

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
    code = " ".join(tok for kind, tok in _tokens(text) if kind == "code")
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
    views = _with_dependencies(sorted(words & set(view_names()) - {path.stem}))
    used = {tok for kind, tok in _tokens(text) if kind == "param"}
    for view in views:  # a view with parameters binds the query's own (it becomes a CTE)
        for name, p in load_view(view).params.items():
            if name not in params or params[name].type != p.type:
                raise ValueError(f"{path.name}: view {view} needs parameter :{name} {p.type}")
            used.add(name)
    if used != set(params):
        raise ValueError(f"{path.name}: parameters used {sorted(used)} != declared {sorted(params)}")
    tables = set(words & set(contracts())).union(*(load_view(v).tables for v in views))
    return Query(path.stem, path, title, params, tuple(sorted(tables)), text, views)


def _with_dependencies(views: Iterable[str]) -> tuple[str, ...]:
    """``views`` and the shared views they read, each after the views it reads: the order
    the runner creates them in (a view over a view needs that one first)."""
    ordered: dict[str, None] = {}
    for view in views:
        ordered.update(dict.fromkeys(load_view(view).views))
        ordered[view] = None
    return tuple(ordered)


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


@cache
def load_view(name: str) -> Query:
    """The shared view ``pipelines/queries/views/<name>.sql``. One without parameters is
    registered as a view; one with parameters (which the queries reading it declare too) is
    written in front of each such query as a CTE (:func:`bound_sql`), since neither engine
    takes parameters in a view."""
    path = VIEWS_DIR / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no view {name!r}; available: {', '.join(view_names())}")
    view = _parse(path)
    if view.params and view.views:
        raise ValueError(f"{path.name}: a shared view with parameters reads no other view")
    return view


def registered_views(views: Iterable[str]) -> list[str]:
    """The ``views`` an engine registers: those without parameters (the others are CTEs)."""
    return [v for v in views if not load_view(v).params]


def _with_ctes(query: Query) -> str:
    """The query's text with its parameterised views as leading CTEs (``WITH view AS
    (...)``, joined to the query's own ``WITH`` list when it has one)."""
    inlined = [v for v in query.views if load_view(v).params]
    if not inlined:
        return query.sql
    ctes = ",\n".join(f"{v} AS (\n{load_view(v).sql.rstrip()}\n)" for v in inlined)
    body = re.search(r"^(?!--)[ \t]*[^\s]", query.sql, re.MULTILINE)
    start = body.end() - 1 if body else len(query.sql)
    head, rest = query.sql[:start], query.sql[start:]
    own = re.match(r"WITH\s", rest, re.IGNORECASE)
    if own:
        return f"{head}WITH {ctes},\n{rest[own.end():]}"
    return f"{head}WITH {ctes}\n{rest}"


def view_names() -> list[str]:
    """Every shared view name (the ``views/*.sql`` files)."""
    return sorted(p.stem for p in VIEWS_DIR.glob("*.sql"))


# ----------------------------------------------------------------------------- binding


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


def utc_instant(value: Any) -> datetime:
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


def _checked(value: Any, type_: str) -> Any:
    """``value`` checked against its declared type, as the Python value the engines bind:
    timestamps become aware UTC instants (so neither engine reads them in a session time
    zone), numbers are validated; None stays None (a typed NULL through the marker's CAST)."""
    if value is None:
        return None
    if type_ == "string":
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        return value
    if type_ == "int":
        if isinstance(value, bool):
            raise TypeError(f"expected an int, got {value!r}")
        return operator.index(value)
    if type_ == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {value!r}")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return number
    if type_ == "boolean":
        if not isinstance(value, bool):
            raise TypeError(f"expected a bool, got {value!r}")
        return value
    if type_ == "timestamp":
        return utc_instant(value)
    raise ValueError(f"unknown parameter type {type_!r}")


def bound_sql(sql: str | Query, dialect: Dialect) -> str:
    """``sql`` (a text with ``:name`` markers, or a loaded query) with the parameter markers
    ``dialect`` binds natively: ``:name`` for Spark (``spark.sql(sql, args=...)``), ``$name``
    for DuckDB. A declared parameter of a query becomes ``CAST(<marker> AS <type>)``, so a
    NULL is typed and a value means the same in both engines. Markers inside literals and
    comments are left alone."""
    query = sql if isinstance(sql, Query) else None
    text = _with_ctes(query) if query else str(sql)
    prefix = ":" if dialect == "spark" else "$"
    out = []
    for kind, tok in _tokens(text):
        if kind != "param":
            out.append(tok)
        elif query is None:
            out.append(prefix + tok)
        else:
            out.append(f"CAST({prefix}{tok} AS {_SQL_TYPES[dialect][query.params[tok].type]})")
    return "".join(out)


def parameters(sql: str | Query, **values: Any) -> dict[str, Any]:
    """The values to bind for ``sql``: for a loaded query its declared defaults overlaid with
    ``values`` and checked against the declared types (unknown, missing and mistyped values
    are errors); for a plain text the values of the markers it uses (DuckDB rejects others)."""
    if isinstance(sql, Query):
        bound = sql.bind(values)
        return {name: _checked(bound[name], p.type) for name, p in sql.params.items()}
    used = {tok for kind, tok in _tokens(sql) if kind == "param"}
    return {k: v for k, v in values.items() if k in used}


# ----------------------------------------------------------------------------- reading Delta


def open_table(lake: Path | str | LakeLocation, table: str) -> tuple[LakeLocation, Any]:
    """The table's location and its DeltaTable (None when there is no table yet)."""
    from deltalake import DeltaTable

    where = lake_location(lake).child(table)
    options = where.delta_options()
    if not DeltaTable.is_deltatable(where.uri, storage_options=options):
        return where, None
    return where, DeltaTable(where.uri, storage_options=options)


def plain_files(dt: Any) -> list[str] | None:
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


def is_remote(uri: str) -> bool:
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
    where, dt = open_table(lake, table)
    if dt is None:
        return spec.arrow_schema.empty_table()
    files = plain_files(dt)
    if files is None:
        return spec.conform(dt.to_pyarrow_table())
    if not files:
        return spec.arrow_schema.empty_table()
    import pyarrow.dataset as pads

    if any(is_remote(f) for f in files):
        return pads.dataset([where.fs_path(f) for f in files], filesystem=where.filesystem(),
                            schema=_string_view(spec.arrow_schema), format="parquet")
    return pads.dataset(files, schema=_string_view(spec.arrow_schema), format="parquet")


def duckdb_connection(lake: Path | str | LakeLocation, tables: Iterable[str],
                      views: Iterable[str] = ()) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (session time zone UTC) with ``tables`` registered,
    then the shared ``views`` over them (a query's ``tables`` and ``views``)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for table in tables:
        con.register(table, arrow_source(lake, table))
    for view in registered_views(views):
        con.execute(f"CREATE VIEW {view} AS {load_view(view).sql}")
    return con


def _spark_ddl(spec: TableContract) -> str:
    return ", ".join(f"`{c.name}` {c.type}" for c in spec.columns)


def spark_frame(spark: SparkSession, lake: Path | str | LakeLocation, table: str) -> DataFrame:
    """A lake table as a Spark DataFrame over its current files, typed by the contract
    (read through delta-rs when the files are on an object store Spark may not reach)."""
    spec = contract(table)
    ddl = _spark_ddl(spec)
    _, dt = open_table(lake, table)
    if dt is None:
        return spark.createDataFrame([], ddl)
    files = plain_files(dt)
    if files is None or any(is_remote(f) for f in files):
        data = spec.conform(dt.to_pyarrow_table())
        return spark.createDataFrame(data) if data.num_rows else spark.createDataFrame([], ddl)
    if not files:
        return spark.createDataFrame([], ddl)
    return spark.read.schema(ddl).parquet(*files)


def register_spark_views(spark: SparkSession, lake: Path | str | LakeLocation, tables: Iterable[str],
                         views: Iterable[str] = ()) -> None:
    """Temp views named like the lake tables, then the shared ``views`` over them (a query's
    ``tables`` and ``views``), replacing same-named temp views."""
    for table in tables:
        spark_frame(spark, lake, table).createOrReplaceTempView(table)
    for view in registered_views(views):
        spark.sql(load_view(view).sql).createOrReplaceTempView(view)


# ----------------------------------------------------------------------------- running


def run_bound_duckdb(con: duckdb.DuckDBPyConnection, sql: str | Query, **params: Any) -> pa.Table:
    """Run ``sql`` (``:name`` markers, or a loaded query) on DuckDB connection ``con`` with
    its parameters bound by DuckDB; the result as Arrow."""
    return con.sql(bound_sql(sql, "duckdb"), params=parameters(sql, **params)).to_arrow_table()


def run_bound_spark(spark: SparkSession, sql: str | Query, **params: Any) -> DataFrame:
    """Run ``sql`` (``:name`` markers, or a loaded query) on Spark with its parameters bound
    by Spark (``spark.sql(sql, args=...)``)."""
    return spark.sql(bound_sql(sql, "spark"), args=parameters(sql, **params))


def run_duckdb(lake: Path | str | LakeLocation, name: str, **params: Any) -> pa.Table:
    """Run query ``name`` over ``lake`` in an in-memory DuckDB; the result as Arrow."""
    query = load(name)
    args = parameters(query, **params)  # argument errors before any table is opened
    con = duckdb_connection(lake, query.tables, query.views)
    try:
        return con.sql(bound_sql(query, "duckdb"), params=args).to_arrow_table()
    finally:
        con.close()


def run_spark(spark: SparkSession, lake: Path | str | LakeLocation, name: str, **params: Any) -> DataFrame:
    """Query ``name`` over ``lake`` as a Spark DataFrame (temp views over current files)."""
    query = load(name)
    args = parameters(query, **params)  # argument errors before any view is registered
    register_spark_views(spark, lake, query.tables, query.views)
    return spark.sql(bound_sql(query, "spark"), args=args)


__all__ = ["PARAM_TYPES", "QUERIES_DIR", "Param", "Query", "arrow_source", "bound_sql",
           "duckdb_connection", "is_remote", "load", "load_view", "names", "open_table", "parameters",
           "plain_files", "register_spark_views", "registered_views", "run_bound_duckdb", "run_bound_spark",
           "run_duckdb", "run_spark", "spark_frame", "utc_instant", "view_names"]
