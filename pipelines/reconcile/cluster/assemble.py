"""A live snapshot's rows, built from the raw answers of one capture.

Why: the I/O thread only gathers answers (:mod:`~pipelines.reconcile.cluster.capture`);
turning them into group, member, offset and lag rows, and naming what the principal was
refused, happens on the caller's thread afterwards, off the I/O loop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as Errors

from pipelines.reconcile.cluster.errors import NONE, UNSUPPORTED_VERSION, error_name
from pipelines.reconcile.cluster.lag import lag_rows
from pipelines.reconcile.cluster.raw import RawAnswers
from pipelines.reconcile.cluster.rows import (
    ClusterSnapshot,
    GroupRow,
    MemberRow,
    OffsetRow,
    decode_assignment,
    group_type,
    kafka_uuid,
    new_snapshot_id,
)

log = logging.getLogger(__name__)


@dataclass
class _Group:
    """One group's row values while its answers are folded in."""

    group_id: str
    group_type: str
    state: str | None
    protocol_type: str | None
    protocol: str | None = None
    error: int = NONE
    epochs: tuple[int | None, int | None] = (None, None)
    members: list[MemberRow] = field(default_factory=list)


def assemble(raw: RawAnswers, *, source: str, require_stable: bool) -> ClusterSnapshot:
    """Rows from the raw answers (runs on the caller's thread, not the I/O loop)."""
    assert raw.captured_at is not None
    groups: list[GroupRow] = []
    members: list[MemberRow] = []
    offsets: list[OffsetRow] = []
    not_described: list[str] = []
    for gid in sorted(raw.listings):
        li = raw.listings[gid]
        g = _Group(gid, group_type(li.group_type), li.group_state, li.protocol_type)
        _fold_classic(g, raw)
        _fold_consumer(g, raw)
        _fold_share_streams(g, raw, not_described)
        if g.error == NONE and gid in raw.coordinator_errors:
            g.error = raw.coordinator_errors[gid]
        members.extend(g.members)
        groups.append(GroupRow(gid, g.group_type, g.state, g.protocol_type, g.protocol,
                               raw.coordinators.get(gid), g.error, error_name(g.error),
                               *g.epochs))
        offsets.extend(_offset_rows(gid, raw.fetched.get(gid, (NONE, []))))
    offsets.extend(_completeness_rows(raw))
    if not_described:
        log.info("%d share/streams group(s) not described (API not offered): %s",
                 len(not_described), "; ".join(not_described))
    captured_at = raw.captured_at
    return ClusterSnapshot(
        snapshot_id=new_snapshot_id(captured_at), captured_at=captured_at, source=source,
        require_stable=require_stable, groups=groups, members=members, offsets=offsets,
        log_end_offsets=raw.ends, lag=lag_rows(offsets, raw.ends, raw.times, raw.window_starts),
        points=raw.points,
        errors=list(raw.errors), not_authorized=_refused(raw, groups, offsets),
        topic_names=dict(raw.topic_names), not_described=not_described)


def _fold_classic(g: _Group, raw: RawAnswers) -> None:
    """DescribeGroups: state, protocol and members (classic assignments decoded)."""
    if g.group_id not in raw.described:
        return
    g.error, described = raw.described[g.group_id]
    if described is None:
        return
    g.state = g.state or described.group_state
    if g.protocol_type is None:
        g.protocol_type = described.protocol_type
    g.protocol = described.protocol_data
    consumer_protocol = (described.protocol_type or g.protocol_type) == "consumer"
    for m in described.members:
        g.members.append(MemberRow(
            g.group_id, m.member_id, m.group_instance_id, m.client_id, m.client_host,
            decode_assignment(m.member_assignment, g.group_id, m.member_id)
            if consumer_protocol else None))


def _fold_consumer(g: _Group, raw: RawAnswers) -> None:
    """ConsumerGroupDescribe (KIP-848): epochs, assignor, members, and the topic ids their
    assignments name."""
    if g.group_id not in raw.consumer_described:
        return
    g.error, described = raw.consumer_described[g.group_id]
    if described is None:
        return
    g.epochs = (described.group_epoch, described.assignment_epoch)
    g.state = g.state or described.group_state
    g.protocol = described.assignor_name
    for m in described.members:
        g.members.append(MemberRow(
            g.group_id, m.member_id, m.instance_id, m.client_id, m.client_host,
            [{"topic": tp.topic_name, "partitions": sorted(tp.partitions)}
             for tp in m.assignment.topic_partitions]))
        for tp in m.assignment.topic_partitions:
            topic_id = kafka_uuid(tp.topic_id)
            if topic_id and tp.topic_name:
                raw.topic_names.setdefault(topic_id, tp.topic_name)


def _fold_share_streams(g: _Group, raw: RawAnswers, not_described: list[str]) -> None:
    """ShareGroupDescribe / StreamsGroupDescribe, where the coordinator offers them."""
    for api, answers in (("ShareGroupDescribe", raw.share_described),
                         ("StreamsGroupDescribe", raw.streams_described)):
        if g.group_id not in answers:
            continue
        code, described = answers[g.group_id]
        if code == UNSUPPORTED_VERSION:  # the coordinator does not offer the API
            not_described.append(f"{g.group_id}: {api} not offered by broker "
                                 f"{raw.coordinators.get(g.group_id)}")
        elif code != NONE:
            g.error = code
            if code != Errors.GroupAuthorizationFailedError.errno:  # -> not_authorized
                raw.errors.append(f"{api} {g.group_id}: {error_name(code)}")
        elif described is not None:
            g.epochs = (described.group_epoch, described.assignment_epoch)
            g.state = g.state or described.group_state
            g.members.extend(_described_members(g.group_id, g.group_type, described))


def _offset_rows(gid: str, answer: tuple[int, Any]) -> list[OffsetRow]:
    """A listed group's OffsetFetch answer: one error row, or one row per partition."""
    code, topics = answer
    if code != NONE:
        return [OffsetRow(gid, None, None, None, None, None, code, error_name(code))]
    return [OffsetRow(gid, t.name, p.partition_index, p.committed_offset,
                      p.committed_leader_epoch, p.metadata, p.error_code,
                      error_name(p.error_code))
            for t in topics or [] for p in t.partitions]


def _described_members(gid: str, gtype: str, described: Any) -> list[MemberRow]:
    """Member rows of a ShareGroupDescribe / StreamsGroupDescribe group, shaped as the
    recorded path shapes ``kafka-share-groups.sh`` / ``kafka-streams-groups.sh`` members:
    share members carry their assigned topic partitions; streams members are assigned tasks
    (subtopology, partition), not topic partitions, so their assignment stays None."""
    rows = []
    for m in described.members:
        if gtype == "share":
            assignment: list[dict[str, Any]] | None = [
                {"topic": tp.topic_name, "partitions": sorted(tp.partitions)}
                for tp in sorted(m.assignment.topic_partitions, key=lambda t: t.topic_name)]
            instance = None
        else:
            assignment, instance = None, m.instance_id
        rows.append(MemberRow(gid, m.member_id, instance, m.client_id, m.client_host,
                              assignment))
    return rows


def _completeness_rows(raw: RawAnswers) -> list[OffsetRow]:
    """Offset rows of the groups asked by name (not listed) and of the partitions asked by
    name: errors (e.g. GROUP/TOPIC_AUTHORIZATION_FAILED) and any offsets they revealed."""
    rows: list[OffsetRow] = []
    for answers in (raw.unlisted, raw.refetched):
        for gid, (code, topics) in sorted(answers.items()):
            if code != NONE:
                if not any(r.group_id == gid and r.topic is None for r in rows):
                    rows.append(OffsetRow(gid, None, None, None, None, None, code, error_name(code)))
                continue
            for t in topics or []:
                for p in t.partitions:
                    if p.error_code != NONE or (p.committed_offset is not None
                                                  and p.committed_offset >= 0):
                        rows.append(OffsetRow(gid, t.name, p.partition_index, p.committed_offset,
                                              p.committed_leader_epoch, p.metadata, p.error_code,
                                              error_name(p.error_code)))
    return rows


def _refused(raw: RawAnswers, groups: Sequence[GroupRow], offsets: Sequence[OffsetRow]) -> list[str]:
    """``group:<id>`` / ``topic:<name>`` the principal was refused, sorted."""
    refused: set[str] = set()
    group_denied = Errors.GroupAuthorizationFailedError.errno
    topic_denied = Errors.TopicAuthorizationFailedError.errno
    for name, code in raw.topic_errors.items():
        if code == topic_denied:
            refused.add(f"topic:{name}")
    for g in groups:
        if g.error_code == group_denied:
            refused.add(f"group:{g.group_id}")
    for r in offsets:
        if r.error_code == group_denied:
            refused.add(f"group:{r.group_id}")
        elif r.error_code == topic_denied and r.topic is not None:
            refused.add(f"topic:{r.topic}")
    return sorted(refused)

