"""The stories, one per group, and the order the generator merges them in.

Why here: :data:`STORIES` describes every group for the manifest, and :data:`STORY_FUNCS`
fixes the merge order (equal timestamps keep this order, so it is part of the bytes).
"""

from __future__ import annotations

from pipelines.demo.stories.audit import audit_trail
from pipelines.demo.stories.classic import (
    billing_batch,
    events_etl,
    kip70,
    orders_processor,
    payments_static,
)
from pipelines.demo.stories.consumer import clicks_848, inventory_848, legacy_upgrade, mixed_migrate
from pipelines.demo.stories.deletions import doomed_848, doomed_classic, reporting_offdel
from pipelines.demo.stories.simple import flink_checkpoints, spark_ingest
from pipelines.demo.stories.transactions import txn_pipeline, txn_standalone

__all__ = ["STORIES", "STORY_FUNCS"]

STORIES: dict[str, str] = {
    "orders-processor": "classic/range, Java clients: m1 alone, m2 joins, m3 joins (gen 3), "
                        "m1 leaves (gen 4), m1 restarts with a new member id (gen 5); commits "
                        "'<client>@gen<N>' (m3 plain commit(), metadata ''), ends Stable",
    "billing-batch": "classic/range, kafka-python: w1, w2 join one by one, w2 leaves, w1 leaves "
                     "(Empty); a later run w3 joins, commits and leaves; ends Empty (gen 6)",
    "payments-static": "classic/sticky, static membership (group.instance.id): two static "
                       "members; one restarts without LeaveGroup and comes back with a new "
                       "member id in the same generation; ends Stable (gen 2)",
    "kip70-analytics": "classic/range: subscribes [foo], commits, re-subscribes [foo, bar] "
                       "(KIP-70, rebalance to gen 2), commits; ends Stable",
    "events-etl": "classic/roundrobin, librdkafka auto-commit on 24 partitions: the bulk of "
                  "multi-partition commit batches; 1, 2 then 3 members; ends Stable",
    "spark-ingest": "simple group (assign() only, no GroupMetadata): Spark-style JSON metadata "
                    "per micro-batch",
    "flink-checkpoints": "simple group: checkpoint commits, leader epoch only on consumed "
                         "partitions (-1 elsewhere)",
    "txn-pipeline": "classic member + transactional producer (KIP-447): periodic transactions "
                    "(every 7th aborted), producer restart (epoch bump), then T-a commit, T-b "
                    "ABORT, T-c interleaved with a non-transactional commit of the same "
                    "partitions (the older transactional offset loses), T-d after a "
                    "non-transactional commit (it wins); the consumer leaves (Empty)",
    "txn-standalone": "simple group committed only through transactions: one committed, one "
                      "ABORTED touching partitions that never get a committed offset",
    "reporting-offdel": "classic: commits, goes Empty, OffsetDelete of payments-0..3 and "
                        "orders-0 (offset tombstones only)",
    "doomed-classic": "classic: commits, goes Empty, DeleteGroups (offset tombstones, then the "
                      "GroupMetadata tombstone in the same batch)",
    "clicks-848": "KIP-848 consumer group (Java): m1, then a static member (revocation via "
                  "UNREVOKED/UNRELEASED states), then m3; commits with leader epochs; ends "
                  "Stable with every member at the target epoch",
    "inventory-848": "KIP-848 consumer group: two members, both leave one by one (member "
                     "tombstones, epoch bumps, partition metadata emptied); ends Empty",
    "doomed-848": "KIP-848 consumer group: member joins, commits, leaves; DeleteGroups "
                  "(offset tombstones, then 6/4/3 tombstones)",
    "legacy-upgrade": "classic group goes Empty, then a KIP-848 member converts it "
                      "(GroupMetadata tombstone followed by records 5,4,3,7,6,8); ends consumer "
                      "Stable, classic-era offsets kept",
    "audit-trail": "classic: a member rewinds one partition (reprocessing), re-subscribes "
                   "so a rebalance takes the ledger partitions from it and still commits one "
                   "of them (zombie), leaves (Empty); an admin resets ledger to 0 (rewinds "
                   "while Empty) and sets audit-0 beyond its log end; listed in the manifest's "
                   "'audit' section",
    "mixed-migrate": "online upgrade: a classic member is active when a KIP-848 member joins "
                     "(classic member re-written as type 5 with classicMemberMetadata); ends "
                     "consumer Stable with one classic-protocol member",
}

STORY_FUNCS = (
    events_etl, orders_processor, spark_ingest, clicks_848, billing_batch, txn_pipeline,
    kip70, payments_static, flink_checkpoints, inventory_848, reporting_offdel,
    txn_standalone, doomed_classic, doomed_848, legacy_upgrade, mixed_migrate, audit_trail,
)
