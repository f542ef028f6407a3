"""One place that builds SparkSessions the way this project needs them (see PLATFORM.md)."""

from __future__ import annotations

import os
import sys


def spark_session(app_name: str = "offsetlake", master: str | None = None, delta_spark: bool = False,
                  extra_conf: dict[str, str] | None = None):
    """A SparkSession; local[2] unless a master is given or spark-submit already set one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the JVM started this process (PYSPARK_GATEWAY_PORT is set) and the
    # master comes from spark-submit; standalone runs default to local Spark.
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or os.environ.get("OFFSETLAKE_SPARK_MASTER", "local[2]"))
    conf = {
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        # micro-batches come to the driver as Arrow: give its JVM room for ~1M-record batches
        "spark.driver.memory": os.environ.get("OFFSETLAKE_SPARK_DRIVER_MEMORY", "4g"),
        "spark.driver.maxResultSize": "0",
    }
    if delta_spark:
        conf["spark.sql.extensions"] = "io.delta.sql.DeltaSparkSessionExtension"
        conf["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # Failures reach the user through our own one-line errors; Spark's JVM traces only
    # with OFFSETLAKE_SPARK_LOG_LEVEL=WARN (or lower).
    spark.sparkContext.setLogLevel(os.environ.get("OFFSETLAKE_SPARK_LOG_LEVEL", "FATAL"))
    return spark


def has_delta_jars(spark) -> bool:
    """Whether delta-spark's JVM classes are on the classpath (they are not installable here)."""
    try:
        spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
        return True
    except Exception:
        return False


def has_kafka_connector(spark) -> bool:
    try:
        spark._jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.KafkaSourceProvider")
        return True
    except Exception:
        return False
