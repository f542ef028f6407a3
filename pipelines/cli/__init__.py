"""``offsetlake``: the command line. Every command has ``--help``; flags default from env vars.

Errors a user can fix (bad arguments, missing paths, unreachable clusters) print one
line and exit 2; ``--log-level DEBUG`` shows the details. This module is the entry point
(parse, set up logging, dispatch, map failures to exit statuses); each command family
lives in its own module of this package.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from typing import NoReturn

from pipelines import redaction
from pipelines.cli.common import INTERRUPTED, UserError, check_schemas, stop_spark
from pipelines.cli.parser import build_parser

__all__ = ["build_parser", "main", "run", "stop_spark"]

log = logging.getLogger("offsetlake")


def main(argv: Sequence[str] | None = None, standalone: bool = False) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.standalone = standalone  # run(): the process ends with this command (os._exit)
    default = logging.INFO if args.verbose else logging.WARNING
    level = getattr(logging, str(args.log_level).upper(), default) if args.log_level else default
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    for logger in (logging.getLogger("py4j.clientserver"), logging.getLogger()):  # py4j logs on both
        if level > logging.DEBUG:
            logger.addFilter(_not_an_echo)
        else:
            logger.removeFilter(_not_an_echo)
    redaction.install()  # every handler of the root logger: kafka-python's loggers included
    if level > logging.DEBUG:  # kafka-python's connection chatter (connecting, closed, ...)
        logging.getLogger("kafka").setLevel(logging.WARNING)
    if level <= logging.DEBUG or args.verbose:
        os.environ.setdefault("OFFSETLAKE_SPARK_LOG_LEVEL", "WARN")
        os.environ.setdefault("OFFSETLAKE_SPARK_QUIET", "false")
    try:
        from pipelines.arrow_memory import use_offsetlake_pool  # pyarrow: not for --help

        check_schemas()
        use_offsetlake_pool()
        return args.func(args)
    except UserError as exc:
        print(f"offsetlake {args.command}: error: {redaction.redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"offsetlake {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if INTERRUPTED.is_set():  # the JVM ended of the same Ctrl-C first: a lost connection
            log.debug("after Ctrl-C", exc_info=True)
            print(f"offsetlake {args.command}: interrupted", file=sys.stderr)
            return 130
        reason = _user_facing(exc)
        if reason:
            print(f"offsetlake {args.command}: error: {redaction.redact(reason)}", file=sys.stderr)
            return 2
        log.debug("failure", exc_info=True)
        print(f"offsetlake {args.command}: failed: {type(exc).__name__}: {redaction.redact(one_line(str(exc)))}"
              " (rerun with --log-level DEBUG for details)", file=sys.stderr)
        return 1


_TRACEBACK = "Traceback (most recent call last):"


def one_line(message: str) -> str:
    """A failure's message in one line: its first, with the exception a Python traceback in
    it ends with. Spark wraps the failure of a Python process it ran (a data source that
    would not load, a task) in its own exception, the traceback inside, the cause last:
    "Failed to create Python data source instance: Traceback (most recent call last):"."""
    lines = message.splitlines()
    first = lines[0] if lines else ""
    if _TRACEBACK not in message:
        return first
    after = message[message.rindex(_TRACEBACK) + len(_TRACEBACK):].splitlines()
    cause = next((line.strip() for line in after if line.strip() and not line[0].isspace()), None)
    if cause is None:
        return first
    if first.endswith(_TRACEBACK):
        return first[: -len(_TRACEBACK)] + cause
    return f"{first} ({cause})"


#: py4j's log lines that only echo what the command reports itself, in one line (and whole
#: with --log-level DEBUG): a foreachBatch failure, with which the query then fails (or it
#: was being stopped: Ctrl-C, a failed commit), and Ctrl-C during a call to the JVM (py4j
#: logs that one on the root logger)
PY4J_ECHOES = ("There was an exception while executing the Python Proxy",
               "KeyboardInterrupt while sending command.")
#: py4j's lines when a call fails and it tries once more, and when it closes the connection
#: a Ctrl-C cut (its ERROR: the JVM's end of it already gone): after a Ctrl-C, its echo (the
#: command reports the interrupt); otherwise kept
PY4J_AFTER_CTRL_C = ("Exception while sending command.", "Exception occurred while shutting down connection")


def _not_an_echo(record: logging.LogRecord) -> bool:
    message = str(record.msg)
    return not (message.startswith(PY4J_ECHOES) or (INTERRUPTED.is_set() and message.startswith(PY4J_AFTER_CTRL_C)))


_ONE_LINE_ERRORS = ("ClusterUnreachable", "NoBrokersAvailable", "NoSnapshotError", "WorkerPythonError",
                    "CheckpointMismatch", "KafkaOptionError", "KafkaAuthenticationError",
                    "KafkaAuthorizationError", "PartialSnapshotError")


def _user_facing(exc: BaseException) -> str | None:
    """One line for failures the user can act on (unreachable cluster, no snapshot yet).

    Spark wraps errors raised in a source into a JVM exception pages long; the Kafka
    source knows how to find its own one-line cause inside.
    """
    from pipelines.sources.kafka.errors import explain_failure

    explained = explain_failure(exc)
    if explained:
        return explained
    for e in (exc, exc.__cause__, exc.__context__):
        if e is not None and type(e).__name__ in _ONE_LINE_ERRORS:
            return f"{type(e).__name__}: {e}"
    return None


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The console and spark-submit entry point: :func:`main`, then a clean, sure exit.

    Arrow's and delta-rs' native thread pools can abort the interpreter's own teardown
    after all work is done and committed (SIGABRT, "terminate called without an active
    exception": apache/arrow#34314, delta-io/delta-rs#2184; seen here about one run in
    ten). So Spark is stopped, output flushed, and the process leaves with the command's
    real status without that teardown.

    The process is offsetlake's, so BLAS gets one thread unless the user set
    ``OPENBLAS_NUM_THREADS``, before numpy's first import: nothing here calls BLAS, and
    numpy's OpenBLAS otherwise starts a thread per core that spins ~0.1 s of CPU after the
    import, in this process and in each Python process the local JVM starts (which inherit
    the setting): Spark's data-source, streaming and planning helpers.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    code = main(argv, standalone=True)
    if "pyspark" in sys.modules:
        from pipelines import jvm_output

        # after a failure or Ctrl-C, what the JVM says while it stops (threads interrupted
        # mid-task) is its echo, and the command said what happened
        with jvm_output.hushed() if code != 0 else nullcontext():
            try:
                stop_spark()
            except Exception as exc:
                if code == 0:
                    raise
                # a JVM that a Ctrl-C or the failure already ended (py4j: "Answer from Java
                # side is empty"): the command said what happened, and exits with its status
                log.debug("stopping Spark after the command's end", exc_info=exc)
    if "pipelines.jvm_cache" in sys.modules:  # a first run's JVM writes its class archive
        from pipelines import jvm_cache

        jvm_cache.finish()
    if "pipelines.jvm_output" in sys.modules:  # the JVM's output comes through our threads
        from pipelines import jvm_output

        jvm_output.drain()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

