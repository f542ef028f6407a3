-- Current consumer lag per (group, topic, partition).
--
-- The lake's current committed offset (committed_offsets) against the log end offset of the
-- partition in the latest cluster snapshot that recorded one (snapshot_log_end_offsets, latest
-- by captured_at per cluster; or :snapshot_id). lag = log_end_offset - committed_offset, not
-- below 0 (a commit newer than the snapshot can be past its end offset:
-- committed_after_snapshot says so); null when the snapshot has no end offset for the
-- partition, or there is no snapshot at all. Run `offsetlake snapshot` to record one.
--
-- Parameters:
--   :group_id     string  null  only this group
--   :topic        string  null  only this topic
--   :cluster_id   string  null  only this cluster
--   :snapshot_id  string  null  use this snapshot instead of each cluster's latest
--
-- Columns: cluster_id, group_id, topic, partition, committed_offset, commit_timestamp,
--   log_end_offset, last_stable_offset, lag, snapshot_id, captured_at,
--   committed_after_snapshot. Ordered by lag, largest first.
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
    SELECT e.cluster_id, e.topic, e.partition, e.log_end_offset, e.last_stable_offset
    FROM snapshot_log_end_offsets e
    JOIN latest l ON l.cluster_id = e.cluster_id AND l.snapshot_id = e.snapshot_id
)
SELECT o.cluster_id, o.group_id, o.topic, o.partition, o.committed_offset, o.commit_timestamp,
       e.log_end_offset, e.last_stable_offset,
       CASE WHEN e.log_end_offset IS NULL THEN CAST(NULL AS BIGINT)
            WHEN e.log_end_offset > o.committed_offset THEN e.log_end_offset - o.committed_offset
            ELSE CAST(0 AS BIGINT) END AS lag,
       l.snapshot_id, l.captured_at,
       o.commit_timestamp > l.captured_at AS committed_after_snapshot
FROM committed_offsets o
LEFT JOIN latest l ON l.cluster_id = o.cluster_id
LEFT JOIN ends e
       ON e.cluster_id = o.cluster_id AND e.topic = o.topic AND e.partition = o.partition
WHERE (:group_id IS NULL OR o.group_id = :group_id)
  AND (:topic IS NULL OR o.topic = :topic)
  AND (:cluster_id IS NULL OR o.cluster_id = :cluster_id)
ORDER BY lag DESC NULLS LAST, o.cluster_id, o.group_id, o.topic, o.partition
