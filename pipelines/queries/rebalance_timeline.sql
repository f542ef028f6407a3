-- The rebalance timeline of a group: every group record in log order, with what it changed.
--
-- One row per record of group_metadata (classic GroupMetadata, KIP-848 epoch, member and
-- assignment records, tombstones), labelled as an event, with the generation (classic) or
-- epoch (KIP-848) it carries. What changed comes from group_generations, the ownership
-- history: the members owning partitions right after the record, the members that started
-- or stopped owning at it, and how many (member, partition) ownerships it opened
-- (partitions_assigned) and closed (partitions_revoked). A member that keeps a partition
-- across the record counts in neither. Events: group created, rebalance, group empty,
-- member replaced (static membership: same generation, new member id), same generation
-- rewritten, group converted (a classic group's tombstone followed by KIP-848 records: the
-- upgrade to a consumer group), group deleted, group epoch bump, member joined, member updated, member left, target assignment, member target,
-- member assignment, member assignment removed, topic metadata, other record types by name.
--
-- Parameters:
--   :group_id    string     null  the group (null = every group)
--   :cluster_id  string     null  only this cluster
--   :since       timestamp  null  only records at or after this time
--   :until       timestamp  null  only records at or before this time
--
-- Columns: cluster_id, group_id, event_time, event, generation, record_type_name,
--   member_id (per-member records), members_after (count), members (member ids owning after
--   the record), members_joined, members_left, partitions_assigned, partitions_revoked,
--   protocol, leader, offsets_partition, log_offset. Ordered by log position.
WITH records AS (
    SELECT m.cluster_id, m.group_id, m.offsets_partition, m.offset AS log_offset,
           m.record_timestamp AS event_time, m.record_type, m.record_type_name, m.member_id,
           m.is_tombstone, m.generation, m.protocol, m.leader,
           LAG(m.generation) OVER (
               PARTITION BY m.cluster_id, m.group_id, m.record_type, m.member_id
               ORDER BY m.offset) AS previous_generation,
           LAG(m.is_tombstone) OVER (
               PARTITION BY m.cluster_id, m.group_id, m.record_type, m.member_id
               ORDER BY m.offset) AS previous_was_tombstone,
           LEAD(m.record_type) OVER (
               PARTITION BY m.cluster_id, m.group_id ORDER BY m.offset) AS next_record_type
    FROM group_metadata m
    WHERE (:group_id IS NULL OR m.group_id = :group_id)
      AND (:cluster_id IS NULL OR m.cluster_id = :cluster_id)
),
ownership AS (
    SELECT g.cluster_id, g.group_id, g.offsets_partition, g.member_id, g.topic, g.partition,
           g.valid_from_offset, g.valid_to_offset
    FROM group_generations g
    WHERE (:group_id IS NULL OR g.group_id = :group_id)
      AND (:cluster_id IS NULL OR g.cluster_id = :cluster_id)
),
-- Each ownership row was opened by one record and possibly closed by a later one.
changes AS (
    SELECT o.cluster_id, o.group_id, o.offsets_partition, o.valid_from_offset AS log_offset,
           o.member_id, o.topic, o.partition, 1 AS opened, 0 AS closed
    FROM ownership o
    UNION ALL
    SELECT o.cluster_id, o.group_id, o.offsets_partition, o.valid_to_offset AS log_offset,
           o.member_id, o.topic, o.partition, 0 AS opened, 1 AS closed
    FROM ownership o
    WHERE o.valid_to_offset IS NOT NULL
),
partition_changes AS (
    SELECT cluster_id, group_id, offsets_partition, log_offset, member_id, topic, partition,
           MAX(opened) AS opened, MAX(closed) AS closed
    FROM changes
    WHERE topic <> ''
    GROUP BY cluster_id, group_id, offsets_partition, log_offset, member_id, topic, partition
),
partition_delta AS (
    SELECT cluster_id, group_id, offsets_partition, log_offset,
           CAST(SUM(opened * (1 - closed)) AS BIGINT) AS partitions_assigned,
           CAST(SUM(closed * (1 - opened)) AS BIGINT) AS partitions_revoked
    FROM partition_changes
    GROUP BY cluster_id, group_id, offsets_partition, log_offset
),
-- Which members owned something (or held a generation with nothing assigned) just before
-- and just after each record: joined = after only, left = before only.
presence AS (
    SELECT r.cluster_id, r.group_id, r.offsets_partition, r.log_offset, o.member_id,
           MAX(CASE WHEN o.valid_from_offset < r.log_offset THEN 1 ELSE 0 END) AS owned_before,
           MAX(CASE WHEN o.valid_to_offset IS NULL OR o.valid_to_offset > r.log_offset
                    THEN 1 ELSE 0 END) AS owned_after
    FROM records r
    JOIN ownership o
      ON o.cluster_id = r.cluster_id AND o.group_id = r.group_id
     AND o.offsets_partition = r.offsets_partition AND o.member_id <> ''
     AND o.valid_from_offset <= r.log_offset
     AND (o.valid_to_offset IS NULL OR o.valid_to_offset >= r.log_offset)
    GROUP BY r.cluster_id, r.group_id, r.offsets_partition, r.log_offset, o.member_id
),
member_delta AS (
    SELECT cluster_id, group_id, offsets_partition, log_offset,
           CAST(SUM(owned_after) AS BIGINT) AS members_after,
           CASE WHEN SUM(owned_after) = 0 THEN NULL
                ELSE array_sort(array_agg(member_id) FILTER (WHERE owned_after = 1)) END AS members,
           CASE WHEN SUM(owned_after * (1 - owned_before)) = 0 THEN NULL
                ELSE array_sort(array_agg(member_id) FILTER (WHERE owned_after = 1 AND owned_before = 0))
           END AS members_joined,
           CASE WHEN SUM(owned_before * (1 - owned_after)) = 0 THEN NULL
                ELSE array_sort(array_agg(member_id) FILTER (WHERE owned_before = 1 AND owned_after = 0))
           END AS members_left
    FROM presence
    GROUP BY cluster_id, group_id, offsets_partition, log_offset
)
SELECT r.cluster_id, r.group_id, r.event_time,
       CASE
           WHEN r.record_type = 2 AND r.is_tombstone AND r.next_record_type BETWEEN 3 AND 8
                THEN 'group converted'
           WHEN r.record_type = 2 AND r.is_tombstone THEN 'group deleted'
           WHEN r.record_type = 2 AND r.generation = 0 THEN 'group created'
           WHEN r.record_type = 2 AND r.generation = r.previous_generation
                AND md.members_joined IS NOT NULL AND md.members_left IS NOT NULL
                THEN 'member replaced'
           WHEN r.record_type = 2 AND r.generation = r.previous_generation
                THEN 'same generation rewritten'
           WHEN r.record_type = 2 AND COALESCE(md.members_after, 0) = 0 THEN 'group empty'
           WHEN r.record_type = 2 THEN 'rebalance'
           WHEN r.record_type = 3 AND r.is_tombstone THEN 'group deleted'
           WHEN r.record_type = 3 THEN 'group epoch bump'
           WHEN r.record_type = 4 THEN 'topic metadata'
           WHEN r.record_type = 5 AND r.is_tombstone THEN 'member left'
           WHEN r.record_type = 5 AND COALESCE(r.previous_was_tombstone, TRUE) THEN 'member joined'
           WHEN r.record_type = 5 THEN 'member updated'
           WHEN r.record_type = 6 THEN 'target assignment'
           WHEN r.record_type = 7 THEN 'member target'
           WHEN r.record_type = 8 AND r.is_tombstone THEN 'member assignment removed'
           WHEN r.record_type = 8 THEN 'member assignment'
           ELSE r.record_type_name
       END AS event,
       r.generation, r.record_type_name, r.member_id,
       COALESCE(md.members_after, CAST(0 AS BIGINT)) AS members_after, md.members,
       md.members_joined, md.members_left,
       COALESCE(pd.partitions_assigned, CAST(0 AS BIGINT)) AS partitions_assigned,
       COALESCE(pd.partitions_revoked, CAST(0 AS BIGINT)) AS partitions_revoked,
       r.protocol, r.leader, r.offsets_partition, r.log_offset
FROM records r
LEFT JOIN member_delta md
       ON md.cluster_id = r.cluster_id AND md.group_id = r.group_id
      AND md.offsets_partition = r.offsets_partition AND md.log_offset = r.log_offset
LEFT JOIN partition_delta pd
       ON pd.cluster_id = r.cluster_id AND pd.group_id = r.group_id
      AND pd.offsets_partition = r.offsets_partition AND pd.log_offset = r.log_offset
WHERE (:since IS NULL OR r.event_time >= :since)
  AND (:until IS NULL OR r.event_time <= :until)
ORDER BY r.cluster_id, r.group_id, r.offsets_partition, r.log_offset
