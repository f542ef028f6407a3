"""The reconciliation classes: every way the lake and the cluster's answers can differ.

Why: the classification (:mod:`pipelines.reconcile.reconcile`) writes these classes and the
quality gate (:mod:`pipelines.reconcile.quality`) checks that every row carries a known one;
both read the one table here. Many differences are expected (spec 5 item 5), so each class
says whether it is *explained*:

========================  ========  ==================================================
class                     explained  meaning
========================  ========  ==================================================
match                     yes       both sides agree
offset_mismatch           no        committed offsets differ
leader_epoch_mismatch     no        offsets agree, leader epochs differ
metadata_mismatch         no        offsets and epochs agree, metadata differs
missing_in_lake           no        the broker has it, the lake does not
missing_on_broker         no        the lake has it, the broker does not
lake_behind               yes       a difference, and the lake had not ingested the
                                    group's ``__consumer_offsets`` partition up to the
                                    snapshot's high watermark (or stopped at the LSO,
                                    as read_committed sources must, spec 2.4)
lake_ahead                yes       a difference, and the lake's record lies at/after
                                    the snapshot point, so the answer may predate it
open_transaction          yes       UNSTABLE_OFFSET_COMMIT from a require_stable
                                    snapshot: a pending transactional commit (spec 3.2)
group_tombstoned          yes       the lake's group is deleted but its offsets live;
                                    the Java coordinator then answers nothing (spec 2.5)
fetch_error               no        the broker answered a group/partition error, so
                                    nothing was verified (retry)
not_authorized            no        the snapshot's principal was refused the group
                                    (GROUP_AUTHORIZATION_FAILED) or the topic
                                    (TOPIC_AUTHORIZATION_FAILED): nothing verified; grant
                                    DESCRIBE (README "Security"), or accept it with
                                    ``--allow-partial`` (then counted as explained)
type_mismatch             no        group rows: type or protocol type differ ('simple'
                                    in the lake = classic with protocol type '')
state_mismatch            no        group rows: state (or a described group/assignment epoch) differs
member_mismatch           no        group rows: member ids differ
state_transient           yes       group rows: the broker is in an in-memory-only
                                    state (PreparingRebalance, CompletingRebalance,
                                    Dead) the log cannot show (spec 2.5)
========================  ========  ==================================================
"""

from __future__ import annotations

EXPLAINED: dict[str, bool] = {
    "match": True,
    "offset_mismatch": False,
    "leader_epoch_mismatch": False,
    "metadata_mismatch": False,
    "missing_in_lake": False,
    "missing_on_broker": False,
    "lake_behind": True,
    "lake_ahead": True,
    "open_transaction": True,
    "group_tombstoned": True,
    "fetch_error": False,
    "not_authorized": False,
    "type_mismatch": False,
    "state_mismatch": False,
    "member_mismatch": False,
    "state_transient": True,
}
CLASSES = tuple(EXPLAINED)

# Broker states the log cannot show: rebalance phases live in memory only (spec 2.5);
# Dead is a group being unloaded/removed.
TRANSIENT_STATES = frozenset({"PreparingRebalance", "CompletingRebalance", "Dead"})
# The log yields classic Empty/Stable and consumer, share and streams group states from the
# persisted epochs and member records (spec 5 item 6; checked against real 4.2 answers).
STATE_COMPARABLE_TYPES = frozenset({"classic", "consumer", "share", "streams"})
# A streams group is NotReady while its topology's topics are missing: cluster metadata,
# not the log, decides it.
METADATA_STATES = frozenset({"NotReady"})

__all__ = ["CLASSES", "EXPLAINED", "METADATA_STATES", "STATE_COMPARABLE_TYPES",
           "TRANSIENT_STATES"]
