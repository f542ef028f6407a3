"""Group-heavy stories: classic and KIP-848 groups that rebalance all the time.

Why: clusters with many short-lived or autoscaled consumers write a GroupMetadata record per
classic rebalance and, for KIP-848 groups, a record per member, epoch and assignment change;
the default demo is commit-heavy (group records ~1%). ``generate_cluster(group_heavy=N)``
adds N of these stories (half classic, half KIP-848) so that group records are a large share
of the log (issue 9, benchmark (b): benchmarks/group_heavy.py). They are never part of the
default stories, so the default output stays byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from pipelines.demo.classic import ClassicGroup
from pipelines.demo.consumer import ConsumerGroup
from pipelines.demo.world import Event, Member, Records, Story, World

__all__ = ["churn_stories"]

#: Rebalance rounds per unit of scale and story (a round: one rebalance, one commit).
ROUNDS_PER_SCALE = 12
_CLASSIC = (("range", "java", ["orders"]), ("roundrobin", "rdkafka", ["inventory", "bar"]),
            ("sticky", "python", ["foo"]))
_KIP848_TOPICS = (["clicks"], ["payments"], ["ledger", "bar"])


def churn_stories(n: int) -> tuple[dict[str, str], list[Callable[[World], Iterator[Event]]]]:
    """``n`` churning groups: their manifest descriptions and story functions."""
    stories: dict[str, str] = {}
    funcs: list[Callable[[World], Iterator[Event]]] = []
    for i in range(n):
        if i % 2 == 0:
            protocol, flavor, topics = _CLASSIC[(i // 2) % len(_CLASSIC)]
            name = f"churn-classic-{i:04d}"
            stories[name] = (f"classic/{protocol}: 1-4 {flavor} members, a rebalance and one "
                             "member's commit every round (group-heavy benchmark)")
            funcs.append(partial(_classic_churn, name=name, protocol=protocol, flavor=flavor,
                                 topics=topics))
        else:
            topics = _KIP848_TOPICS[(i // 2) % len(_KIP848_TOPICS)]
            name = f"churn-848-{i:04d}"
            stories[name] = ("KIP-848 consumer group: members join and leave every round "
                             "(member, epoch and assignment records), one member commits "
                             "(group-heavy benchmark)")
            funcs.append(partial(_consumer_churn, name=name, topics=topics))
    return stories, funcs


def _classic_churn(w: World, *, name: str, protocol: str, flavor: str,
                   topics: list[str]) -> Iterator[Event]:
    s = Story(w, name)
    g = ClassicGroup(s, protocol)
    pool = [s.classic_member(f"{name}-c{j}", flavor, topics) for j in range(4)]
    rng = s.rng
    t = yield from g.start(w.at(rng.random() * 0.01), [pool[0]], (10, 40))
    for ts in w.ticks(rng, t + 100, w.at(0.995), w.rounds(ROUNDS_PER_SCALE)):
        members = pool[:rng.randint(1, len(pool))]
        yield Records(ts, s.group, [g.rebalance(ts, members)])
        owned = g.owned(members[rng.randrange(len(members))])
        if owned:
            yield s.commit(ts + 20, owned, "", epochs=flavor == "java")


def _consumer_churn(w: World, *, name: str, topics: list[str]) -> Iterator[Event]:
    s = Story(w, name)
    g = ConsumerGroup(s)
    rng = s.rng
    pool = [s.kip848_member(f"{name}-m{j}", topics) for j in range(3)]
    active: list[Member] = []
    t0 = w.at(0.01 + rng.random() * 0.01)
    for ts in w.ticks(rng, t0, w.at(0.99), w.rounds(ROUNDS_PER_SCALE)):
        idle = [m for m in pool if m not in active]
        if idle and (len(active) < 2 or rng.random() < 0.5):
            m = idle[rng.randrange(len(idle))]
            active.append(m)
            yield from g.join(ts, m)
        else:
            m = active.pop(rng.randrange(len(active)))
            yield from g.leave(ts, m)
        owned = g.owned(active[rng.randrange(len(active))])
        if owned:
            yield s.commit(ts + 5000, owned, "", epochs=True)
