"""A KIP-848 consumer group: group epoch, target and current assignments (records 3-8).

Why: the new protocol's records come in a fixed order per heartbeat (member metadata,
partition metadata, group epoch, target members, target epoch, current assignment) and
members reconcile through the UNREVOKED/UNRELEASED states; this model writes them that way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.decode.formats import EXPLICIT_DEFAULT_TAGS
from pipelines.demo.assignors import group_partitions, sticky_assign
from pipelines.demo.world import TP, Event, Member, Records, Story

__all__ = ["STABLE", "UNRELEASED", "UNREVOKED", "ConsumerGroup", "MemberCurrent"]

STABLE, UNREVOKED, UNRELEASED = 0, 1, 2  # KIP-848 member states (spec 1.7)


@dataclass
class MemberCurrent:
    epoch: int
    previous: int
    state: int
    assigned: list[TP]
    pending: list[TP] = field(default_factory=list)


class ConsumerGroup:
    """A KIP-848 consumer group: epochs, target and current assignments (records 3-8)."""

    def __init__(self, story: Story) -> None:
        self.s = story
        self.epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member] = {}
        self.target: dict[str, list[TP]] = {}
        self.current: dict[str, MemberCurrent] = {}
        self.meta_topics: tuple[str, ...] = ()

    def gkey(self) -> dict[str, Any]:
        return {"group_id": self.s.group}

    def mkey(self, mid: str) -> dict[str, Any]:
        return {"group_id": self.s.group, "member_id": mid}

    def partitions_by_id(self, tps: Iterable[TP]) -> list[dict[str, Any]]:
        topics = self.s.w.topics
        return [{"topic_id": topics[e["topic"]].topic_id, "partitions": e["partitions"]}
                for e in group_partitions(tps)]

    def member_value(self, m: Member, classic: dict[str, Any] | None = None) -> dict[str, Any]:
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
            "assigned_partitions": self.partitions_by_id(c.assigned),
            "partitions_pending_revocation": self.partitions_by_id(c.pending)})

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
        new = sticky_assign(mids, tps, self.target)
        changed = [m for m in mids if new[m] != self.target.get(m)]
        self.target = new
        self.assignment_epoch = self.epoch
        ops: list[tuple[int, dict[str, Any], dict[str, Any]]] = [
            (7, self.mkey(m), {"topic_partitions": self.partitions_by_id(new[m])}) for m in changed]
        ops.append((6, self.gkey(), {"assignment_epoch": self.epoch}))
        return ops

    def join(self, ts: int, m: Member, *, before: Sequence[tuple[int, dict[str, Any], dict[str, Any] | None]] = ()) -> Iterator[Event]:
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
        state = STABLE if len(free) == len(mine) else UNRELEASED
        self.current[m.member_id] = MemberCurrent(self.epoch, 0, state, free)
        ops.append(self.current_op(m.member_id))
        yield Records(ts, self.s.group, ops)
        yield from self._reconcile(ts)

    def _reconcile(self, ts: int) -> Iterator[Event]:
        """Members revoke what left their target, then everybody reaches the target epoch."""
        rng = self.s.rng
        t = ts
        revoking = []
        for mid, c in self.current.items():
            if c.epoch == self.epoch:
                continue
            lost = [tp for tp in c.assigned if tp not in self.target[mid]]
            if lost:
                c.previous, c.state = c.epoch, UNREVOKED
                c.assigned = [tp for tp in c.assigned if tp in self.target[mid]]
                c.pending = lost
                t += rng.randint(80, 600)
                yield Records(t, self.s.group, [self.current_op(mid)])
                revoking.append(mid)
        for mid, c in self.current.items():
            if c.epoch == self.epoch and c.state == STABLE:
                continue
            c.previous = c.epoch  # a lagging member's old epoch, or an unreleased member's
            c.epoch, c.state, c.assigned, c.pending = self.epoch, STABLE, list(self.target[mid]), []
            t += rng.randint(20, 400)
            yield Records(t, self.s.group, [self.current_op(mid)])

    def leave(self, ts: int, m: Member) -> Iterator[Event]:
        """Heartbeat with epoch -1: member records tombstoned, then the group epoch bump; the
        remaining members get a new target on their next heartbeat."""
        mid = m.member_id
        del self.members[mid], self.current[mid], self.target[mid]
        ops: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = [
            (8, self.mkey(mid), None), (7, self.mkey(mid), None), (5, self.mkey(mid), None)]
        ops += self._metadata_ops()
        self.epoch += 1
        ops.append((3, self.gkey(), {"epoch": self.epoch}))
        yield Records(ts, self.s.group, ops)
        if not self.members:
            return
        t = ts + self.s.rng.randint(500, 3000)
        ops = self._new_target()
        for mid2, c in self.current.items():
            if self.target[mid2] != c.assigned or c.epoch != self.epoch:
                self.current[mid2] = MemberCurrent(self.epoch, c.epoch, STABLE, list(self.target[mid2]))
                ops.append(self.current_op(mid2))
        yield Records(t, self.s.group, ops)

    def delete_ops(self) -> list[tuple[int, dict[str, Any], None]]:
        """DeleteGroups of an empty consumer group: target epoch, partition metadata, epoch."""
        return [(6, self.gkey(), None), (4, self.gkey(), None), (3, self.gkey(), None)]

    def commits(self, t0: int, t1: int, members: list[Member], per_scale: float) -> Iterator[Event]:
        """A stable phase: the members commit what they own, round after round, as the Java
        and librdkafka KIP-848 consumers do (empty metadata, leader epochs sent)."""
        return self.s.commit_rounds(t0, t1, per_scale, members, self.owned, lambda m: "",
                                    epochs=True)

    def owned(self, m: Member) -> list[TP]:
        c = self.current.get(m.member_id)
        return list(c.assigned) if c else []
