"""Ownership history: who owned which partition from which generation/time to which.

A classic GroupMetadata record starts a generation: the previous generation's rows are
closed and one row per (member, partition) of the new assignment is opened. A KIP-848
current-assignment record does the same for one member at its member epoch (partitions
pending revocation included: the member holds them until it acknowledges). Tombstones
close rows. Rows are only ever closed, never deleted, so rebalances and KIP-70
subscription changes stay auditable.

A KIP-848 row takes its member's metadata (client id, host, subscription) as of the
record that opened it: member-metadata records (type 5) are replayed in log order with
the rest. A row opened before its member's first metadata record is filled in by that
record later, whatever batch it lands in: the table does not depend on batch boundaries.

Each row is one ownership interval: a key (group, generation, member, topic, partition,
group type) is open at most once at a time, and an interval that ends and starts again
under the same generation is a second row, told apart by ``valid_from_offset``. The table
is partitioned by ``is_open``; the replay remembers which partition each stored row is in,
so that the MERGE reads only the partitions its rows are in (the open one, usually).

How the replay computes the rows (as runs of records, column by column) is
:mod:`pipelines.state.ownership_runs`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa

from pipelines.lake.contracts import contract
from pipelines.model import GroupColumns
from pipelines.state.ownership_runs import STORED_COLUMN, replay_runs

#: The group record types the replay reads (every one, in log order).
REPLAYED_TYPES = (2, 3, 5, 8, 17, 19, 22, 23)


def generation_changes(
    open_rows: pa.Table | None,
    events: GroupColumns,
    topic_names: dict[str, str],
    cluster_id: str,
    updated_at: datetime,
    members: dict[tuple[str, str], dict[str, Any]] | None = None,
    unfilled_rows: pa.Table | None = None,
    topologies: dict[str, dict[str, Any]] | None = None,
) -> pa.Table:
    """Rows to upsert into ``group_generations`` after replaying ``events`` (one cluster's
    group records of :data:`REPLAYED_TYPES`, in any order) in log order, each with the
    partition its stored version is in (:data:`STORED_COLUMN`).

    ``open_rows`` are the currently open rows (valid_to null) of the groups in ``events``;
    ``members`` maps (group, member id) to the KIP-848 member metadata (client id, host...)
    *before* the events (it is updated by the type-5 events); ``unfilled_rows`` are stored
    KIP-848 rows of those groups still without member metadata (client id null).
    """
    return replay_runs(open_rows, events, topic_names, cluster_id, updated_at, members, unfilled_rows,
                       topologies)


def no_changes() -> pa.Table:
    """An empty ``group_generations`` change set (:data:`STORED_COLUMN` included)."""
    schema = contract("group_generations").arrow_schema
    return schema.empty_table().append_column(STORED_COLUMN, pa.array([], pa.bool_()))


def stored_change_set(rows: list[dict[str, Any]], ops: list[str]) -> pa.Table:
    """Stored rows (read from the lake, ``is_open`` included) as a change set that names
    the partition each is in (renamed topics: the old key deleted, the new one upserted)."""
    table = contract("group_generations").change_set(rows, ops)
    return table.append_column(STORED_COLUMN, pa.array([r["is_open"] for r in rows], pa.bool_()))
