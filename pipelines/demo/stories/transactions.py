"""Transaction stories: KIP-447 transactional offset commits, their markers and aborts.

Why: a transactional commit only counts from its COMMIT marker, an aborted one never, and
an older pending offset loses to a newer plain commit (spec 2.4); these stories write each
of those cases so the read_committed fold and the replay are checked against them.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipelines.demo.classic import ClassicGroup
from pipelines.demo.world import TP, Commit, Event, Marker, Records, Story, World

__all__ = ["txn_pipeline", "txn_standalone"]


def txn_pipeline(w: World) -> Iterator[Event]:
    s = Story(w, "txn-pipeline")
    g = ClassicGroup(s, "range")
    rng = s.rng
    c = s.classic_member("consumer-txn-pipeline-1", "java", ["orders"])
    tps = w.tps(["orders"])
    pid, epoch = 1000 * rng.randint(1, 3) + rng.randrange(10), 0
    t = w.at(0.06)
    yield Records(t, s.group, [g.created(t)])
    t += rng.randint(10, 30)
    yield Records(t, s.group, [g.rebalance(t, [c])])
    for n, ts in enumerate(w.ticks(rng, t, w.at(0.60), w.rounds(20)), start=1):
        aborted = n % 7 == 0
        yield s.commit(ts, tps, f"txn-{n}" + ("-aborted" if aborted else ""), epochs=True,
                       txn=(pid, epoch))
        yield Marker(ts + rng.randint(15, 60), s.group, (pid, epoch), not aborted)
    # The producer application restarts: InitProducerId bumps the epoch.
    epoch += 1
    t = w.at(0.60) + rng.randint(3000, 6000)

    def txn(t: int, parts: list[TP], md: str) -> Commit:
        return s.commit(t, parts, md, epochs=True, txn=(pid, epoch))

    yield txn(t, tps, "txn-a")
    t += rng.randint(15, 60)
    yield Marker(t, s.group, (pid, epoch), True)
    t += rng.randint(200, 400)
    yield txn(t, tps, "txn-b-aborted")
    t += rng.randint(10, 30)
    yield Marker(t, s.group, (pid, epoch), False)
    # T-c: transactional offsets for orders-0..2, then -- while the transaction is open -- a
    # plain commitSync of orders-0 and orders-3. At COMMIT the pending orders-0 offset is
    # older (lower log offset) than the committed one and is dropped (spec 2.4 rule 3).
    t += rng.randint(200, 400)
    yield txn(t, tps[:3], "txn-c")
    t += rng.randint(5, 20)
    yield s.commit(t, [tps[0], tps[3]], "sync-during-txn-c", epochs=True)
    t += rng.randint(10, 30)
    yield Marker(t, s.group, (pid, epoch), True)
    # T-d: a plain commit first, then the transaction: the transactional offset is newer.
    t += rng.randint(200, 400)
    yield s.commit(t, [tps[4]], "sync-before-txn-d", epochs=True)
    t += rng.randint(5, 20)
    yield txn(t, tps[4:], "txn-d")
    t += rng.randint(10, 30)
    yield Marker(t, s.group, (pid, epoch), True)
    t += rng.randint(100, 300)
    yield Records(t, s.group, [g.empty(t)])


def txn_standalone(w: World) -> Iterator[Event]:
    s = Story(w, "txn-standalone")
    rng = s.rng
    pid = 1000 * rng.randint(4, 6) + rng.randrange(10)
    p = w.tps(["payments"])
    t = w.at(0.30)
    yield s.commit(t, p[:2], "sa-commit", epochs=False, txn=(pid, 0))
    t += rng.randint(15, 40)
    yield Marker(t, s.group, (pid, 0), True)
    t += rng.randint(20, 60)
    yield s.commit(t, p[1:], "sa-abort", epochs=False, txn=(pid, 0))
    t += rng.randint(15, 40)
    yield Marker(t, s.group, (pid, 0), False)
