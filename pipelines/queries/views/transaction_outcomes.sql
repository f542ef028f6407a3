-- How each transactional offset commit ended: the marker that closed its transaction.
--
-- A transactional commit takes effect when its transaction's COMMIT marker is written and
-- never when it is aborted: its marker is the next control record of its producer in the
-- same __consumer_offsets partition. One row per transactional commit of offset_commits;
-- control_type and marker_time are null while the transaction is still open. The queries
-- join it on (cluster_id, offsets_partition, log_offset); the runner registers it as a view.
--
-- Columns: cluster_id, offsets_partition, log_offset (the commit record's offset),
--   control_type (COMMIT, ABORT or null), marker_time.
WITH markers AS (
    SELECT r.cluster_id, r.offsets_partition, r.producer_id, r.offset AS log_offset,
           r.control_type, r.timestamp AS marker_time
    FROM offsets_raw r
    WHERE r.is_control
),
txn_end AS (
    SELECT e.cluster_id, e.offsets_partition, e.log_offset, e.is_marker,
           MIN(CASE WHEN e.is_marker THEN e.log_offset END) OVER (
               PARTITION BY e.cluster_id, e.offsets_partition, e.producer_id
               ORDER BY e.log_offset
               ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS marker_offset
    FROM (
        SELECT c.cluster_id, c.offsets_partition, c.producer_id, c.offset AS log_offset,
               FALSE AS is_marker
        FROM offset_commits c
        WHERE COALESCE(c.is_transactional, FALSE)
        UNION ALL
        SELECT cluster_id, offsets_partition, producer_id, log_offset, TRUE AS is_marker
        FROM markers
    ) e
)
SELECT t.cluster_id, t.offsets_partition, t.log_offset, m.control_type, m.marker_time
FROM txn_end t
LEFT JOIN markers m
       ON m.cluster_id = t.cluster_id AND m.offsets_partition = t.offsets_partition
      AND m.log_offset = t.marker_offset
WHERE NOT t.is_marker
