"""Simple-group stories: ``assign()``-only consumers that commit offsets and nothing else.

Why: Spark and Flink commit through groups that never join, so their offsets exist without
any GroupMetadata record; the state must still list them (as simple groups).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pipelines.demo.world import Event, Story, World

__all__ = ["flink_checkpoints", "spark_ingest"]


def spark_ingest(w: World) -> Iterator[Event]:
    s = Story(w, "spark-ingest")
    tps = w.tps(["spark-src"])
    for batch_id, ts in enumerate(w.ticks(s.rng, w.at(0.02), w.at(0.995), w.rounds(40))):
        md = json.dumps({"batchId": batch_id, "source": "spark-src"}, separators=(",", ":"))
        yield s.commit(ts, tps, md, epochs=False)


def flink_checkpoints(w: World) -> Iterator[Event]:
    s = Story(w, "flink-checkpoints")
    tps = w.tps(["orders"])
    for ts in w.ticks(s.rng, w.at(0.10), w.at(0.90), w.rounds(20)):
        yield s.commit(ts, tps, "", epochs=True)
