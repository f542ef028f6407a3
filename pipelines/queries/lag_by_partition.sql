-- Current consumer lag per (group, topic, partition).
--
-- The lake's current committed offset (committed_offsets) against the log end offset of the
-- partition in the latest cluster snapshot that recorded one (snapshot_log_end_offsets, latest
-- by captured_at per cluster; or :snapshot_id). lag = log_end_offset - committed_offset, not
-- below 0 (a commit newer than the snapshot can be past its end offset:
-- committed_after_snapshot says so); null when the snapshot has no end offset for the
-- partition, or there is no snapshot at all. Run `offsetlake snapshot` to record one.
--
-- Time lag beside it, from the same snapshot's snapshot_lag row: time_lag_ms is the exact
-- time lag the snapshot read from the log (newest record's timestamp - timestamp of the record
-- at the committed offset; 0 when caught up), shown only when the snapshot saw the same
-- committed offset as the lake; otherwise null, and time_lag_reason says why
-- (committed_since_snapshot, no_time_lag_in_snapshot, or the snapshot's own reason, e.g.
-- committed_before_log_start). est_catch_up_s is an ESTIMATE: lag / (the partition's recent
-- commit rate in the lake's history - the producers' rate the snapshot measured, both in
-- offsets per second over the 15 minutes before it); null when the group is not gaining.
--
-- Parameters:
--   :group_id     string  null  only this group
--   :topic        string  null  only this topic
--   :cluster_id   string  null  only this cluster
--   :snapshot_id  string  null  use this snapshot instead of each cluster's latest
--
-- Columns: cluster_id, group_id, topic, partition, committed_offset, commit_timestamp,
--   log_end_offset, last_stable_offset, lag, time_lag_ms, time_lag_reason,
--   committed_timestamp, newest_timestamp, commit_rate, produce_rate, est_catch_up_s,
--   snapshot_id, captured_at, committed_after_snapshot. Ordered by lag, largest first.
-- partition_lag (queries/views): the one definition of lag, time lag and catch-up estimate
SELECT p.*
FROM partition_lag p
WHERE (:topic IS NULL OR p.topic = :topic)
ORDER BY p.lag DESC NULLS LAST, p.cluster_id, p.group_id, p.topic, p.partition
