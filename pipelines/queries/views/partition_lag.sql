-- Current consumer lag per (group, topic, partition): the rows lag_by_partition lists and
-- lag_by_group sums, so both read one definition of lag, time lag and catch-up estimate.
--
-- The lake's committed offset (committed_offsets) against the partition's log end offset in
-- the latest snapshot of its cluster that recorded end offsets (or :snapshot_id); the time
-- lag and rates from the same snapshot's snapshot_lag row. A view with parameters: the
-- runner writes it as a CTE in front of the query that reads it (the query declares the same
-- parameters), where a view without parameters is registered once.
--
-- Parameters:
--   :group_id     string  null  only this group
--   :cluster_id   string  null  only this cluster
--   :snapshot_id  string  null  use this snapshot instead of each cluster's latest
--
-- Columns: those of lag_by_partition, in its order.
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
),
times AS (
    SELECT t.cluster_id, t.group_id, t.topic, t.partition, t.committed_offset, t.time_lag_ms,
           t.time_lag_reason, t.committed_timestamp, t.newest_timestamp, t.commit_rate,
           t.produce_rate
    FROM snapshot_lag t
    JOIN latest l ON l.cluster_id = t.cluster_id AND l.snapshot_id = t.snapshot_id
),
lagged AS (
    SELECT o.cluster_id, o.group_id, o.topic, o.partition, o.committed_offset,
           o.commit_timestamp, e.log_end_offset, e.last_stable_offset,
           CASE WHEN e.log_end_offset IS NULL THEN CAST(NULL AS BIGINT)
                WHEN e.log_end_offset > o.committed_offset
                     THEN e.log_end_offset - o.committed_offset
                ELSE CAST(0 AS BIGINT) END AS lag,
           t.committed_offset AS snapshot_committed_offset, t.time_lag_ms, t.time_lag_reason,
           t.committed_timestamp, t.newest_timestamp, t.commit_rate, t.produce_rate,
           l.snapshot_id, l.captured_at
    FROM committed_offsets o
    LEFT JOIN latest l ON l.cluster_id = o.cluster_id
    LEFT JOIN ends e
           ON e.cluster_id = o.cluster_id AND e.topic = o.topic AND e.partition = o.partition
    LEFT JOIN times t
           ON t.cluster_id = o.cluster_id AND t.group_id = o.group_id AND t.topic = o.topic
          AND t.partition = o.partition
    WHERE (:group_id IS NULL OR o.group_id = :group_id)
      AND (:cluster_id IS NULL OR o.cluster_id = :cluster_id)
)
SELECT p.cluster_id, p.group_id, p.topic, p.partition, p.committed_offset, p.commit_timestamp,
       p.log_end_offset, p.last_stable_offset, p.lag,
       CASE WHEN p.snapshot_committed_offset = p.committed_offset THEN p.time_lag_ms
            ELSE CAST(NULL AS BIGINT) END AS time_lag_ms,
       CASE WHEN p.snapshot_id IS NULL THEN 'no_snapshot'
            WHEN p.snapshot_committed_offset IS NULL THEN 'no_time_lag_in_snapshot'
            WHEN p.snapshot_committed_offset <> p.committed_offset
                 THEN 'committed_since_snapshot'
            WHEN p.time_lag_ms IS NULL THEN COALESCE(p.time_lag_reason, 'no_time_lag_in_snapshot')
            ELSE CAST(NULL AS STRING) END AS time_lag_reason,
       CASE WHEN p.snapshot_committed_offset = p.committed_offset THEN p.committed_timestamp
            END AS committed_timestamp,
       p.newest_timestamp, p.commit_rate, p.produce_rate,
       CASE WHEN p.lag = 0 THEN CAST(0 AS DOUBLE)
            WHEN p.commit_rate > COALESCE(p.produce_rate, 0)
                 THEN p.lag / (p.commit_rate - COALESCE(p.produce_rate, 0))
            ELSE CAST(NULL AS DOUBLE) END AS est_catch_up_s,
       p.snapshot_id, p.captured_at,
       p.commit_timestamp > p.captured_at AS committed_after_snapshot
FROM lagged p
