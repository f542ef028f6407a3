"""The per-record ``offsetlake decode`` writer as it was before issue 9 (record objects from
the exact reader, ``decode_record`` and ``json.dumps`` per record): the oracle the bulk
writer (pipelines/decode/dump.py) must match byte for byte. Kept verbatim in behaviour;
only the output goes to strings instead of the process' stdout."""

from __future__ import annotations

import json
from collections import Counter

from pipelines.decode import decode_record, partition_for
from pipelines.decode.jsonify import jsonable
from pipelines.decode.wire import ZERO_UUID
from pipelines.sources.record_batches.exact_reader import iter_batches
from pipelines.sources.record_batches.problems import Problem


def record_json(rec, decoded) -> dict:
    b = rec.batch
    key = None
    if decoded.record_type is not None:
        key = {"type": decoded.record_type, "name": decoded.type_name, "fields": decoded.key}
    value = decoded.value
    if decoded.record_type == 1 and value and value.get("topic_id") == ZERO_UUID:
        value = {**value, "topic_id": None}
    out = {
        "partition": b.offsets_partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "timestamp_type": {0: "CreateTime", 1: "LogAppendTime"}.get(rec.timestamp_type, "NoTimestamp"),
        "key": key,
        "value": None if value is None else {"version": decoded.value_version, "fields": value},
        "batch": {
            "base_offset": b.base_offset, "producer_id": b.producer_id,
            "producer_epoch": b.producer_epoch, "transactional": b.is_transactional,
            "control": b.is_control, "control_type": rec.control_type,
            "compression": b.compression, "magic": b.magic, "crc_valid": b.crc_valid,
            "position": b.position,
        },
        "decode_status": decoded.decode_status,
        "decode_error": decoded.decode_error,
        "file": b.source,
    }
    if decoded.decode_status not in ("ok", "tombstone", "control"):
        out["key_hex"] = rec.key.hex() if rec.key is not None else None
        out["value_hex"] = rec.value.hex() if rec.value is not None else None
    return jsonable(out)


def _count(stats: Counter, rec, decoded) -> None:
    stats[("type", decoded.type_name or f"unknown({decoded.record_type})")] += 1
    stats[("status", decoded.decode_status)] += 1
    if decoded.value_version is not None:
        stats[("version", f"{decoded.type_name} v{decoded.value_version}")] += 1
    stats[("compression", rec.batch.compression)] += 1
    stats[("magic", str(rec.batch.magic))] += 1
    if not rec.batch.crc_valid:
        stats[("crc", "invalid")] += 1


def oracle_decode(paths: list[str], *, stats: bool = False,
                  num_partitions: int | None = None) -> tuple[str, str]:
    """(stdout, the stderr summary line or "") of the old ``offsetlake decode PATHS``."""
    problems: list[Problem] = []
    counts: Counter = Counter()
    statuses: Counter = Counter()
    wrong_partition = 0
    out: list[str] = []
    for _batch, records in iter_batches(*paths, problems=problems):
        for rec in records:
            decoded = decode_record(rec.key, rec.value, rec.batch.is_control)
            statuses[decoded.decode_status] += 1
            if stats:
                _count(counts, rec, decoded)
                group = decoded.group_id
                part = rec.batch.offsets_partition
                if num_partitions and group is not None and part >= 0 \
                        and partition_for(group, num_partitions) != part:
                    wrong_partition += 1
            else:
                out.append(json.dumps(record_json(rec, decoded), ensure_ascii=False) + "\n")
    skipped = sum(p.length_skipped for p in problems)
    if stats:
        report: dict = {}
        for (kind, name), n in sorted(counts.items()):
            report.setdefault(kind, {})[name] = n
        report["problems"] = len(problems)
        report["bytes_skipped"] = skipped
        report["problem_list"] = [{"file": p.path, "byte_range": [p.position, p.position + p.length_skipped],
                                   "bytes_skipped": p.length_skipped, "reason": p.reason} for p in problems]
        if num_partitions:
            report["partition_for_mismatches"] = wrong_partition
        return json.dumps(report, indent=2) + "\n", ""
    summary = (f"offsetlake decode: {sum(statuses.values())} records "
               f"({', '.join(f'{k}: {n}' for k, n in sorted(statuses.items())) or 'none'}); "
               f"{len(problems)} problem(s), {skipped} bytes skipped")
    return "".join(out), summary
