"""KIP-848 consumer-group stories: joins, revocations, leaves and classic-to-consumer upgrades.

Why: the new protocol's records (types 3-8) and the two ways a classic group becomes a
consumer group (offline conversion of an Empty group, online upgrade with a classic member
kept as classicMemberMetadata) must each appear in the history the replay is checked on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipelines.decode import encode_subscription
from pipelines.demo.classic import ClassicGroup
from pipelines.demo.consumer import STABLE, ConsumerGroup, MemberCurrent
from pipelines.demo.world import Event, Member, Records, Story, World

__all__ = ["clicks_848", "inventory_848", "legacy_upgrade", "mixed_migrate"]


def clicks_848(w: World) -> Iterator[Event]:
    s = Story(w, "clicks-848")
    g = ConsumerGroup(s)
    m1 = s.kip848_member("consumer-clicks-848-1", ["clicks"])
    m2 = s.kip848_member("consumer-clicks-848-2", ["clicks"], instance_id="clicks-848-static-2")
    m3 = s.kip848_member("consumer-clicks-848-3", ["clicks"])
    joined: list[Member] = []  # three consumers join one after another
    for m, start, settle_ms, end, k in ((m1, 0.04, 1000, 0.20, 6), (m2, 0.20, 3000, 0.55, 8),
                                        (m3, 0.55, 3000, 0.995, 12)):
        t = w.at(start)
        yield from g.join(t, m)
        joined.append(m)
        yield from g.commits(t + settle_ms, w.at(end), list(joined), k)


def inventory_848(w: World) -> Iterator[Event]:
    s = Story(w, "inventory-848")
    g = ConsumerGroup(s)
    c1 = s.kip848_member("console-consumer", ["inventory"])
    c2 = s.kip848_member("console-consumer", ["inventory"])
    t = w.at(0.12)
    yield from g.join(t, c1)
    yield from g.commits(t + 1000, w.at(0.16), [c1], 3)
    t = w.at(0.16)
    yield from g.join(t, c2)
    yield from g.commits(t + 3000, w.at(0.25), [c1, c2], 3)
    t = w.at(0.25)
    yield from g.leave(t, c2)
    yield from g.commits(t + 4000, w.at(0.30), [c1], 2)
    t = w.at(0.30)
    yield from g.leave(t, c1)


def legacy_upgrade(w: World) -> Iterator[Event]:
    s = Story(w, "legacy-upgrade")
    cg = ClassicGroup(s, "range")
    c = s.classic_member("upgrade-classic-c1", "python", ["bar"])
    t = yield from cg.start(w.at(0.42), [c], (10, 30))
    yield from s.commit_rounds(t, w.at(0.43), 2, [c], cg.owned,
                               lambda m: "classic-before-upgrade", epochs=False)
    t = w.at(0.43)
    yield Records(t, s.group, [cg.empty(t)])
    # An Empty classic group is converted when a KIP-848 member joins it.
    g = ConsumerGroup(s)
    m = s.kip848_member("console-consumer", ["bar"])
    t = w.at(0.46)
    yield from g.join(t, m, before=[(2, {"group": s.group}, None)])
    yield from g.commits(t + 1000, w.at(0.995), [m], 10)


def mixed_migrate(w: World) -> Iterator[Event]:
    s = Story(w, "mixed-migrate")
    cg = ClassicGroup(s, "range")
    rng = s.rng
    c = s.classic_member("consumer-mixed-migrate-1", "java", ["inventory"])
    t = w.at(0.62)
    yield Records(t, s.group, [cg.created(t), cg.rebalance(t, [c])])
    yield from s.commit_rounds(t, w.at(0.64), 2, [c], cg.owned, lambda m: "classic-only",
                               epochs=True)
    # Online upgrade: the classic member becomes a member of a consumer group, its JoinGroup
    # protocols kept as classicMemberMetadata; then the KIP-848 member's own join records.
    g = ConsumerGroup(s)
    sub = encode_subscription({"version": 0, "topics": ["inventory"], "user_data": b""})
    classic_md = {"session_timeout_ms": c.session_timeout, "supported_protocols": [
        {"name": "range", "metadata": sub}, {"name": "cooperative-sticky", "metadata": sub}]}
    g.members[c.member_id] = c
    g.epoch = g.assignment_epoch = 1
    g.target[c.member_id] = list(cg.owned(c))
    g.current[c.member_id] = MemberCurrent(1, 1, STABLE, list(cg.owned(c)))
    conversion: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
        (2, {"group": s.group}, None),
        (5, g.mkey(c.member_id), g.member_value(c, classic_md)),
        (3, g.gkey(), {"epoch": 1}),
        (7, g.mkey(c.member_id), {"topic_partitions": g.partitions_by_id(g.target[c.member_id])}),
        (6, g.gkey(), {"assignment_epoch": 1}),
        g.current_op(c.member_id),
    ]
    m = s.kip848_member("migrate-848-r1", ["inventory"], flavor="rdkafka")
    t = w.at(0.66)
    yield from g.join(t, m, before=conversion)
    for ts in w.ticks(rng, t + 6000, w.at(0.995), w.rounds(10)):
        yield s.commit(ts, g.owned(c), "mixed-classic-member", epochs=True)
        yield s.commit(ts + 9, g.owned(m), "mixed-848-member\x00", epochs=False)
