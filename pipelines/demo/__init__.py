"""Generate a realistic ``__consumer_offsets`` history as Kafka log segments, with its answer.

Why: tests, demos and benchmarks need a data directory that looks like what a Kafka 4.0
broker writes -- which records, in which order, in which batch shapes, with transactions,
tombstones and KIP-848 records -- *and* the state the group coordinator rebuilds from it.
The expected state is bookkept from the simulation's own events with the coordinator's
replay rules (spec 2.2-2.6, including the KIP-447 "older pending offset loses" rule), never
by decoding the files, so a decoder/replay checked against it is checked against something
independent.

The record patterns are those of the golden capture of a real broker
(``shared/corpus/golden/scenario-a``): an empty generation-0 GroupMetadata record when a
classic group is created, one record per completed rebalance written at the leader's
SyncGroup, a members-less record when the last member leaves, the same generation with a
new member id when a static member restarts, offset tombstones before the group tombstone
on DeleteGroups, KIP-848 records in the coordinator's order (member metadata, partition
metadata, group epoch, target members, target epoch, current assignment; leaving writes
8/7/5 tombstones then the epoch bump), control batches that are never compressed, base
sequence 0 on coordinator-written data batches, member ids ``<client id>-<uuid4>`` for
classic members and 22-char base64 uuids for KIP-848 members.

Everything is deterministic in ``seed`` (no wall clock, no hash randomisation), and writing
streams: stories are generators merged by timestamp, each event is encoded and written as
soon as it is produced, so memory does not grow with ``scale``.

Next to the segments, ``OUT_DIR/live/`` (+ ``OUT_DIR/capture_log.json``) holds the brokers'
answers right after the history ends, in the recorded-capture format of the golden corpus
(:func:`write_live_capture`), so the pipeline's snapshot -> reconcile step runs without a
broker: ``offsetlake snapshot --recorded OUT_DIR/live``. They are written from the same
bookkept state, never from the files, so reconciling the lake against them checks the
decoder and the replay end to end.

What is *not* simulated: offset expiration (the history spans < 7 days even at scale 2000,
so a real coordinator would not expire anything either), log compaction, topic deletion,
share/streams groups.

Layout (one module per job, one story family per module): :mod:`.world` (clock, topics,
leader epochs, events, members), :mod:`.assignors`, :mod:`.classic` and :mod:`.consumer`
(the two group protocols' records), :mod:`.stories` (classic, simple, consumer,
transactions, deletions, audit), :mod:`.expected` (the replay model), :mod:`.log` (events
-> batches -> segments, through the shared record-batch writer), :mod:`.live` (the answers),
:mod:`.manifest` (the result types) and :mod:`.generate` (entry points). Nothing in the
ingest path imports this package: it is for the CLI's ``demo`` command, tests and benchmarks.
"""

from pipelines.demo.generate import generate_cluster, main
from pipelines.demo.live import CAPTURE_DELAY_MS, write_live_capture
from pipelines.demo.log import SEGMENT_BYTES
from pipelines.demo.manifest import AbortedCommit, Committed, DemoManifest
from pipelines.demo.world import DEFAULT_START_MS

__all__ = [
    "CAPTURE_DELAY_MS",
    "DEFAULT_START_MS",
    "SEGMENT_BYTES",
    "AbortedCommit",
    "Committed",
    "DemoManifest",
    "generate_cluster",
    "main",
    "write_live_capture",
]
