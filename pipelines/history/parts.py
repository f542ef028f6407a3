"""One task's share of a micro-batch: decoded, written as history files, reduced for the state.

Why: the history is >99% of the bytes and needs nothing from other tasks, so each Spark
task writes its own history files and hands the driver only file names, counts and the
few rows the state depends on. The driver commits everything in one Delta transaction
per table (:func:`pipelines.micro_batch.commit_batch`), so a batch still lands whole or not at all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from pipelines.history.tables import HISTORY_TABLES, build_history
from pipelines.lake.contracts import contract
from pipelines.lake.files import DataFile, write_data_file
from pipelines.lake.location import LakeLocation, lake_location
from pipelines.model import GroupColumns, StateInput


@dataclass
class HistoryPart:
    """What a task hands the driver: written files or (no lake given) the tables themselves."""

    state: StateInput
    records: int = 0
    statuses: Counter = field(default_factory=Counter)
    files: dict[str, list[DataFile]] = field(default_factory=dict)
    tables: dict[str, pa.Table] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)  # rows the engine already committed itself


def history_part(raw: pa.Table, batch_id: int, ingested_at: datetime,
                 lake: str | Path | LakeLocation | None,
                 tables: tuple[str, ...] = HISTORY_TABLES) -> HistoryPart:
    """Decode ``raw``; write ``tables`` as data files under ``lake`` (a local directory or an
    object-store location, with its storage options) or keep them in memory."""
    history = build_history(raw, batch_id, ingested_at)
    where = None if lake is None else lake_location(lake)
    part = HistoryPart(history.state_input(), raw.num_rows, Counter(history.status_counts()))
    for name in tables:
        data = getattr(history, name)
        if where is None:
            part.tables[name] = data
        else:
            part.files[name] = [write_data_file(where.child(name), data, contract(name).delta_encoded)] \
                if data.num_rows else []
    return part


def combined_state(parts: list[HistoryPart]) -> StateInput:
    """The parts' state inputs as one, group records in log order."""
    commits = [p.state.offset_commits for p in parts] or [contract("offset_commits").arrow_schema.empty_table()]
    groups = GroupColumns.concat([p.state.groups for p in parts]).in_log_order()
    ranges = [p.state.commit_ranges for p in parts]
    if any(r is None for r in ranges):
        return StateInput(pa.concat_tables(commits), groups)
    return StateInput(pa.concat_tables(commits), groups, pa.concat_tables(ranges))
