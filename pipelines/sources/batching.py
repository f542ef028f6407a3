"""A micro-batch's record budget: Spark's read limit, shared fairly between partitions (used by
every source; ``max_records_per_batch`` counts records, never offsets)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

#: Records per micro-batch unless the user says otherwise (``--max-records-per-batch``), for
#: every source. Why a million: each batch pays ~0.45 s of fixed driver work (a Delta commit
#: per table, the state merges, the audit's reads and writes) on 2 cores. Measured on 2026-11-25
#: (the 10M-record generated history, one Spark session, two runs of each): 500k-record
#: batches took 29.2 s, 1M 24.3-25.5 s and 2M 24.6-25.2 s. On the 2.04M-record group-heavy history, 500k took
#: 30.4-31.7 s and 1M 28.0-28.9 s. The driver held 930 MB at 1M, against 740 MB at 500k.
DEFAULT_MAX_RECORDS_PER_BATCH = 1_000_000


def even_budget(backlog: int, max_records: int) -> int:
    """The records of the next micro-batch when ``backlog`` records wait: as many
    micro-batches as ``max_records`` per batch needs (``ceil(backlog / max_records)``), sized
    evenly, so each holds at most ``max_records`` and no batch is a small remainder.

    Why: a run's first batch is decoded while nothing else runs, and its last batch is
    committed while nothing else runs; the batches between overlap one's commit with the
    next one's decoding. Full batches and a remainder (2.04M records at 1M: 1M, 1M, 40k) make
    the batch committed alone a full one; three of 680k each, same count, shorten both ends
    (the group-heavy history, alternated: 13.13-13.91 s against 14.24-14.44 s by the run's
    summary). Only a source that knows its backlog in records can size batches so (the
    segment files' index); the Kafka source counts records by fetching ahead, and fills each
    batch up to ``max_records``."""
    if max_records <= 0 or backlog <= max_records:
        return max_records
    batches = -(-backlog // max_records)
    return -(-backlog // batches)


def spread_budget(backlog: Mapping[str, int], budget: int) -> dict[str, int]:
    """Split ``budget`` records over partitions fairly (water-filling): partitions with less
    backlog than an equal share get all of it, the rest is shared by the others. Never grants
    more than a partition's backlog nor more than ``budget`` in total; grants something to at
    least one partition whenever ``budget > 0`` and there is backlog (so batches progress)."""
    grants = {p: 0 for p in backlog}
    pending = sorted(((n, p) for p, n in backlog.items() if n > 0), key=lambda t: (t[0], t[1]))
    remaining = max(0, budget)
    for i, (need, p) in enumerate(pending):
        if remaining <= 0:
            break
        share = math.ceil(remaining / (len(pending) - i))
        grant = min(need, share)
        grants[p] = grant
        remaining -= grant
    return grants


class RecordTaker(Protocol):
    """A partition whose records are counted only as far as a plan needs them."""

    @property
    def done(self) -> bool: ...

    def take(self, n: int) -> int:
        """Count up to ``n`` more records; fewer only when the partition has no more."""
        ...


def fill_budget(takers: Mapping[str, RecordTaker], budget: int) -> int:
    """Share ``budget`` records between partitions whose backlog is unknown until counted
    (the Kafka source: the driver counts by fetching ahead). Rounds of equal shares, in
    partition order; what a partition lacks goes to the others in the next round, so the
    result is the water-filling of :func:`spread_budget` up to rounding. Returns the
    records taken (less than ``budget`` only when every partition ran out)."""
    remaining = max(0, budget)
    active = sorted((p for p, t in takers.items() if not t.done), key=_partition_order)
    while remaining > 0 and active:
        share = math.ceil(remaining / len(active))
        for p in active:
            if remaining <= 0:
                break
            remaining -= takers[p].take(min(share, remaining))
        active = [p for p in active if not takers[p].done]
    return max(0, budget) - remaining


def _partition_order(key: str) -> tuple[int, str]:
    return (int(key), key) if key.isdigit() else (-1, key)


def default_read_limit(max_records: int | None) -> Any:
    """Spark's read limit for a source's ``max_records_per_batch`` (0 or None: no limit).
    Spark is imported here, not at module import: the segment index uses this module too."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    return ReadMaxRows(max_records) if max_records else ReadAllAvailable()


def record_budget(limit: Any) -> int | None:
    """The records a micro-batch may hold under Spark's ``limit`` (None: no bound)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    return limit.max_rows if isinstance(limit, ReadMaxRows) else None
