"""Spark's built-in ``kafka`` source, mapped onto the raw-record schema.

For clusters whose Spark has the spark-sql-kafka connector on its classpath. It reads
with ``kafka.isolation.level=read_committed`` so aborted transactional commits never
arrive (spec 2.4); the consumer API cannot see producer ids or batch facts, so those
columns are null.
"""

from __future__ import annotations

from pipelines.sources.raw import RAW_ARROW_SCHEMA

TOPIC = "__consumer_offsets"


def read_stream(
    spark,
    bootstrap_servers: str,
    cluster_id: str,
    max_records_per_batch: int | None,
    kafka_options: dict[str, str] | None = None,
    topic: str = TOPIC,
):
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "false")
    )
    if max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_batch))
    for key, value in (kafka_options or {}).items():
        reader = reader.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
    df = reader.load()
    columns = {
        "cluster_id": F.lit(cluster_id),
        "offsets_partition": F.col("partition"),
        "offset": F.col("offset"),
        "timestamp": F.col("timestamp"),
        "timestamp_type": F.col("timestampType"),
        "key": F.col("key"),
        "value": F.col("value"),
        "is_control": F.lit(False),
        "source": F.lit("spark-kafka"),
        "source_position": F.lit(-1),
    }
    from pyspark.sql.pandas.types import from_arrow_type

    return df.select(
        *[
            (columns.get(f.name, F.lit(None))).cast(from_arrow_type(f.type)).alias(f.name)
            for f in RAW_ARROW_SCHEMA
        ]
    )
