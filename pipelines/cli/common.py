"""What every ``offsetlake`` command shares: the error a user can fix, env-var defaults,
the lake/engine/Kafka options and how they turn into a lake location, an engine, Kafka settings."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

log = logging.getLogger("offsetlake")


class UserError(Exception):
    """An error the user can fix; printed as one line."""


#: set once Ctrl-C reached a command that takes it as its own (:func:`plain_ctrl_c`)
INTERRUPTED = threading.Event()


def _interrupt(signum: int, frame: object) -> None:
    """Python's own Ctrl-C, remembered: a terminal's Ctrl-C reaches the JVM too (one process
    group), and when the JVM ends first, the call the main thread was in fails with a lost
    connection before the KeyboardInterrupt is raised; the command still reports the
    interrupt (``main``)."""
    INTERRUPTED.set()
    signal.default_int_handler(signum, frame)


def plain_ctrl_c() -> None:
    """Ctrl-C as Python's own KeyboardInterrupt, not pyspark's, once the CLI's own session runs.

    Why: pyspark's handler first cancels every job through the JVM, from inside whatever
    JVM call the main thread is in (the ingest asks its query every 50 ms). py4j's socket
    is then read re-entrantly, and both calls fail with a logged traceback each. The CLI
    stops its query (its jobs cancelled) and its session itself."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupt)


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"OFFSETLAKE_{name}", default)


def flag_env(name: str) -> bool:
    """A boolean flag's env default: true/1/yes (any case; Airflow renders params as True)."""
    return (env(name) or "").strip().lower() in ("true", "1", "yes")


def parse_kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value


def lake_from(args: argparse.Namespace):
    """``--lake`` with its storage options: the store's env vars (AWS_*, AZURE_*, GOOGLE_*),
    OFFSETLAKE_STORAGE_OPTIONS (JSON), then ``--storage-option``. Errors name keys only."""
    from pipelines.lake.location import StorageOptionError, lake_location, parse_options

    try:
        return lake_location(args.lake, parse_options(getattr(args, "storage_option", None)))
    except StorageOptionError as exc:
        raise UserError(str(exc)) from None


def add_lake_args(p: argparse.ArgumentParser, checkpoint: bool = False) -> None:
    """``--lake`` and ``--storage-option`` (and ``--checkpoint`` for streaming commands)."""
    p.add_argument("--lake", default=env("LAKE", "lake"),
                   help="lake root: a directory or a URI (file://, s3://, abfss://, az://, gs://); "
                        "env OFFSETLAKE_LAKE; default ./lake")
    p.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   help="object-store setting for delta-rs/object_store, e.g. "
                        "AWS_ENDPOINT_URL=http://host:9000 (repeatable; also read: AWS_*, AZURE_*, "
                        "GOOGLE_* env vars and OFFSETLAKE_STORAGE_OPTIONS as a JSON object); "
                        "values are never logged")
    if checkpoint:
        p.add_argument("--checkpoint", default=env("CHECKPOINT"),
                       help="directory for Spark's checkpoint, the app id marker and the segment "
                            "index cache (env OFFSETLAKE_CHECKPOINT; default <lake>/_checkpoints/"
                            "ingest; required for a lake at a URI)")
    add_engine_arg(p)


ENGINE_HELP = ("Delta engine for every command that reads or writes the lake: delta-rs (no JVM jars "
               "needed; default) or spark (delta-spark's jars on Spark's classpath); env "
               "OFFSETLAKE_DELTA_ENGINE")


def add_engine_arg(p: argparse.ArgumentParser) -> None:
    """``--delta-engine`` after the command too; unset there, the global setting holds."""
    p.add_argument("--delta-engine", choices=["delta-rs", "spark"], default=argparse.SUPPRESS,
                   help=ENGINE_HELP)


def add_kafka_args(p: argparse.ArgumentParser) -> None:
    """``--kafka-option`` and ``--kafka-options-file`` (plus OFFSETLAKE_KAFKA_OPTION_* env)."""
    p.add_argument("--kafka-option", action="append", type=parse_kv, metavar="KEY=VALUE",
                   help="Kafka client setting, e.g. security.protocol=SASL_SSL (repeatable). "
                        "Never put secrets here (visible in ps): use --kafka-options-file or "
                        "OFFSETLAKE_KAFKA_OPTION_<KEY> env vars, e.g. "
                        "OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD")
    p.add_argument("--kafka-options-file", default=env("KAFKA_OPTIONS_FILE"), metavar="FILE",
                   help="Java properties file of Kafka client settings, like Kafka's "
                        "--command-config (sasl.jaas.config, ssl.truststore.location (PEM), ...); "
                        "env OFFSETLAKE_KAFKA_OPTIONS_FILE")


def gather_kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """Raw Kafka options from the file, OFFSETLAKE_KAFKA_OPTION_* and --kafka-option."""
    from pipelines.kafka_options import KafkaOptionError, gather

    try:
        return gather(dict(args.kafka_option or ()), args.kafka_options_file)
    except KafkaOptionError as exc:
        raise UserError(str(exc)) from None


def source_options(raw: dict[str, str]) -> dict[str, str]:
    """Raw options checked by the one normaliser and spelt as kafka-python settings, as the
    ``offsetlake-kafka`` source takes them (a JAAS line becomes username + password keys,
    which Spark's own redaction of option values also recognises)."""
    from kafka import KafkaConsumer

    from pipelines.kafka_options import KafkaOptionError, normalize

    try:
        typed = normalize(raw, KafkaConsumer.DEFAULT_CONFIG)
    except KafkaOptionError as exc:
        raise UserError(str(exc)) from None
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in typed.items()}


def checkpoint_or_fail(cfg) -> None:
    from pipelines.ingest import CheckpointError

    try:
        cfg.checkpoint_dir  # noqa: B018 -- resolves (and checks) the location
    except CheckpointError as exc:
        raise UserError(str(exc)) from None


def on_spark(args: argparse.Namespace) -> bool:
    """Whether ``--delta-engine`` names Spark's Delta (``spark``, or its old name)."""
    return args.delta_engine in ("spark", "delta-spark")


def check_engine(spark, engine: str) -> None:
    from pipelines.spark import has_delta_jars

    if engine in ("spark", "delta-spark") and not has_delta_jars(spark):
        raise UserError("--delta-engine spark needs delta-spark's jars visible to Spark (e.g. "
                        "spark-submit --packages io.delta:delta-spark_4.2_2.13:4.4.1); "
                        "use --delta-engine delta-rs otherwise")


def without_pandas_on_delta_rs(args: argparse.Namespace) -> None:
    """A command that ends the process (``run()``) on delta-rs runs without pandas: nothing
    of it holds a pandas object, and pyarrow's first question would import pandas for
    nothing (``snapshot`` 0.82 -> 0.57 s, ``maintain`` 0.56-0.75 -> 0.38-0.46 s). On Spark
    it stays: PySpark's driver asks for pandas in places of its own."""
    if getattr(args, "standalone", False) and not on_spark(args):
        from pipelines.without_pandas import block_pandas

        block_pandas()


def spark_for_engine(args: argparse.Namespace, app_name: str):
    """A SparkSession with Delta's extension and catalog whose jars are checked, or None
    for delta-rs (no JVM at all)."""
    if not on_spark(args):
        return None
    from pipelines.spark import spark_session

    spark = spark_session(app_name, delta_spark=True)
    check_engine(spark, args.delta_engine)
    return spark


def lake_engine(args: argparse.Namespace, app_name: str):
    """The Delta engine the shared ``--delta-engine`` setting names, on ``--lake``."""
    from pipelines.lake.engines import make_engine

    return make_engine(args.delta_engine, lake_from(args), spark=spark_for_engine(args, app_name))


def package_version() -> str:
    """The installed distribution's version (the wheel's metadata, also inside a --py-files zip)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("offsetlake")
    except PackageNotFoundError:
        return "unknown (not installed as a distribution)"


def check_schemas() -> None:
    """Load the record formats and table contracts before any work, or stop with one line.

    Without them every record would decode as ``unknown_type`` and the command exit 0.
    """
    from pipelines.decode.formats import record_formats
    from pipelines.lake.contracts import contracts
    from pipelines.shipped_schemas import MissingSchemas

    try:
        record_formats()
        contracts()
    except MissingSchemas as exc:
        raise UserError(f"broken installation: {exc}") from exc


def _release_accumulator_server(context) -> None:
    """Let ``SparkContext.stop`` skip the driver's accumulator server: the process ends next.

    Why: stopping it waits for its request handler, which polls the JVM's connection once a
    second (pyspark.accumulators), so every command paid 0-1 s after its work was done
    (measured: 0.75 s of a 10 s ingest). Its thread is a daemon that ends with the process;
    a Unix-socket server's socket file is removed here, as its own shutdown would."""
    server = getattr(context, "_accumulatorServer", None)
    if server is None:
        return
    server.server_shutdown = True  # the handler's loop stops at its next poll
    context._accumulatorServer = None
    address = getattr(server, "server_address", None)
    if isinstance(address, str) and os.path.exists(address):
        os.remove(address)


def stop_spark() -> None:
    """Stop the active SparkSession, for a process about to end; then, when this process
    launched the JVM, its py4j gateway too.

    Why the gateway: the JVM exits when this process ends (its stdin closes), but at exit
    Java 17 waits for threads blocked in native calls, up to 300 ms, and py4j's server
    thread waits in ``accept`` until its socket closes. Anyone who reads the command's
    output through a pipe (Airflow, ``subprocess.run``, ``| tee``) waited those 300 ms: the
    JVM holds the pipe too (measured: the JVM gone 0.35 s after Python, against 0.02-0.03
    s with the gateway shut first, which takes 10 ms). A JVM that spark-submit started is
    spark-submit's to end."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return
    gateway = session.sparkContext._gateway
    _release_accumulator_server(session.sparkContext)
    session.stop()
    if getattr(gateway, "proc", None) is not None:
        gateway.shutdown()
