"""Spark's built-in ``kafka`` source, mapped onto the raw-record schema.

For clusters whose Spark has the spark-sql-kafka connector on its classpath.

Why it is read the way it is:

* ``__consumer_offsets`` is an internal topic, and Spark's kafka source drops internal
  topics whenever it lists partitions through its admin client (``ConsumerStrategy.
  retrieveAllPartitions`` filters ``TopicDescription.isInternal``, for ``subscribe`` *and*
  ``assign``): ``subscribe`` then reads 0 records and exits 0. So the driver lists the
  topic's partitions from the cluster metadata itself (kafka-python), every partition is
  given with an explicit ``assign``, and the query uses the consumer-based offset reader
  (``spark.sql.streaming.kafka.useDeprecatedOffsetFetching=true``), which takes the assigned
  partitions as they are. ``startingOffsets`` names every partition (``-2`` = earliest): the
  admin reader, if it were ever used anyway, fails loudly on the mismatch ("you must specify
  all TopicPartitions") instead of reading nothing.
* ``kafka.isolation.level=read_committed``: aborted transactional commits never arrive
  (spec 2.4), exactly what the group coordinator applies.
* ``failOnDataLoss=true`` unless the caller allows data loss: records the topic no longer
  has (retention, compaction ran past the checkpoint, a recreated topic) fail the query
  instead of silently leaving a gap in an audit trail.

The consumer API cannot see producer ids, batch facts or control records, so those columns
are null (``is_control`` false).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping

from pipelines.sources.kafka.options import OFFSETS_TOPIC
from pipelines.sources.kafka.wire import describe_topic
from pipelines.sources.raw import RAW_ARROW_SCHEMA

log = logging.getLogger(__name__)

NAME = "spark-kafka"
#: Spark SQL conf selecting the consumer-based offset reader, the one that keeps internal topics.
DEPRECATED_OFFSET_FETCHING = "spark.sql.streaming.kafka.useDeprecatedOffsetFetching"
#: Kafka's "earliest" in Spark's startingOffsets JSON.
EARLIEST = -2

#: Source options this module sets itself; a user option may not change them.
_OWNED_OPTIONS = {
    "assign": "the source assigns every partition of the topic itself",
    "subscribe": "subscribe drops internal topics such as __consumer_offsets",
    "subscribepattern": "subscribePattern drops internal topics such as __consumer_offsets",
    "startingoffsets": "the source starts every partition at its earliest offset",
    "failondataloss": "use --allow-data-loss",
    "kafka.isolation.level": "the source always reads read_committed",
    "kafka.bootstrap.servers": "use --bootstrap-servers",
}


class SparkKafkaConfigError(ValueError):
    """A setting that would make Spark's kafka source read something other than the topic."""


def assign_json(partitions: Iterable[int], topic: str = OFFSETS_TOPIC) -> str:
    """Spark's ``assign`` option: ``{"topic": [p, ...]}`` with every partition, sorted."""
    parts = sorted({int(p) for p in partitions})
    if not parts:
        raise SparkKafkaConfigError(f"no partitions of {topic} to assign")
    return json.dumps({topic: parts}, separators=(",", ":"))


def starting_offsets_json(partitions: Iterable[int], topic: str = OFFSETS_TOPIC) -> str:
    """``startingOffsets`` naming every partition at earliest (``{"topic": {"0": -2, ...}}``)."""
    parts = sorted({int(p) for p in partitions})
    return json.dumps({topic: {str(p): EARLIEST for p in parts}}, separators=(",", ":"))


def reader_options(bootstrap_servers: str, partitions: Iterable[int], *,
                   max_records_per_batch: int | None = None,
                   kafka_options: Mapping[str, str] | None = None,
                   allow_data_loss: bool = False, topic: str = OFFSETS_TOPIC) -> dict[str, str]:
    """Every option given to ``spark.readStream.format("kafka")`` (pure: unit-testable).

    ``kafka_options`` are consumer settings, with or without the ``kafka.`` prefix; the ones
    that would change what is read are refused.
    """
    parts = sorted({int(p) for p in partitions})
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "assign": assign_json(parts, topic),
        "startingOffsets": starting_offsets_json(parts, topic),
        "kafka.isolation.level": "read_committed",
        "failOnDataLoss": "false" if allow_data_loss else "true",
        "includeHeaders": "false",
    }
    if max_records_per_batch:
        options["maxOffsetsPerTrigger"] = str(int(max_records_per_batch))
    for key, value in (kafka_options or {}).items():
        name = key if key.startswith("kafka.") else f"kafka.{key}"
        for owned in (key.lower(), name.lower()):
            if owned in _OWNED_OPTIONS:
                raise SparkKafkaConfigError(f"option {key} cannot be set: {_OWNED_OPTIONS[owned]}")
        options[name] = value
    return options


def kafka_python_settings(kafka_options: Mapping[str, str] | None) -> dict[str, object]:
    """The consumer settings as kafka-python takes them (through the project's one strict
    option normaliser: a JAAS line becomes username and password, TLS files map, ...).

    Used only to list the topic's partitions on the driver; settings only the Java client
    has (no kafka-python form) are left to Spark's consumers.
    """
    from kafka import KafkaConsumer

    from pipelines.kafka_options import KafkaOptionError, normalize

    raw = {key.removeprefix("kafka."): value for key, value in (kafka_options or {}).items()
           if key.removeprefix("kafka.") != "bootstrap.servers"}
    known = {}
    for key, value in raw.items():
        try:
            normalize({key: value}, KafkaConsumer.DEFAULT_CONFIG)
        except KafkaOptionError as exc:
            if str(exc).startswith("unknown Kafka option"):
                log.debug("listing partitions without consumer setting %s (Java client only)", key)
                continue
        known[key] = value
    try:
        return normalize(known, KafkaConsumer.DEFAULT_CONFIG)
    except KafkaOptionError as exc:
        raise SparkKafkaConfigError(str(exc)) from None


def list_partitions(bootstrap_servers: str, kafka_options: Mapping[str, str] | None = None,
                    topic: str = OFFSETS_TOPIC) -> list[int]:
    """The topic's partitions from the cluster's metadata (driver side, kafka-python).

    Raises the Kafka source's named errors (unreachable cluster, topic not found)."""
    return sorted(describe_topic(bootstrap_servers, topic, **kafka_python_settings(kafka_options)))


def use_consumer_offset_reader(spark) -> None:
    """Select the consumer-based offset reader for this session's kafka queries.

    The admin-based reader filters internal topics out of every assignment; a user who
    explicitly chose it gets a clear error instead of an empty ingest.
    """
    current = spark.conf.get(DEPRECATED_OFFSET_FETCHING, None)
    if current is not None and current.strip().lower() == "false" and _user_set(spark):
        raise SparkKafkaConfigError(
            f"{DEPRECATED_OFFSET_FETCHING}=false was set, but Spark's admin-based offset reader drops "
            f"internal topics: {OFFSETS_TOPIC} would read 0 records. Unset it or set it to true.")
    spark.conf.set(DEPRECATED_OFFSET_FETCHING, "true")


def _user_set(spark) -> bool:
    """Whether the conf was given to Spark (``--conf``, spark-defaults), not just defaulted."""
    try:
        return spark.sparkContext.getConf().contains(DEPRECATED_OFFSET_FETCHING)
    except Exception:  # a Spark Connect session has no SparkContext: trust the value
        return True


def read_stream(
    spark,
    bootstrap_servers: str,
    cluster_id: str,
    max_records_per_batch: int | None,
    kafka_options: dict[str, str] | None = None,
    topic: str = OFFSETS_TOPIC,
    allow_data_loss: bool = False,
    partitions: Iterable[int] | None = None,
):
    """The raw-record streaming DataFrame of ``topic`` through Spark's kafka source.

    ``partitions`` defaults to every partition the cluster's metadata lists now.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    parts = sorted(partitions) if partitions is not None else list_partitions(
        bootstrap_servers, kafka_options, topic)
    options = reader_options(bootstrap_servers, parts, max_records_per_batch=max_records_per_batch,
                             kafka_options=kafka_options, allow_data_loss=allow_data_loss,
                             topic=topic)
    use_consumer_offset_reader(spark)
    log.info("reading %s through Spark's kafka source: %d partitions assigned, read_committed%s",
             topic, len(parts), ", data loss allowed" if allow_data_loss else "")
    df = spark.readStream.format("kafka").options(**options).load()
    columns = {
        "cluster_id": F.lit(cluster_id),
        "offsets_partition": F.col("partition"),
        "offset": F.col("offset"),
        "timestamp": F.col("timestamp"),
        "timestamp_type": F.col("timestampType"),
        "key": F.col("key"),
        "value": F.col("value"),
        "is_control": F.lit(False),
        "source": F.lit(NAME),
        "source_position": F.lit(-1),
    }
    return df.select(
        *[
            (columns.get(f.name, F.lit(None))).cast(from_arrow_type(f.type)).alias(f.name)
            for f in RAW_ARROW_SCHEMA
        ]
    )
