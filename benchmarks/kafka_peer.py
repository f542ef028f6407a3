"""Kafka's own decoder beside ours: ``kafka-dump-log.sh --offsets-decoder --print-data-log``
on the same segment files, timed as issue 9 states its goals (the JVM tool's wall and CPU).

Why: the issue's goals are ratios to that tool (ingest within 1.5x of its wall time, ``decode``
>= 5x and ``--stats`` >= 20x on CPU). Where a Kafka distribution is installed (``--kafka-home
DIR`` or ``KAFKA_HOME``), ``real_workload.py`` and ``decode_cli.py`` run it in each round,
alternately with our command, and print the ratios; without one they print our side alone
and say so. This machine has none (Maven Central and Apache's mirrors are unreachable): the
harness is tested with a stand-in for the tool (``tests/test_kafka_peer.py``), the figures
need a real distribution.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from machine_cpu import process_seconds

#: the tool inside a Kafka distribution (``kafka-run-class.sh kafka.tools.DumpLogSegments``)
TOOL = Path("bin") / "kafka-dump-log.sh"
#: how the tool starts each record's line with ``--print-data-log`` (control records too)
RECORD_LINE = b"| offset: "


def add_kafka_home(parser: argparse.ArgumentParser) -> None:
    """The ``--kafka-home`` option of a benchmark that can run the tool beside ours."""
    parser.add_argument("--kafka-home", default=os.environ.get("KAFKA_HOME"),
                        help="a Kafka distribution: its kafka-dump-log.sh runs beside (default "
                             "KAFKA_HOME; none: our side alone)")


def dump_log_tool(kafka_home: str | os.PathLike[str] | None) -> Path | None:
    """``kafka_home``'s kafka-dump-log.sh, None without a home; a clear error when the home
    holds no such executable (a wrong directory is never measured as "no peer")."""
    if not kafka_home:
        return None
    tool = Path(kafka_home) / TOOL
    if not (tool.is_file() and os.access(tool, os.X_OK)):
        raise SystemExit(f"no executable {tool}: --kafka-home (or KAFKA_HOME) must be a Kafka "
                         "distribution's directory")
    return tool


def tool_files(paths: list[str] | list[Path], into: Path) -> list[Path]:
    """The segment files ``offsetlake decode paths`` reads, in its order, linked into ``into``
    under names the tool takes: ``<base offset>.log`` (it parses the base offset from the name,
    and skips other suffixes, such as the corpus' ``*.log@commit`` versions)."""
    from pipelines.sources.segments.files import find_segments  # what decode reads, in order

    links = []
    for n, seg in enumerate(s for plog in find_segments(*paths) for s in plog.segments):
        link = into / str(n) / f"{seg.base_offset:020d}.log"
        link.parent.mkdir(parents=True)
        link.symlink_to(seg.path.resolve())
        links.append(link)
    if not links:
        raise SystemExit(f"no segment files under {' '.join(map(str, paths))}")
    return links


def run_dump_log(tool: Path, files: list[Path], out: Path) -> tuple[float, float, int]:
    """``(wall seconds, CPU seconds, records printed)`` of one fresh run of the tool over
    ``files``, its output in ``out`` (the script execs the JVM: every JVM thread counts)."""
    cmd = [str(tool), "--offsets-decoder", "--print-data-log", "--files", ",".join(map(str, files))]
    errors = out.with_suffix(".stderr")
    with errors.open("wb") as err:
        wall, cpu, code = process_seconds(cmd, out, stderr=err)
    if code != 0:
        raise SystemExit(f"{tool} exited {code}: {errors.read_text(errors='replace')[-2000:]}")
    return wall, cpu, records_printed(out)


def records_printed(out: Path) -> int:
    """Records in the tool's output: one line each."""
    with out.open("rb") as f:
        return sum(1 for line in f if line.startswith(RECORD_LINE))
