-- Groups that stopped committing: no offset commit since a cutoff, with their last commit time.
--
-- A group is listed when its last effective commit at or before :as_of (a non-tombstone
-- record of offset_commits; a transactional one counts from its COMMIT marker, an aborted one
-- never) is older than the cutoff: :cutoff when given, else :as_of - :idle_hours. :as_of
-- defaults to the newest record the lake holds for the cluster, not the wall clock, so a lake
-- whose ingestion paused does not make every group look stalled; pass the current time to
-- ask "as of now". group_state/partitions are the groups' current state (consumer_groups,
-- committed_offsets); a group the lake no longer holds (DeleteGroups, or a simple group whose
-- offsets were all removed) has a null group_state and is only listed with :include_deleted.
--
-- Parameters:
--   :idle_hours       double     1.0    stalled = no commit for longer than this before :as_of
--   :cutoff           timestamp  null   stalled = no commit since this time (overrides :idle_hours)
--   :as_of            timestamp  null   "now" (null = the newest record of the cluster in the lake)
--   :cluster_id       string     null   only this cluster
--   :include_deleted  boolean    false  also list groups that no longer exist
--
-- Columns: cluster_id, group_id, group_type, group_state, num_members, partitions (with a
--   current committed offset), last_commit_at, idle_seconds (:as_of - last_commit_at),
--   cutoff, as_of. Ordered by last_commit_at, oldest first.
WITH bounds AS (
    SELECT b.cluster_id, b.as_of,
           COALESCE(:cutoff, b.as_of - CAST(:idle_hours AS DOUBLE) * INTERVAL '1' HOUR) AS cutoff
    FROM (
        SELECT r.cluster_id, COALESCE(:as_of, MAX(r.timestamp)) AS as_of
        FROM offsets_raw r
        WHERE (:cluster_id IS NULL OR r.cluster_id = :cluster_id)
        GROUP BY r.cluster_id
    ) b
),
last_commit AS (
    SELECT f.cluster_id, f.group_id, MAX(f.effective_at) AS last_commit_at
    -- effective_commits (queries/views): each commit with the time it took effect
    FROM effective_commits f
    JOIN bounds b ON b.cluster_id = f.cluster_id
    WHERE NOT f.is_tombstone AND (:cluster_id IS NULL OR f.cluster_id = :cluster_id)
      AND f.effective_at <= b.as_of
    GROUP BY f.cluster_id, f.group_id
),
current_offsets AS (
    SELECT o.cluster_id, o.group_id, COUNT(*) AS partitions
    FROM committed_offsets o
    GROUP BY o.cluster_id, o.group_id
)
SELECT lc.cluster_id, lc.group_id, g.group_type, g.group_state, g.num_members,
       COALESCE(co.partitions, CAST(0 AS BIGINT)) AS partitions,
       lc.last_commit_at,
       CAST(EXTRACT(DAY FROM (b.as_of - lc.last_commit_at)) AS BIGINT) * 86400
         + CAST(EXTRACT(HOUR FROM (b.as_of - lc.last_commit_at)) AS BIGINT) * 3600
         + CAST(EXTRACT(MINUTE FROM (b.as_of - lc.last_commit_at)) AS BIGINT) * 60
         + CAST(FLOOR(EXTRACT(SECOND FROM (b.as_of - lc.last_commit_at))) AS BIGINT)
         AS idle_seconds,
       b.cutoff, b.as_of
FROM last_commit lc
JOIN bounds b ON b.cluster_id = lc.cluster_id
LEFT JOIN consumer_groups g ON g.cluster_id = lc.cluster_id AND g.group_id = lc.group_id
LEFT JOIN current_offsets co ON co.cluster_id = lc.cluster_id AND co.group_id = lc.group_id
WHERE lc.last_commit_at < b.cutoff
  AND (:include_deleted OR g.group_id IS NOT NULL)
ORDER BY lc.last_commit_at, lc.cluster_id, lc.group_id
