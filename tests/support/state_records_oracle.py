"""The group records a task ships the driver, and the last record per key, found record by
record: the oracles of ``pipelines.history.group_rows.GroupRows.for_state`` and of the
driver's winners per key (``pipelines.state.apply._last_per_key``), which find them with numpy."""

from __future__ import annotations

from pipelines.model import EVERY_RECORD_TYPES, GroupRecord


def state_records(records: list[GroupRecord]) -> list[GroupRecord]:
    """Every record of :data:`EVERY_RECORD_TYPES`, and of the other types the last per
    (cluster, group, type, member) only, in order; a classic GroupMetadata record (type 2)
    without its value unless it is the last of its key."""
    kept = last_record_indices(records, skipped=EVERY_RECORD_TYPES)
    classic_last = last_record_indices(records, skipped=frozenset(g.record.record_type for g in records) - {2})
    out = []
    for i, g in enumerate(records):
        if g.record.record_type not in EVERY_RECORD_TYPES and i not in kept:
            continue
        if g.record.record_type == 2 and i not in classic_last:
            g = GroupRecord(g.cluster_id, g.group_id, g.record._replace(value=None))
        out.append(g)
    return out


def last_record_indices(records: list[GroupRecord], skipped: frozenset[int] = frozenset()) -> set[int]:
    """Indices of the record at the greatest log position per (cluster, group, type, member),
    records of the ``skipped`` types left out; of two at one position the later in the list
    wins, as ``pipelines.state.offsets.last_per_key``'s stable log-order sort ranks them."""
    last: dict[tuple, int] = {}
    for i, g in enumerate(records):
        r = g.record
        if r.record_type in skipped:
            continue
        key = (g.cluster_id, g.group_id, r.record_type, r.subkey)
        j = last.get(key)
        if j is None or (r.offsets_partition, r.offset) >= (records[j].record.offsets_partition,
                                                            records[j].record.offset):
            last[key] = i
    return set(last.values())
