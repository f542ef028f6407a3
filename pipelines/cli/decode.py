"""``offsetlake decode``: segment files printed as JSON lines (or a --stats histogram),
like kafka-dump-log --offsets-decoder."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path

from pipelines.cli.common import UserError, flag_env

log = logging.getLogger("offsetlake")


def _record_json(rec, decoded) -> dict:
    from pipelines.decode.jsonify import jsonable
    from pipelines.decode.wire import ZERO_UUID

    b = rec.batch
    key = None
    if decoded.record_type is not None:
        key = {"type": decoded.record_type, "name": decoded.type_name, "fields": decoded.key}
    value = decoded.value
    if decoded.record_type == 1 and value and value.get("topic_id") == ZERO_UUID:
        # v4 without the topicId tag: no topic id, as offset_commits.topic_id (null) says
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


def cmd_decode(args: argparse.Namespace) -> int:
    from pipelines.decode import decode_record, partition_for
    from pipelines.sources.record_batches.exact_reader import iter_batches
    from pipelines.sources.record_batches.problems import Problem

    for p in args.paths:
        if not Path(p).exists():
            raise UserError(f"no such file or directory: {p}")
    problems: list[Problem] = []
    stats: Counter = Counter()
    statuses: Counter = Counter()
    wrong_partition = 0
    out = sys.stdout
    try:
        for _batch, records in iter_batches(*args.paths, problems=problems):
            for rec in records:
                decoded = decode_record(rec.key, rec.value, rec.batch.is_control)
                statuses[decoded.decode_status] += 1
                if args.stats:
                    _count(stats, rec, decoded)
                    group = decoded.group_id
                    part = rec.batch.offsets_partition
                    if args.num_partitions and group is not None and part >= 0 \
                            and partition_for(group, args.num_partitions) != part:
                        wrong_partition += 1
                else:
                    out.write(json.dumps(_record_json(rec, decoded), ensure_ascii=False))
                    out.write("\n")
        out.flush()
    except BrokenPipeError:  # `decode | head`: the reader has all it wants; not a failure
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail
        return 0
    for problem in problems:  # one line each: the reader leaves them to us
        log.warning("unreadable region in %s, bytes %d-%d (%d bytes skipped): %s", problem.path,
                    problem.position, problem.position + problem.length_skipped,
                    problem.length_skipped, problem.reason)
    skipped = sum(p.length_skipped for p in problems)
    if args.stats:
        report: dict = {}
        for (kind, name), n in sorted(stats.items()):
            report.setdefault(kind, {})[name] = n
        report["problems"] = len(problems)
        report["bytes_skipped"] = skipped
        report["problem_list"] = [{"file": p.path, "byte_range": [p.position, p.position + p.length_skipped],
                                   "bytes_skipped": p.length_skipped, "reason": p.reason} for p in problems]
        if args.num_partitions:
            report["partition_for_mismatches"] = wrong_partition
        print(json.dumps(report, indent=2))
    else:
        print(f"offsetlake decode: {sum(statuses.values())} records "
              f"({', '.join(f'{k}: {n}' for k, n in sorted(statuses.items())) or 'none'}); "
              f"{len(problems)} problem(s), {skipped} bytes skipped", file=sys.stderr)
    if not statuses:
        log.warning("no record in %s (no __consumer_offsets-N segment files, or none readable)",
                    " ".join(args.paths))
    bad = sum(n for k, n in statuses.items() if k not in ("ok", "tombstone", "control"))
    return 3 if args.strict and (problems or bad or not statuses) else 0


def _count(stats: Counter, rec, decoded) -> None:
    """The --stats histogram of one record."""
    stats[("type", decoded.type_name or f"unknown({decoded.record_type})")] += 1
    stats[("status", decoded.decode_status)] += 1
    if decoded.value_version is not None:
        stats[("version", f"{decoded.type_name} v{decoded.value_version}")] += 1
    stats[("compression", rec.batch.compression)] += 1
    stats[("magic", str(rec.batch.magic))] += 1
    if not rec.batch.crc_valid:
        stats[("crc", "invalid")] += 1



def add_decode_parser(sub: argparse._SubParsersAction) -> None:
    """The ``decode`` command's arguments."""
    p = sub.add_parser("decode", help="print every record of segment files as JSON lines",
                       description="Decode __consumer_offsets segment files (.log) like "
                                   "kafka-dump-log --offsets-decoder, as one JSON object per record.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="segment files or directories")
    p.add_argument("--stats", action="store_true",
                   help="print a histogram of record types, versions and statuses instead")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="with --stats: check partition_for(group, N) against each record's partition")
    p.add_argument("--strict", action="store_true", default=flag_env("STRICT"),
                   help="exit 3 when any byte could not be read, any record not decoded, or "
                        "there was no record at all")
    p.set_defaults(func=cmd_decode)
