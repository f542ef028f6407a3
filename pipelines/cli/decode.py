"""``offsetlake decode``: segment files printed as JSON lines (or a --stats histogram),
like kafka-dump-log --offsets-decoder."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pipelines.cli.common import UserError, flag_env
from pipelines.without_pandas import block_pandas

log = logging.getLogger("offsetlake")


def _timestamp_lookup() -> Callable[[dict], int]:
    """The stored timestamp of a record whose RAW timestamp is null (negative on disk: magic 0
    messages, or a producer's -1): its batch is decoded again by the exact reader."""
    from pipelines.sources.record_batches.exact_reader import slow_step

    files: dict[str, bytes] = {}
    batches: dict[tuple[str, int], dict[int, int]] = {}

    def lookup(row: dict) -> int:
        where = (row["source"], row["source_position"])
        if where not in batches:
            if row["source"] not in files:
                files.clear()  # one file at a time: rows come file by file
                files[row["source"]] = Path(row["source"]).read_bytes()
            data = files[row["source"]]
            step = slow_step(data, memoryview(data), where[1], len(data), 0, row["source"],
                             row["offsets_partition"], lambda *_: None)
            records = step[1][1] if step is not None and step[1] is not None else []
            batches[where] = {r.offset: r.timestamp for r in records}
        return batches[where].get(row["offset"], -1)

    return lookup


def _write(out, pieces: list) -> None:
    """Bytes to a text stream's binary buffer (after its pending text), or as text."""
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        out.write(b"".join(pieces).decode("utf-8"))
        return
    out.flush()
    for piece in pieces:
        buffer.write(piece)


def cmd_decode(args: argparse.Namespace) -> int:
    if getattr(args, "standalone", False):  # the process ends with this command (run())
        block_pandas()
    from pipelines.decode.dump import json_lines, stats_counts
    from pipelines.sources.record_batches.arrow_reader import read_arrow
    from pipelines.sources.record_batches.problems import Problem

    for p in args.paths:
        if not Path(p).exists():
            raise UserError(f"no such file or directory: {p}")
    problems: list[Problem] = []
    stats: Counter = Counter()
    statuses: Counter = Counter()
    wrong_partition = 0
    out = sys.stdout
    lookup = _timestamp_lookup()
    try:
        for raw in read_arrow(*args.paths, problems=problems):
            if args.stats:
                counts, chunk_statuses, wrong = stats_counts(raw, args.num_partitions)
                stats.update(counts)
                statuses.update(chunk_statuses)
                wrong_partition += wrong
            else:
                pieces, chunk_statuses = json_lines(raw, lookup)
                statuses.update(chunk_statuses)
                _write(out, pieces)
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
