-- Every offset commit record with the time it took effect (the rule committed_offsets follows).
--
-- A plain commit takes effect at its record time (record_timestamp, else commit_timestamp). A
-- transactional commit (TxnOffsetCommit, KIP-447) takes effect when its transaction's COMMIT
-- marker is written (transaction_outcomes): effective_at is the marker's time, and null while
-- the transaction is open or when it was aborted. One row per offset_commits row, tombstones
-- included; the queries filter it like the table itself (the runner registers it as a view).
--
-- Columns: cluster_id, group_id, topic, partition, committed_offset, leader_epoch, metadata,
--   commit_timestamp, is_tombstone, offsets_partition, log_offset (the commit record's offset),
--   record_time, is_transactional (never null), control_type (COMMIT, ABORT or null: the
--   marker that ended its transaction), effective_at.
SELECT c.cluster_id, c.group_id, c.topic, c.partition, c.committed_offset, c.leader_epoch,
       c.metadata, c.commit_timestamp, c.is_tombstone, c.offsets_partition, c.log_offset,
       c.record_time, c.is_transactional, m.control_type,
       CASE WHEN NOT c.is_transactional THEN c.record_time
            WHEN m.control_type = 'COMMIT' THEN m.marker_time END AS effective_at
FROM (
    SELECT r.cluster_id, r.group_id, r.topic, r.partition, r.committed_offset, r.leader_epoch,
           r.metadata, r.commit_timestamp, r.is_tombstone, r.offsets_partition,
           r.offset AS log_offset,
           COALESCE(r.record_timestamp, r.commit_timestamp) AS record_time,
           COALESCE(r.is_transactional, FALSE) AS is_transactional
    FROM offset_commits r
) c
LEFT JOIN transaction_outcomes m
       ON m.cluster_id = c.cluster_id AND m.offsets_partition = c.offsets_partition
      AND m.log_offset = c.log_offset
