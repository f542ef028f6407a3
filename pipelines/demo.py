"""Generate a realistic ``__consumer_offsets`` history as Kafka log segments, with its answer.

Why: tests, demos and benchmarks need a data directory that looks like what a Kafka 4.0
broker writes -- which records, in which order, in which batch shapes, with transactions,
tombstones and KIP-848 records -- *and* the state the group coordinator rebuilds from it.
The expected state is bookkept from the simulation's own events with the coordinator's
replay rules (spec 2.2-2.6, including the KIP-447 "older pending offset loses" rule), never
by decoding the files, so a decoder/replay checked against it is checked against something
independent.

The record patterns are those of the golden capture of a real broker
(``shared/corpus/golden/scenario-a``): an empty generation-0 GroupMetadata record when a
classic group is created, one record per completed rebalance written at the leader's
SyncGroup, a members-less record when the last member leaves, the same generation with a
new member id when a static member restarts, offset tombstones before the group tombstone
on DeleteGroups, KIP-848 records in the coordinator's order (member metadata, partition
metadata, group epoch, target members, target epoch, current assignment; leaving writes
8/7/5 tombstones then the epoch bump), control batches that are never compressed, base
sequence 0 on coordinator-written data batches, member ids ``<client id>-<uuid4>`` for
classic members and 22-char base64 uuids for KIP-848 members.

Everything is deterministic in ``seed`` (no wall clock, no hash randomisation), and writing
streams: stories are generators merged by timestamp, each event is encoded and written as
soon as it is produced, so memory does not grow with ``scale``.

Next to the segments, ``OUT_DIR/live/`` (+ ``OUT_DIR/capture_log.json``) holds the brokers'
answers right after the history ends, in the recorded-capture format of the golden corpus
(:func:`write_live_capture`), so the pipeline's snapshot -> reconcile step runs without a
broker: ``offsetlake snapshot --recorded OUT_DIR/live``. They are written from the same
bookkept state, never from the files, so reconciling the lake against them checks the
decoder and the replay end to end.

What is *not* simulated: offset expiration (the history spans < 7 days even at scale 2000,
so a real coordinator would not expire anything either), log compaction, topic deletion,
share/streams groups.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import heapq
import json
import random
import struct
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from crc32c import crc32c

from pipelines.decode import (
    encode_assignment,
    encode_key,
    encode_subscription,
    encode_value,
    partition_for,
)
from pipelines.decode.formats import EXPLICIT_DEFAULT_TAGS
from pipelines.sources.segments import (
    CODEC_NAMES,
    NewRecord,
    SegmentWriter,
    encode_batch,
    encode_control_batch,
)

__all__ = [
    "CAPTURE_DELAY_MS",
    "DEFAULT_START_MS",
    "SEGMENT_BYTES",
    "AbortedCommit",
    "Committed",
    "DemoManifest",
    "generate_cluster",
    "main",
    "write_live_capture",
]

#: 2026-01-01T00:00:00Z. A fixed default so that the same seed gives the same bytes.
DEFAULT_START_MS = 1_767_225_600_000
#: Kafka's ``offsets.topic.segment.bytes`` default: a partition rolls to a new segment here.
SEGMENT_BYTES = 100 * 1024 * 1024
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
_OC_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_Q = struct.Struct(">q")
# v2 batch header up to the CRC, and from attributes (where the CRC starts) to the records
_V2_HEAD = struct.Struct(">qiibI")
_V2_TAIL = struct.Struct(">hiqqqhii")
_V2_LENGTH_OVERHEAD = 49  # header bytes counted by the length field (61 - offset - length)
_ATTR_TRANSACTIONAL = 0x10


def _zigzag(v: int) -> bytes:
    """Kafka's zig-zag varint, for the precomputed table the fast batch encoder indexes."""
    u = (v << 1) if v >= 0 else ((-v) << 1) - 1
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


_ZZ = [_zigzag(i) for i in range(1 << 14)]  # varints of small non-negative ints, precomputed
_STABLE, _UNREVOKED, _UNRELEASED = 0, 1, 2  # KIP-848 member states (spec 1.7)


# --------------------------------------------------------------------------------------------
# Public result types
# --------------------------------------------------------------------------------------------


class Committed(NamedTuple):
    """The committed offset a coordinator would serve for one (group, topic, partition)."""

    offset: int
    leader_epoch: int
    metadata: str


class AbortedCommit(NamedTuple):
    """A transactional offset commit whose transaction was aborted: it must never win."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str
    producer_id: int


@dataclass
class DemoManifest:
    """What :func:`generate_cluster` wrote and the final state a coordinator rebuilds from it."""

    out_dir: str
    num_partitions: int
    seed: int
    scale: int
    start_ms: int
    end_ms: int
    compression: list[str]
    topics: dict[str, dict[str, Any]]
    broker_restarts_ms: list[int]
    stories: dict[str, str]
    groups: dict[str, dict[str, Any]]
    deleted_groups: list[str]
    committed: dict[tuple[str, str, int], Committed]
    aborted: list[AbortedCommit]
    counts: dict[str, Any]
    partitions: dict[int, dict[str, Any]]
    #: the audit-trail story's known anomalies ({kind, group, topic, partition,
    #: committed_offset}), its commits' expected attribution, and the log-end floors of
    #: partitions committed beyond their end (see :mod:`pipelines.state.audit`)
    audit: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (tuple keys become rows)."""
        return {
            "generator": "pipelines.demo",
            "out_dir": self.out_dir,
            "num_partitions": self.num_partitions,
            "seed": self.seed,
            "scale": self.scale,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "compression": self.compression,
            "topics": self.topics,
            "broker_restarts_ms": self.broker_restarts_ms,
            "stories": self.stories,
            "groups": self.groups,
            "deleted_groups": self.deleted_groups,
            "committed_offsets": [
                {"group": g, "topic": t, "partition": p, "offset": c.offset,
                 "leader_epoch": c.leader_epoch, "metadata": c.metadata}
                for (g, t, p), c in sorted(self.committed.items())
            ],
            "aborted_commits": [a._asdict() for a in self.aborted],
            "counts": self.counts,
            "partitions": {str(p): v for p, v in sorted(self.partitions.items())},
            "audit": self.audit,
        }

    def write_manifest(self, path: str | Path) -> Path:
        """Write :meth:`to_json` to ``path`` (sorted keys, so equal runs give equal files)."""
        out = Path(path)
        out.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")
        return out

    def summary(self) -> str:
        """A few human-readable lines: totals, then one line per group."""
        c = self.counts
        lines = [
            f"{c['records']:,} records ({c['data_records']:,} data, {c['control_records']} "
            f"markers: {c['commit_markers']} COMMIT / {c['abort_markers']} ABORT) in "
            f"{c['batches']:,} batches, {c['bytes']:,} bytes, {self.num_partitions} partitions, "
            f"scale {self.scale}, seed {self.seed}",
            "records by type: " + ", ".join(f"{k}={v:,}" for k, v in sorted(
                c["records_by_type"].items(), key=lambda kv: int(kv[0]))),
            "tombstones by type: " + ", ".join(f"{k}={v}" for k, v in sorted(
                c["tombstones_by_type"].items(), key=lambda kv: int(kv[0]))),
            f"committed offsets expected: {len(self.committed)}; aborted commits: "
            f"{len(self.aborted)}; deleted groups: {', '.join(self.deleted_groups) or '-'}",
        ]
        for gid, g in sorted(self.groups.items()):
            extra = (f"gen {g['generation']}" if g["group_type"] == "classic"
                     else f"epoch {g['group_epoch']}/{g['assignment_epoch']}"
                     if g["group_type"] == "consumer" else "offsets only")
            lines.append(f"  p{g['offsets_partition']:<3} {gid:<20} {g['group_type']:<8} "
                         f"{g['state']:<11} {extra:<13} {len(g['members'])} member(s)")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Events: what stories yield, what the log turns into batches
# --------------------------------------------------------------------------------------------


class _Commit(NamedTuple):
    """One OffsetCommit / TxnOffsetCommit request = one batch (the coordinator appends each
    request's records together)."""

    ts: int
    group: str
    entries: list[tuple[str, int, int, int, str]]  # topic, partition, offset, leader epoch, md
    txn: tuple[int, int] | None = None  # producer id, producer epoch


class _Records(NamedTuple):
    """Group records (and offset tombstones) written together as one batch."""

    ts: int
    group: str
    ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]]  # type, key, value|None


class _Marker(NamedTuple):
    """A transaction marker, written by the transaction coordinator into the group's partition."""

    ts: int
    group: str
    producer: tuple[int, int]
    commit: bool


_Event = _Commit | _Records | _Marker


# --------------------------------------------------------------------------------------------
# The world: topics, clock, leader epochs
# --------------------------------------------------------------------------------------------


@dataclass
class _Topic:
    name: str
    partitions: int
    topic_id: str
    base_epoch: list[int]
    leader_broker: list[int]
    epochs: list[list[int]] = field(default_factory=list)  # [partition][broker phase]


def _kafka_uuid(rng: random.Random, *, urlsafe: bool = True) -> str:
    """Kafka's ``Uuid.toString()``: 22 chars of base64 (url-safe; librdkafka uses std)."""
    raw = rng.getrandbits(128).to_bytes(16, "big")
    enc = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return enc(raw).rstrip(b"=").decode("ascii")


class _World:
    """Clock, topics and leader epochs shared by every story."""

    def __init__(self, seed: int, scale: int, start_ms: int) -> None:
        self.seed = seed
        self.scale = scale
        self.start = start_ms
        self.span = SPAN_PER_SCALE_MS * scale
        rng = random.Random(f"offsetlake-demo/{seed}/world")
        self.topics: dict[str, _Topic] = {}
        for name, n in TOPICS:
            self.topics[name] = _Topic(
                name, n, _kafka_uuid(rng), [rng.randint(0, 3) for _ in range(n)],
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
class _Member:
    """A consumer instance: its ids and which client library it is (shapes the bytes)."""

    member_id: str
    client_id: str
    host: str
    flavor: str  # "java" | "python" | "rdkafka"
    topics: list[str]
    instance_id: str | None = None
    session_timeout: int = 45000


class _Story:
    """Per-group randomness, consumer positions and commit construction."""

    def __init__(self, w: _World, group: str) -> None:
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
                       host: str | None = None) -> _Member:
        """Member ids as brokers make them: ``<group.instance.id or client.id>-<uuid4>``."""
        prefix = instance_id or client_id
        timeout = session_timeout or (10000 if flavor == "python" else 45000)
        return _Member(f"{prefix}-{self.uuid()}", client_id, host or self.host(), flavor,
                       list(topics), instance_id, timeout)

    def kip848_member(self, client_id: str, topics: list[str], *, flavor: str = "java",
                      instance_id: str | None = None) -> _Member:
        """KIP-848 member ids are client-generated uuids (librdkafka: standard base64)."""
        mid = _kafka_uuid(self.rng, urlsafe=flavor != "rdkafka")
        return _Member(mid, client_id, self.host(), flavor, list(topics), instance_id)

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

    def commit_rounds(self, t0: int, t1: int, per_scale: float, members: list[_Member],
                      owned: Callable[[_Member], list[TP]], metadata: Callable[[_Member], str],
                      *, epochs: bool, spacing: int = 5) -> Iterator[_Event]:
        """A stable phase: every member commits what it owns, round after round (each member
        its own OffsetCommit request, so its own batch). ``scale`` multiplies the rounds."""
        for ts in self.w.ticks(self.rng, t0, t1, self.w.rounds(per_scale)):
            for i, m in enumerate(members):
                yield self.commit(ts + spacing * i, owned(m), metadata(m), epochs=epochs)

    def commit(self, ts: int, tps: Iterable[TP], metadata: str, *, epochs: bool,
               txn: tuple[int, int] | None = None) -> _Commit:
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
        return _Commit(ts, self.group, entries, txn)


def _group_partitions(tps: Iterable[TP]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


def _sticky_user_data(tps: list[TP], generation: int) -> bytes:
    """kafka-python StickyAssignor user data v1: previous assignment + its generation."""
    out = bytearray(struct.pack(">hi", 1, len({t for t, _ in tps})))
    for entry in _group_partitions(tps):
        name = entry["topic"].encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(entry["partitions"]))
        out += b"".join(struct.pack(">i", p) for p in entry["partitions"])
    out += struct.pack(">i", generation)
    return bytes(out)


def _range_assign(members: list[_Member], tps_of: dict[str, int]) -> dict[str, list[TP]]:
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


def _roundrobin_assign(members: list[_Member], tps: list[TP]) -> dict[str, list[TP]]:
    """Kafka's RoundRobinAssignor (homogeneous subscriptions)."""
    ordered = sorted(members, key=lambda m: m.member_id)
    out: dict[str, list[TP]] = {m.member_id: [] for m in ordered}
    for i, tp in enumerate(sorted(tps)):
        out[ordered[i % len(ordered)].member_id].append(tp)
    return out


def _sticky_assign(member_ids: list[str], tps: list[TP],
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


class _Classic:
    """A classic-protocol group as the coordinator persists it (GroupMetadataValue v3)."""

    def __init__(self, story: _Story, protocol: str) -> None:
        self.s = story
        self.protocol = protocol
        self.generation = 0
        self.members: list[_Member] = []
        self.assignment: dict[str, list[TP]] = {}
        self.leader: str | None = None
        self.state_ts = 0
        self.subscription: dict[str, dict[str, Any]] = {}

    def key(self) -> dict[str, Any]:
        return {"group": self.s.group}

    def created(self, ts: int) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """The record a brand-new group gets at its first JoinGroup (generation 0)."""
        self.state_ts = ts - self.s.rng.randint(2, 15)
        return (2, self.key(), {"protocol_type": "", "generation": 0, "protocol": None,
                                "leader": None, "current_state_timestamp": self.state_ts,
                                "members": []})

    def _subscription(self, m: _Member) -> dict[str, Any]:
        prev = self.assignment.get(m.member_id)
        if m.flavor == "python":
            user_data = (_sticky_user_data(prev, self.generation)
                         if self.protocol == "sticky" and prev else b"")
            return {"version": 0, "topics": list(m.topics), "user_data": user_data}
        if m.flavor == "rdkafka":
            return {"version": 3, "topics": list(m.topics), "user_data": b"",
                    "owned_partitions": [], "generation_id": -1, "rack_id": ""}
        # Java 4.0 consumer, eager assignor: owned partitions were revoked before rejoining.
        return {"version": 3, "topics": sorted(m.topics), "user_data": None,
                "owned_partitions": [], "generation_id": self.generation if prev else -1,
                "rack_id": None}

    def _assignment(self, m: _Member) -> dict[str, Any]:
        java = m.flavor == "java"
        return {"version": 3 if java else 0,
                "assigned_partitions": _group_partitions(self.assignment[m.member_id]),
                "user_data": None if java else b""}

    def value(self) -> dict[str, Any]:
        members = []
        for m in self.members:
            members.append({
                "member_id": m.member_id, "group_instance_id": m.instance_id,
                "client_id": m.client_id, "client_host": m.host, "rebalance_timeout": 300000,
                "session_timeout": m.session_timeout,
                "subscription": self.subscription[m.member_id],
                "assignment": self._assignment(m),
            })
        return {"protocol_type": "consumer", "generation": self.generation,
                "protocol": self.protocol if self.members else None,
                "leader": self.leader if self.members else None,
                "current_state_timestamp": self.state_ts, "members": members}

    def rebalance(self, ts: int, members: list[_Member]) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """A completed rebalance: the record written when the leader's SyncGroup lands."""
        self.subscription = {m.member_id: self._subscription(m) for m in members}
        self.members = list(members)
        if self.leader not in {m.member_id for m in members}:
            self.leader = members[0].member_id
        tps_of = {t: self.s.w.topics[t].partitions for m in members for t in m.topics}
        all_tps = self.s.w.tps(tps_of)
        if self.protocol == "range":
            new = _range_assign(members, tps_of)
        elif self.protocol == "roundrobin":
            new = _roundrobin_assign(members, all_tps)
        else:
            new = _sticky_assign([m.member_id for m in members], all_tps, self.assignment)
        self.assignment = new
        self.generation += 1
        self.state_ts = max(self.state_ts, ts - self.s.rng.randint(2, 12))
        return (2, self.key(), self.value())

    def empty(self, ts: int) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """The last member left: a new generation without protocol, leader or members."""
        self.members, self.assignment, self.subscription = [], {}, {}
        self.generation += 1
        self.state_ts = ts
        return (2, self.key(), self.value())

    def replace_static(self, ts: int, old: _Member, new: _Member) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """A static member came back with a new member id: same generation, no rebalance;
        the broker keeps the old client id and subscription (golden a-static)."""
        new.client_id = old.client_id
        self.members = [new if m is old else m for m in self.members]
        self.assignment[new.member_id] = self.assignment.pop(old.member_id)
        self.subscription[new.member_id] = self.subscription.pop(old.member_id)
        if self.leader == old.member_id:
            self.leader = new.member_id
        return (2, self.key(), self.value())

    def owned(self, m: _Member) -> list[TP]:
        return self.assignment.get(m.member_id, [])


@dataclass
class _Current:
    epoch: int
    previous: int
    state: int
    assigned: list[TP]
    pending: list[TP] = field(default_factory=list)


class _Modern:
    """A KIP-848 consumer group: epochs, target and current assignments (records 3-8)."""

    def __init__(self, story: _Story) -> None:
        self.s = story
        self.epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, _Member] = {}
        self.target: dict[str, list[TP]] = {}
        self.current: dict[str, _Current] = {}
        self.meta_topics: tuple[str, ...] = ()

    def gkey(self) -> dict[str, Any]:
        return {"group_id": self.s.group}

    def mkey(self, mid: str) -> dict[str, Any]:
        return {"group_id": self.s.group, "member_id": mid}

    def _tps(self, tps: Iterable[TP]) -> list[dict[str, Any]]:
        topics = self.s.w.topics
        return [{"topic_id": topics[e["topic"]].topic_id, "partitions": e["partitions"]}
                for e in _group_partitions(tps)]

    def member_value(self, m: _Member, classic: dict[str, Any] | None = None) -> dict[str, Any]:
        value: dict[str, Any] = {
            "instance_id": m.instance_id, "rack_id": None, "client_id": m.client_id,
            "client_host": m.host, "subscribed_topic_names": sorted(m.topics),
            "subscribed_topic_regex": "", "rebalance_timeout_ms": 300000,
            "server_assignor": None, "classic_member_metadata": classic,
        }
        if classic is None:
            value[EXPLICIT_DEFAULT_TAGS] = [0]  # Kafka 4.0 writes the null tag explicitly
        return value

    def current_op(self, mid: str) -> tuple[int, dict[str, Any], dict[str, Any]]:
        c = self.current[mid]
        return (8, self.mkey(mid), {
            "member_epoch": c.epoch, "previous_member_epoch": c.previous, "state": c.state,
            "assigned_partitions": self._tps(c.assigned),
            "partitions_pending_revocation": self._tps(c.pending)})

    def _metadata_ops(self) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        topics = tuple(sorted({t for m in self.members.values() for t in m.topics}))
        if topics == self.meta_topics:
            return []
        self.meta_topics = topics
        w = self.s.w
        return [(4, self.gkey(), {"topics": [
            {"topic_id": w.topics[t].topic_id, "topic_name": t,
             "num_partitions": w.topics[t].partitions, "partition_metadata": []}
            for t in topics]})]

    def _new_target(self) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
        """Recompute the target assignment; records for members whose target changed."""
        mids = list(self.members)
        tps = self.s.w.tps(self.meta_topics)
        new = _sticky_assign(mids, tps, self.target)
        changed = [m for m in mids if new[m] != self.target.get(m)]
        self.target = new
        self.assignment_epoch = self.epoch
        ops: list[tuple[int, dict[str, Any], dict[str, Any]]] = [
            (7, self.mkey(m), {"topic_partitions": self._tps(new[m])}) for m in changed]
        ops.append((6, self.gkey(), {"assignment_epoch": self.epoch}))
        return ops

    def join(self, ts: int, m: _Member, *, before: Sequence[tuple[int, dict[str, Any], dict[str, Any] | None]] = ()) -> Iterator[_Event]:
        """ConsumerGroupHeartbeat of a new member, then the reconciliation heartbeats."""
        self.members = {m.member_id: m, **self.members}  # the new member's target comes first
        ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = list(before)
        ops.append((5, self.mkey(m.member_id), self.member_value(m)))
        ops += self._metadata_ops()
        self.epoch += 1
        ops.append((3, self.gkey(), {"epoch": self.epoch}))
        ops += self._new_target()
        owned = {tp for mid, c in self.current.items() for tp in (*c.assigned, *c.pending)}
        mine = self.target[m.member_id]
        free = [tp for tp in mine if tp not in owned]
        state = _STABLE if len(free) == len(mine) else _UNRELEASED
        self.current[m.member_id] = _Current(self.epoch, 0, state, free)
        ops.append(self.current_op(m.member_id))
        yield _Records(ts, self.s.group, ops)
        yield from self._reconcile(ts)

    def _reconcile(self, ts: int) -> Iterator[_Event]:
        """Members revoke what left their target, then everybody reaches the target epoch."""
        rng = self.s.rng
        t = ts
        revoking = []
        for mid, c in self.current.items():
            if c.epoch == self.epoch:
                continue
            lost = [tp for tp in c.assigned if tp not in self.target[mid]]
            if lost:
                c.previous, c.state = c.epoch, _UNREVOKED
                c.assigned = [tp for tp in c.assigned if tp in self.target[mid]]
                c.pending = lost
                t += rng.randint(80, 600)
                yield _Records(t, self.s.group, [self.current_op(mid)])
                revoking.append(mid)
        for mid, c in self.current.items():
            if c.epoch == self.epoch and c.state == _STABLE:
                continue
            c.previous = c.epoch  # a lagging member's old epoch, or an unreleased member's
            c.epoch, c.state, c.assigned, c.pending = self.epoch, _STABLE, list(self.target[mid]), []
            t += rng.randint(20, 400)
            yield _Records(t, self.s.group, [self.current_op(mid)])

    def leave(self, ts: int, m: _Member) -> Iterator[_Event]:
        """Heartbeat with epoch -1: member records tombstoned, then the group epoch bump; the
        remaining members get a new target on their next heartbeat."""
        mid = m.member_id
        del self.members[mid], self.current[mid], self.target[mid]
        ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
            (8, self.mkey(mid), None), (7, self.mkey(mid), None), (5, self.mkey(mid), None)]
        ops += self._metadata_ops()
        self.epoch += 1
        ops.append((3, self.gkey(), {"epoch": self.epoch}))
        yield _Records(ts, self.s.group, ops)
        if not self.members:
            return
        t = ts + self.s.rng.randint(500, 3000)
        ops = self._new_target()
        for mid2, c in self.current.items():
            if self.target[mid2] != c.assigned or c.epoch != self.epoch:
                self.current[mid2] = _Current(self.epoch, c.epoch, _STABLE, list(self.target[mid2]))
                ops.append(self.current_op(mid2))
        yield _Records(t, self.s.group, ops)

    def delete_ops(self) -> list[tuple[int, dict[str, Any], None]]:
        """DeleteGroups of an empty consumer group: target epoch, partition metadata, epoch."""
        return [(6, self.gkey(), None), (4, self.gkey(), None), (3, self.gkey(), None)]

    def owned(self, m: _Member) -> list[TP]:
        c = self.current.get(m.member_id)
        return list(c.assigned) if c else []


# --------------------------------------------------------------------------------------------
# The stories (one per group)
# --------------------------------------------------------------------------------------------

STORIES: dict[str, str] = {
    "orders-processor": "classic/range, Java clients: m1 alone, m2 joins, m3 joins (gen 3), "
                        "m1 leaves (gen 4), m1 restarts with a new member id (gen 5); commits "
                        "'<client>@gen<N>' (m3 plain commit(), metadata ''), ends Stable",
    "billing-batch": "classic/range, kafka-python: w1, w2 join one by one, w2 leaves, w1 leaves "
                     "(Empty); a later run w3 joins, commits and leaves; ends Empty (gen 6)",
    "payments-static": "classic/sticky, static membership (group.instance.id): two static "
                       "members; one restarts without LeaveGroup and comes back with a new "
                       "member id in the same generation; ends Stable (gen 2)",
    "kip70-analytics": "classic/range: subscribes [foo], commits, re-subscribes [foo, bar] "
                       "(KIP-70, rebalance to gen 2), commits; ends Stable",
    "events-etl": "classic/roundrobin, librdkafka auto-commit on 24 partitions: the bulk of "
                  "multi-partition commit batches; 1, 2 then 3 members; ends Stable",
    "spark-ingest": "simple group (assign() only, no GroupMetadata): Spark-style JSON metadata "
                    "per micro-batch",
    "flink-checkpoints": "simple group: checkpoint commits, leader epoch only on consumed "
                         "partitions (-1 elsewhere)",
    "txn-pipeline": "classic member + transactional producer (KIP-447): periodic transactions "
                    "(every 7th aborted), producer restart (epoch bump), then T-a commit, T-b "
                    "ABORT, T-c interleaved with a non-transactional commit of the same "
                    "partitions (the older transactional offset loses), T-d after a "
                    "non-transactional commit (it wins); the consumer leaves (Empty)",
    "txn-standalone": "simple group committed only through transactions: one committed, one "
                      "ABORTED touching partitions that never get a committed offset",
    "reporting-offdel": "classic: commits, goes Empty, OffsetDelete of payments-0..3 and "
                        "orders-0 (offset tombstones only)",
    "doomed-classic": "classic: commits, goes Empty, DeleteGroups (offset tombstones, then the "
                      "GroupMetadata tombstone in the same batch)",
    "clicks-848": "KIP-848 consumer group (Java): m1, then a static member (revocation via "
                  "UNREVOKED/UNRELEASED states), then m3; commits with leader epochs; ends "
                  "Stable with every member at the target epoch",
    "inventory-848": "KIP-848 consumer group: two members, both leave one by one (member "
                     "tombstones, epoch bumps, partition metadata emptied); ends Empty",
    "doomed-848": "KIP-848 consumer group: member joins, commits, leaves; DeleteGroups "
                  "(offset tombstones, then 6/4/3 tombstones)",
    "legacy-upgrade": "classic group goes Empty, then a KIP-848 member converts it "
                      "(GroupMetadata tombstone followed by records 5,4,3,7,6,8); ends consumer "
                      "Stable, classic-era offsets kept",
    "audit-trail": "classic: a member rewinds one partition (reprocessing), re-subscribes "
                   "so a rebalance takes the ledger partitions from it and still commits one "
                   "of them (zombie), leaves (Empty); an admin resets ledger to 0 (rewinds "
                   "while Empty) and sets audit-0 beyond its log end; listed in the manifest's "
                   "'audit' section",
    "mixed-migrate": "online upgrade: a classic member is active when a KIP-848 member joins "
                     "(classic member re-written as type 5 with classicMemberMetadata); ends "
                     "consumer Stable with one classic-protocol member",
}


def _orders_processor(w: _World) -> Iterator[_Event]:
    s = _Story(w, "orders-processor")
    g = _Classic(s, "range")
    topics = ["orders", "payments"]
    m1, m2, m3 = (s.classic_member(f"consumer-orders-processor-{i}", "java", topics)
                  for i in (1, 2, 3))
    rng = s.rng

    def md(m: _Member) -> str:
        return "" if m is m3 else f"{m.client_id}@gen{g.generation}"

    def phase(t0: int, t1: int, members: list[_Member], k: float) -> Iterator[_Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned, md, epochs=True, spacing=4)

    t = w.at(0.01)
    yield _Records(t, s.group, [g.created(t)])
    t += rng.randint(20, 60)
    yield _Records(t, s.group, [g.rebalance(t, [m1])])
    yield from phase(t, w.at(0.15), [m1], 8)
    t = w.at(0.15)
    yield _Records(t, s.group, [g.rebalance(t, [m1, m2])])
    yield from phase(t, w.at(0.30), [m1, m2], 8)
    t = w.at(0.30)
    yield _Records(t, s.group, [g.rebalance(t, [m1, m2, m3])])
    yield from phase(t, w.at(0.45), [m1, m2, m3], 8)
    t = w.at(0.45)  # m1 sends LeaveGroup; m2 (next in line) becomes the leader
    yield _Records(t, s.group, [g.rebalance(t, [m2, m3])])
    yield from phase(t, w.at(0.60), [m2, m3], 8)
    t = w.at(0.60)
    m1b = s.classic_member(m1.client_id, "java", topics, host=m1.host)  # restarted process
    yield _Records(t, s.group, [g.rebalance(t, [m2, m3, m1b])])
    yield from phase(t, w.at(0.995), [m2, m3, m1b], 16)


def _billing_batch(w: _World) -> Iterator[_Event]:
    s = _Story(w, "billing-batch")
    g = _Classic(s, "range")
    topics = ["payments", "ledger"]
    w1, w2, w3 = (s.classic_member(f"billing-{n}", "python", topics) for n in ("w1", "w2", "w3"))

    def phase(t0: int, t1: int, members: list[_Member], k: float) -> Iterator[_Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned,
                               lambda m: f"{m.client_id}@gen{g.generation}", epochs=False,
                               spacing=6)

    t = w.at(0.05)
    ops = [g.created(t)]
    ops.append(g.rebalance(t, [w1]))  # both records in one batch happens too (golden a-kip70)
    yield _Records(t, s.group, ops)
    yield from phase(t, w.at(0.12), [w1], 3)
    t = w.at(0.12)
    yield _Records(t, s.group, [g.rebalance(t, [w1, w2])])
    yield from phase(t, w.at(0.20), [w1, w2], 3)
    t = w.at(0.20)
    yield _Records(t, s.group, [g.rebalance(t, [w1])])
    yield from phase(t, w.at(0.25), [w1], 2)
    t = w.at(0.25)
    yield _Records(t, s.group, [g.empty(t)])
    t = w.at(0.50)
    yield _Records(t, s.group, [g.rebalance(t, [w3])])
    yield from phase(t, w.at(0.55), [w3], 2)
    t = w.at(0.55)
    yield _Records(t, s.group, [g.empty(t)])


def _payments_static(w: _World) -> Iterator[_Event]:
    s = _Story(w, "payments-static")
    g = _Classic(s, "sticky")
    topics = ["payments"]
    s0 = s.classic_member("payments-static-c0", "python", topics,
                          instance_id="payments-static-0", session_timeout=30000)
    s1 = s.classic_member("payments-static-c1", "python", topics,
                          instance_id="payments-static-1", session_timeout=30000)
    rng = s.rng
    suffix = {s0.member_id: "", s1.member_id: ""}

    def phase(t0: int, t1: int, members: list[_Member], k: float) -> Iterator[_Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned,
                               lambda m: f"static {m.client_id}{suffix[m.member_id]}",
                               epochs=False)

    t = w.at(0.10)
    yield _Records(t, s.group, [g.created(t), g.rebalance(t, [s0])])
    t += rng.randint(400, 900)
    yield _Records(t, s.group, [g.rebalance(t, [s0, s1])])
    g.state_ts = t + rng.randint(5, 15)  # Stable once the leader's SyncGroup completes
    yield from phase(t + 20, w.at(0.40), [s0, s1], 10)
    # s1's process dies without LeaveGroup (static members don't send it) and restarts with
    # the same group.instance.id: the broker swaps the member id, no rebalance.
    t = w.at(0.40) + rng.randint(2000, 8000)
    s1b = s.classic_member("payments-static-c1b", "python", topics,
                           instance_id="payments-static-1", session_timeout=30000, host=s1.host)
    yield _Records(t, s.group, [g.replace_static(t, s1, s1b)])
    suffix[s1b.member_id] = " restarted"
    yield from phase(t, w.at(0.995), [s0, s1b], 15)


def _kip70(w: _World) -> Iterator[_Event]:
    s = _Story(w, "kip70-analytics")
    g = _Classic(s, "range")
    rng = s.rng
    m = s.classic_member("kip70-c1", "python", ["foo"])
    t = w.at(0.08)
    yield _Records(t, s.group, [g.created(t), g.rebalance(t, [m])])
    for ts in w.ticks(rng, t, w.at(0.20), w.rounds(4)):
        yield s.commit(ts, g.owned(m), "subscription=[foo]", epochs=False)
    t = w.at(0.20)
    m.topics = ["foo", "bar"]  # subscribe() again with one more topic: KIP-70 rejoin
    yield _Records(t, s.group, [g.rebalance(t, [m])])
    for ts in w.ticks(rng, t, w.at(0.995), w.rounds(10)):
        yield s.commit(ts, g.owned(m), "subscription=[foo,bar]", epochs=False)


def _events_etl(w: _World) -> Iterator[_Event]:
    s = _Story(w, "events-etl")
    g = _Classic(s, "roundrobin")
    rng = s.rng
    r1, r2, r3 = (s.classic_member(f"events-etl-{i}", "rdkafka", ["events"]) for i in (1, 2, 3))

    def phase(t0: int, t1: int, members: list[_Member], k: float) -> Iterator[_Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned, lambda m: "", epochs=True,
                               spacing=7)

    t = w.at(0.0) + 500
    yield _Records(t, s.group, [g.created(t)])
    t += rng.randint(15, 40)
    yield _Records(t, s.group, [g.rebalance(t, [r1])])
    yield from phase(t, w.at(0.03), [r1], 2)
    t = w.at(0.03)
    yield _Records(t, s.group, [g.rebalance(t, [r1, r2])])
    yield from phase(t, w.at(0.50), [r1, r2], 70)
    t = w.at(0.50)
    yield _Records(t, s.group, [g.rebalance(t, [r1, r2, r3])])
    yield from phase(t, w.at(0.995), [r1, r2, r3], 75)


def _spark_ingest(w: _World) -> Iterator[_Event]:
    s = _Story(w, "spark-ingest")
    tps = w.tps(["spark-src"])
    for batch_id, ts in enumerate(w.ticks(s.rng, w.at(0.02), w.at(0.995), w.rounds(40))):
        md = json.dumps({"batchId": batch_id, "source": "spark-src"}, separators=(",", ":"))
        yield s.commit(ts, tps, md, epochs=False)


def _flink_checkpoints(w: _World) -> Iterator[_Event]:
    s = _Story(w, "flink-checkpoints")
    tps = w.tps(["orders"])
    for ts in w.ticks(s.rng, w.at(0.10), w.at(0.90), w.rounds(20)):
        yield s.commit(ts, tps, "", epochs=True)


def _txn_pipeline(w: _World) -> Iterator[_Event]:
    s = _Story(w, "txn-pipeline")
    g = _Classic(s, "range")
    rng = s.rng
    c = s.classic_member("consumer-txn-pipeline-1", "java", ["orders"])
    tps = w.tps(["orders"])
    pid, epoch = 1000 * rng.randint(1, 3) + rng.randrange(10), 0
    t = w.at(0.06)
    yield _Records(t, s.group, [g.created(t)])
    t += rng.randint(10, 30)
    yield _Records(t, s.group, [g.rebalance(t, [c])])
    for n, ts in enumerate(w.ticks(rng, t, w.at(0.60), w.rounds(20)), start=1):
        aborted = n % 7 == 0
        yield s.commit(ts, tps, f"txn-{n}" + ("-aborted" if aborted else ""), epochs=True,
                       txn=(pid, epoch))
        yield _Marker(ts + rng.randint(15, 60), s.group, (pid, epoch), not aborted)
    # The producer application restarts: InitProducerId bumps the epoch.
    epoch += 1
    t = w.at(0.60) + rng.randint(3000, 6000)

    def txn(t: int, parts: list[TP], md: str) -> _Commit:
        return s.commit(t, parts, md, epochs=True, txn=(pid, epoch))

    yield txn(t, tps, "txn-a")
    t += rng.randint(15, 60)
    yield _Marker(t, s.group, (pid, epoch), True)
    t += rng.randint(200, 400)
    yield txn(t, tps, "txn-b-aborted")
    t += rng.randint(10, 30)
    yield _Marker(t, s.group, (pid, epoch), False)
    # T-c: transactional offsets for orders-0..2, then -- while the transaction is open -- a
    # plain commitSync of orders-0 and orders-3. At COMMIT the pending orders-0 offset is
    # older (lower log offset) than the committed one and is dropped (spec 2.4 rule 3).
    t += rng.randint(200, 400)
    yield txn(t, tps[:3], "txn-c")
    t += rng.randint(5, 20)
    yield s.commit(t, [tps[0], tps[3]], "sync-during-txn-c", epochs=True)
    t += rng.randint(10, 30)
    yield _Marker(t, s.group, (pid, epoch), True)
    # T-d: a plain commit first, then the transaction: the transactional offset is newer.
    t += rng.randint(200, 400)
    yield s.commit(t, [tps[4]], "sync-before-txn-d", epochs=True)
    t += rng.randint(5, 20)
    yield txn(t, tps[4:], "txn-d")
    t += rng.randint(10, 30)
    yield _Marker(t, s.group, (pid, epoch), True)
    t += rng.randint(100, 300)
    yield _Records(t, s.group, [g.empty(t)])


def _txn_standalone(w: _World) -> Iterator[_Event]:
    s = _Story(w, "txn-standalone")
    rng = s.rng
    pid = 1000 * rng.randint(4, 6) + rng.randrange(10)
    p = w.tps(["payments"])
    t = w.at(0.30)
    yield s.commit(t, p[:2], "sa-commit", epochs=False, txn=(pid, 0))
    t += rng.randint(15, 40)
    yield _Marker(t, s.group, (pid, 0), True)
    t += rng.randint(20, 60)
    yield s.commit(t, p[1:], "sa-abort", epochs=False, txn=(pid, 0))
    t += rng.randint(15, 40)
    yield _Marker(t, s.group, (pid, 0), False)


def _reporting_offdel(w: _World) -> Iterator[_Event]:
    s = _Story(w, "reporting-offdel")
    g = _Classic(s, "range")
    rng = s.rng
    m = s.classic_member("offdel-c1", "python", ["orders", "payments"])
    t = w.at(0.22)
    yield _Records(t, s.group, [g.created(t), g.rebalance(t, [m])])
    for ts in w.ticks(rng, t, w.at(0.23), w.rounds(2)):
        yield s.commit(ts, g.owned(m), "before-offset-delete", epochs=False)
    t = w.at(0.23)
    yield _Records(t, s.group, [g.empty(t)])
    t += rng.randint(20, 80)
    gone = [("payments", p) for p in range(4)] + [("orders", 0)]
    yield _Records(t, s.group, [(1, {"group": s.group, "topic": tp[0], "partition": tp[1]}, None)
                                for tp in gone])


def _doomed_classic(w: _World) -> Iterator[_Event]:
    s = _Story(w, "doomed-classic")
    g = _Classic(s, "range")
    rng = s.rng
    m = s.classic_member("deleted-c1", "python", ["payments"])
    t = w.at(0.32)
    yield _Records(t, s.group, [g.created(t)])
    t += rng.randint(5, 15)
    yield _Records(t, s.group, [g.rebalance(t, [m])])
    for ts in w.ticks(rng, t, w.at(0.33), w.rounds(3)):
        yield s.commit(ts, g.owned(m), "doomed", epochs=False)
    t = w.at(0.33)
    yield _Records(t, s.group, [g.empty(t)])
    t = w.at(0.34)
    ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
        (1, {"group": s.group, "topic": tp[0], "partition": tp[1]}, None)
        for tp in (("payments", 0), ("payments", 2), ("payments", 1), ("payments", 3))]
    ops.append((2, {"group": s.group}, None))
    yield _Records(t, s.group, ops)


def _clicks_848(w: _World) -> Iterator[_Event]:
    s = _Story(w, "clicks-848")
    g = _Modern(s)
    m1 = s.kip848_member("consumer-clicks-848-1", ["clicks"])
    m2 = s.kip848_member("consumer-clicks-848-2", ["clicks"], instance_id="clicks-848-static-2")
    m3 = s.kip848_member("consumer-clicks-848-3", ["clicks"])

    def phase(t0: int, t1: int, members: list[_Member], k: float) -> Iterator[_Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned, lambda m: "", epochs=True)

    t = w.at(0.04)
    yield from g.join(t, m1)
    yield from phase(t + 1000, w.at(0.20), [m1], 6)
    t = w.at(0.20)
    yield from g.join(t, m2)
    yield from phase(t + 3000, w.at(0.55), [m1, m2], 8)
    t = w.at(0.55)
    yield from g.join(t, m3)
    yield from phase(t + 3000, w.at(0.995), [m1, m2, m3], 12)


def _inventory_848(w: _World) -> Iterator[_Event]:
    s = _Story(w, "inventory-848")
    g = _Modern(s)
    c1 = s.kip848_member("console-consumer", ["inventory"])
    c2 = s.kip848_member("console-consumer", ["inventory"])

    def phase(t0: int, t1: int, members: list[_Member], k: float) -> Iterator[_Event]:
        return s.commit_rounds(t0, t1, k, members, g.owned, lambda m: "", epochs=True)

    t = w.at(0.12)
    yield from g.join(t, c1)
    yield from phase(t + 1000, w.at(0.16), [c1], 3)
    t = w.at(0.16)
    yield from g.join(t, c2)
    yield from phase(t + 3000, w.at(0.25), [c1, c2], 3)
    t = w.at(0.25)
    yield from g.leave(t, c2)
    yield from phase(t + 4000, w.at(0.30), [c1], 2)
    t = w.at(0.30)
    yield from g.leave(t, c1)


def _doomed_848(w: _World) -> Iterator[_Event]:
    s = _Story(w, "doomed-848")
    g = _Modern(s)
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
    yield _Records(t, s.group, ops)


def _legacy_upgrade(w: _World) -> Iterator[_Event]:
    s = _Story(w, "legacy-upgrade")
    cg = _Classic(s, "range")
    rng = s.rng
    c = s.classic_member("upgrade-classic-c1", "python", ["bar"])
    t = w.at(0.42)
    yield _Records(t, s.group, [cg.created(t)])
    t += rng.randint(10, 30)
    yield _Records(t, s.group, [cg.rebalance(t, [c])])
    for ts in w.ticks(rng, t, w.at(0.43), w.rounds(2)):
        yield s.commit(ts, cg.owned(c), "classic-before-upgrade", epochs=False)
    t = w.at(0.43)
    yield _Records(t, s.group, [cg.empty(t)])
    # An Empty classic group is converted when a KIP-848 member joins it.
    g = _Modern(s)
    m = s.kip848_member("console-consumer", ["bar"])
    t = w.at(0.46)
    yield from g.join(t, m, before=[(2, {"group": s.group}, None)])
    for ts in w.ticks(rng, t + 1000, w.at(0.995), w.rounds(10)):
        yield s.commit(ts, g.owned(m), "", epochs=True)


def _mixed_migrate(w: _World) -> Iterator[_Event]:
    s = _Story(w, "mixed-migrate")
    cg = _Classic(s, "range")
    rng = s.rng
    c = s.classic_member("consumer-mixed-migrate-1", "java", ["inventory"])
    t = w.at(0.62)
    yield _Records(t, s.group, [cg.created(t), cg.rebalance(t, [c])])
    for ts in w.ticks(rng, t, w.at(0.64), w.rounds(2)):
        yield s.commit(ts, cg.owned(c), "classic-only", epochs=True)
    # Online upgrade: the classic member becomes a member of a consumer group, its JoinGroup
    # protocols kept as classicMemberMetadata; then the KIP-848 member's own join records.
    g = _Modern(s)
    sub = encode_subscription({"version": 0, "topics": ["inventory"], "user_data": b""})
    classic_md = {"session_timeout_ms": c.session_timeout, "supported_protocols": [
        {"name": "range", "metadata": sub}, {"name": "cooperative-sticky", "metadata": sub}]}
    g.members[c.member_id] = c
    g.epoch = g.assignment_epoch = 1
    g.target[c.member_id] = list(cg.owned(c))
    g.current[c.member_id] = _Current(1, 1, _STABLE, list(cg.owned(c)))
    conversion: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
        (2, {"group": s.group}, None),
        (5, g.mkey(c.member_id), g.member_value(c, classic_md)),
        (3, g.gkey(), {"epoch": 1}),
        (7, g.mkey(c.member_id), {"topic_partitions": g._tps(g.target[c.member_id])}),
        (6, g.gkey(), {"assignment_epoch": 1}),
        g.current_op(c.member_id),
    ]
    m = s.kip848_member("migrate-848-r1", ["inventory"], flavor="rdkafka")
    t = w.at(0.66)
    yield from g.join(t, m, before=conversion)
    for ts in w.ticks(rng, t + 6000, w.at(0.995), w.rounds(10)):
        yield s.commit(ts, g.owned(c), "mixed-classic-member", epochs=True)
        yield s.commit(ts + 9, g.owned(m), "mixed-848-member\x00", epochs=False)


def _audit_trail(w: _World) -> Iterator[_Event]:
    """Known anomalies and ownerless commits, recorded in ``w.audit`` as they are written."""
    s = _Story(w, "audit-trail")
    g = _Classic(s, "range")
    rng = s.rng
    a = s.classic_member("audit-consumer-a", "java", ["audit", "ledger"])
    tps = [("audit", 0)] + [("ledger", p) for p in range(4)]
    for i, tp in enumerate(tps):
        s.pos[tp], s.rate[tp] = 20_000 + 1_000 * i, 301
    last: dict[TP, int] = {}

    def note(ev: _Commit, attribution: str, member: _Member | None) -> _Commit:
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
    yield _Records(t, s.group, [g.created(t), g.rebalance(t, [a])])
    for ts in w.ticks(rng, t, w.at(0.52), 3):
        yield note(s.commit(ts, g.owned(a), "a@gen1", epochs=False), "owner", a)
    # the owner rewinds ledger-1 (reprocessing from an earlier offset) and goes on from there
    t = w.at(0.52)
    back = s.pos[("ledger", 1)] - 5_000
    s.pos[("ledger", 1)] = back
    yield note(_Commit(t, s.group, [("ledger", 1, back, -1, "a@gen1 reprocess")]), "owner", a)
    for ts in w.ticks(rng, t, w.at(0.54), 2):
        yield note(s.commit(ts, g.owned(a), "a@gen1", epochs=False), "owner", a)
    # a re-subscribes to [audit] only: the rebalance leaves ledger to nobody, yet its old
    # commit thread still commits ledger-2 (a zombie commit)
    a.topics = ["audit"]
    t = w.at(0.54)
    yield _Records(t, s.group, [g.rebalance(t, [a])])
    yield note(s.commit(t + 40, [("ledger", 2)], "a@gen1 late", epochs=False), "zombie", None)
    for ts in w.ticks(rng, t + 100, w.at(0.56), 2):
        yield note(s.commit(ts, g.owned(a), "a@gen2", epochs=False), "owner", a)
    # a leaves (Empty); an admin resets ledger to the earliest offset, then sets audit-0 to an
    # offset beyond the partition's log end (kafka-consumer-groups --reset-offsets --to-offset)
    t = w.at(0.56)
    yield _Records(t, s.group, [g.empty(t)])
    yield note(_Commit(t + 1_000, s.group, [("ledger", p, 0, -1, "") for p in range(4)]),
               "group_empty", None)
    floor = s.pos[("audit", 0)]
    beyond = floor + 10_000
    yield note(_Commit(t + 2_000, s.group, [("audit", 0, beyond, -1, "")]), "group_empty", None)
    w.audit["anomalies"].append({"kind": "past_log_end", "group": s.group, "topic": "audit",
                                 "partition": 0, "committed_offset": beyond})
    w.audit["log_end_floor"].append({"topic": "audit", "partition": 0, "offset": floor})


_STORY_FUNCS = (
    _events_etl, _orders_processor, _spark_ingest, _clicks_848, _billing_batch, _txn_pipeline,
    _kip70, _payments_static, _flink_checkpoints, _inventory_848, _reporting_offdel,
    _txn_standalone, _doomed_classic, _doomed_848, _legacy_upgrade, _mixed_migrate, _audit_trail,
)


# --------------------------------------------------------------------------------------------
# Expected state: the coordinator's replay rules applied to the events (not to the bytes)
# --------------------------------------------------------------------------------------------


class _Expected:
    """Replay model (spec 2.2-2.5) fed with the simulation's events as they are logged."""

    def __init__(self) -> None:
        # key -> (offset, leader epoch, metadata, log offset of the record)
        self.committed: dict[tuple[str, str, int], tuple[int, int, str, int]] = {}
        self.pending: dict[int, dict[tuple[str, str, int], tuple[int, int, str, int]]] = {}
        self.classic: dict[str, tuple[dict[str, Any], int]] = {}
        self.modern: dict[str, dict[tuple[int, str], tuple[dict[str, Any], int]]] = {}
        self.group_tombstone: dict[str, int] = {}
        self.last_offset_value: dict[str, int] = {}
        self.partition: dict[str, int] = {}
        self.aborted: list[AbortedCommit] = []

    def offset_value(self, key: tuple[str, str, int], v: tuple[int, int, str, int],
                     txn: tuple[int, int] | None) -> None:
        if txn is None:
            self.committed[key] = v
        else:
            self.pending.setdefault(txn[0], {})[key] = v
        self.last_offset_value[key[0]] = v[3]

    def offset_tombstone(self, key: tuple[str, str, int]) -> None:
        self.committed.pop(key, None)
        for pend in self.pending.values():
            pend.pop(key, None)

    def marker(self, producer_id: int, commit: bool) -> None:
        pend = self.pending.pop(producer_id, {})
        for key, v in pend.items():
            if not commit:
                self.aborted.append(AbortedCommit(key[0], key[1], key[2], v[0], v[2], producer_id))
                continue
            cur = self.committed.get(key)
            if cur is None or v[3] > cur[3]:
                self.committed[key] = v

    def group_record(self, record_type: int, key: dict[str, Any],
                     value: dict[str, Any] | None, position: int) -> None:
        if record_type == 2:
            g = key["group"]
            if value is None:
                self.classic.pop(g, None)
                self.group_tombstone[g] = position
            else:
                self.classic[g] = (value, position)
            return
        g = key["group_id"]
        recs = self.modern.setdefault(g, {})
        sub = key.get("member_id", "")
        if value is None:
            recs.pop((record_type, sub), None)
            if record_type == 3:
                self.group_tombstone[g] = position
        else:
            recs[(record_type, sub)] = (value, position)

    # ---------------------------------------------------------------------------- results

    def final_committed(self) -> dict[tuple[str, str, int], Committed]:
        return {k: Committed(v[0], v[1], v[2]) for k, v in sorted(self.committed.items())}

    def final_groups(self, w: _World) -> tuple[dict[str, dict[str, Any]], list[str]]:
        names = {t.topic_id: t.name for t in w.topics.values()}
        groups: dict[str, dict[str, Any]] = {}
        deleted = []
        for g in sorted(self.partition):
            classic = self.classic.get(g)
            modern = self.modern.get(g, {})
            modern_live = (3, "") in modern
            modern_pos = max((pos for _, pos in modern.values()), default=-1)
            if classic and (not modern_live or classic[1] > modern_pos):
                groups[g] = self._classic_group(g, classic[0])
            elif modern_live:
                groups[g] = self._consumer_group(g, modern, names)
            elif self.last_offset_value.get(g, -1) > self.group_tombstone.get(g, -1):
                groups[g] = {"group_type": "simple", "state": "Empty", "protocol_type": "",
                             "protocol": None, "generation": None, "leader": None,
                             "members": []}
            else:
                deleted.append(g)
                continue
            groups[g]["offsets_partition"] = self.partition[g]
            groups[g]["story"] = STORIES[g]
        return groups, deleted

    @staticmethod
    def _classic_group(g: str, v: dict[str, Any]) -> dict[str, Any]:
        members = [{
            "member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
            "client_id": m["client_id"], "client_host": m["client_host"],
            "subscribed_topics": sorted(m["subscription"]["topics"]),
            "assignment": {e["topic"]: e["partitions"]
                           for e in m["assignment"]["assigned_partitions"]},
        } for m in v["members"]]
        return {"group_type": "classic", "state": "Stable" if members else "Empty",
                "protocol_type": v["protocol_type"], "protocol": v["protocol"],
                "generation": v["generation"], "leader": v["leader"], "members": members}

    @staticmethod
    def _consumer_group(g: str, recs: dict[tuple[int, str], tuple[dict[str, Any], int]],
                        names: dict[str, str]) -> dict[str, Any]:
        epoch = recs[(3, "")][0]["epoch"]
        target = recs.get((6, ""))
        assignment_epoch = target[0]["assignment_epoch"] if target else None
        mids = sorted({sub for (rtype, sub) in recs if rtype in (5, 8) and sub})
        members = []
        state = "Empty" if not mids else "Stable"
        for mid in mids:
            meta = recs.get((5, mid), ({}, 0))[0]
            cur = recs.get((8, mid), ({}, 0))[0]
            target = recs.get((7, mid), ({}, 0))[0]
            if cur.get("member_epoch") != assignment_epoch or cur.get("state") != _STABLE:
                state = "Reconciling"
            members.append({
                "member_id": mid, "group_instance_id": meta.get("instance_id"),
                "client_id": meta.get("client_id"), "client_host": meta.get("client_host"),
                "subscribed_topics": sorted(meta.get("subscribed_topic_names") or ()),
                "classic_protocol": meta.get("classic_member_metadata") is not None,
                "member_epoch": cur.get("member_epoch"),
                "assignment": {names[e["topic_id"]]: e["partitions"]
                               for e in cur.get("assigned_partitions", ())},
                "target_assignment": {names[e["topic_id"]]: e["partitions"]
                                      for e in target.get("topic_partitions", ())},
            })
        if mids and assignment_epoch is not None and epoch > assignment_epoch:
            state = "Assigning"
        return {"group_type": "consumer", "state": state, "protocol_type": "consumer",
                "assignor": "uniform", "group_epoch": epoch,
                "assignment_epoch": assignment_epoch, "members": members}


# --------------------------------------------------------------------------------------------
# The log: events -> batches -> segment files, plus counting
# --------------------------------------------------------------------------------------------


class _Log:
    """Turns events into v2 batches in the right partition and feeds the expected state."""

    def __init__(self, out_dir: Path, w: _World, num_partitions: int, codecs: list[str],
                 segment_bytes: int) -> None:
        self.w = w
        self.n = num_partitions
        self.codecs = codecs
        self.segment_bytes = segment_bytes
        self.writers = [SegmentWriter(out_dir, p) for p in range(num_partitions)]
        self.sizes = [0] * num_partitions
        self.expected = _Expected()
        self.keys: dict[tuple[str, str, int], bytes] = {}
        self.parts: dict[str, int] = {}
        self.last_ts = w.start
        self.batches = [0] * num_partitions
        self.records = [0] * num_partitions
        self.by_type: dict[int, int] = {}
        self.tombstones: dict[int, int] = {}
        self.txn_records = 0
        self.markers = {"COMMIT": 0, "ABORT": 0}

    def close(self) -> None:
        for wr in self.writers:
            wr.close()

    def partition(self, group: str) -> int:
        p = self.parts.get(group)
        if p is None:
            p = self.parts[group] = partition_for(group, self.n)
            self.expected.partition[group] = p
        return p

    def _write(self, p: int, data: bytes, next_offset: int) -> None:
        wr = self.writers[p]
        if self.sizes[p] and self.sizes[p] + len(data) > self.segment_bytes:
            wr.roll()
            self.sizes[p] = 0
        wr.write_raw(data, next_offset)
        self.sizes[p] += len(data)
        self.batches[p] += 1

    def emit(self, ev: _Event) -> None:
        if ev.ts < self.last_ts:
            raise AssertionError(f"event for {ev.group} goes back in time: {ev.ts} < {self.last_ts}")
        self.last_ts = ev.ts
        p = self.partition(ev.group)
        phase = self.w.phase(ev.ts)
        if isinstance(ev, _Commit):
            self._commit(p, phase, ev)
        elif isinstance(ev, _Records):
            self._records(p, phase, ev)
        else:
            self._marker(p, phase, ev)

    def _commit(self, p: int, phase: int, ev: _Commit) -> None:
        """The hot path: keys are cached with their length prefix, OffsetCommitValue v3 is
        packed directly and uncompressed batches are framed by :func:`_commit_batch`."""
        wr = self.writers[p]
        base = wr.next_offset
        ts = ev.ts
        g = ev.group
        keys = self.keys
        exp = self.expected
        committed = exp.committed
        txn = ev.txn
        pending = exp.pending.setdefault(txn[0], {}) if txn else None
        pairs = []
        pack_head = _OC_V3_HEAD.pack
        tail = _Q.pack(ts)
        off = base
        last_md, mdb = None, b""
        for topic, part, offset, le, md in ev.entries:
            kk = (g, topic, part)
            key = keys.get(kk)
            if key is None:
                key = keys[kk] = encode_key(1, {"group": g, "topic": topic, "partition": part})
            if md is not last_md:
                last_md, mdb = md, md.encode()
            pairs.append((key, pack_head(3, offset, le, len(mdb)) + mdb + tail))
            if pending is None:
                committed[kk] = (offset, le, md, off)
            else:
                pending[kk] = (offset, le, md, off)
            off += 1
        exp.last_offset_value[g] = off - 1
        pid, pepoch = txn if txn else (-1, -1)
        codec = self._codec(phase)
        data = _commit_batch(pairs, base, ts, phase, pid, pepoch) if codec == "none" else None
        if data is None:
            data = encode_batch([NewRecord(base + i, ts, k, v) for i, (k, v) in enumerate(pairs)],
                                base_offset=base, compression=codec, partition_leader_epoch=phase,
                                producer_id=pid, producer_epoch=pepoch, base_sequence=0,
                                is_transactional=txn is not None)
        self._write(p, data, off)
        n = len(pairs)
        self.records[p] += n
        self.by_type[1] = self.by_type.get(1, 0) + n
        if txn:
            self.txn_records += n

    def _records(self, p: int, phase: int, ev: _Records) -> None:
        wr = self.writers[p]
        base = wr.next_offset
        recs = []
        for i, (rtype, key, value) in enumerate(ev.ops):
            kb = encode_key(rtype, key)
            vb = None if value is None else encode_value(rtype, 3 if rtype <= 2 else 0, value)
            recs.append(NewRecord(base + i, ev.ts, kb, vb))
            self.by_type[rtype] = self.by_type.get(rtype, 0) + 1
            if value is None:
                self.tombstones[rtype] = self.tombstones.get(rtype, 0) + 1
            if rtype == 1:
                kk = (key["group"], key["topic"], key["partition"])
                if value is None:
                    self.expected.offset_tombstone(kk)
                else:
                    self.expected.offset_value(
                        kk, (value["offset"], value.get("leader_epoch", -1), value["metadata"],
                             base + i), None)
            else:
                self.expected.group_record(rtype, key, value, base + i)
        data = encode_batch(recs, base_offset=base, compression=self._codec(phase),
                            partition_leader_epoch=phase, base_sequence=0)
        self._write(p, data, base + len(recs))
        self.records[p] += len(recs)

    def _marker(self, p: int, phase: int, ev: _Marker) -> None:
        off = self.writers[p].next_offset
        kind = "COMMIT" if ev.commit else "ABORT"
        data = encode_control_batch(kind, offset=off, producer_id=ev.producer[0],
                                    producer_epoch=ev.producer[1], timestamp=ev.ts,
                                    coordinator_epoch=phase, partition_leader_epoch=phase)
        self._write(p, data, off + 1)
        self.records[p] += 1
        self.markers[kind] += 1
        self.expected.marker(ev.producer[0], ev.commit)

    def _codec(self, phase: int) -> str:
        return self.codecs[min(phase, len(self.codecs) - 1)]

    def counts(self) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
        control = sum(self.markers.values())
        total = sum(self.records)
        counts = {
            "records": total,
            "data_records": total - control,
            "control_records": control,
            "commit_markers": self.markers["COMMIT"],
            "abort_markers": self.markers["ABORT"],
            "batches": sum(self.batches),
            "bytes": sum(f.stat().st_size for wr in self.writers for f in wr.paths),
            "transactional_data_records": self.txn_records,
            "records_by_type": {str(k): v for k, v in sorted(self.by_type.items())},
            "tombstones_by_type": {str(k): v for k, v in sorted(self.tombstones.items())},
        }
        groups_in: dict[int, list[str]] = {}
        for g, p in sorted(self.parts.items()):
            groups_in.setdefault(p, []).append(g)
        partitions = {
            p: {"records": self.records[p], "batches": self.batches[p],
                "next_offset": self.writers[p].next_offset,
                "segments": [f.name for f in self.writers[p].paths],
                "groups": groups_in.get(p, [])}
            for p in range(self.n)
        }
        return counts, partitions


def _commit_batch(pairs: list[tuple[bytes, bytes]], base_offset: int, ts: int,
                  partition_leader_epoch: int, producer_id: int, producer_epoch: int) -> bytes | None:
    """What :func:`encode_batch` makes of uncompressed same-timestamp records with base
    sequence 0 (transactional when there is a producer id), ~3x faster: no per-record varint
    loop, as generation speed is the point of ``scale``. None when a size is beyond the
    precomputed varints (then use encode_batch). ``tests/test_demo.py`` checks it byte for
    byte against ``encode_batch``."""
    zz = _ZZ
    parts = []
    try:
        for i, (key, value) in enumerate(pairs):
            # attributes 0, timestamp delta 0, offset delta i, key, value, no headers
            body = b"".join((b"\x00\x00", zz[i], zz[len(key)], key, zz[len(value)], value,
                             b"\x00"))
            parts.append(zz[len(body)])
            parts.append(body)
    except IndexError:
        return None
    records = b"".join(parts)
    n = len(pairs)
    tail = _V2_TAIL.pack(_ATTR_TRANSACTIONAL if producer_id >= 0 else 0, n - 1, ts, ts,
                         producer_id, producer_epoch, 0, n)
    crc = crc32c(records, crc32c(tail))
    head = _V2_HEAD.pack(base_offset, _V2_LENGTH_OVERHEAD + len(records),
                         partition_leader_epoch, 2, crc)
    return head + tail + records


# --------------------------------------------------------------------------------------------
# Live answers: what the brokers would answer right after the history ends
# --------------------------------------------------------------------------------------------

#: The recorded capture starts this long after the last record (its snapshot point).
CAPTURE_DELAY_MS = 5_000
#: Brokers of the simulated cluster; the coordinator of offsets partition p is broker p % 3.
_BROKERS = 3
_GROUP_ID_NOT_FOUND = 69
#: librdkafka's ConsumerGroupState names, as ``describe_consumer_groups`` prints them.
_RDKAFKA_STATES = {"Stable": "STABLE", "Empty": "EMPTY", "Dead": "DEAD",
                   "Assigning": "ASSIGNING", "Reconciling": "RECONCILING",
                   "PreparingRebalance": "PREPARING_REBALANCE",
                   "CompletingRebalance": "COMPLETING_REBALANCE"}
_SYNTHETIC = ("synthesized by pipelines.demo from the generator's bookkept state (its "
              "manifest), not captured from a broker and not decoded from the segments")


def _write_json(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _coordinator(offsets_partition: int) -> dict[str, Any]:
    broker = offsets_partition % _BROKERS
    return {"id": broker, "host": f"broker-{broker}.demo.invalid", "port": 9092}


def _tp_pairs(assignment: dict[str, list[int]] | None) -> list[list[Any]]:
    return [[t, p] for t, ps in sorted((assignment or {}).items()) for p in sorted(ps)]


def _classic_member_answer(m: dict[str, Any]) -> dict[str, Any]:
    """One DescribeGroups member: the consumer-protocol blobs as hex, plus their decoding.

    The blobs are re-encoded (version 0, no user data) from the bookkept subscription and
    assignment: the coordinator serves the bytes the client sent, which the manifest does
    not keep, but what they say is the same.
    """
    topics = list(m["subscribed_topics"])
    assigned = [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(m["assignment"].items())]
    metadata = encode_subscription({"version": 0, "topics": topics, "user_data": b""})
    assignment = encode_assignment({"version": 0, "assigned_partitions": assigned,
                                    "user_data": b""})
    return {
        "member_id": m["member_id"], "group_instance_id": m["group_instance_id"],
        "client_id": m["client_id"], "client_host": m["client_host"],
        "member_metadata": {"hex": metadata.hex()},
        "member_assignment": {"hex": assignment.hex()},
        "member_metadata_decoded": {"topics": topics, "user_data": {"hex": ""}},
        "member_assignment_decoded": {"assigned_partitions": assigned, "user_data": {"hex": ""}},
    }


def write_live_capture(manifest: DemoManifest, out_dir: Path | str | None = None) -> Path:
    """Write the cluster's answers at the end of the history as a recorded capture.

    Files (the formats of ``shared/corpus/golden/scenario-a``, which
    :func:`pipelines.reconcile.cluster.snapshot_from_recorded` reads): ``live/list_groups.json``
    (ListGroups v5), ``live/describe_groups.json`` (DescribeGroups v6, classic members with
    hex and decoded blobs; consumer groups answer GROUP_ID_NOT_FOUND as on a 4.0 broker),
    ``live/consumer_group_describe.json`` (librdkafka's describe_consumer_groups: KIP-848
    members and every group's coordinator), ``live/offset_fetch.json`` and
    ``live/offset_fetch_require_stable.json`` (OffsetFetch v8, topics=null; equal, as the
    simulation ends every transaction), ``live/log_end_offsets.json`` and
    ``capture_log.json`` (the ``__consumer_offsets`` high watermarks read before the capture,
    which is the snapshot point, and its start time).

    Everything comes from ``manifest``: groups and members from the bookkept group state,
    offsets from the bookkept committed offsets, high watermarks from the log writers' next
    offsets. Producers are not simulated, so a user partition's log end offset is the
    furthest position any group committed (aborted ones included) plus a seeded slack.
    Returns the ``live`` directory.
    """
    root = Path(out_dir if out_dir is not None else manifest.out_dir)
    live = root / "live"
    live.mkdir(parents=True, exist_ok=True)
    started_ms = manifest.end_ms + CAPTURE_DELAY_MS
    groups = sorted(manifest.groups.items())

    listed = [{"group_id": gid, "protocol_type": g["protocol_type"], "group_state": g["state"],
               "group_type": "consumer" if g["group_type"] == "consumer" else "classic"}
              for gid, g in groups]
    _write_json(live / "list_groups.json", {
        "_type": "ListGroupsResponse", "_version": 5, "throttle_time_ms": 0, "error_code": 0,
        "groups": listed, "_note": _SYNTHETIC})

    described = []
    for gid, g in groups:
        if g["group_type"] == "consumer":
            described.append({
                "error_code": _GROUP_ID_NOT_FOUND,
                "error_message": f"Group {gid} is not a classic group.", "group_id": gid,
                "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": None, "error_name": "GroupIdNotFoundError"})
            continue
        described.append({
            "error_code": 0, "error_message": None, "group_id": gid, "group_state": g["state"],
            "protocol_type": g["protocol_type"],
            "protocol_data": (g["protocol"] or "") if g["members"] else "",
            "members": [_classic_member_answer(m) for m in g["members"]],
            "authorized_operations": None, "error_name": "NoError"})
    _write_json(live / "describe_groups.json", {
        "_type": "DescribeGroupsResponse", "_version": 6, "throttle_time_ms": 0,
        "groups": described, "_note": _SYNTHETIC})

    cgd: dict[str, Any] = {}
    for gid, g in groups:
        modern = g["group_type"] == "consumer"
        cgd[gid] = {
            "group_id": gid, "is_simple_consumer_group": g["group_type"] == "simple",
            "state": _RDKAFKA_STATES.get(g["state"], "UNKNOWN"),
            "type": "CONSUMER" if modern else "CLASSIC",
            "partition_assignor": g["assignor"] if modern else (
                (g["protocol"] or "") if g["members"] else ""),
            "coordinator": _coordinator(g["offsets_partition"]),
            "members": [{
                "member_id": m["member_id"], "client_id": m["client_id"],
                "host": m["client_host"], "group_instance_id": m["group_instance_id"],
                "assignment": _tp_pairs(m["assignment"]),
                "target_assignment": _tp_pairs(m["target_assignment"]) if modern else None,
            } for m in g["members"]],
        }
    cgd["_note"] = _SYNTHETIC
    _write_json(live / "consumer_group_describe.json", cgd)

    by_group: dict[str, dict[str, list[tuple[int, Committed]]]] = {}
    for (gid, topic, partition), c in sorted(manifest.committed.items()):
        by_group.setdefault(gid, {}).setdefault(topic, []).append((partition, c))
    for require_stable, name in ((False, "offset_fetch.json"),
                                 (True, "offset_fetch_require_stable.json")):
        _write_json(live / name, {
            "_type": "OffsetFetchResponse", "_version": 8, "throttle_time_ms": 0,
            "groups": [{
                "group_id": gid,
                "topics": [{"name": topic, "partitions": [{
                    "partition_index": partition, "committed_offset": c.offset,
                    "committed_leader_epoch": c.leader_epoch, "metadata": c.metadata,
                    "error_code": 0, "error_name": "NoError"} for partition, c in parts]}
                    for topic, parts in sorted(by_group.get(gid, {}).items())],
                "error_code": 0, "error_name": "NoError"} for gid, _ in groups],
            "_note": f"OffsetFetch v8, topics=null for every group listed by ListGroups; "
                     f"require_stable={require_stable}; {_SYNTHETIC}"})

    furthest: dict[TP, int] = {}
    floors = {(f["topic"], f["partition"]): f["offset"] for f in manifest.audit.get("log_end_floor", ())}
    for (_, topic, partition), c in manifest.committed.items():
        offset = min(c.offset, floors.get((topic, partition), c.offset))  # beyond the end: not the end
        furthest[(topic, partition)] = max(furthest.get((topic, partition), 0), offset)
    for a in manifest.aborted:
        furthest[(a.topic, a.partition)] = max(furthest.get((a.topic, a.partition), 0), a.offset)
    rng = random.Random(f"offsetlake-demo/{manifest.seed}/log-end-offsets")
    ends: dict[str, dict[str, dict[str, int]]] = {}
    for topic, info in sorted(manifest.topics.items()):
        for partition in range(info["partitions"]):
            leo = furthest.get((topic, partition), 0) + rng.randint(0, 400)
            ends.setdefault(topic, {})[str(partition)] = {
                "log_start_offset": 0, "log_end_offset": leo, "last_stable_offset": leo}
    _write_json(live / "log_end_offsets.json", ends)

    started = datetime.fromtimestamp(started_ms / 1000, tz=timezone.utc)
    _write_json(root / "capture_log.json", {
        "started": started.strftime("%Y-%m-%dT%H:%M:%S+0000"), "started_ms": started_ms,
        "offsets_partitions": sorted(manifest.partitions),
        "co_end_offsets_before": {
            str(p): {"log_start_offset": 0, "high_watermark": info["next_offset"],
                     "last_stable_offset": info["next_offset"]}
            for p, info in sorted(manifest.partitions.items())},
        "groups": [gid for gid, _ in groups],
        "brokers": [_coordinator(b)["host"] for b in range(_BROKERS)],
        "_note": _SYNTHETIC,
    })
    return live


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def generate_cluster(
    out_dir: Path | str,
    *,
    num_partitions: int = 10,
    seed: int = 7,
    scale: int = 1,
    start_ms: int | None = None,
    compression: str | Sequence[str] = "none",
    segment_bytes: int = SEGMENT_BYTES,
    live: bool = True,
) -> DemoManifest:
    """Write a simulated cluster's ``__consumer_offsets`` log under ``out_dir`` and return
    what was written with the state the coordinator would rebuild from it.

    ``scale`` multiplies the commit rounds (about 5,000 records per unit); everything else
    (joins, rebalances, transactions, deletions) happens once. ``compression`` is one codec
    for every data batch or one per broker phase (the golden capture switched none -> gzip
    -> zstd across two restarts); control batches are never compressed, as on a broker.
    Existing files in ``out_dir`` partition directories are overwritten.

    ``live`` also writes the brokers' answers at the end of the history as a recorded
    capture under ``out_dir/live`` (:func:`write_live_capture`).
    """
    if scale < 1:
        raise ValueError(f"scale must be >= 1, got {scale}")
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    codecs = [compression] if isinstance(compression, str) else list(compression)
    if not codecs or any(c not in CODEC_NAMES for c in codecs):
        raise ValueError(f"compression must be among {CODEC_NAMES}, got {compression!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    w = _World(seed, scale, DEFAULT_START_MS if start_ms is None else start_ms)
    log = _Log(out, w, num_partitions, codecs, segment_bytes)
    try:
        for ev in heapq.merge(*(f(w) for f in _STORY_FUNCS), key=lambda e: e.ts):
            log.emit(ev)
    finally:
        log.close()
    if any(log.expected.pending.values()):
        # The live answers take LSO == high watermark and require_stable == plain fetch.
        raise AssertionError("a story left a transaction open; the live capture assumes none")
    groups, deleted = log.expected.final_groups(w)
    counts, partitions = log.counts()
    manifest = DemoManifest(
        out_dir=str(out), num_partitions=num_partitions, seed=seed, scale=scale,
        start_ms=w.start, end_ms=log.last_ts, compression=codecs,
        topics={t.name: {"topic_id": t.topic_id, "partitions": t.partitions}
                for t in w.topics.values()},
        broker_restarts_ms=list(w.restarts), stories=dict(STORIES), groups=groups,
        deleted_groups=deleted, committed=log.expected.final_committed(),
        aborted=list(log.expected.aborted), counts=counts, partitions=partitions, audit=w.audit,
    )
    if live:
        write_live_capture(manifest, out)
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pipelines.demo OUT_DIR [--partitions N] [--scale S] [--seed N]``."""
    ap = argparse.ArgumentParser(prog="python -m pipelines.demo", description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--partitions", type=int, default=10, help="__consumer_offsets partitions")
    ap.add_argument("--scale", type=int, default=1, help="multiplies the commit rounds")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--start-ms", type=int, default=None)
    ap.add_argument("--compression", default="none",
                    help="codec, or comma-separated codecs per broker phase (e.g. none,gzip,zstd)")
    ap.add_argument("--manifest", type=Path, default=None,
                    help="where to write the manifest JSON (default OUT_DIR/demo-manifest.json)")
    args = ap.parse_args(argv)
    codecs = args.compression.split(",")
    began, began_cpu = time.perf_counter(), time.process_time()
    manifest = generate_cluster(args.out_dir, num_partitions=args.partitions, seed=args.seed,
                                scale=args.scale, start_ms=args.start_ms,
                                compression=codecs[0] if len(codecs) == 1 else codecs)
    secs, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    path = manifest.write_manifest(args.manifest or args.out_dir / "demo-manifest.json")
    n = manifest.counts["records"]
    print(manifest.summary())
    print(f"generated in {secs:.2f} s wall / {cpu:.2f} s CPU ({n / secs:,.0f} records/s wall, "
          f"{n / max(cpu, 1e-9):,.0f} records/s CPU); manifest: {path}; live answers: "
          f"{args.out_dir / 'live'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
