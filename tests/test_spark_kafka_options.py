"""How ``--source spark-kafka`` asks Spark's kafka source for ``__consumer_offsets``.

Why: Spark's kafka source lists partitions through an admin client that drops internal
topics, so ``subscribe`` reads 0 records from ``__consumer_offsets`` and exits 0. These
tests pin the options that avoid it (explicit ``assign`` of every partition listed from
the cluster's metadata, ``startingOffsets`` naming each one, read_committed, failing on data
loss unless allowed) without the connector jar; the read itself is proven where the jar
exists (tests/test_optional_jvm_ends.py).
"""

from __future__ import annotations

import json

import pytest

from pipelines.sources.kafka.spark_connector import (
    SparkKafkaConfigError,
    assign_json,
    kafka_python_settings,
    list_partitions,
    reader_options,
    starting_offsets_json,
)
from tests.support.fake_broker import OFFSETS_TOPIC, FakeKafkaCluster


def test_assign_lists_every_partition_once_in_order() -> None:
    assert assign_json([2, 0, 1, 1]) == '{"__consumer_offsets":[0,1,2]}'
    assert json.loads(assign_json(range(50))) == {"__consumer_offsets": list(range(50))}
    with pytest.raises(SparkKafkaConfigError):
        assign_json([])


def test_starting_offsets_name_each_partition_at_earliest() -> None:
    assert starting_offsets_json([1, 0]) == '{"__consumer_offsets":{"0":-2,"1":-2}}'


def test_reader_options_default_to_read_committed_and_failing_on_data_loss() -> None:
    options = reader_options("h1:9092,h2:9092", [0, 1, 2], max_records_per_batch=1000)
    assert options == {
        "kafka.bootstrap.servers": "h1:9092,h2:9092",
        "assign": '{"__consumer_offsets":[0,1,2]}',
        "startingOffsets": '{"__consumer_offsets":{"0":-2,"1":-2,"2":-2}}',
        "kafka.isolation.level": "read_committed",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "maxOffsetsPerTrigger": "1000",
    }
    assert "subscribe" not in options


def test_allow_data_loss_is_the_only_way_to_stop_failing() -> None:
    assert reader_options("h:1", [0], allow_data_loss=True)["failOnDataLoss"] == "false"
    with pytest.raises(SparkKafkaConfigError, match="--allow-data-loss"):
        reader_options("h:1", [0], kafka_options={"failOnDataLoss": "false"})


@pytest.mark.parametrize("key", ["isolation.level", "kafka.isolation.level", "subscribe",
                                 "kafka.bootstrap.servers", "assign", "startingOffsets"])
def test_options_that_change_what_is_read_are_refused(key: str) -> None:
    with pytest.raises(SparkKafkaConfigError):
        reader_options("h:1", [0], kafka_options={key: "x"})


def test_consumer_settings_get_the_kafka_prefix() -> None:
    options = reader_options("h:1", [0], kafka_options={"security.protocol": "SASL_SSL",
                                                        "kafka.sasl.mechanism": "SCRAM-SHA-512"})
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"


def test_partition_listing_takes_the_java_settings_in_kafka_pythons_form() -> None:
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";'
    assert kafka_python_settings({"kafka.security.protocol": "SASL_SSL",
                                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas,
                                  "bootstrap.servers": "h:1", "client.id": "audit"}) == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "u", "sasl_plain_password": "p", "client_id": "audit"}


def test_partition_listing_skips_java_only_settings_and_refuses_contradictions() -> None:
    assert kafka_python_settings({"some.java.only.setting": "1"}) == {}
    with pytest.raises(SparkKafkaConfigError, match=r"needs sasl\.mechanism"):
        kafka_python_settings({"security.protocol": "SASL_SSL"})


def test_partitions_come_from_the_clusters_metadata() -> None:
    """The driver lists the internal topic's partitions itself, over the Kafka protocol."""
    with FakeKafkaCluster(max_lifetime_s=60) as cluster:
        cluster.add_topic(OFFSETS_TOPIC, 7)
        cluster.add_topic("orders", 3)
        assert list_partitions(cluster.bootstrap_servers) == list(range(7))
        assert list_partitions(cluster.bootstrap_servers, topic="orders") == [0, 1, 2]
