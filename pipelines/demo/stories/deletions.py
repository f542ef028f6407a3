"""Deletion stories: OffsetDelete and DeleteGroups, i.e. the tombstones compaction keeps.

Why: offset tombstones, the GroupMetadata tombstone and the KIP-848 6/4/3 tombstones are
what makes a group or an offset disappear from the current state; these stories write them
in the coordinator's order (offsets first, then the group, in one batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipelines.demo.classic import ClassicGroup
from pipelines.demo.consumer import ConsumerGroup
from pipelines.demo.world import Event, Records, Story, World

__all__ = ["doomed_848", "doomed_classic", "reporting_offdel"]


def reporting_offdel(w: World) -> Iterator[Event]:
    s = Story(w, "reporting-offdel")
    g = ClassicGroup(s, "range")
    rng = s.rng
    m = s.classic_member("offdel-c1", "python", ["orders", "payments"])
    t = w.at(0.22)
    yield Records(t, s.group, [g.created(t), g.rebalance(t, [m])])
    yield from s.commit_rounds(t, w.at(0.23), 2, [m], g.owned, lambda m: "before-offset-delete",
                               epochs=False)
    t = w.at(0.23)
    yield Records(t, s.group, [g.empty(t)])
    t += rng.randint(20, 80)
    gone = [("payments", p) for p in range(4)] + [("orders", 0)]
    yield Records(t, s.group, [(1, {"group": s.group, "topic": tp[0], "partition": tp[1]}, None)
                                for tp in gone])


def doomed_classic(w: World) -> Iterator[Event]:
    s = Story(w, "doomed-classic")
    g = ClassicGroup(s, "range")
    m = s.classic_member("deleted-c1", "python", ["payments"])
    t = yield from g.start(w.at(0.32), [m], (5, 15))
    yield from s.commit_rounds(t, w.at(0.33), 3, [m], g.owned, lambda m: "doomed", epochs=False)
    t = w.at(0.33)
    yield Records(t, s.group, [g.empty(t)])
    t = w.at(0.34)
    ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
        (1, {"group": s.group, "topic": tp[0], "partition": tp[1]}, None)
        for tp in (("payments", 0), ("payments", 2), ("payments", 1), ("payments", 3))]
    ops.append((2, {"group": s.group}, None))
    yield Records(t, s.group, ops)


def doomed_848(w: World) -> Iterator[Event]:
    s = Story(w, "doomed-848")
    g = ConsumerGroup(s)
    rng = s.rng
    m = s.kip848_member("console-consumer", ["foo"])
    t = w.at(0.36)
    yield from g.join(t, m)
    last = t
    for ts in w.ticks(rng, t + 500, w.at(0.38), w.rounds(2)):
        last = ts
        yield s.commit(ts, g.owned(m), "", epochs=True)
    t = max(w.at(0.38), last + 10)
    yield from g.leave(t, m)
    t = w.at(0.40)
    ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
        (1, {"group": s.group, "topic": "foo", "partition": p}, None) for p in (0, 2, 1)]
    ops += g.delete_ops()
    yield Records(t, s.group, ops)
