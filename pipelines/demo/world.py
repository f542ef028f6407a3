"""The simulated world every story shares: clock, topics, leader epochs, events and members.

Why: stories (one group each) only decide *what* happens and when; the world gives them a
deterministic clock (broker restarts included), the topics' ids and leader epochs, the
consumers' ids as brokers and clients make them, and the three event kinds the log turns
into batches (an offset commit request, group records, a transaction marker).
"""

from __future__ import annotations

import base64
import bisect
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_START_MS", "RESTARTS", "SPAN_PER_SCALE_MS", "TOPICS", "TP", "Commit", "Event",
    "Marker", "Member", "Records", "Story", "Topic", "World", "kafka_uuid",
]

#: 2026-01-01T00:00:00Z. A fixed default so that the same seed gives the same bytes.
DEFAULT_START_MS = 1_767_225_600_000
#: Simulated wall-clock span per unit of scale. 240 s x 2000 = 5.6 days: below the default
#: 7-day offset retention, so not simulating expiration stays faithful.
SPAN_PER_SCALE_MS = 240_000
#: Broker restarts, as fractions of the span: each bumps the __consumer_offsets partition
#: leader epoch, the transaction coordinator epoch, the leader epoch of user-topic partitions
#: led by the restarted broker, and may switch the offsets topic codec (golden scenario-a).
RESTARTS = (0.35, 0.70)

TOPICS: tuple[tuple[str, int], ...] = (
    ("orders", 6), ("payments", 4), ("ledger", 4), ("events", 24), ("clicks", 8),
    ("inventory", 3), ("foo", 3), ("bar", 2), ("spark-src", 4), ("audit", 1),
)

TP = tuple[str, int]


# --------------------------------------------------------------------------------------------
# Events: what stories yield, what the log turns into batches
# --------------------------------------------------------------------------------------------


class Commit(NamedTuple):
    """One OffsetCommit / TxnOffsetCommit request = one batch (the coordinator appends each
    request's records together)."""

    ts: int
    group: str
    entries: list[tuple[str, int, int, int, str]]  # topic, partition, offset, leader epoch, md
    txn: tuple[int, int] | None = None  # producer id, producer epoch


class Records(NamedTuple):
    """Group records (and offset tombstones) written together as one batch."""

    ts: int
    group: str
    ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]]  # type, key, value|None


class Marker(NamedTuple):
    """A transaction marker, written by the transaction coordinator into the group's partition."""

    ts: int
    group: str
    producer: tuple[int, int]
    commit: bool


Event = Commit | Records | Marker


# --------------------------------------------------------------------------------------------
# The world: topics, clock, leader epochs
# --------------------------------------------------------------------------------------------


@dataclass
class Topic:
    name: str
    partitions: int
    topic_id: str
    base_epoch: list[int]
    leader_broker: list[int]
    epochs: list[list[int]] = field(default_factory=list)  # [partition][broker phase]


def kafka_uuid(rng: random.Random, *, urlsafe: bool = True) -> str:
    """Kafka's ``Uuid.toString()``: 22 chars of base64 (url-safe; librdkafka uses std)."""
    raw = rng.getrandbits(128).to_bytes(16, "big")
    enc = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return enc(raw).rstrip(b"=").decode("ascii")


class World:
    """Clock, topics and leader epochs shared by every story."""

    def __init__(self, seed: int, scale: int, start_ms: int) -> None:
        self.seed = seed
        self.scale = scale
        self.start = start_ms
        self.span = SPAN_PER_SCALE_MS * scale
        rng = random.Random(f"offsetlake-demo/{seed}/world")
        self.topics: dict[str, Topic] = {}
        for name, n in TOPICS:
            self.topics[name] = Topic(
                name, n, kafka_uuid(rng), [rng.randint(0, 3) for _ in range(n)],
                [rng.randrange(3) for _ in range(n)],
            )
        self.restarts = [self.at(f) for f in RESTARTS]
        #: what the audit-trail story did on purpose (anomalies, attributions, log-end floors)
        self.audit: dict[str, Any] = {"anomalies": [], "attribution": [], "log_end_floor": []}
        for t in self.topics.values():
            # Restart i re-elects the partitions led by broker i % 3: their epoch goes up.
            t.epochs = [[base + sum(1 for i in range(ph) if i % 3 == broker)
                         for ph in range(len(RESTARTS) + 1)]
                        for base, broker in zip(t.base_epoch, t.leader_broker, strict=True)]

    def at(self, frac: float) -> int:
        return self.start + int(frac * self.span)

    def rounds(self, per_scale: float) -> int:
        """How many commit rounds a phase gets: the part of the history ``scale`` multiplies."""
        return max(1, round(per_scale * self.scale))

    def phase(self, ts: int) -> int:
        """Broker phase at ``ts``: 0 before the first restart, 1 after it, ..."""
        return bisect.bisect_right(self.restarts, ts)

    def leader_epoch(self, topic: str, partition: int, ts: int) -> int:
        """The partition's leader epoch at ``ts``."""
        return self.topics[topic].epochs[partition][self.phase(ts)]

    def story_rng(self, name: str) -> random.Random:
        return random.Random(f"offsetlake-demo/{self.seed}/{name}")

    def ticks(self, rng: random.Random, t0: int, t1: int, n: int) -> Iterator[int]:
        """``n`` increasing timestamps spread over (t0, t1) with jitter, like a poll loop."""
        if t1 <= t0:
            t1 = t0 + 1000 * n
        step = (t1 - t0) / (n + 1)
        jitter = max(0, int(step / 4) - 20)
        for i in range(n):
            yield t0 + int(step * (i + 1)) + (rng.randint(0, jitter) if jitter else 0)

    def tps(self, topics: Iterable[str]) -> list[TP]:
        return [(t, p) for t in sorted(topics) for p in range(self.topics[t].partitions)]


# --------------------------------------------------------------------------------------------
# Stories' building blocks
# --------------------------------------------------------------------------------------------


@dataclass
class Member:
    """A consumer instance: its ids and which client library it is (shapes the bytes)."""

    member_id: str
    client_id: str
    host: str
    flavor: str  # "java" | "python" | "rdkafka"
    topics: list[str]
    instance_id: str | None = None
    session_timeout: int = 45000


class Story:
    """Per-group randomness, consumer positions and commit construction."""

    def __init__(self, w: World, group: str) -> None:
        self.w = w
        self.group = group
        self.rng = w.story_rng(group)
        self.pos: dict[TP, int] = {}
        self.rate: dict[TP, int] = {}

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def host(self) -> str:
        return f"/10.{self.rng.randint(0, 3)}.{self.rng.randint(0, 255)}.{self.rng.randint(2, 254)}"

    def classic_member(self, client_id: str, flavor: str, topics: list[str], *,
                       instance_id: str | None = None, session_timeout: int | None = None,
                       host: str | None = None) -> Member:
        """Member ids as brokers make them: ``<group.instance.id or client.id>-<uuid4>``."""
        prefix = instance_id or client_id
        timeout = session_timeout or (10000 if flavor == "python" else 45000)
        return Member(f"{prefix}-{self.uuid()}", client_id, host or self.host(), flavor,
                       list(topics), instance_id, timeout)

    def kip848_member(self, client_id: str, topics: list[str], *, flavor: str = "java",
                      instance_id: str | None = None) -> Member:
        """KIP-848 member ids are client-generated uuids (librdkafka: standard base64)."""
        mid = kafka_uuid(self.rng, urlsafe=flavor != "rdkafka")
        return Member(mid, client_id, self.host(), flavor, list(topics), instance_id)

    def advance(self, tp: TP) -> int:
        """Move the group's position on ``tp`` like a consumer that keeps up with producers
        (some partitions stay idle)."""
        pos = self.pos.get(tp)
        if pos is None:
            pos = self.pos[tp] = self.rng.choice((0, 0, self.rng.randrange(1, 50_000)))
            self.rate[tp] = 0 if self.rng.random() < 0.15 else 2 * self.rng.randint(1, 400) + 1
        elif self.rate[tp]:
            pos = self.pos[tp] = pos + int(self.rng.random() * self.rate[tp])
        return pos

    def commit_rounds(self, t0: int, t1: int, per_scale: float, members: list[Member],
                      owned: Callable[[Member], list[TP]], metadata: Callable[[Member], str],
                      *, epochs: bool, spacing: int = 5) -> Iterator[Event]:
        """A stable phase: every member commits what it owns, round after round (each member
        its own OffsetCommit request, so its own batch). ``scale`` multiplies the rounds."""
        for ts in self.w.ticks(self.rng, t0, t1, self.w.rounds(per_scale)):
            for i, m in enumerate(members):
                yield self.commit(ts + spacing * i, owned(m), metadata(m), epochs=epochs)

    def commit(self, ts: int, tps: Iterable[TP], metadata: str, *, epochs: bool,
               txn: tuple[int, int] | None = None) -> Commit:
        """Commit the current positions of ``tps``; Java-like clients send the leader epoch
        of the last consumed record (-1 where nothing was consumed), others -1."""
        entries = []
        phase = self.w.phase(ts)
        topics = self.w.topics
        advance = self.advance
        for tp in tps:
            off = advance(tp)
            le = topics[tp[0]].epochs[tp[1]][phase] if epochs and off > 0 else -1
            entries.append((tp[0], tp[1], off, le, metadata))
        return Commit(ts, self.group, entries, txn)
