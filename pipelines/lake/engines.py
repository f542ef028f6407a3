"""Delta engines: delta-rs (no JVM; the local default) and delta-spark (clusters with its jars).

Both take Arrow tables already conformed to a contract, so the tables come out the
same whichever engine wrote them. Every write of micro-batch N to table T carries a
Delta transaction ``(app_id, N)``; a write whose ``(app_id, N)`` is already in T's log
is skipped, which makes replays after a crash exactly-once per table.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from pipelines.lake.contracts import TableContract
from pipelines.lake.files import DataFile

log = logging.getLogger(__name__)

OP = "_op"  # change-set column for merge(): "upsert" or "delete"


class DeltaEngine(Protocol):
    name: str
    root: Path
    commits_files: bool  # whether commit_files() works: data files written elsewhere, committed here

    def path(self, table: str) -> str: ...

    def exists(self, table: str) -> bool: ...

    def ensure(self, contract: TableContract) -> None:
        """Create the table (empty, with the contract's schema and comments) if missing."""

    def committed(self, table: str, app_id: str, version: int) -> bool:
        """Whether micro-batch ``version`` of writer ``app_id`` is already in ``table``."""

    def append(self, contract: TableContract, data: pa.Table, app_id: str, version: int) -> bool:
        """Append rows; returns False when skipped because the batch was already written."""

    def commit_files(self, contract: TableContract, files: list[DataFile], app_id: str, version: int) -> bool:
        """Append already-written data files in one commit; False when the batch was already in."""

    def merge(self, contract: TableContract, changes: pa.Table, app_id: str, version: int) -> bool:
        """Upsert/delete by the contract's key; ``changes`` has the contract's columns + ``_op``."""

    def read(self, table: str, columns: list[str] | None = None, filter_expr=None) -> pa.Table: ...

    def overwrite(self, contract: TableContract, data: pa.Table) -> None: ...


def _key_predicate(key: tuple[str, ...]) -> str:
    return " AND ".join(f"t.{k} = s.{k}" for k in key)


class DeltaRsEngine:
    """delta-rs (``deltalake``): writes and merges from Arrow in this process."""

    name = "delta-rs"
    commits_files = True

    def __init__(self, root: str | Path, storage_options: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.storage_options = storage_options

    def path(self, table: str) -> str:
        return str(self.root / table)

    def _table(self, table: str):
        from deltalake import DeltaTable

        return DeltaTable(self.path(table), storage_options=self.storage_options)

    def exists(self, table: str) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.path(table), storage_options=self.storage_options)

    def ensure(self, contract: TableContract) -> None:
        if self.exists(contract.name):
            return
        from deltalake import DeltaTable

        DeltaTable.create(
            self.path(contract.name), contract.arrow_schema, mode="ignore",
            name=contract.name, description=contract.description,
            storage_options=self.storage_options,
        )
        log.info("created Delta table %s", self.path(contract.name))

    def committed(self, table: str, app_id: str, version: int) -> bool:
        if not self.exists(table):
            return False
        done = self._table(table).transaction_version(app_id)
        return done is not None and done >= version

    @staticmethod
    def _writer():
        """zstd level 1: smaller than delta-rs' default snappy for the byte columns, and faster."""
        from deltalake import WriterProperties

        return WriterProperties(compression="ZSTD", compression_level=1)

    def _commit(self, app_id: str, version: int):
        from deltalake import CommitProperties, Transaction

        return CommitProperties(app_transactions=[Transaction(app_id=app_id, version=version)])

    def append(self, contract: TableContract, data: pa.Table, app_id: str, version: int) -> bool:
        from deltalake import write_deltalake

        self.ensure(contract)
        if self.committed(contract.name, app_id, version):
            log.info("%s: batch %d of %s already written, skipping", contract.name, version, app_id)
            return False
        write_deltalake(
            self.path(contract.name), contract.conform(data), mode="append",
            commit_properties=self._commit(app_id, version), storage_options=self.storage_options,
            writer_properties=self._writer(),
        )
        return True

    def commit_files(self, contract: TableContract, files: list[DataFile], app_id: str, version: int) -> bool:
        from deltalake.transaction import AddAction

        self.ensure(contract)
        if self.committed(contract.name, app_id, version):
            log.info("%s: batch %d of %s already written, skipping (vacuum removes %d unnamed files)",
                     contract.name, version, app_id, len(files))
            return False
        for f in files:  # a task on another machine may have written to its own local disk
            where = Path(self.path(contract.name), f.path)
            if not where.exists() or where.stat().st_size != f.size:
                raise FileNotFoundError(
                    f"{where} was written by a Spark task but is not visible here: the lake must be a "
                    "path every executor and the driver share (or use --delta-engine spark)")
        actions = [AddAction(f.path, f.size, {}, f.modification_time, True, f.stats) for f in files]
        self._table(contract.name).create_write_transaction(
            actions, mode="append", schema=contract.arrow_schema,
            commit_properties=self._commit(app_id, version))
        return True

    def merge(self, contract: TableContract, changes: pa.Table, app_id: str, version: int) -> bool:
        self.ensure(contract)
        if self.committed(contract.name, app_id, version):
            log.info("%s: batch %d of %s already merged, skipping", contract.name, version, app_id)
            return False
        source = contract.conform(changes, contract.change_schema).append_column(OP, changes.column(OP))
        (
            self._table(contract.name)
            .merge(source, _key_predicate(contract.key), source_alias="s", target_alias="t",
                   commit_properties=self._commit(app_id, version), writer_properties=self._writer())
            .when_matched_delete(f"s.{OP} = 'delete'")
            .when_matched_update_all(f"s.{OP} = 'upsert'", except_cols=[OP])
            .when_not_matched_insert_all(f"s.{OP} = 'upsert'", except_cols=[OP])
            .execute()
        )
        return True

    def read(self, table: str, columns: list[str] | None = None, filter_expr=None) -> pa.Table:
        if not self.exists(table):
            from pipelines.lake.contracts import contract

            schema = contract(table).arrow_schema
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        dataset = self._table(table).to_pyarrow_dataset()
        return dataset.to_table(columns=columns, filter=filter_expr)

    def overwrite(self, contract: TableContract, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.path(contract.name), contract.conform(data), mode="overwrite",
                        schema_mode="overwrite", storage_options=self.storage_options,
                        name=contract.name, description=contract.description)


class SparkDeltaEngine:
    """delta-spark: the same operations through Spark, for clusters that have Delta's jars.

    Idempotence uses Delta's own ``txnAppId``/``txnVersion`` writer options, the
    mechanism Delta documents for ``foreachBatch``.
    """

    name = "delta-spark"
    commits_files = False  # delta-spark has no API to commit files it did not write

    def __init__(self, spark, root: str | Path) -> None:
        self.spark = spark
        self.root = Path(root)

    def path(self, table: str) -> str:
        return str(self.root / table)

    def exists(self, table: str) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self.spark, self.path(table))

    def _df(self, contract: TableContract, data: pa.Table):
        return self.spark.createDataFrame(contract.conform(data))

    def ensure(self, contract: TableContract) -> None:
        if self.exists(contract.name):
            return
        from delta.tables import DeltaTable

        builder = DeltaTable.createIfNotExists(self.spark).location(self.path(contract.name))
        builder = builder.comment(contract.description)
        for c in contract.columns:
            builder = builder.addColumn(c.name, c.type, nullable=c.nullable, comment=c.comment)
        builder.execute()

    def commit_files(self, contract: TableContract, files: list[DataFile], app_id: str, version: int) -> bool:
        raise NotImplementedError("delta-spark commits only files it writes itself; use append()")

    def committed(self, table: str, app_id: str, version: int) -> bool:
        if not self.exists(table):
            return False
        rows = self.spark.sql(f"DESCRIBE HISTORY delta.`{self.path(table)}`").select(
            "operationParameters", "userMetadata").collect()
        marker = f"{app_id}:{version}"
        return any(r["userMetadata"] and marker in r["userMetadata"].split(",") for r in rows)

    def append(self, contract: TableContract, data: pa.Table, app_id: str, version: int) -> bool:
        self.ensure(contract)
        (self._df(contract, data).write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", version)
         .option("userMetadata", f"{app_id}:{version}")
         .save(self.path(contract.name)))
        return True

    def merge(self, contract: TableContract, changes: pa.Table, app_id: str, version: int) -> bool:
        from delta.tables import DeltaTable

        self.ensure(contract)
        if self.committed(contract.name, app_id, version):
            return False
        source = self.spark.createDataFrame(
            contract.conform(changes, contract.change_schema).append_column(OP, changes.column(OP)))
        cols = {c: f"s.{c}" for c in contract.column_names}
        self.spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", f"{app_id}:{version}")
        try:
            (DeltaTable.forPath(self.spark, self.path(contract.name)).alias("t")
             .merge(source.alias("s"), _key_predicate(contract.key))
             .whenMatchedDelete(f"s.{OP} = 'delete'")
             .whenMatchedUpdate(f"s.{OP} = 'upsert'", set=cols)
             .whenNotMatchedInsert(f"s.{OP} = 'upsert'", values=cols)
             .execute())
        finally:
            self.spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
        return True

    def read(self, table: str, columns: list[str] | None = None, filter_expr=None) -> pa.Table:
        if not self.exists(table):
            from pipelines.lake.contracts import contract

            return contract(table).arrow_schema.empty_table()
        df = self.spark.read.format("delta").load(self.path(table))
        if columns:
            df = df.select(*columns)
        table_ = df.toArrow()
        return table_.filter(filter_expr) if filter_expr is not None else table_

    def overwrite(self, contract: TableContract, data: pa.Table) -> None:
        (self._df(contract, data).write.format("delta").mode("overwrite")
         .option("overwriteSchema", "true").save(self.path(contract.name)))


def make_engine(kind: str, root: str | Path, spark=None,
                storage_options: dict[str, str] | None = None) -> DeltaEngine:
    if kind in ("delta-rs", "rs", "deltars"):
        return DeltaRsEngine(root, storage_options)
    if kind in ("spark", "delta-spark"):
        if spark is None:
            raise ValueError("the delta-spark engine needs a SparkSession with Delta's jars")
        return SparkDeltaEngine(spark, root)
    raise ValueError(f"unknown Delta engine {kind!r}: use delta-rs or spark")
