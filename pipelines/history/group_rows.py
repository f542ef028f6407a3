"""A batch's decoded group records, as the columns the driver's state step reads.

Why: a task ships the driver every group record of the types the state reads in log order
and only the last per key of the others (:data:`pipelines.model.EVERY_RECORD_TYPES`); on a
group-heavy log the others (KIP-848 target assignments) are a third of the group records.
Building an object for each record and then dropping most of them by a Python pass cost
~0.8 s of the executors' CPU per 2M records; here the last per key is found with numpy over
the rows, and the records kept cross to the driver as columns and their values
(:class:`pipelines.model.GroupColumns`), made objects there only where a step reads values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decode import DecodedRecord
from pipelines.model import (
    CLASSIC_TYPE,
    EVERY_RECORD_TYPES,
    GROUP_SCHEMA,
    GroupColumns,
    GroupRecord,
    last_by_position,
    micros_of,
)


@dataclass
class GroupRows:
    """Rows of decoded group records: row ``j`` is record ``uniq[at[j]]`` (one decoded record
    per distinct (key, value) pair, shared), at the position ``raw`` row ``j`` gives
    (``cluster_id``, ``offsets_partition``, ``offset``, ``timestamp``). ``group_ids`` and
    ``subkeys`` are each distinct record's group and member (or regular expression), ``classic``
    its classic columns (:data:`pipelines.model.GROUP_SCHEMA`'s ``classic_generation`` and
    ``classic_members``)."""

    uniq: list[DecodedRecord]
    group_ids: list[str | None]
    subkeys: list[str]
    at: np.ndarray
    raw: pa.Table
    classic: dict[str, pa.Array]

    def columns(self, rows: np.ndarray | None = None, valued: np.ndarray | None = None) -> GroupColumns:
        """The ``rows`` (all by default), in order, as group-record columns: each distinct
        record's fields converted once and taken for its rows. Where ``valued`` (a mask over
        ``rows``) is False, the row's value is left out (None)."""
        raw, at = (self.raw, self.at) if rows is None else (self.raw.take(pa.array(rows, pa.int64())), self.at[rows])
        uniq, take = self.uniq, pa.array(at, pa.int64())
        per_record = {
            "group_id": pa.array(self.group_ids, pa.string()),
            "record_type": pa.array([r.record_type for r in uniq], pa.int16()),
            "subkey": pa.array(self.subkeys, pa.string()),
            "is_tombstone": pa.array([r.value is None for r in uniq], pa.bool_()),
            "value_version": pa.array([r.value_version for r in uniq], pa.int16()),
            **self.classic,
        }
        per_row = {"cluster_id": raw.column("cluster_id"), "offsets_partition": raw.column("offsets_partition"),
                   "offset": raw.column("offset"), "record_timestamp": micros_of(raw.column("timestamp"))}
        table = pa.table([per_row[f.name].cast(f.type) if f.name in per_row else per_record[f.name].take(take)
                          for f in GROUP_SCHEMA], schema=GROUP_SCHEMA)
        if valued is None:
            return GroupColumns(table, [uniq[i].value for i in at.tolist()])
        return GroupColumns(table, [uniq[i].value if v else None for i, v in zip(at.tolist(), valued.tolist(),
                                                                                  strict=True)])

    def records(self, rows: np.ndarray | None = None) -> list[GroupRecord]:
        """The ``rows`` (all by default), in order, as group records."""
        return self.columns(rows).records()

    def for_state(self) -> GroupColumns:
        """The records the state tables can depend on, in order: every record of
        :data:`EVERY_RECORD_TYPES`, and of the other types the last per (cluster, group,
        type, member) by log position (of two at one position, the later row).

        A classic ``GroupMetadata`` record keeps its value only if it is the last of its
        key: the ownership replay reads the classic columns, and ``group_records_latest``
        the last value per key. The values left behind were 40 of the 55 MB a group-heavy
        history's tasks pickled for the driver."""
        types = np.array([r.record_type for r in self.uniq], np.int64)
        every = np.isin(types, np.array(sorted(EVERY_RECORD_TYPES), np.int64))
        ranked = ~every | (types == CLASSIC_TYPE)
        rows = np.flatnonzero(ranked[self.at])
        if not len(rows):
            return self.columns()
        key_of: dict[tuple, int] = {}
        code = np.full(len(self.uniq), -1, np.int64)
        for i in np.flatnonzero(ranked).tolist():
            code[i] = key_of.setdefault((self.group_ids[i], int(types[i]), self.subkeys[i]), len(key_of))
        raw = self.raw.take(pa.array(rows, pa.int64()))
        cluster = pc.dictionary_encode(raw.column("cluster_id").combine_chunks()).indices.to_numpy()
        key = cluster.astype(np.int64) * len(key_of) + code[self.at[rows]]
        partition = raw.column("offsets_partition").to_numpy().astype(np.int64)
        offset = raw.column("offset").to_numpy().astype(np.int64)
        last = np.zeros(len(self.at), bool)
        last[rows[last_by_position(key, partition, offset)]] = True
        kept = np.flatnonzero(every[self.at] | last)
        return self.columns(kept, last[kept] | (types[self.at[kept]] != CLASSIC_TYPE))
