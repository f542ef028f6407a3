"""The keys each record of the ownership replay holds (:mod:`pipelines.state.ownership_runs`):
a member's (topic, partition) pairs as flat columns, from a KIP-848 assignment's value, a
streams member's tasks and its group's topology, or a classic generation's members.

Why apart: listing keys is one job (what a record holds), the runs over them another (when
each key's row opens and closes). Classic generations are listed from the columns the tasks
send (``classic_members``), without a Python object per member: on a group-heavy history
~84k classic records with ~2.5 members each, ~0.5 s of the driver's replay as objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# a row's attributes: group_instance_id, client_id, client_host, subscribed_topics
Attrs = tuple[Any, Any, Any, Any]
#: the keys a member holds in one record: its topics and, alike, its partitions
Owned = tuple[list[str], list[int]]


def member_attrs(member: dict[str, Any]) -> Attrs:
    """A KIP-848/streams member's metadata record as a row's attributes."""
    return (member.get("instance_id"), member.get("client_id"), member.get("client_host"),
            member.get("subscribed_topic_names"))


def member_owned(value: dict[str, Any], topic_names: dict[str, str]) -> Owned:
    """A KIP-848 member's partitions, assigned and pending revocation (a partition pending
    revocation is still the member's until it acknowledges the revocation), as the keys'
    topics and partitions (:func:`key_columns`'s placeholder for none)."""
    held = (*(value.get("assigned_partitions") or ()), *(value.get("partitions_pending_revocation") or ()))
    return held_keys(held, lambda tp: topic_names.get(tp["topic_id"], tp["topic_id"]))


def held_keys(held: Iterable[dict[str, Any]], topic_of: Callable[[dict[str, Any]], str]) -> Owned:
    """Assignment entries (a topic and its ``partitions``) as the keys' topics and partitions,
    one pass, no pair per key; none as :func:`key_columns`'s placeholder."""
    topics: list[str] = []
    partitions: list[int] = []
    for tp in held:
        numbers = tp["partitions"]
        topics += [topic_of(tp)] * len(numbers)
        partitions += numbers
    return (topics, partitions) if topics else key_columns([])


def streams_owned(value: dict[str, Any], topology: dict[str, Any] | None) -> list[tuple[str, int]]:
    """A streams member's active tasks (pending revocation included) as the source-topic
    partitions they read: task (subtopology s, partition p) reads partition p of every
    source and repartition-source topic of s (from the group's topology record)."""
    subtopologies = {st.get("subtopology_id"): st for st in (topology or {}).get("subtopologies") or ()}
    owned = []
    for task in [*(value.get("active_tasks") or ()), *(value.get("active_tasks_pending_revocation") or ())]:
        st = subtopologies.get(task.get("subtopology_id")) or {}
        topics = [*(st.get("source_topics") or ()),
                  *(t.get("name") for t in st.get("repartition_source_topics") or () if t.get("name"))]
        owned += [(t, p) for t in topics for p in task.get("partitions") or ()]
    return sorted(set(owned))


@dataclass
class KeyGroups:
    """Groups of keys (a member's in one record) as columns: per group its record, generation,
    member, attrs and number of keys; the keys' topics and partitions, group after group."""

    group_at: np.ndarray
    gen: np.ndarray
    member: pa.Array
    attr: np.ndarray
    count: np.ndarray
    key_topic: pa.Array
    key_partition: np.ndarray

    @staticmethod
    def concat(parts: list[KeyGroups]) -> KeyGroups:
        """``parts`` one after the other."""
        return KeyGroups(*(np.concatenate([getattr(p, f) for p in parts]) if f not in ("member", "key_topic")
                           else pa.concat_arrays([getattr(p, f) for p in parts]) for f in _FIELDS))

    def take(self, order: np.ndarray) -> KeyGroups:
        """The groups ``order`` lists, in that order, each with its keys."""
        starts = np.cumsum(self.count) - self.count
        taken = self.count[order]
        keys = np.repeat(starts[order] - (np.cumsum(taken) - taken), taken) + np.arange(int(taken.sum()))
        rows, at = pa.array(order, pa.int64()), pa.array(keys, pa.int64())
        return KeyGroups(self.group_at[order], self.gen[order], self.member.take(rows), self.attr[order], taken,
                         self.key_topic.take(at), self.key_partition[keys])


_FIELDS = ("group_at", "gen", "member", "attr", "count", "key_topic", "key_partition")


def lengths(lists: pa.Array) -> np.ndarray:
    """Each list's length (a null: none), as :meth:`pa.ListArray.flatten` lays them out."""
    return pc.fill_null(pc.list_value_length(lists), 0).to_numpy().astype(np.int64)


def key_columns(owned: list[tuple[str, int]]) -> Owned:
    """(topic, partition) pairs as a list of topics and one of partitions; none as the
    placeholder key ("", -1) that a member owning nothing has."""
    return ([t for t, _ in owned], [p for _, p in owned]) if owned else ([""], [-1])




def classic_key_groups(events: pa.Table, rows: np.ndarray, record_at: np.ndarray,
                       attr_base: int) -> tuple[KeyGroups, list[pa.Array]]:
    """The groups of keys of the classic records at ``rows`` of ``events`` (records
    ``record_at`` of the listing), one per member, from the ``classic_members`` and
    ``classic_generation`` columns: each member's generation, attrs (numbered from
    ``attr_base``, one per member) and the partitions its assignment holds (none:
    :func:`key_columns`'s placeholder). Also the attrs' four columns (group_instance_id,
    client_id, client_host, subscribed_topics)."""
    take = pa.array(rows, pa.int64())
    members = events.column("classic_members").take(take).combine_chunks()
    generation = pc.fill_null(events.column("classic_generation").take(take), 0).to_numpy().astype(np.int64)
    owner = np.repeat(np.arange(len(members)), lengths(members))  # per member: its record
    member_id, instance, client, host, subscribed, assigned = members.flatten().flatten()
    entry_owner = np.repeat(np.arange(len(assigned)), lengths(assigned))  # per entry: its member
    topic, numbers = assigned.flatten().flatten()
    key_entry = np.repeat(np.arange(len(topic)), lengths(numbers))
    key_member = entry_owner[key_entry]
    count = np.bincount(key_member, minlength=len(member_id)).astype(np.int64)
    empty = np.flatnonzero(count == 0)
    order = pa.array(np.argsort(np.r_[key_member, empty], kind="stable"), pa.int64())  # by member
    key_topic = pa.concat_arrays([topic.take(pa.array(key_entry, pa.int64())),
                                  pa.array([""] * len(empty), pa.string())]).take(order)
    key_partition = np.r_[numbers.flatten().to_numpy(zero_copy_only=False).astype(np.int64),
                          np.full(len(empty), -1, np.int64)][order.to_numpy()]
    groups = KeyGroups(record_at[owner], generation[owner], member_id,
                       attr_base + np.arange(len(member_id), dtype=np.int64), np.maximum(count, 1),
                       key_topic, key_partition)
    return groups, [instance, client, host, subscribed]
