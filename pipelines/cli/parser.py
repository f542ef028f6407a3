"""The ``offsetlake`` argument parser: global options, then each command family's own
arguments (in the order ``--help`` lists them)."""

from __future__ import annotations

import argparse

from pipelines.cli.common import ENGINE_HELP, env, flag_env, package_version
from pipelines.cli.decode import add_decode_parser
from pipelines.cli.demo import add_demo_parser, add_warm_up_parser
from pipelines.cli.ingest import add_ingest_parser
from pipelines.cli.maintain import add_maintain_parser
from pipelines.cli.report import add_report_parsers
from pipelines.cli.snapshot import add_snapshot_parsers


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for (reading the
    distribution's metadata imports ``importlib.metadata`` and ``email``: ~12 ms that every
    other command would pay for nothing)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offsetlake",
        description="Kafka's __consumer_offsets as Delta Lake tables: decoded history, the group "
                    "coordinator's current state, and reconciliation with the live cluster.")
    parser.add_argument("--log-level", default=env("LOG_LEVEL"),
                        help="logging level (env OFFSETLAKE_LOG_LEVEL; default WARNING, INFO "
                             "with --verbose)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=flag_env("VERBOSE"),
                        help="progress logs, Spark's JVM warnings and its console progress bar "
                             "(env OFFSETLAKE_VERBOSE=true); quiet otherwise")
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    parser.add_argument("--delta-engine", choices=["delta-rs", "spark"],
                        default=env("DELTA_ENGINE") or "delta-rs", help=ENGINE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_decode_parser(sub)
    add_ingest_parser(sub)
    add_demo_parser(sub)
    add_snapshot_parsers(sub)
    add_maintain_parser(sub)
    add_report_parsers(sub)
    add_warm_up_parser(sub)
    return parser
