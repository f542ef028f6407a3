-- Partitions revoked without a commit during the ownership: the KIP-70 duplicate-processing risk.
--
-- For each closed ownership row of group_generations (a member owned topic-partition from
-- valid_from to valid_to, then a rebalance or assignment change took it), the rows with no
-- offset commit of that (group, topic, partition) in between. Whatever that owner processed
-- was never committed, so the next owner resumed from the last offset committed before the
-- ownership began (last_committed_offset; null = none, so it fell back to auto.offset.reset)
-- and processed those records again. KIP-70 added the revocation callback
-- (onPartitionsRevoked) for committing there; these rows are where that did not happen.
-- "In between" is by log position (both kinds of record are in the group's
-- __consumer_offsets partition), which is exact even when they share a millisecond.
-- Tombstones and commits of aborted transactions do not count as commits. moved is false
-- when the same member owned the partition again next (a new generation or member epoch):
-- eager classic rebalances revoke everything, cooperative and KIP-848 ones do not.
--
-- Parameters:
--   :group_id    string     null   only this group
--   :cluster_id  string     null   only this cluster
--   :since       timestamp  null   only ownerships that ended at or after this time
--   :until       timestamp  null   only ownerships that ended at or before this time
--   :moved_only  boolean    false  only rows whose partition went to another member or none
--
-- Columns: cluster_id, group_id, group_type, generation, member_id, group_instance_id,
--   client_id, topic, partition, valid_from, valid_to, next_member_id, next_generation,
--   moved, last_committed_offset, last_commit_at. Ordered by valid_to.
WITH owned AS (
    SELECT g.cluster_id, g.group_id, g.group_type, g.generation, g.member_id,
           g.group_instance_id, g.client_id, g.topic, g.partition, g.offsets_partition,
           g.valid_from, g.valid_to, g.valid_from_offset, g.valid_to_offset,
           LEAD(g.member_id) OVER (
               PARTITION BY g.cluster_id, g.group_id, g.offsets_partition, g.topic, g.partition
               ORDER BY g.valid_from_offset, g.member_id) AS next_member_id,
           LEAD(g.generation) OVER (
               PARTITION BY g.cluster_id, g.group_id, g.offsets_partition, g.topic, g.partition
               ORDER BY g.valid_from_offset, g.member_id) AS next_generation
    FROM group_generations g
    WHERE g.topic <> ''
      AND (:group_id IS NULL OR g.group_id = :group_id)
      AND (:cluster_id IS NULL OR g.cluster_id = :cluster_id)
),
good_commits AS (
    SELECT c.cluster_id, c.group_id, c.offsets_partition, c.topic, c.partition,
           c.committed_offset, c.record_time, c.log_offset
    -- effective_commits (queries/views): each commit with the marker that ended its transaction
    FROM effective_commits c
    WHERE NOT c.is_tombstone
      AND (:group_id IS NULL OR c.group_id = :group_id)
      AND (:cluster_id IS NULL OR c.cluster_id = :cluster_id)
      AND (NOT c.is_transactional OR c.control_type IS NULL OR c.control_type <> 'ABORT')
),
-- Commits and ownership boundaries of each (group, topic, partition) on one log axis: the
-- running commit count at a boundary is the number of commits before it (a boundary is a
-- group record, never at a commit's position), so a window without commits has equal
-- counts at both ends. Linear in the history, unlike joining every ownership to its commits.
points AS (
    SELECT cluster_id, group_id, offsets_partition, topic, partition, log_offset AS pos,
           1 AS is_commit
    FROM good_commits
    UNION ALL
    SELECT cluster_id, group_id, offsets_partition, topic, partition, valid_from_offset AS pos,
           0 AS is_commit
    FROM owned
    UNION ALL
    SELECT cluster_id, group_id, offsets_partition, topic, partition, valid_to_offset AS pos,
           0 AS is_commit
    FROM owned
    WHERE valid_to_offset IS NOT NULL
),
running AS (
    SELECT p.cluster_id, p.group_id, p.offsets_partition, p.topic, p.partition, p.pos,
           p.is_commit,
           SUM(p.is_commit) OVER (
               PARTITION BY p.cluster_id, p.group_id, p.offsets_partition, p.topic, p.partition
               ORDER BY p.pos ROWS UNBOUNDED PRECEDING) AS commits_before,
           MAX(CASE WHEN p.is_commit = 1 THEN p.pos END) OVER (
               PARTITION BY p.cluster_id, p.group_id, p.offsets_partition, p.topic, p.partition
               ORDER BY p.pos ROWS UNBOUNDED PRECEDING) AS last_commit_pos
    FROM points p
),
boundaries AS (
    SELECT DISTINCT cluster_id, group_id, offsets_partition, topic, partition, pos,
           commits_before, last_commit_pos
    FROM running
    WHERE is_commit = 0
)
SELECT o.cluster_id, o.group_id, o.group_type, o.generation, o.member_id, o.group_instance_id,
       o.client_id, o.topic, o.partition, o.valid_from, o.valid_to, o.next_member_id,
       o.next_generation,
       (o.next_member_id IS NULL OR o.next_member_id <> o.member_id) AS moved,
       lc.committed_offset AS last_committed_offset, lc.record_time AS last_commit_at
FROM owned o
JOIN boundaries bf
  ON bf.cluster_id = o.cluster_id AND bf.group_id = o.group_id
 AND bf.offsets_partition = o.offsets_partition AND bf.topic = o.topic
 AND bf.partition = o.partition AND bf.pos = o.valid_from_offset
JOIN boundaries bt
  ON bt.cluster_id = o.cluster_id AND bt.group_id = o.group_id
 AND bt.offsets_partition = o.offsets_partition AND bt.topic = o.topic
 AND bt.partition = o.partition AND bt.pos = o.valid_to_offset
LEFT JOIN good_commits lc
       ON lc.cluster_id = o.cluster_id AND lc.group_id = o.group_id
      AND lc.offsets_partition = o.offsets_partition AND lc.topic = o.topic
      AND lc.partition = o.partition AND lc.log_offset = bf.last_commit_pos
WHERE bt.commits_before = bf.commits_before
  AND (NOT :moved_only OR o.next_member_id IS NULL OR o.next_member_id <> o.member_id)
  AND (:since IS NULL OR o.valid_to >= :since)
  AND (:until IS NULL OR o.valid_to <= :until)
ORDER BY o.cluster_id, o.group_id, o.valid_to, o.topic, o.partition, o.member_id
