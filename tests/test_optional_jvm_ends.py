"""delta-spark and Spark's own kafka source: tested wherever their JVM jars are on the classpath.

Neither jar is installable here (Maven Central is unreachable and no PyPI package ships them);
users' clusters have them. Run with e.g.
``PYSPARK_SUBMIT_ARGS="--packages io.delta:delta-spark_2.13:4.0.0 pyspark-shell"``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.ingest import IngestConfig, run_ingest
from pipelines.spark import has_delta_jars, has_kafka_connector
from tests.conftest import table_rows
from tests.test_ingest import ALL_TABLES

pytestmark = pytest.mark.spark


def test_delta_spark_engine_writes_the_same_tables(spark, scenario_a: Path, tmp_path: Path) -> None:
    if not has_delta_jars(spark):
        pytest.skip("delta-spark's JVM classes are not on Spark's classpath in this environment")
    rs, js = tmp_path / "rs", tmp_path / "spark"
    for engine, lake in (("delta-rs", rs), ("spark", js)):
        run_ingest(spark, IngestConfig(source="segments", lake=lake, path=str(scenario_a / "segments"),
                                       delta_engine=engine, max_records_per_batch=5000))
    for table in ALL_TABLES:
        assert table_rows(js, table) == table_rows(rs, table), table


def test_spark_kafka_source_maps_onto_the_raw_schema(spark) -> None:
    if not has_kafka_connector(spark):
        pytest.skip("spark-sql-kafka is not on Spark's classpath in this environment")
    from pipelines.sources.spark_kafka import read_stream

    df = read_stream(spark, "127.0.0.1:1", "c", 1000)
    from pipelines.sources.raw import RAW_ARROW_SCHEMA

    assert df.columns == RAW_ARROW_SCHEMA.names
