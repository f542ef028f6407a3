"""The raw answers of one live capture, gathered on kafka-python's I/O thread.

Why: the I/O (:mod:`~pipelines.reconcile.cluster.capture`) only collects what the brokers
said; the rows are built afterwards, off the I/O loop
(:mod:`~pipelines.reconcile.cluster.assemble`). This is what passes between the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipelines.reconcile.cluster.record_times import RecordTimes
from pipelines.reconcile.cluster.rows import LogEndOffsetRow, PointRow


@dataclass
class Listing:
    """One ListGroups entry, with the broker that listed it."""

    group_id: str
    protocol_type: str | None
    group_state: str | None
    group_type: str | None
    listed_by: int


@dataclass
class RawAnswers:
    """Raw answers gathered on the I/O thread; rows are built afterwards, off the loop."""

    captured_at: datetime | None = None
    points: list[PointRow] = field(default_factory=list)
    listings: dict[str, Listing] = field(default_factory=dict)
    coordinators: dict[str, int] = field(default_factory=dict)
    coordinator_errors: dict[str, int] = field(default_factory=dict)
    described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    consumer_described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    # ShareGroupDescribe / StreamsGroupDescribe answers (UNSUPPORTED_VERSION: not offered)
    share_described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    streams_described: dict[str, tuple[int, Any]] = field(default_factory=dict)
    fetched: dict[str, tuple[int, Any]] = field(default_factory=dict)
    ends: list[LogEndOffsetRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    topic_errors: dict[str, int] = field(default_factory=dict)  # Metadata errors per topic
    topic_names: dict[str, str] = field(default_factory=dict)  # topic id -> name (Metadata)
    # groups the lake knows but ListGroups did not list, asked one by one (OffsetFetch)
    unlisted: dict[str, tuple[int, Any]] = field(default_factory=dict)
    # partitions the lake knows that OffsetFetch(topics=null) left out, asked by name
    refetched: dict[str, tuple[int, Any]] = field(default_factory=dict)
    starts: dict[tuple[str, int], int | None] = field(default_factory=dict)  # log start offsets
    # first offset with a timestamp inside the catch-up window (ListOffsets by timestamp)
    window_starts: dict[tuple[str, int], int | None] = field(default_factory=dict)
    times: RecordTimes | None = None  # records at committed offsets and newest (time lag)
