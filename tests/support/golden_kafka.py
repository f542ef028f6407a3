"""The in-test Kafka protocol server serving a real scenario's ``__consumer_offsets`` logs.

Why: the Kafka source tests and the JVM-ends tests both read scenario-a's real
broker-written partitions over the wire; this is the one place that loads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.fake_broker import OFFSETS_TOPIC, FakeKafkaCluster

__all__ = ["serving_scenario"]


@contextmanager
def serving_scenario(scenario: Path, *, max_lifetime_s: int) -> Iterator[FakeKafkaCluster]:
    """Fake brokers serving the scenario's five ``__consumer_offsets`` partitions, each from
    its segment files in order."""
    with FakeKafkaCluster(max_lifetime_s=max_lifetime_s) as cluster:
        for p in range(5):
            cluster.load_segments(OFFSETS_TOPIC, p, sorted(
                (scenario / "segments" / f"{OFFSETS_TOPIC}-{p}").glob("*.log")))
        yield cluster
