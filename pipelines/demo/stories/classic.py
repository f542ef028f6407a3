"""Classic-protocol group stories: rebalances, static members, KIP-70 re-subscription.

Why: most groups in a real cluster are classic; these stories write the GroupMetadata
records of joins, leaves, restarts and assignor changes (range, roundrobin, sticky) across
Java, kafka-python and librdkafka clients, and the bulk of the offset commits.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipelines.demo.classic import ClassicGroup
from pipelines.demo.world import Event, Member, Records, Story, World

__all__ = ["billing_batch", "events_etl", "kip70", "orders_processor", "payments_static"]


def orders_processor(w: World) -> Iterator[Event]:
    s = Story(w, "orders-processor")
    g = ClassicGroup(s, "range")
    topics = ["orders", "payments"]
    m1, m2, m3 = (s.classic_member(f"consumer-orders-processor-{i}", "java", topics)
                  for i in (1, 2, 3))

    def md(m: Member) -> str:
        return "" if m is m3 else f"{m.client_id}@gen{g.generation}"

    def phase(t0: int, t1: int, members: list[Member], k: float) -> Iterator[Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned, md, epochs=True, spacing=4)

    t = yield from g.start(w.at(0.01), [m1], (20, 60))
    yield from phase(t, w.at(0.15), [m1], 8)
    yield from g.rebalances([
        (w.at(0.15), w.at(0.30), [m1, m2], 8),
        (w.at(0.30), w.at(0.45), [m1, m2, m3], 8),
        # m1 sends LeaveGroup; m2 (next in line) becomes the leader
        (w.at(0.45), w.at(0.60), [m2, m3], 8),
    ], phase)
    m1b = s.classic_member(m1.client_id, "java", topics, host=m1.host)  # restarted process
    yield from g.rebalances([(w.at(0.60), w.at(0.995), [m2, m3, m1b], 16)], phase)


def billing_batch(w: World) -> Iterator[Event]:
    s = Story(w, "billing-batch")
    g = ClassicGroup(s, "range")
    topics = ["payments", "ledger"]
    w1, w2, w3 = (s.classic_member(f"billing-{n}", "python", topics) for n in ("w1", "w2", "w3"))

    def phase(t0: int, t1: int, members: list[Member], k: float) -> Iterator[Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned,
                               lambda m: f"{m.client_id}@gen{g.generation}", epochs=False,
                               spacing=6)

    t = w.at(0.05)
    ops = [g.created(t)]
    ops.append(g.rebalance(t, [w1]))  # both records in one batch happens too (golden a-kip70)
    yield Records(t, s.group, ops)
    yield from phase(t, w.at(0.12), [w1], 3)
    yield from g.rebalances([(w.at(0.12), w.at(0.20), [w1, w2], 3),
                             (w.at(0.20), w.at(0.25), [w1], 2)], phase)
    t = w.at(0.25)
    yield Records(t, s.group, [g.empty(t)])
    yield from g.rebalances([(w.at(0.50), w.at(0.55), [w3], 2)], phase)
    t = w.at(0.55)
    yield Records(t, s.group, [g.empty(t)])


def payments_static(w: World) -> Iterator[Event]:
    s = Story(w, "payments-static")
    g = ClassicGroup(s, "sticky")
    topics = ["payments"]
    s0 = s.classic_member("payments-static-c0", "python", topics,
                          instance_id="payments-static-0", session_timeout=30000)
    s1 = s.classic_member("payments-static-c1", "python", topics,
                          instance_id="payments-static-1", session_timeout=30000)
    rng = s.rng
    suffix = {s0.member_id: "", s1.member_id: ""}

    def phase(t0: int, t1: int, members: list[Member], k: float) -> Iterator[Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned,
                               lambda m: f"static {m.client_id}{suffix[m.member_id]}",
                               epochs=False)

    t = w.at(0.10)
    yield Records(t, s.group, [g.created(t), g.rebalance(t, [s0])])
    t += rng.randint(400, 900)
    yield Records(t, s.group, [g.rebalance(t, [s0, s1])])
    g.state_ts = t + rng.randint(5, 15)  # Stable once the leader's SyncGroup completes
    yield from phase(t + 20, w.at(0.40), [s0, s1], 10)
    # s1's process dies without LeaveGroup (static members don't send it) and restarts with
    # the same group.instance.id: the broker swaps the member id, no rebalance.
    t = w.at(0.40) + rng.randint(2000, 8000)
    s1b = s.classic_member("payments-static-c1b", "python", topics,
                           instance_id="payments-static-1", session_timeout=30000, host=s1.host)
    yield Records(t, s.group, [g.replace_static(t, s1, s1b)])
    suffix[s1b.member_id] = " restarted"
    yield from phase(t, w.at(0.995), [s0, s1b], 15)


def kip70(w: World) -> Iterator[Event]:
    s = Story(w, "kip70-analytics")
    g = ClassicGroup(s, "range")
    m = s.classic_member("kip70-c1", "python", ["foo"])
    t = w.at(0.08)
    yield Records(t, s.group, [g.created(t), g.rebalance(t, [m])])
    yield from s.commit_rounds(t, w.at(0.20), 4, [m], g.owned, lambda m: "subscription=[foo]",
                               epochs=False)
    t = w.at(0.20)
    m.topics = ["foo", "bar"]  # subscribe() again with one more topic: KIP-70 rejoin
    yield Records(t, s.group, [g.rebalance(t, [m])])
    yield from s.commit_rounds(t, w.at(0.995), 10, [m], g.owned,
                               lambda m: "subscription=[foo,bar]", epochs=False)


def events_etl(w: World) -> Iterator[Event]:
    s = Story(w, "events-etl")
    g = ClassicGroup(s, "roundrobin")
    r1, r2, r3 = (s.classic_member(f"events-etl-{i}", "rdkafka", ["events"]) for i in (1, 2, 3))

    def phase(t0: int, t1: int, members: list[Member], k: float) -> Iterator[Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned, lambda m: "", epochs=True,
                               spacing=7)

    t = yield from g.start(w.at(0.0) + 500, [r1], (15, 40))
    yield from phase(t, w.at(0.03), [r1], 2)
    yield from g.rebalances([(w.at(0.03), w.at(0.50), [r1, r2], 70),
                             (w.at(0.50), w.at(0.995), [r1, r2, r3], 75)], phase)
