"""The expected state: the coordinator's replay rules applied to the events, not to the bytes.

Why: a decoder and replay checked against the files' own decoding would be checked against
themselves; this model is fed the simulation's events as they are logged (spec 2.2-2.5,
including the KIP-447 "older pending offset loses" rule), so the answer is independent.
"""

from __future__ import annotations

from typing import Any

from pipelines.demo.consumer import STABLE
from pipelines.demo.manifest import AbortedCommit, Committed
from pipelines.demo.stories import STORIES
from pipelines.demo.world import World

__all__ = ["Expected"]


class Expected:
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

    def final_groups(self, w: World, stories: dict[str, str] = STORIES
                     ) -> tuple[dict[str, dict[str, Any]], list[str]]:
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
            groups[g]["story"] = stories[g]
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
            if cur.get("member_epoch") != assignment_epoch or cur.get("state") != STABLE:
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
