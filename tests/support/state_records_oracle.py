"""The group records a task ships the driver, found record by record: the oracle of
``pipelines.history.group_rows.GroupRows.for_state`` (which finds them with numpy)."""

from __future__ import annotations

from pipelines.model import EVERY_RECORD_TYPES, GroupRecord, last_record_indices


def state_records(records: list[GroupRecord]) -> list[GroupRecord]:
    """Every record of :data:`EVERY_RECORD_TYPES`, and of the other types the last per
    (cluster, group, type, member) only, in order."""
    kept = last_record_indices(records, skipped=EVERY_RECORD_TYPES)
    return [g for i, g in enumerate(records) if g.record.record_type in EVERY_RECORD_TYPES or i in kept]
