"""A classic-protocol consumer group as its coordinator persists it (GroupMetadataValue v3).

Why: each completed rebalance, empty group and static-member replacement is one type-2
record whose members, subscriptions and assignment bytes depend on the client library; this
model produces those records in the order and shapes of the golden capture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pipelines.demo.assignors import (
    group_partitions,
    range_assign,
    roundrobin_assign,
    sticky_assign,
    sticky_user_data,
)
from pipelines.demo.world import TP, Event, Member, Records, Story

__all__ = ["ClassicGroup"]


class ClassicGroup:
    """A classic-protocol group as the coordinator persists it (GroupMetadataValue v3)."""

    def __init__(self, story: Story, protocol: str) -> None:
        self.s = story
        self.protocol = protocol
        self.generation = 0
        self.members: list[Member] = []
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

    def _subscription(self, m: Member) -> dict[str, Any]:
        prev = self.assignment.get(m.member_id)
        if m.flavor == "python":
            user_data = (sticky_user_data(prev, self.generation)
                         if self.protocol == "sticky" and prev else b"")
            return {"version": 0, "topics": list(m.topics), "user_data": user_data}
        if m.flavor == "rdkafka":
            return {"version": 3, "topics": list(m.topics), "user_data": b"",
                    "owned_partitions": [], "generation_id": -1, "rack_id": ""}
        # Java 4.0 consumer, eager assignor: owned partitions were revoked before rejoining.
        return {"version": 3, "topics": sorted(m.topics), "user_data": None,
                "owned_partitions": [], "generation_id": self.generation if prev else -1,
                "rack_id": None}

    def _assignment(self, m: Member) -> dict[str, Any]:
        java = m.flavor == "java"
        return {"version": 3 if java else 0,
                "assigned_partitions": group_partitions(self.assignment[m.member_id]),
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

    def rebalance(self, ts: int, members: list[Member]) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """A completed rebalance: the record written when the leader's SyncGroup lands."""
        self.subscription = {m.member_id: self._subscription(m) for m in members}
        self.members = list(members)
        if self.leader not in {m.member_id for m in members}:
            self.leader = members[0].member_id
        tps_of = {t: self.s.w.topics[t].partitions for m in members for t in m.topics}
        all_tps = self.s.w.tps(tps_of)
        if self.protocol == "range":
            new = range_assign(members, tps_of)
        elif self.protocol == "roundrobin":
            new = roundrobin_assign(members, all_tps)
        else:
            new = sticky_assign([m.member_id for m in members], all_tps, self.assignment)
        self.assignment = new
        self.generation += 1
        self.state_ts = max(self.state_ts, ts - self.s.rng.randint(2, 12))
        return (2, self.key(), self.value())

    def start(self, ts: int, members: list[Member], gap: tuple[int, int]) -> Iterator[Event]:
        """A new group's first JoinGroup round: the created record at ``ts``, then the first
        rebalance ``gap`` ms later (a random span, like a real SyncGroup); returns its time."""
        yield Records(ts, self.s.group, [self.created(ts)])
        ts += self.s.rng.randint(*gap)
        yield Records(ts, self.s.group, [self.rebalance(ts, members)])
        return ts

    def rebalances(self, steps: Sequence[tuple[int, int, list[Member], float]],
                   phase: Callable[[int, int, list[Member], float], Iterator[Event]],
                   ) -> Iterator[Event]:
        """A group's membership timeline: for each step ``(t0, t1, members, k)`` a rebalance
        to ``members`` at ``t0``, then their commit ``phase`` until ``t1`` (``k`` rounds)."""
        for t0, t1, members, k in steps:
            yield Records(t0, self.s.group, [self.rebalance(t0, members)])
            yield from phase(t0, t1, members, k)

    def empty(self, ts: int) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """The last member left: a new generation without protocol, leader or members."""
        self.members, self.assignment, self.subscription = [], {}, {}
        self.generation += 1
        self.state_ts = ts
        return (2, self.key(), self.value())

    def replace_static(self, ts: int, old: Member, new: Member) -> tuple[int, dict[str, Any], dict[str, Any]]:
        """A static member came back with a new member id: same generation, no rebalance;
        the broker keeps the old client id and subscription (golden a-static)."""
        new.client_id = old.client_id
        self.members = [new if m is old else m for m in self.members]
        self.assignment[new.member_id] = self.assignment.pop(old.member_id)
        self.subscription[new.member_id] = self.subscription.pop(old.member_id)
        if self.leader == old.member_id:
            self.leader = new.member_id
        return (2, self.key(), self.value())

    def owned(self, m: Member) -> list[TP]:
        return self.assignment.get(m.member_id, [])
