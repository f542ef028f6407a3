"""delta-spark and Spark's own kafka source: the JVM ends users' clusters have.

Neither jar is installable here (Maven Central is unreachable and no PyPI package ships them),
so the tests that need them skip with the exact reason and run wherever they are given, e.g.::

    PYSPARK_SUBMIT_ARGS="--packages io.delta:delta-spark_4.2_2.13:4.4.1,\
org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 pyspark-shell" \
        .venv/bin/pytest -q tests/test_optional_jvm_ends.py

(``tests/conftest.py`` then gives the session Delta's extension and catalog.) What does not
need the jars runs here: jar detection through Spark's class loader, the pushed-down key
predicate evaluated by Spark SQL, Delta's DML transaction confs set and restored, and the
executor-side history plan of the delta-spark engine.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipelines.history.spark_writes import decode_cells, spark_arrow_schema, unpack_task
from pipelines.history.tables import HISTORY_TABLES, build_history
from pipelines.ingest import IngestConfig, ingest_segments_local, run_ingest
from pipelines.lake.contracts import contract
from pipelines.lake.engines import (
    DML_TXN_APP_ID,
    DML_TXN_VERSION,
    OP,
    DeltaRsEngine,
    SparkDeltaEngine,
    dml_transaction,
)
from pipelines.lake.keys import KeyFilter
from pipelines.sources.kafka.spark_connector import (
    DEPRECATED_OFFSET_FETCHING,
    use_consumer_offset_reader,
)
from pipelines.spark import has_delta_jars, has_kafka_connector, jvm_class_visible
from tests.conftest import table_rows
from tests.support.fake_broker import FakeKafkaCluster
from tests.support.golden_kafka import serving_scenario

pytestmark = pytest.mark.spark

ALL_TABLES = ("offsets_raw", "offset_commits", "group_metadata", "committed_offsets",
              "consumer_groups", "group_members", "group_generations", "group_records_latest")
STATE_TABLES = ALL_TABLES[3:]

NO_DELTA = ("delta-spark's JVM classes (io.delta.tables.DeltaTable) are not visible to Spark's class "
            "loader: Maven Central is unreachable here, so io.delta:delta-spark_4.2_2.13:4.4.1 cannot "
            "be fetched; run with PYSPARK_SUBMIT_ARGS='--packages io.delta:delta-spark_4.2_2.13:4.4.1 "
            "pyspark-shell'")
NO_KAFKA = ("Spark's kafka source (org.apache.spark.sql.kafka010.KafkaSourceProvider) is not visible "
            "to Spark's class loader: Maven Central is unreachable here, so "
            "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 cannot be fetched; run with "
            "PYSPARK_SUBMIT_ARGS='--packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 "
            "pyspark-shell'")


@pytest.fixture
def delta_spark(spark: Any) -> Any:
    if not has_delta_jars(spark):
        pytest.skip(NO_DELTA)
    return spark


@pytest.fixture
def kafka_spark(spark: Any) -> Any:
    if not has_kafka_connector(spark):
        pytest.skip(NO_KAFKA)
    return spark


# ------------------------------------------------------------------ jar detection (runs here)


@pytest.fixture(scope="module")
def probe_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A jar holding one class, built here with the JDK's javac and jar."""
    root = tmp_path_factory.mktemp("probe")
    src = root / "src" / "offsetlake" / "probe"
    src.mkdir(parents=True)
    (src / "Probe.java").write_text("package offsetlake.probe; public class Probe {}\n")
    classes = root / "classes"
    subprocess.run(["javac", "-d", str(classes), str(src / "Probe.java")], check=True)
    jar = root / "probe.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    return jar


def test_jar_detection_sees_jars_added_to_sparks_class_loader(spark: Any, probe_jar: Path) -> None:
    """A jar Spark loads at run time (ADD JAR, like --jars/--packages/spark.jars) is not on the
    application class path that Class.forName searches, but Spark's class loader sees it."""
    name = "offsetlake.probe.Probe"
    assert not jvm_class_visible(spark, name)
    spark.sql(f"ADD JAR '{probe_jar}'")
    with pytest.raises(Exception, match="ClassNotFoundException"):
        spark._jvm.java.lang.Class.forName(name)  # what the old detection asked
    assert jvm_class_visible(spark, name)
    assert jvm_class_visible(spark, "org.apache.spark.sql.SparkSession")
    assert not jvm_class_visible(spark, "offsetlake.probe.NoSuchClass")


# ---------------------------------------------------- delta-spark engine without jars (runs here)


def test_key_predicate_selects_exactly_the_changed_keys_in_spark_sql(spark: Any) -> None:
    rows = [("a", "g"), ("a", "h"), ("b", "g"), ("b", "it's"), ("c", "g"), ("a", "back\\slash"),
            ("a", None), ("b", "h")]
    df = spark.createDataFrame(rows, "cluster_id string, group_id string")
    wanted = {("a", "g"), ("b", "it's"), ("a", "back\\slash"), ("a", None)}
    got = {(r.cluster_id, r.group_id) for r in
           df.where(KeyFilter.of(("cluster_id", "group_id"), wanted).to_sql()).collect()}
    assert got == {("a", "g"), ("b", "it's"), ("a", "back\\slash"), ("a", None)}
    assert df.where(KeyFilter.of(("cluster_id", "group_id"), ()).to_sql()).count() == 0


def test_dml_transaction_confs_are_set_for_the_merge_and_restored(spark: Any) -> None:
    spark.conf.set(DML_TXN_VERSION, "3")  # a value the user had: put back afterwards
    try:
        with dml_transaction(spark, "app-x", 41):
            assert spark.conf.get(DML_TXN_APP_ID) == "app-x"
            assert spark.conf.get(DML_TXN_VERSION) == "41"
        assert spark.conf.get(DML_TXN_APP_ID, None) is None
        assert spark.conf.get(DML_TXN_VERSION) == "3"
        with pytest.raises(RuntimeError), dml_transaction(spark, "app-y", 1):
            raise RuntimeError("merge failed")
        assert spark.conf.get(DML_TXN_APP_ID, None) is None
    finally:
        spark.conf.unset(DML_TXN_VERSION)


def test_consumer_offset_reader_is_selected(spark: Any) -> None:
    try:
        use_consumer_offset_reader(spark)
        assert spark.conf.get(DEPRECATED_OFFSET_FETCHING) == "true"
    finally:
        spark.conf.unset(DEPRECATED_OFFSET_FETCHING)


def test_delta_spark_maintenance_sql() -> None:
    from pipelines.lake.maintain_spark import set_properties_sql

    assert set_properties_sql("s3a://b/lake/offsets_raw", {
        "delta.logRetentionDuration": "interval 720 hours",
        "delta.deletedFileRetentionDuration": "interval 720 hours"}) == (
        "ALTER TABLE delta.`s3a://b/lake/offsets_raw` SET TBLPROPERTIES ("
        "'delta.deletedFileRetentionDuration' = 'interval 720 hours', "
        "'delta.logRetentionDuration' = 'interval 720 hours')")


def _raw_of(segments: Path) -> pa.Table:
    from pipelines.sources.segments.files import find_segments
    from pipelines.sources.segments.index import cluster_of, read_range

    batches = [b for plog in find_segments(segments)
               for b in read_range(plog, 0, 1 << 62, cluster_of(plog, "gen"))]
    return pa.Table.from_batches(batches)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipelines.demo import generate_cluster

    out = tmp_path_factory.mktemp("generated")
    generate_cluster(out, num_partitions=4, seed=13)
    return out


def test_cells_unpack_to_exactly_the_history_tables(generated: Path) -> None:
    """What one task ships through the cache is the decoded history, table by table."""
    from datetime import datetime, timezone

    raw = _raw_of(generated)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    cells = decode_cells(raw, 4, now)
    expected = build_history(raw, 4, now)
    for name in HISTORY_TABLES:
        unpacked = pa.Table.from_batches(list(unpack_task(name)(iter([cells]))),
                                         schema=spark_arrow_schema(name))
        assert unpacked.num_rows == getattr(expected, name).num_rows > 0, name
        assert unpacked.cast(contract(name).arrow_schema).equals(getattr(expected, name)), name


class FrameCollectingEngine(DeltaRsEngine):
    """delta-rs where delta-spark's writer would be: it appends the DataFrames the executors
    computed (``toArrow`` here, Spark's Delta writer in :class:`SparkDeltaEngine`)."""

    commits_files = False

    def append_frame(self, contract_, frame: Any, app_id: str, version: int) -> bool:
        return self.append(contract_, frame.toArrow(), app_id, version)


def test_executor_side_history_plan_writes_the_same_tables(spark: Any, generated: Path,
                                                           tmp_path: Path) -> None:
    """The delta-spark engine's batch plan (decode on the executors, one DataFrame per
    history table, state from the tasks' summaries) gives the lake the file-committing path
    gives, on data the project generates itself."""
    plain, planned = tmp_path / "plain", tmp_path / "planned"
    for lake, engine in ((plain, None), (planned, FrameCollectingEngine(planned))):
        cfg = IngestConfig(source="segments", lake=lake, path=str(generated), cluster_id="gen",
                           max_records_per_batch=3000)
        report = run_ingest(spark, cfg, engine)
        assert report.batches >= 2 and report.rows["offsets_raw"] == report.records
    for table in ALL_TABLES:
        assert table_rows(planned, table) == table_rows(plain, table), table


# ------------------------------------------------------------- delta-spark with its jars


def _txn(table_dir: Path) -> list[tuple[str, int]]:
    out = []
    for commit in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                out.append((action["txn"]["appId"], action["txn"]["version"]))
    return out


def test_delta_spark_engine_writes_the_same_tables(delta_spark: Any, scenario_a: Path,
                                                   tmp_path: Path) -> None:
    rs, js = tmp_path / "rs", tmp_path / "spark"
    for engine, lake in (("delta-rs", rs), ("spark", js)):
        run_ingest(delta_spark, IngestConfig(source="segments", lake=lake,
                                             path=str(scenario_a / "segments"),
                                             delta_engine=engine, max_records_per_batch=5000))
    for table in ALL_TABLES:
        assert table_rows(js, table) == table_rows(rs, table), table


def test_delta_spark_engine_on_generated_data(delta_spark: Any, generated: Path, tmp_path: Path) -> None:
    rs, js = tmp_path / "rs", tmp_path / "spark"
    batches = {}
    for engine, lake in (("delta-rs", rs), ("spark", js)):
        batches[engine] = run_ingest(delta_spark, IngestConfig(
            source="segments", lake=lake, path=str(generated), cluster_id="gen",
            delta_engine=engine, max_records_per_batch=3000)).batches
    assert batches["spark"] == batches["delta-rs"] >= 2
    for table in ALL_TABLES:
        assert table_rows(js, table) == table_rows(rs, table), table
    for lake in (rs, js):  # every batch marked with Delta's txn action, whichever engine wrote it
        assert [v for _, v in _txn(lake / "offsets_raw")] == list(range(batches["spark"]))


def test_delta_spark_records_the_standard_txn_action(delta_spark: Any, tmp_path: Path) -> None:
    engine = SparkDeltaEngine(delta_spark, tmp_path)
    name = "group_records_latest"
    latest = contract(name)
    from datetime import datetime, timezone

    row = {"cluster_id": "c", "group_id": "g", "record_type": 0, "subkey": "", "is_tombstone": False,
           "offsets_partition": 0, "offset": 1, "updated_at": datetime(2026, 1, 1, tzinfo=timezone.utc)}
    data = pa.Table.from_pylist([row], schema=latest.change_schema)
    assert engine.append(latest, data, "spark-app", 5)
    changes = data.append_column(OP, pa.array(["upsert"]))
    assert engine.merge(latest, changes, "spark-app", 6)
    assert _txn(tmp_path / name)[-2:] == [("spark-app", 5), ("spark-app", 6)]
    assert DeltaRsEngine(tmp_path).committed(name, "spark-app", 6)  # delta-rs reads delta-spark's txn
    assert not engine.append(latest, data, "spark-app", 6)
    assert DeltaTable(str(tmp_path / name)).to_pyarrow_table().num_rows == 1


def test_delta_spark_lays_out_an_old_group_generations_once(delta_spark: Any, tmp_path: Path) -> None:
    """tests/test_generations_layout.py's old lake, through delta-spark: rewritten once,
    partitioned by ``is_open``, its transaction ids kept; then a MERGE closes the open row."""
    from tests.test_generations_layout import check_closed, check_laid_out, old_layout

    spec = contract("group_generations")
    old, closing = old_layout(tmp_path)
    engine = SparkDeltaEngine(delta_spark, tmp_path)
    engine.ensure(spec)
    check_laid_out(tmp_path, old)
    SparkDeltaEngine(delta_spark, tmp_path).ensure(spec)
    assert DeltaTable(str(tmp_path / "group_generations")).version() == 1
    assert engine.merge(spec, closing, "new-app", 0)
    check_closed(tmp_path)


def test_delta_skips_a_replayed_merge_through_the_dml_confs(delta_spark: Any, tmp_path: Path) -> None:
    """Delta itself (not our log check) skips a MERGE whose (app id, version) is recorded."""
    from delta.tables import DeltaTable as SparkTable

    path = str(tmp_path / "t")
    delta_spark.createDataFrame([(1, "a")], "k int, v string").write.format("delta").save(path)
    source = delta_spark.createDataFrame([(2, "b")], "k int, v string")

    def merge() -> None:
        with dml_transaction(delta_spark, "dml-app", 9):
            (SparkTable.forPath(delta_spark, path).alias("t").merge(source.alias("s"), "t.k = s.k")
             .whenNotMatchedInsertAll().execute())

    merge()
    version = DeltaTable(path).version()
    merge()
    assert DeltaTable(path).version() == version
    assert DeltaTable(path).transaction_version("dml-app") == 9
    assert sorted(r.k for r in delta_spark.read.format("delta").load(path).collect()) == [1, 2]


def test_engines_recognise_each_others_commits(delta_spark: Any, scenario_a: Path, tmp_path: Path) -> None:
    """A lake written by one engine and replayed by the other writes nothing twice."""
    segments = scenario_a / "segments"
    for first, second in (("delta-rs", "spark"), ("spark", "delta-rs")):
        lake = tmp_path / f"{first}-then-{second}"
        engines = {"delta-rs": DeltaRsEngine(lake), "spark": SparkDeltaEngine(delta_spark, lake)}
        ingest_segments_local(segments, lake, engine=engines[first], app_id="shared-app")
        before = {t: DeltaTable(str(lake / t)).version() for t in ALL_TABLES}
        report = ingest_segments_local(segments, lake, engine=engines[second], app_id="shared-app")
        assert report.skipped_batches == report.batches > 0
        assert {t: DeltaTable(str(lake / t)).version() for t in ALL_TABLES} == before


def test_delta_spark_maintenance_keeps_rows_and_raises_retention(delta_spark: Any, generated: Path,
                                                                tmp_path: Path) -> None:
    from pipelines.lake.maintain_spark import maintain_with_spark

    lake = tmp_path / "lake"
    ingest_segments_local(generated, lake, cluster_id="gen", max_records_per_batch=500)
    before = {t: table_rows(lake, t) for t in ALL_TABLES}
    report = maintain_with_spark(delta_spark, lake, retention_hours=200)
    assert set(ALL_TABLES) <= set(report["tables"])
    assert {t: table_rows(lake, t) for t in ALL_TABLES} == before
    config = DeltaTable(str(lake / "offsets_raw")).metadata().configuration
    assert config["delta.deletedFileRetentionDuration"] == "interval 200 hours"
    assert "delta.logRetentionDuration" not in config  # Delta's default (720 h) is already longer


# ------------------------------------------------------- Spark's kafka source with its jar


@pytest.fixture
def golden_kafka(scenario_a: Path) -> Iterator[FakeKafkaCluster]:
    """The in-test Kafka protocol server serving the five real scenario-a logs."""
    with serving_scenario(scenario_a, max_lifetime_s=600) as cluster:
        yield cluster


def _records(lake: Path, columns: tuple[str, ...]) -> list[tuple]:
    rows = DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table().to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in rows if not r["is_control"])


def test_spark_kafka_source_gives_the_tables_of_the_kafka_source(
        kafka_spark: Any, golden_kafka: FakeKafkaCluster, scenario_a: Path, tmp_path: Path) -> None:
    """Every record a read_committed consumer gets, and the same tables as ``--source kafka``.

    Spark's source sees no batches, so the batch columns (producer ids, transactional flag,
    control markers) are the only difference."""
    from tests.test_ingest import lake_offsets, live_offsets

    lakes = {}
    for source in ("kafka", "spark-kafka"):
        lakes[source] = tmp_path / source
        report = run_ingest(kafka_spark, IngestConfig(
            source=source, lake=lakes[source], bootstrap_servers=golden_kafka.bootstrap_servers,
            max_records_per_batch=4000))
        assert report.records > 0, source
    spark_lake, kafka_lake = lakes["spark-kafka"], lakes["kafka"]

    consumed = set()
    with open(scenario_a / "consumed_read_committed.jsonl") as fh:
        for line in fh:
            r = json.loads(line)
            consumed.add((r["partition"], r["offset"], r["key"], r["value"]))
    got = {(p, o, k.hex(), None if v is None else v.hex())
           for p, o, k, v in _records(spark_lake, ("offsets_partition", "offset", "key", "value"))}
    assert got == consumed

    record_cols = ("offsets_partition", "offset", "timestamp", "timestamp_type", "key", "value",
                   "record_type", "decode_status")
    assert _records(spark_lake, record_cols) == _records(kafka_lake, record_cols)
    batch_cols = ("producer_id", "is_transactional")
    assert table_rows(spark_lake, "offset_commits", drop=batch_cols) \
        == table_rows(kafka_lake, "offset_commits", drop=batch_cols)
    for table in ("group_metadata", *STATE_TABLES):
        assert table_rows(spark_lake, table) == table_rows(kafka_lake, table), table
    assert lake_offsets(spark_lake) == live_offsets(scenario_a)
