-- Current consumer lag per group.
--
-- lag_by_partition summed per group: the lake's current committed offsets (committed_offsets)
-- against the log end offsets of the latest cluster snapshot that recorded them
-- (snapshot_log_end_offsets, latest by captured_at per cluster; or :snapshot_id). A partition
-- whose end offset the snapshot does not have counts in `partitions` but not in
-- `partitions_with_lag`, and adds nothing to total_lag; without any snapshot total_lag is null.
--
-- Parameters:
--   :group_id     string  null  only this group
--   :cluster_id   string  null  only this cluster
--   :snapshot_id  string  null  use this snapshot instead of each cluster's latest
--
-- Columns: cluster_id, group_id, group_type, group_state, partitions, partitions_with_lag,
--   total_lag, max_lag, last_commit_at, snapshot_id, captured_at. Ordered by total_lag,
--   largest first.
WITH snapshots AS (
    SELECT s.cluster_id, s.snapshot_id, MAX(s.captured_at) AS captured_at
    FROM snapshot_log_end_offsets s
    WHERE (:cluster_id IS NULL OR s.cluster_id = :cluster_id)
      AND (:snapshot_id IS NULL OR s.snapshot_id = :snapshot_id)
    GROUP BY s.cluster_id, s.snapshot_id
),
latest AS (
    SELECT x.cluster_id, x.snapshot_id, x.captured_at
    FROM (
        SELECT s.cluster_id, s.snapshot_id, s.captured_at,
               ROW_NUMBER() OVER (PARTITION BY s.cluster_id
                                  ORDER BY s.captured_at DESC, s.snapshot_id DESC) AS newest_first
        FROM snapshots s
    ) x
    WHERE x.newest_first = 1
),
ends AS (
    SELECT e.cluster_id, e.topic, e.partition, e.log_end_offset
    FROM snapshot_log_end_offsets e
    JOIN latest l ON l.cluster_id = e.cluster_id AND l.snapshot_id = e.snapshot_id
),
partition_lag AS (
    SELECT o.cluster_id, o.group_id, o.commit_timestamp, l.snapshot_id, l.captured_at,
           CASE WHEN e.log_end_offset IS NULL THEN CAST(NULL AS BIGINT)
                WHEN e.log_end_offset > o.committed_offset
                     THEN e.log_end_offset - o.committed_offset
                ELSE CAST(0 AS BIGINT) END AS lag
    FROM committed_offsets o
    LEFT JOIN latest l ON l.cluster_id = o.cluster_id
    LEFT JOIN ends e
           ON e.cluster_id = o.cluster_id AND e.topic = o.topic AND e.partition = o.partition
    WHERE (:group_id IS NULL OR o.group_id = :group_id)
      AND (:cluster_id IS NULL OR o.cluster_id = :cluster_id)
)
SELECT p.cluster_id, p.group_id, g.group_type, g.group_state,
       COUNT(*) AS partitions,
       COUNT(p.lag) AS partitions_with_lag,
       CAST(SUM(p.lag) AS BIGINT) AS total_lag,
       MAX(p.lag) AS max_lag,
       MAX(p.commit_timestamp) AS last_commit_at,
       MAX(p.snapshot_id) AS snapshot_id,
       MAX(p.captured_at) AS captured_at
FROM partition_lag p
LEFT JOIN consumer_groups g ON g.cluster_id = p.cluster_id AND g.group_id = p.group_id
GROUP BY p.cluster_id, p.group_id, g.group_type, g.group_state
ORDER BY total_lag DESC NULLS LAST, p.cluster_id, p.group_id
