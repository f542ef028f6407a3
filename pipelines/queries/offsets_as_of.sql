-- Who had committed what for a topic partition as of a point in time.
--
-- For every group: the offset the group coordinator would have served for (topic, partition)
-- at :as_of, rebuilt from the offset_commits history: among the commit records that had
-- taken effect by :as_of, the last one by log position. A group whose last such record is a
-- tombstone (OffsetDelete, DeleteGroups, expiry) had no offset then and is left out.
-- Transactional commits (TxnOffsetCommit, KIP-447) take effect when their transaction's
-- COMMIT marker is written, and never when it is aborted or still open: the rules
-- committed_offsets is built with, so an :as_of at or after the lake's last record gives
-- exactly committed_offsets.
--
-- Parameters:
--   :as_of       timestamp  required  the point in time (inclusive; UTC)
--   :topic       string     null      the topic T (null = every topic)
--   :partition   int        null      the partition P (null = every partition)
--   :group_id    string     null      only this group
--   :cluster_id  string     null      only this cluster
--
-- Columns: cluster_id, group_id, topic, partition, committed_offset, leader_epoch, metadata,
--   commit_timestamp, effective_at (when the commit took effect: its record time, or its
--   transaction's COMMIT marker time), is_transactional, offsets_partition, log_offset (the
--   commit record's offset in that __consumer_offsets partition).
WITH ranked AS (
    SELECT f.*,
           ROW_NUMBER() OVER (
               PARTITION BY f.cluster_id, f.group_id, f.topic, f.partition
               ORDER BY f.log_offset DESC) AS newest_first
    -- effective_commits (queries/views): each commit with the time it took effect
    FROM effective_commits f
    WHERE f.record_time <= :as_of AND f.effective_at <= :as_of
      AND (:topic IS NULL OR f.topic = :topic)
      AND (:partition IS NULL OR f.partition = :partition)
      AND (:group_id IS NULL OR f.group_id = :group_id)
      AND (:cluster_id IS NULL OR f.cluster_id = :cluster_id)
)
SELECT r.cluster_id, r.group_id, r.topic, r.partition, r.committed_offset, r.leader_epoch,
       r.metadata, r.commit_timestamp, r.effective_at, r.is_transactional, r.offsets_partition,
       r.log_offset
FROM ranked r
WHERE r.newest_first = 1 AND NOT r.is_tombstone
ORDER BY r.cluster_id, r.group_id, r.topic, r.partition
