"""Partition assignors as the clients and the KIP-848 coordinator run them.

Why: the assignment inside a GroupMetadata record or a KIP-848 target assignment record must
be what the named assignor would have produced, or the generated history is not one a real
cluster writes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from pipelines.demo.world import TP, Member

__all__ = ["group_partitions", "range_assign", "roundrobin_assign", "sticky_assign",
           "sticky_user_data"]


def group_partitions(tps: Iterable[TP]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def sticky_user_data(tps: list[TP], generation: int) -> bytes:
    """kafka-python StickyAssignor user data v1: previous assignment + its generation."""
    out = bytearray(struct.pack(">hi", 1, len({t for t, _ in tps})))
    for entry in group_partitions(tps):
        name = entry["topic"].encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(entry["partitions"]))
        out += b"".join(struct.pack(">i", p) for p in entry["partitions"])
    out += struct.pack(">i", generation)
    return bytes(out)


def range_assign(members: list[Member], tps_of: dict[str, int]) -> dict[str, list[TP]]:
    """Kafka's RangeAssignor: per topic, sorted members get contiguous ranges, the first
    ``n % k`` one extra (sorted by group.instance.id when every member has one)."""
    static = all(m.instance_id for m in members)
    out: dict[str, list[TP]] = {m.member_id: [] for m in members}
    for topic in sorted(tps_of):
        subs = sorted((m for m in members if topic in m.topics),
                      key=lambda m: (m.instance_id or "") if static else m.member_id)
        if not subs:
            continue
        n, k = tps_of[topic], len(subs)
        per, extra = divmod(n, k)
        start = 0
        for i, m in enumerate(subs):
            length = per + (1 if i < extra else 0)
            out[m.member_id] += [(topic, p) for p in range(start, start + length)]
            start += length
    return out


def roundrobin_assign(members: list[Member], tps: list[TP]) -> dict[str, list[TP]]:
    """Kafka's RoundRobinAssignor (homogeneous subscriptions)."""
    ordered = sorted(members, key=lambda m: m.member_id)
    out: dict[str, list[TP]] = {m.member_id: [] for m in ordered}
    for i, tp in enumerate(sorted(tps)):
        out[ordered[i % len(ordered)].member_id].append(tp)
    return out


def sticky_assign(member_ids: list[str], tps: list[TP],
                   previous: dict[str, list[TP]]) -> dict[str, list[TP]]:
    """Balanced and sticky (what Kafka's sticky and KIP-848 uniform assignors achieve for
    homogeneous subscriptions): keep up to quota of what you own, fill the rest in order."""
    k = len(member_ids)
    if not k:
        return {}
    per, extra = divmod(len(tps), k)
    valid = set(tps)
    order = sorted(member_ids, key=lambda m: (-len(previous.get(m, ())), member_ids.index(m)))
    quota = {m: per + (1 if i < extra else 0) for i, m in enumerate(order)}
    out: dict[str, list[TP]] = {}
    taken: set[TP] = set()
    for m in member_ids:
        keep = [tp for tp in sorted(previous.get(m, ())) if tp in valid and tp not in taken]
        out[m] = keep[: quota[m]]
        taken.update(out[m])
    free = [tp for tp in sorted(tps) if tp not in taken]
    for m in member_ids:
        while len(out[m]) < quota[m]:
            out[m].append(free.pop(0))
        out[m].sort()
    return out
