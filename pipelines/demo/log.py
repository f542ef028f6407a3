"""The log: events -> v2 record batches -> segment files, plus what was written (counts).

Why: one place turns a story's event into the bytes a broker would append (which partition,
which offsets, which codec for the broker phase, when a segment rolls) and feeds the same
event to the expected state, so the files and their answer cannot drift apart.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from pipelines.decode import encode_key, encode_value, partition_for
from pipelines.demo.expected import Expected
from pipelines.demo.world import Commit, Event, Marker, Records, World
from pipelines.sources.record_batches.writer import (
    NewRecord,
    SegmentWriter,
    encode_batch,
    encode_control_batch,
    encode_pairs_batch,
)

__all__ = ["SEGMENT_BYTES", "Log"]

#: Kafka's ``offsets.topic.segment.bytes`` default: a partition rolls to a new segment here.
SEGMENT_BYTES = 100 * 1024 * 1024
_OC_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_Q = struct.Struct(">q")


class Log:
    """Turns events into v2 batches in the right partition and feeds the expected state."""

    def __init__(self, out_dir: Path, w: World, num_partitions: int, codecs: list[str],
                 segment_bytes: int) -> None:
        self.w = w
        self.n = num_partitions
        self.codecs = codecs
        self.segment_bytes = segment_bytes
        self.writers = [SegmentWriter(out_dir, p) for p in range(num_partitions)]
        self.sizes = [0] * num_partitions
        self.expected = Expected()
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

    def emit(self, ev: Event) -> None:
        if ev.ts < self.last_ts:
            raise AssertionError(f"event for {ev.group} goes back in time: {ev.ts} < {self.last_ts}")
        self.last_ts = ev.ts
        p = self.partition(ev.group)
        phase = self.w.phase(ev.ts)
        if isinstance(ev, Commit):
            self._commit(p, phase, ev)
        elif isinstance(ev, Records):
            self._records(p, phase, ev)
        else:
            self._marker(p, phase, ev)

    def _commit(self, p: int, phase: int, ev: Commit) -> None:
        """The hot path: keys are cached, OffsetCommitValue v3 is packed directly and the
        batch is framed by the writer's :func:`encode_pairs_batch` (one timestamp, no
        headers: its fast path when uncompressed)."""
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
        data = encode_pairs_batch(pairs, base_offset=base, timestamp=ts, compression=codec,
                                  partition_leader_epoch=phase, producer_id=pid,
                                  producer_epoch=pepoch, base_sequence=0,
                                  is_transactional=txn is not None)
        self._write(p, data, off)
        n = len(pairs)
        self.records[p] += n
        self.by_type[1] = self.by_type.get(1, 0) + n
        if txn:
            self.txn_records += n

    def _records(self, p: int, phase: int, ev: Records) -> None:
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

    def _marker(self, p: int, phase: int, ev: Marker) -> None:
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

