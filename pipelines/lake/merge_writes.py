"""MERGEs that are writes: a state table's MERGE done as the write it amounts to.

Why: delta-rs plans every MERGE anew (~15-25 ms, more with more columns), whatever the size
of the table and the change set. A micro-batch merges ~9 small state tables (the groups, the
members, the audit cursor, the progress...), so the plans cost more than the rows: 250-258 ms
per batch of the 10M history against 112-178 ms as writes (three measurements). Two kinds
of MERGE are writes:

* into an empty table, a MERGE inserts the change set's upserts (a delete matches nothing,
  no row can match twice): an append. The group-heavy history's first batch opens 658k
  ownership rows, whose MERGE took 1.2 s of CPU;
* into a small table (at most :data:`REWRITE_BYTES` of files, not partitioned), a MERGE
  rewrites every file that holds a changed key, and a small table is one file: its rows are
  read, the changed keys' rows replaced or deleted in Arrow, written as one file, and
  committed with the removal of the files read.

Both commit the batch's transaction as the MERGE would, so a replay is skipped as before,
and only onto the version they read: a MERGE fails when another writer added or removed
rows it may match meanwhile, and delta-rs checks no such thing for a plain commit of files,
so these commits are not retried onto a newer version (``max_commit_retries=0``). Any commit
to the table in between fails the write loudly (:class:`ConcurrentWriteError`), and nothing
of it lands.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.lake.contracts import TableContract
from pipelines.lake.files import delta_rs_writer, write_data_file
from pipelines.lake.location import LakeLocation
from pipelines.model import OP

#: Tables whose data files add up to at most this many bytes take a MERGE as a rewrite.
#: Measured on ``committed_offsets`` with 100 changed keys, MERGE against rewrite: 1,000 rows
#: 27 vs 18 ms, 10,000 rows 37 vs 15, 50,000 rows (66 KiB) 45 vs 33, 200,000 rows (276 KiB,
#: one file) 88 vs 85. Larger tables are laid out so that a MERGE rewrites only the files of
#: the changed keys.
REWRITE_BYTES = 128 << 10


class ConcurrentWriteError(RuntimeError):
    """Another writer committed to a table while a batch's changes were written into it."""


def merge_as_write(table, contract: TableContract, source: pa.Table, stored: list[str],
                   lake: LakeLocation, app_id: str, version: int, storage_options: dict[str, str]) -> bool:
    """Do the MERGE of ``source`` (a change set as ``merge_source`` made it; ``stored``: its
    partition columns) into ``table`` as a write committed with batch ``version`` of
    ``app_id``'s transaction, where it is one of the two kinds above; False, and nothing
    done, where it takes a MERGE. Only tables with the contract's columns (names, types,
    nullability) and no table features (:func:`plain_table`); a change set naming a stored
    key twice is left to the MERGE (which refuses it)."""
    from deltalake import CommitProperties, Schema, Transaction
    from deltalake.exceptions import CommitFailedError

    partitioned = bool(table.metadata().partition_columns)
    if (partitioned or stored) and table.file_uris():
        return False
    if _columns(table.schema()) != _columns(Schema.from_arrow(contract.arrow_schema)) or not plain_table(table):
        return False
    # through the Arrow stream: pa.table() would first ask whether it is a pandas object
    files = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=False)).read_all()
    if files.num_rows and pc.sum(files.column("size_bytes")).as_py() > REWRITE_BYTES:
        return False  # (a partitioned table with files left above)
    names = contract.arrow_schema.names
    upserts = contract.conform(source.filter(pc.equal(source.column(OP), "upsert")).select(names))
    rows = upserts
    if files.num_rows:
        kept = _unmatched(table, contract, source)
        if kept is None:
            return False
        rows = pa.concat_tables([kept, upserts])
    commit = CommitProperties(app_transactions=[Transaction(app_id=app_id, version=version)],
                              max_commit_retries=0)
    try:
        if not files.num_rows and partitioned and upserts.num_rows:
            from deltalake import write_deltalake

            write_deltalake(table, upserts, mode="append", commit_properties=commit,
                            storage_options=storage_options, writer_properties=delta_rs_writer(contract))
        else:
            table.create_write_transaction(_actions(files, rows, contract, lake), mode="append",
                                           schema=contract.arrow_schema, commit_properties=commit)
    except CommitFailedError as exc:
        raise ConcurrentWriteError(
            f"{contract.name}: another writer committed to the table while batch {version} of {app_id} "
            f"was written into it; nothing of the batch landed in it, and a rerun replays it ({exc})") from exc
    return True


def _actions(files: pa.Table, rows: pa.Table, contract: TableContract, lake: LakeLocation) -> list:
    """The commit's actions: the files read removed, ``rows`` added as one file of ours."""
    from deltalake.transaction import RemoveAction

    now = time.time_ns() // 1_000_000
    actions: list = [RemoveAction(path, True, now, size, {}) for path, size in
                     zip(files.column("path").to_pylist(), files.column("size_bytes").to_pylist(), strict=True)]
    if rows.num_rows:
        actions.append(write_data_file(lake.child(contract.name), rows, contract.delta_encoded).add_action())
    return actions


def _unmatched(table, contract: TableContract, source: pa.Table) -> pa.Table | None:
    """The table's rows no change matches, as the MERGE's condition matches them (equal keys;
    a null key matches nothing); None when a key is named twice. The join takes the keys
    alone (it cannot carry list columns)."""
    key = list(contract.key)
    changed = source.select(key)
    if changed.group_by(key).aggregate([]).num_rows != changed.num_rows:
        return None
    target = contract.conform(table.to_pyarrow_dataset().to_table())
    at = target.select(key).append_column("_row", pa.array(np.arange(target.num_rows)))
    unmatched = at.join(changed, keys=key, join_type="left anti").column("_row")
    return target.take(pa.array(np.sort(unmatched.to_numpy())))


def _columns(schema) -> list[tuple]:
    """A Delta schema's columns as (name, type, nullable), comments aside."""
    return [(f.name, f.type, f.nullable) for f in schema.fields]


def plain_table(table) -> bool:
    """A table of the protocol delta-rs creates (reader 1, writer 2, no table features): no
    check constraints (writer 3), change data feed or generated columns (4), column mapping
    (5), deletion vectors... that a MERGE would honour and a file of ours would not. Its
    files hold its rows under the columns' own names, and it may lose files (not
    append-only)."""
    protocol, configuration = table.protocol(), table.metadata().configuration
    return (protocol.min_reader_version == 1 and protocol.min_writer_version <= 2
            and not protocol.reader_features and not protocol.writer_features
            and not any(k.startswith(("delta.columnMapping", "delta.constraints.")) for k in configuration)
            and configuration.get("delta.appendOnly") != "true"
            and configuration.get("delta.enableChangeDataFeed") != "true")
