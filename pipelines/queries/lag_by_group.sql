-- Current consumer lag per group.
--
-- lag_by_partition summed per group (both read the shared view partition_lag): the lake's
-- current committed offsets (committed_offsets) against the log end offsets of the latest
-- cluster snapshot that recorded them (snapshot_log_end_offsets, latest by captured_at per
-- cluster; or :snapshot_id). A partition
-- whose end offset the snapshot does not have counts in `partitions` but not in
-- `partitions_with_lag`, and adds nothing to total_lag; without any snapshot total_lag is null.
--
-- Time lag beside it: max_time_lag_ms is the group's exact time lag, the largest of its
-- partitions' (see lag_by_partition: read from the log by the snapshot, counted only where
-- the snapshot saw the lake's committed offset); partitions_with_time_lag says over how many.
-- commit_rate sums the partitions' recent commit rates (offsets per second, rounded to 6
-- decimals so that both engines' summation orders agree); est_catch_up_s
-- is an ESTIMATE: the slowest partition's lag / (its commit rate - its producers' rate)
-- (partitions are consumed in parallel), null when a lagging partition is not gaining.
--
-- Parameters:
--   :group_id     string  null  only this group
--   :cluster_id   string  null  only this cluster
--   :snapshot_id  string  null  use this snapshot instead of each cluster's latest
--
-- Columns: cluster_id, group_id, group_type, group_state, partitions, partitions_with_lag,
--   total_lag, max_lag, max_time_lag_ms, partitions_with_time_lag, commit_rate,
--   est_catch_up_s, last_commit_at, snapshot_id, captured_at. Ordered by total_lag, largest
--   first.
SELECT p.cluster_id, p.group_id, g.group_type, g.group_state,
       COUNT(*) AS partitions,
       COUNT(p.lag) AS partitions_with_lag,
       CAST(SUM(p.lag) AS BIGINT) AS total_lag,
       MAX(p.lag) AS max_lag,
       MAX(p.time_lag_ms) AS max_time_lag_ms,
       COUNT(p.time_lag_ms) AS partitions_with_time_lag,
       ROUND(SUM(p.commit_rate), 6) AS commit_rate,
       CASE WHEN COUNT(p.lag) = 0 THEN CAST(NULL AS DOUBLE)
            WHEN SUM(CASE WHEN p.lag > 0 AND p.est_catch_up_s IS NULL THEN 1 ELSE 0 END) > 0
                 THEN CAST(NULL AS DOUBLE)
            ELSE MAX(p.est_catch_up_s) END AS est_catch_up_s,
       MAX(p.commit_timestamp) AS last_commit_at,
       MAX(p.snapshot_id) AS snapshot_id,
       MAX(p.captured_at) AS captured_at
-- partition_lag (queries/views): the rows lag_by_partition lists, summed here
FROM partition_lag p
LEFT JOIN consumer_groups g ON g.cluster_id = p.cluster_id AND g.group_id = p.group_id
GROUP BY p.cluster_id, p.group_id, g.group_type, g.group_state
ORDER BY total_lag DESC NULLS LAST, p.cluster_id, p.group_id
