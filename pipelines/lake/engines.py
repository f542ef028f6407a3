"""Delta engines: delta-rs (no JVM; the local default) and delta-spark (clusters with its jars).

Both take Arrow tables already conformed to a contract, so the tables come out the
same whichever engine wrote them. Every write of micro-batch N to table T carries a
Delta transaction ``(app_id, N)``; a write whose ``(app_id, N)`` is already in T's log
is skipped, which makes replays after a crash exactly-once per table.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Protocol

import pyarrow as pa
from pyarrow.fs import FileType

from pipelines.lake.contracts import ADDED_COLUMNS, TableContract, upgraded
from pipelines.lake.files import DataFile, delta_rs_writer, write_data_file
from pipelines.lake.keys import KeyFilter
from pipelines.lake.location import LakeLocation, lake_location
from pipelines.lake.merge_writes import merge_as_write
from pipelines.model import OP

log = logging.getLogger(__name__)


class DeltaEngine(Protocol):
    name: str
    root: Path
    commits_files: bool  # whether commit_files() works: data files written elsewhere, committed here
    # whether writes to two different tables may run on two threads at once
    concurrent_tables: bool

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

    def read_own_batch(self, table: str, app_id: str, version: int, columns: list[str] | None = None,
                       filter_expr=None, dictionaries: tuple[str, ...] = ()) -> pa.Table | None:
        """Rows of batch ``version`` of ``app_id`` in ``table`` read from the data files this
        engine itself committed for it (no scan of the table); None when it did not commit
        them (a replay after a restart, another engine): the caller reads the table.
        ``dictionaries``: string columns read as Arrow dictionaries (one per table)."""

    def overwrite(self, contract: TableContract, data: pa.Table) -> None: ...


def _key_predicate(key: tuple[str, ...]) -> str:
    return " AND ".join(f"t.{k} = s.{k}" for k in key)


def stored_partitions(contract: TableContract, changes: pa.Table) -> tuple[str, list[str]]:
    """The MERGE condition's terms that keep each changed row's match in the partition the
    change set says it is stored in (:func:`~pipelines.lake.contracts.stored_column`), and
    those change-set columns. Both engines then read only the partitions the change set
    names: a batch that only closes open rows and opens new ones reads no closed row."""
    terms, columns = "", []
    for partition, column in contract.stored_columns.items():
        if column in changes.column_names:
            terms += f" AND t.{partition} = s.{column}"
            columns.append(column)
    return terms, columns


def merge_source(contract: TableContract, changes: pa.Table) -> tuple[pa.Table, str, list[str]]:
    """What both engines' MERGE takes from a change set: its rows as the contract's columns
    plus the operation and the stored partitions (:func:`stored_partitions`), the condition's
    partition terms, and the columns that are no table column (never written)."""
    source = contract.conform(changes, contract.change_schema).append_column(OP, changes.column(OP))
    terms, stored = stored_partitions(contract, changes)
    for column in stored:
        source = source.append_column(column, changes.column(column))
    return source, terms, [OP, *stored]


class DeltaRsEngine:
    """delta-rs (``deltalake``): writes and merges from Arrow in this process."""

    name = "delta-rs"
    commits_files = True
    concurrent_tables = True  # each table its own DeltaTable; writes release the GIL

    def __init__(self, root: str | Path | LakeLocation,
                 storage_options: dict[str, str] | None = None) -> None:
        self.location = lake_location(root, storage_options)
        # a Path for a local lake (callers join paths to it), the URI text otherwise
        self.root: Path | str = (self.location.local_path if self.location.is_local
                                 else self.location.uri)
        self.storage_options = self.location.delta_options()
        # Tables opened once, then brought up to date with only the log entries added
        # since (``update_incremental``) instead of replaying the whole log on each use:
        # a micro-batch asks "committed?" and then writes, per table. Tables are never
        # dropped, so a table seen to exist is not probed again.
        self._tables: dict[str, object] = {}
        self._existing: set[str] = set()  # tables a probe found, not opened yet
        # per table, the last batch committed through commit_files: (app_id, version, files)
        self._own_batch: dict[str, tuple[str, int, tuple[str, ...]]] = {}
        self._laid_out: set[str] = set()  # partitioned tables whose layout was checked

    def path(self, table: str) -> str:
        return self.location.join(table)

    def _table(self, table: str):
        """``table`` at its latest version (every commit, by any writer, is seen)."""
        known = self._tables.get(table)
        if known is not None:
            known.update_incremental()
            return known
        from deltalake import DeltaTable

        opened = DeltaTable(self.path(table), storage_options=self.storage_options)
        self._tables[table] = opened
        return opened

    def exists(self, table: str) -> bool:
        if table in self._tables or table in self._existing:
            return True
        from deltalake import DeltaTable

        if DeltaTable.is_deltatable(self.path(table), storage_options=self.storage_options):
            self._existing.add(table)
            return True
        return False

    def ensure(self, contract: TableContract) -> None:
        if self.exists(contract.name):
            if contract.partition_by and contract.name not in self._laid_out:
                self._lay_out(contract)
            return
        from deltalake import DeltaTable

        self._tables[contract.name] = DeltaTable.create(
            self.path(contract.name), contract.arrow_schema, mode="ignore",
            partition_by=list(contract.partition_by) or None,
            name=contract.name, description=contract.description,
            storage_options=self.storage_options,
        )
        self._laid_out.add(contract.name)
        log.info("created Delta table %s", self.path(contract.name))

    def _lay_out(self, contract: TableContract) -> None:
        """An existing table partitioned otherwise than its contract says (written by an
        older offsetlake) rewritten once, in one commit that keeps its transaction ids, its
        rows streamed through :func:`~pipelines.lake.contracts.upgraded`."""
        from deltalake import write_deltalake

        table = self._table(contract.name)
        if list(table.metadata().partition_columns) != list(contract.partition_by):
            rows = (b for batch in table.to_pyarrow_dataset().to_batches()
                    for b in upgraded(contract, pa.Table.from_batches([batch])).to_batches())
            write_deltalake(self.path(contract.name), pa.RecordBatchReader.from_batches(contract.arrow_schema, rows),
                            mode="overwrite", schema_mode="overwrite",
                            partition_by=list(contract.partition_by) or None,
                            storage_options=self.storage_options, writer_properties=delta_rs_writer(contract),
                            name=contract.name, description=contract.description)
            self._tables.pop(contract.name, None)
            log.info("rewrote %s partitioned by %s", contract.name, ", ".join(contract.partition_by))
        self._laid_out.add(contract.name)

    def committed(self, table: str, app_id: str, version: int) -> bool:
        if not self.exists(table):
            return False
        done = self._table(table).transaction_version(app_id)
        return done is not None and done >= version

    def _unwritten(self, contract: TableContract, app_id: str, version: int):
        """The table, brought up to date once, when batch ``version`` of ``app_id`` is not in
        it yet (None when it is). Why one object for the check and the write: each bring-up
        lists the table's log, a round trip to an object store, and asking "committed?"
        apart from the write paid it twice per write (~10 writes per micro-batch)."""
        self.ensure(contract)
        table = self._table(contract.name)
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return None
        return table

    def _commit(self, app_id: str, version: int):
        from deltalake import CommitProperties, Transaction

        return CommitProperties(app_transactions=[Transaction(app_id=app_id, version=version)])

    def append(self, contract: TableContract, data: pa.Table, app_id: str, version: int) -> bool:
        """Rows written as one file of ours (:func:`~pipelines.lake.files.write_data_file`)
        and committed as :meth:`commit_files` commits a batch's history files: Arrow
        dictionary columns (the audit's attribution: 1M commits name a few hundred owners
        and reasons) are stored as they are, where delta-rs' writer would first copy every
        row's string. A partitioned table (created by another writer) goes through delta-rs."""
        from deltalake import write_deltalake

        table = self._unwritten(contract, app_id, version)
        if table is None:
            log.info("%s: batch %d of %s already written, skipping", contract.name, version, app_id)
            return False
        if data.num_rows and not table.metadata().partition_columns:
            file = write_data_file(self.location.child(contract.name),
                                   contract.conform(data, keep_dictionaries=True), contract.delta_encoded)
            self._commit_files(table, contract, [file], app_id, version)
            return True
        write_deltalake(
            table, contract.conform(data), mode="append",
            commit_properties=self._commit(app_id, version), storage_options=self.storage_options,
            writer_properties=delta_rs_writer(contract),
        )
        return True

    def commit_files(self, contract: TableContract, files: list[DataFile], app_id: str, version: int) -> bool:
        table = self._unwritten(contract, app_id, version)
        if table is None:
            log.info("%s: batch %d of %s already written, skipping (vacuum removes %d unnamed files)",
                     contract.name, version, app_id, len(files))
            return False
        self._check_visible(contract.name, files)
        self._commit_files(table, contract, files, app_id, version)
        return True

    def _commit_files(self, table, contract: TableContract, files: list[DataFile], app_id: str,
                      version: int) -> None:
        table.create_write_transaction(
            [f.add_action() for f in files], mode="append", schema=contract.arrow_schema,
            commit_properties=self._commit(app_id, version))
        self._own_batch[contract.name] = (app_id, version, tuple(f.path for f in files))

    def read_own_batch(self, table: str, app_id: str, version: int, columns: list[str] | None = None,
                       filter_expr=None, dictionaries: tuple[str, ...] = ()) -> pa.Table | None:
        """The rows :meth:`commit_files` committed as ``(app_id, version)`` in this process,
        read from those files only: a batch's own history without scanning the whole table
        (whose per-file statistics cannot single it out). None when this engine did not
        commit the batch, or a file is gone (vacuumed after a rewrite): read the table.

        ``dictionaries`` are read as Parquet stores them, as dictionaries (one for the whole
        table): a batch's group ids, topics and cluster ids repeat, and a string per row cost
        most of the read (1M commits: 0.63 -> 0.13 s CPU)."""
        import pyarrow.dataset as ds

        from pipelines.lake.contracts import contract

        own = self._own_batch.get(table)
        if own is None or own[:2] != (app_id, version):
            return None
        # partition columns never change: the table as last seen, no bring-up of its log
        if (self._tables.get(table) or self._table(table)).metadata().partition_columns:
            return None
        if isinstance(filter_expr, KeyFilter):
            filter_expr = filter_expr.to_arrow()
        fs = self.location.filesystem()
        paths = [self.location.fs_path(self.location.join(table, p)) for p in own[2]]
        try:
            schema = contract(table).arrow_schema
            parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=dictionaries))
            if dictionaries:
                schema = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionaries
                                    else f for f in schema], metadata=schema.metadata)
            dataset = ds.dataset(paths, schema=schema, format=parquet, filesystem=fs)
            rows = dataset.to_table(columns=columns, filter=filter_expr)
            return rows.unify_dictionaries() if dictionaries else rows
        except (FileNotFoundError, OSError):
            log.info("%s: batch %d of %s no longer in its own files, reading the table", table, version, app_id)
            return None

    def _check_visible(self, table: str, files: list[DataFile]) -> None:
        """Refuse to commit a file the driver cannot see with the size the task wrote: a
        task on another machine may have written a "local" lake to its own disk."""
        if not files:
            return
        fs = self.location.filesystem()
        uris = [self.location.join(table, f.path) for f in files]
        infos = fs.get_file_info([self.location.fs_path(u) for u in uris])
        for f, uri, info in zip(files, uris, infos, strict=True):
            if info.type != FileType.File or info.size != f.size:
                raise FileNotFoundError(
                    f"{uri} was written by a Spark task but is not visible here: the lake must be a "
                    "path every executor and the driver share, or an object store (or use "
                    "--delta-engine spark)")

    def merge(self, contract: TableContract, changes: pa.Table, app_id: str, version: int) -> bool:
        table = self._unwritten(contract, app_id, version)
        if table is None:
            log.info("%s: batch %d of %s already merged, skipping", contract.name, version, app_id)
            return False
        source, stored, not_written = merge_source(contract, changes)
        if self._merge_as_write(table, contract, source, stored, app_id, version):
            return True
        (
            table
            # streamed_exec=False: the change set is small and in memory, and only then does
            # delta-rs derive a target predicate from it and skip the files (and the
            # partitions) it cannot match
            .merge(source, _key_predicate(contract.key) + stored, source_alias="s", target_alias="t",
                   streamed_exec=False, commit_properties=self._commit(app_id, version),
                   writer_properties=delta_rs_writer(contract))
            .when_matched_delete(f"s.{OP} = 'delete'")
            .when_matched_update_all(f"s.{OP} = 'upsert'", except_cols=not_written)
            .when_not_matched_insert_all(f"s.{OP} = 'upsert'", except_cols=not_written)
            .execute()
        )
        return True

    def _merge_as_write(self, table, contract: TableContract, source: pa.Table, stored: list[str],
                        app_id: str, version: int) -> bool:
        """:func:`~pipelines.lake.merge_writes.merge_as_write` (a method: tests compare it
        with the MERGE it stands for)."""
        return merge_as_write(table, contract, source, stored, self.location, app_id, version, self.storage_options)

    def read(self, table: str, columns: list[str] | None = None, filter_expr=None) -> pa.Table:
        if not self.exists(table):
            from pipelines.lake.contracts import contract

            schema = contract(table).arrow_schema
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        if isinstance(filter_expr, KeyFilter):
            filter_expr = filter_expr.to_arrow()
        dataset = self._table(table).to_pyarrow_dataset()
        return dataset.to_table(columns=columns, filter=filter_expr)

    def overwrite(self, contract: TableContract, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.path(contract.name), contract.conform(data), mode="overwrite",
                        schema_mode="overwrite", partition_by=list(contract.partition_by) or None,
                        storage_options=self.storage_options,
                        name=contract.name, description=contract.description)
        self._tables.pop(contract.name, None)  # its partitioning may have changed


class SparkDeltaEngine:
    """delta-spark: the same tables through Spark's Delta writer, for clusters with Delta's jars.

    * History: written by the executors (:meth:`append_frame`, see
      :mod:`pipelines.history.spark_writes`) with Delta's ``txnAppId``/``txnVersion``
      writer options: Delta records a ``txn`` (SetTransaction) action in the commit and
      skips a write whose version is not above the app's recorded one.
    * State: MERGEs run with Delta's DML transaction confs
      (``spark.databricks.delta.write.txnAppId``/``txnVersion``), the same ``txn`` action and
      the same skip; the merge condition and the reads are restricted to the batch's
      changed keys (:class:`~pipelines.lake.keys.KeyFilter`) so Delta skips the other files.
    * "Is batch N of app A in table T?" reads the ``txn`` action from T's log (delta-rs'
      ``transaction_version``, a log-only read), so a lake written by either engine is
      recognised by the other: both write Delta's standard action.
    """

    name = "delta-spark"
    commits_files = False  # delta-spark has no API to commit files it did not write
    concurrent_tables = False  # MERGE's transaction id is a session setting

    def __init__(self, spark, root: str | Path | LakeLocation,
                 storage_options: dict[str, str] | None = None) -> None:
        self.spark = spark
        self.location = lake_location(root, storage_options)
        self.root: Path | str = (self.location.local_path if self.location.is_local
                                 else self.location.uri)
        self._existing: set[str] = set()  # tables seen to exist: tables are never dropped
        self._laid_out: set[str] = set()  # partitioned tables whose layout was checked

    def path(self, table: str) -> str:
        return self.location.join(table)

    def spark_path(self, table: str) -> str:
        """The table's path as Spark's Hadoop filesystems name it (``s3a://`` for S3)."""
        return spark_uri(self.path(table))

    def exists(self, table: str) -> bool:
        if table in self._existing:
            return True
        from delta.tables import DeltaTable

        if DeltaTable.isDeltaTable(self.spark, self.spark_path(table)):
            self._existing.add(table)
            return True
        return False

    def _df(self, contract: TableContract, data: pa.Table, schema: pa.Schema | None = None):
        return self.spark.createDataFrame(contract.conform(data, schema))

    def ensure(self, contract: TableContract) -> None:
        if self.exists(contract.name):
            if contract.partition_by and contract.name not in self._laid_out:
                self._lay_out(contract)
            return
        from delta.tables import DeltaTable

        builder = DeltaTable.createIfNotExists(self.spark).location(self.spark_path(contract.name))
        builder = builder.comment(contract.description)
        for c in contract.columns:
            builder = builder.addColumn(c.name, c.type, nullable=c.nullable, comment=c.comment)
        if contract.partition_by:
            builder = builder.partitionedBy(*contract.partition_by)
        builder.execute()
        self._existing.add(contract.name)
        self._laid_out.add(contract.name)

    def _lay_out(self, contract: TableContract) -> None:
        """An existing table partitioned otherwise than its contract says (written by an
        older offsetlake) rewritten once, in one commit, the way :class:`DeltaRsEngine` does."""
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        path = self.spark_path(contract.name)
        detail = DeltaTable.forPath(self.spark, path).detail().collect()[0]
        if list(detail["partitionColumns"]) != list(contract.partition_by):
            frame = self.spark.read.format("delta").load(path)
            for name, (in_sql, _) in ADDED_COLUMNS.get(contract.name, {}).items():
                if name not in frame.columns:
                    frame = frame.withColumn(name, F.expr(in_sql))
            writer = (frame.select(*contract.column_names).write.format("delta").mode("overwrite")
                      .option("overwriteSchema", "true"))
            if contract.partition_by:
                writer = writer.partitionBy(*contract.partition_by)
            writer.save(path)
            log.info("rewrote %s partitioned by %s", contract.name, ", ".join(contract.partition_by))
        self._laid_out.add(contract.name)

    def commit_files(self, contract: TableContract, files: list[DataFile], app_id: str, version: int) -> bool:
        raise NotImplementedError("delta-spark commits only files it writes itself; use append_frame()")

    def committed(self, table: str, app_id: str, version: int) -> bool:
        done = transaction_version(self.path(table), app_id, self.location.delta_options())
        return done is not None and done >= version

    def append_frame(self, contract: TableContract, frame, app_id: str, version: int) -> bool:
        """Append a DataFrame from the executors; False when the batch was already in."""
        self.ensure(contract)
        if self.committed(contract.name, app_id, version):
            log.info("%s: batch %d of %s already written, skipping", contract.name, version, app_id)
            return False
        (frame.write.format("delta").mode("append")
         .options(**idempotent_write_options(app_id, version))
         .save(self.spark_path(contract.name)))
        return True

    def append(self, contract: TableContract, data: pa.Table, app_id: str, version: int) -> bool:
        return self.append_frame(contract, self._df(contract, data), app_id, version)

    def merge(self, contract: TableContract, changes: pa.Table, app_id: str, version: int) -> bool:
        from delta.tables import DeltaTable

        self.ensure(contract)
        if self.committed(contract.name, app_id, version):
            log.info("%s: batch %d of %s already merged, skipping", contract.name, version, app_id)
            return False
        source, stored, _ = merge_source(contract, changes)
        source = self.spark.createDataFrame(source)
        cols = {c: f"s.{c}" for c in contract.column_names}
        condition = merge_condition(contract.key, changed_keys(changes, contract.key)) + stored
        with dml_transaction(self.spark, app_id, version):
            (DeltaTable.forPath(self.spark, self.spark_path(contract.name)).alias("t")
             .merge(source.alias("s"), condition)
             .whenMatchedDelete(f"s.{OP} = 'delete'")
             .whenMatchedUpdate(f"s.{OP} = 'upsert'", set=cols)
             .whenNotMatchedInsert(f"s.{OP} = 'upsert'", values=cols)
             .execute())
        return True

    def read_own_batch(self, table: str, app_id: str, version: int, columns: list[str] | None = None,
                       filter_expr=None, dictionaries: tuple[str, ...] = ()) -> pa.Table | None:
        return None  # history is written by the executors' Delta writer: no file list here

    def read(self, table: str, columns: list[str] | None = None, filter_expr=None) -> pa.Table:
        """Rows of ``table``; a :class:`~pipelines.lake.keys.KeyFilter` is pushed into the
        scan (Delta file skipping), a pyarrow expression is applied after reading."""
        from pipelines.lake.contracts import contract

        schema = contract(table).arrow_schema
        if not self.exists(table):
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        df = self.spark.read.format("delta").load(self.spark_path(table))
        if isinstance(filter_expr, KeyFilter):
            df = df.where(filter_expr.to_sql())
            filter_expr = None
        if columns and filter_expr is None:
            df = df.select(*columns)
        data = df.toArrow()
        if filter_expr is not None:
            data = data.filter(filter_expr)
            if columns:
                data = data.select(columns)
        wanted = pa.schema([schema.field(n) for n in data.column_names])
        return data.cast(wanted) if data.schema != wanted else data

    def overwrite(self, contract: TableContract, data: pa.Table) -> None:
        writer = self._df(contract, data).write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        if contract.partition_by:
            writer = writer.partitionBy(*contract.partition_by)
        writer.save(self.spark_path(contract.name))


def spark_uri(uri: str) -> str:
    """``s3://`` as Spark's S3A connector names it; other schemes and paths unchanged."""
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def transaction_version(table_uri: str, app_id: str, storage_options: dict[str, str] | None = None
                        ) -> int | None:
    """The last version ``app_id`` recorded in the table's Delta log (its ``txn`` action),
    None when the table or the app has none. Reads the log only, whichever engine wrote it."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(table_uri, storage_options=storage_options):
        return None
    return DeltaTable(table_uri, storage_options=storage_options).transaction_version(app_id)


def idempotent_write_options(app_id: str, version: int) -> dict[str, str]:
    """Delta's DataFrameWriter options that make an append happen at most once per
    ``(app_id, version)``: Delta records them as the commit's ``txn`` action."""
    return {"txnAppId": app_id, "txnVersion": str(int(version))}


#: Delta's session confs making the next DML (MERGE/UPDATE/DELETE) idempotent (delta-io/delta#1555).
DML_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
DML_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


@contextlib.contextmanager
def dml_transaction(spark, app_id: str, version: int):
    """Run a DML with Delta's transaction confs set, and restore what was there before."""
    conf = spark.conf
    before = {k: conf.get(k, None) for k in (DML_TXN_APP_ID, DML_TXN_VERSION)}
    conf.set(DML_TXN_APP_ID, app_id)
    conf.set(DML_TXN_VERSION, str(int(version)))
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)


def changed_keys(changes: pa.Table, key: tuple[str, ...]) -> KeyFilter:
    """The keys a change set touches."""
    cols = [changes.column(k).to_pylist() for k in key]
    return KeyFilter.of(key, zip(*cols, strict=True))


#: Above this many distinct pushed keys the target-side predicate stops paying for itself.
MAX_PUSHED_KEYS = 10_000


def merge_condition(key: tuple[str, ...], keys: KeyFilter) -> str:
    """``t.k = s.k AND ...``, plus the target restricted to the batch's values of the key's
    first two columns (cluster, group), which lets Delta skip every file holding none of
    them. The extra condition only excludes target rows that no source row matches (a
    matching row has the source row's values), so the MERGE's result is the same."""
    condition = _key_predicate(key)
    if len(key) < 2 or not keys.keys:
        return condition
    pushed = key[:2]
    values = {k[:2] for k in keys.keys}
    if len(values) > MAX_PUSHED_KEYS:
        return condition
    return f"{condition} AND {KeyFilter.of(pushed, values).to_sql(alias='t')}"


def read_batch(engine: DeltaEngine, table: str, columns: list[str], where: KeyFilter,
               app_id: str | None = None, batch_id: int | None = None,
               dictionaries: tuple[str, ...] = ()) -> pa.Table:
    """Rows of ``table`` selected by ``where`` that batch ``batch_id`` of ``app_id`` wrote:
    from the files this engine committed for it when it did (no scan of the table; see
    :meth:`DeltaEngine.read_own_batch`; ``dictionaries`` may then come as dictionaries),
    else through ``where`` from the whole table."""
    rows = None
    if app_id is not None and batch_id is not None:
        rows = engine.read_own_batch(table, app_id, batch_id, columns, where, dictionaries)
    return engine.read(table, columns, where) if rows is None else rows


def make_engine(kind: str, root: str | Path, spark=None,
                storage_options: dict[str, str] | None = None) -> DeltaEngine:
    if kind in ("delta-rs", "rs", "deltars"):
        return DeltaRsEngine(root, storage_options)
    if kind in ("spark", "delta-spark"):
        if spark is None:
            raise ValueError("the delta-spark engine needs a SparkSession with Delta's jars")
        return SparkDeltaEngine(spark, root, storage_options)
    raise ValueError(f"unknown Delta engine {kind!r}: use delta-rs or spark")
