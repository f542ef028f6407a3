"""The audit-trail story: anomalies the commit audit must find, written on purpose.

Why: offset rewinds, zombie commits (a member committing partitions it no longer owns),
commits while the group is Empty and an offset beyond the log end are each recorded in
``World.audit`` as they are written, so :mod:`pipelines.state.audit` is checked against a
list that does not come from its own logic.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipelines.demo.classic import ClassicGroup
from pipelines.demo.world import TP, Commit, Event, Member, Records, Story, World

__all__ = ["audit_trail"]


def audit_trail(w: World) -> Iterator[Event]:
    """Known anomalies and ownerless commits, recorded in ``w.audit`` as they are written."""
    s = Story(w, "audit-trail")
    g = ClassicGroup(s, "range")
    rng = s.rng
    a = s.classic_member("audit-consumer-a", "java", ["audit", "ledger"])
    tps = [("audit", 0)] + [("ledger", p) for p in range(4)]
    for i, tp in enumerate(tps):
        s.pos[tp], s.rate[tp] = 20_000 + 1_000 * i, 301
    last: dict[TP, int] = {}

    def note(ev: Commit, attribution: str, member: Member | None) -> Commit:
        for topic, partition, offset, _le, _md in ev.entries:
            w.audit["attribution"].append({
                "group": s.group, "topic": topic, "partition": partition, "committed_offset": offset,
                "attribution": attribution, "client_id": member.client_id if member else None})
            if offset < last.get((topic, partition), -1):
                w.audit["anomalies"].append({"kind": "offset_rewind", "group": s.group, "topic": topic,
                                             "partition": partition, "committed_offset": offset})
            if attribution == "zombie":
                w.audit["anomalies"].append({"kind": "zombie_commit", "group": s.group, "topic": topic,
                                             "partition": partition, "committed_offset": offset})
            last[(topic, partition)] = offset
        return ev

    t = w.at(0.50)
    yield Records(t, s.group, [g.created(t), g.rebalance(t, [a])])
    for ts in w.ticks(rng, t, w.at(0.52), 3):
        yield note(s.commit(ts, g.owned(a), "a@gen1", epochs=False), "owner", a)
    # the owner rewinds ledger-1 (reprocessing from an earlier offset) and goes on from there
    t = w.at(0.52)
    back = s.pos[("ledger", 1)] - 5_000
    s.pos[("ledger", 1)] = back
    yield note(Commit(t, s.group, [("ledger", 1, back, -1, "a@gen1 reprocess")]), "owner", a)
    for ts in w.ticks(rng, t, w.at(0.54), 2):
        yield note(s.commit(ts, g.owned(a), "a@gen1", epochs=False), "owner", a)
    # a re-subscribes to [audit] only: the rebalance leaves ledger to nobody, yet its old
    # commit thread still commits ledger-2 (a zombie commit)
    a.topics = ["audit"]
    t = w.at(0.54)
    yield Records(t, s.group, [g.rebalance(t, [a])])
    yield note(s.commit(t + 40, [("ledger", 2)], "a@gen1 late", epochs=False), "zombie", None)
    for ts in w.ticks(rng, t + 100, w.at(0.56), 2):
        yield note(s.commit(ts, g.owned(a), "a@gen2", epochs=False), "owner", a)
    # a leaves (Empty); an admin resets ledger to the earliest offset, then sets audit-0 to an
    # offset beyond the partition's log end (kafka-consumer-groups --reset-offsets --to-offset)
    t = w.at(0.56)
    yield Records(t, s.group, [g.empty(t)])
    yield note(Commit(t + 1_000, s.group, [("ledger", p, 0, -1, "") for p in range(4)]),
               "group_empty", None)
    floor = s.pos[("audit", 0)]
    beyond = floor + 10_000
    yield note(Commit(t + 2_000, s.group, [("audit", 0, beyond, -1, "")]), "group_empty", None)
    w.audit["anomalies"].append({"kind": "past_log_end", "group": s.group, "topic": "audit",
                                 "partition": 0, "committed_offset": beyond})
    w.audit["log_end_floor"].append({"topic": "audit", "partition": 0, "offset": floor})
