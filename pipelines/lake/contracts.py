"""Table contracts: ``schemas/tables/*.json`` as Arrow schemas (and Spark ones through Arrow).

The contracts are the single definition of every Delta table's columns, types and
analyst-facing comments; writers conform their data to them before every commit, so
delta-rs and delta-spark produce the same tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.model import OP
from pipelines.shipped_schemas import MissingSchemas, schema_dir, schema_files

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

_SIMPLE = {
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "double": pa.float64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    comment: str


@dataclass(frozen=True)
class TableContract:
    name: str
    kind: str  # history | state | snapshot | quality
    description: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]
    #: Delta partition columns; a change set may name the partition each row is stored in
    #: now (:func:`stored_column`), and the MERGE then reads only those partitions
    partition_by: tuple[str, ...] = ()
    #: integer columns our files store as DELTA_BINARY_PACKED: log positions and batch ids,
    #: ascending within a file's runs (see :func:`pipelines.lake.files.write_data_file`)
    delta_encoded: tuple[str, ...] = ()

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema(
            [pa.field(c.name, parse_type(c.type), nullable=c.nullable,
                      metadata={"comment": c.comment}) for c in self.columns],
            metadata={"description": self.description},
        )

    @property
    def stored_columns(self) -> dict[str, str]:
        """Partition column -> the change-set column saying where a changed row is stored."""
        return {p: stored_column(p) for p in self.partition_by}

    @property
    def change_schema(self) -> pa.Schema:
        """The schema with every column nullable: delete rows of a change set carry only keys."""
        return pa.schema([f.with_nullable(True) for f in self.arrow_schema])

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def from_rows(self, rows: list[dict[str, Any]]) -> pa.Table:
        """Rows (dicts) as a table of the contract's schema: a missing key is a null, a key the
        contract lacks is ignored, as ``Table.from_pylist`` does. Arrow's struct converter
        reads the dicts in C++, where ``from_pylist`` gathers each column in Python: the
        group-heavy benchmark's ``group_generations`` change sets (~950k rows) took 2.06 s
        instead of 2.76 s."""
        schema = self.arrow_schema
        return pa.Table.from_arrays(pa.array(rows, type=pa.struct(list(schema))).flatten(), schema=schema)

    def change_set(self, rows: list[dict[str, Any]], ops: str | list[str] = "upsert") -> pa.Table:
        """Rows as a change set for ``DeltaEngine.merge``: the contract's columns
        (:meth:`from_rows`) and each row's operation (``ops``: one for all, or one per row)."""
        data = self.from_rows(rows)
        ops = [ops] * data.num_rows if isinstance(ops, str) else ops
        return data.append_column(OP, pa.array(ops, pa.string()))

    def conform(self, table: pa.Table, schema: pa.Schema | None = None,
                keep_dictionaries: bool = False) -> pa.Table:
        """Select, order and cast ``table``'s columns to the contract (missing ones as nulls).

        ``keep_dictionaries``: a dictionary column of the field's type stays one, for a writer
        that stores it as it is (:func:`pipelines.lake.files.write_data_file`)."""
        schema = schema or self.arrow_schema
        arrays, fields = [], []
        for field in schema:
            if field.name in table.column_names:
                column = table.column(field.name)
                kept = keep_dictionaries and pa.types.is_dictionary(column.type) \
                    and column.type.value_type == field.type and not _null_values(column)
                if kept:
                    field = field.with_type(column.type)
                elif column.type != field.type:
                    column = column.cast(field.type)
            else:
                column = pa.nulls(table.num_rows, field.type)
            arrays.append(column)
            fields.append(field)
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


def _null_values(column: pa.ChunkedArray) -> bool:
    """Whether a dictionary column's dictionary holds a null (its rows' nulls are then not
    all in the indices: such a column is cast, so every writer counts nulls the same way)."""
    return any(chunk.dictionary.null_count for chunk in column.chunks)


def load_contracts(directory: Traversable) -> dict[str, TableContract]:
    """The table contracts of one directory; MissingSchemas when it is missing or empty."""
    out = {}
    for path in schema_files(directory):
        raw = json.loads(path.read_text(encoding="utf-8"))
        out[raw["name"]] = TableContract(
            name=raw["name"],
            kind=raw["kind"],
            description=raw["description"],
            key=tuple(raw.get("key", ())),
            columns=tuple(Column(c["name"], c["type"], c.get("nullable", True), c.get("comment", ""))
                          for c in raw["columns"]),
            partition_by=tuple(raw.get("partition_by", ())),
            delta_encoded=tuple(raw.get("delta_encoded", ())),
        )
    return out


@cache
def contracts() -> dict[str, TableContract]:
    """Every table contract shipped in the package (``schemas/tables``), keyed by table name."""
    return load_contracts(schema_dir("tables"))


def contract(name: str) -> TableContract:
    try:
        return contracts()[name]
    except KeyError:
        raise MissingSchemas(f"no table contract {name!r} in {schema_dir('tables')}") from None


#: Columns added to a table after lakes were written with it, and how an older layout's rows
#: get them: a Spark SQL expression (delta-spark) and the same in Arrow (delta-rs). So far
#: ``group_generations.is_open``, its partition column since it was added.
ADDED_COLUMNS: dict[str, dict[str, tuple[str, Callable[[pa.Table], pa.Array]]]] = {
    "group_generations": {"is_open": ("valid_to IS NULL", lambda t: pc.is_null(t.column("valid_to")))},
}


def upgraded(contract: TableContract, table: pa.Table) -> pa.Table:
    """Rows of an older layout of ``contract``'s table with the columns added since
    (:data:`ADDED_COLUMNS`), as the contract has them."""
    for name, (_, in_arrow) in ADDED_COLUMNS.get(contract.name, {}).items():
        if name not in table.column_names:
            table = table.append_column(name, in_arrow(table))
    return contract.conform(table)


def stored_column(partition_column: str) -> str:
    """The change-set column naming the partition (``partition_column``'s value) where a
    changed row is stored now: the MERGE matches it only there. A row that is not stored
    yet may name any partition (it matches nothing); a change set without the column
    matches in every partition."""
    return f"_stored_{partition_column}"


_TOKEN = re.compile(r"\s*([<>,:]|[A-Za-z_][A-Za-z0-9_]*)")


def parse_type(text: str) -> pa.DataType:
    """Spark DDL type (``array<struct<topic:string,partitions:array<int>>>``) to Arrow."""
    tokens = [t for t in _TOKEN.findall(text) if t]
    dtype, rest = _parse(tokens)
    if rest:
        raise ValueError(f"trailing tokens in type {text!r}: {rest}")
    return dtype


def _parse(tokens: list[str]) -> tuple[pa.DataType, list[str]]:
    head, rest = tokens[0].lower(), tokens[1:]
    if head in _SIMPLE:
        return _SIMPLE[head], rest
    if head == "array":
        elem, rest = _parse(rest[1:])  # skip "<"
        return pa.list_(elem), rest[1:]  # skip ">"
    if head == "struct":
        fields = []
        rest = rest[1:]
        while rest[0] != ">":
            name = rest[0]
            ftype, rest = _parse(rest[2:])  # skip name ":"
            fields.append(pa.field(name, ftype))
            if rest[0] == ",":
                rest = rest[1:]
        return pa.struct(fields), rest[1:]
    raise ValueError(f"unknown type {head!r}")
