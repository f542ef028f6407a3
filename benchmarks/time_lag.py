"""Benchmark: the cost of exact time lag in ``snapshot``, by partition count.

Why: reading the record at each committed offset must stay a handful of requests per broker
however many partitions the groups hold (issue 11). This captures a snapshot of the in-test
Kafka protocol server (tests/support/fake_broker.py, 3 brokers, real v2 record batches) with
``--groups`` groups committed at different offsets of every partition, and prints the wall
time and the requests per API key, with and without the time-lag reads (the baseline: the
same capture before issue 11, i.e. only ListOffsets for end offsets).

Usage: ``python benchmarks/time_lag.py [--partitions 1000 10000] [--groups 2] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.reconcile.cluster.capture import Capture
from pipelines.reconcile.cluster.live import capture_snapshot
from tests.support.fake_broker import FakeKafkaCluster, record_batch

log = logging.getLogger("benchmarks.time_lag")
APIS = ("Fetch", "ListOffsets", "Metadata", "OffsetFetch")


def _without_time_lag():
    """The capture without step 6 (the Fetches): the baseline."""
    async def skip(self, held):
        from pipelines.reconcile.cluster.record_times import RecordTimes
        return RecordTimes()
    return skip


def run(partitions: int, groups: int, repeat: int) -> None:
    with FakeKafkaCluster(num_brokers=3, max_lifetime_s=3600) as fk:
        fk.add_topic("bench", partitions)
        for p in range(partitions):
            for i in range(groups + 1):  # one ~1 KB batch per offset: one read cannot serve two
                fk.append_records("bench", p, record_batch([(b"k", b"v" * 1000)],
                                                           timestamp_ms=1_700_000_000_000 + i))
            for g in range(groups):
                fk.commit(f"g{g}", "bench", p, g)
        original = Capture.read_record_times
        for label in ("with time lag", "baseline (no reads)"):
            if label.startswith("baseline"):
                Capture.read_record_times = _without_time_lag()
            best = float("inf")
            counts: dict[str, int] = {}
            try:
                for _ in range(repeat):
                    fk.reset_counters()
                    start = time.perf_counter()
                    snap = capture_snapshot(fk.bootstrap_servers, timeout_s=10)
                    best = min(best, time.perf_counter() - start)
                    counts = {api: fk.count(api) for api in APIS}
            finally:
                Capture.read_record_times = original
            known = sum(1 for r in snap.lag if r.time_lag_ms is not None)
            print(f"{partitions:>6} partitions x {groups} groups, {label:<20}: "
                  f"{best:6.2f} s  time lags known {known}/{len(snap.lag)}  "
                  + "  ".join(f"{k}={v}" for k, v in counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for n in args.partitions:
        run(n, args.groups, args.repeat)


if __name__ == "__main__":
    main()
