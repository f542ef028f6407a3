"""The cluster's own answers about groups and committed offsets, as a snapshot.

Why: reconciliation needs what the brokers say, taken at a known point (spec section 3).
One module a job: :mod:`.live` (:func:`~.live.capture_snapshot`: connect and capture),
:mod:`.capture` (the group requests, in the snapshot's order), :mod:`.wire` (sending,
metadata, list offsets), :mod:`.record_times` (the records the time lag needs),
:mod:`.messages` (the describe APIs kafka-python lacks), :mod:`.assemble` (rows from a live
capture's answers), :mod:`.recorded` (:func:`~.recorded.snapshot_from_recorded`: the same
snapshot from a recorded capture), :mod:`.rows` (:class:`~.rows.ClusterSnapshot` and its
rows), :mod:`.lag` (offset and time lag rows), :mod:`.errors` (error codes and names).
Pure Python on kafka-python 3.x; no Spark.
"""
