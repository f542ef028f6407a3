"""The coordinator's state at an instant, as a query function for DuckDB and Spark SQL.

``state_as_of_duckdb(lake, as_of, group_id=...)`` and ``state_as_of_spark(spark, lake, ...)``
read the history rows written by ``as_of`` with SQL and fold them with
:func:`pipelines.state.as_of.state_as_of` (the state fold of the current-state tables), so
both engines answer with the coordinator's semantics and not a second implementation.

Parameters are bound by the engines themselves, never rendered into the SQL text: DuckDB
gets ``$name`` markers and a parameter dict, Spark gets ``:name`` markers and
``spark.sql(sql, args=...)`` (Spark 3.4+ named parameter markers). The SQL reduces what
leaves the engine without changing the answer: of the non-transactional offset records of a
key only the newest written by then can win (every later winner is transactional), and of
a group's records only the newest per (record type, member) and its newest commit matter.

:func:`pipelines.queries.bound_sql` gives any ``pipelines/queries/*.sql`` in the same form.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.lake.contracts import contract
from pipelines.lake.location import LakeLocation
from pipelines.queries import (
    duckdb_connection,
    register_spark_views,
    run_bound_duckdb,
    run_bound_spark,
    utc_instant,
)
from pipelines.state.as_of import StateAsOf, state_as_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TABLES = ("offset_commits", "offsets_raw", "group_metadata", "topic_names")

# The records of each offset key that can still matter at :as_of: the newest
# non-transactional one written by then, every transactional one after it (whether it took
# effect is the fold's business: its marker), and each group's newest commit.
COMMITS_SQL = """
WITH written AS (
    SELECT c.*, COALESCE(c.record_timestamp, c.commit_timestamp) AS written_at,
           COALESCE(c.is_transactional, FALSE) AS txn
    FROM offset_commits c
    WHERE COALESCE(c.record_timestamp, c.commit_timestamp) <= :as_of
      AND (:group_id IS NULL OR c.group_id = :group_id)
      AND (:cluster_id IS NULL OR c.cluster_id = :cluster_id)
),
ranked AS (
    SELECT w.*,
           MAX(CASE WHEN NOT w.txn THEN w.offset END) OVER (
               PARTITION BY w.cluster_id, w.group_id, w.topic, w.partition, w.offsets_partition
           ) AS last_plain,
           ROW_NUMBER() OVER (
               PARTITION BY w.cluster_id, w.group_id, w.txn, w.is_tombstone
               ORDER BY w.offsets_partition DESC, w.offset DESC) AS newest_in_group
    FROM written w
)
SELECT r.cluster_id, r.group_id, r.topic, r.partition, r.committed_offset, r.leader_epoch,
       r.metadata, r.commit_timestamp, r.expire_timestamp, r.topic_id, r.is_tombstone,
       r.offsets_partition, r.offset, r.record_timestamp, r.producer_id, r.is_transactional
FROM ranked r
WHERE r.txn OR r.last_plain IS NULL OR r.offset >= r.last_plain OR r.newest_in_group = 1
"""

MARKERS_SQL = """
SELECT r.cluster_id, r.offsets_partition, r.offset, r.producer_id, r.control_type, r.timestamp
FROM offsets_raw r
WHERE r.is_control AND r.control_type IN ('COMMIT', 'ABORT')
  AND (:cluster_id IS NULL OR r.cluster_id = :cluster_id)
"""

GROUP_RECORDS_SQL = """
WITH written AS (
    SELECT g.cluster_id, g.group_id, g.record_type, g.member_id, g.is_tombstone,
           g.value_version, g.value_json, g.offsets_partition, g.offset, g.record_timestamp,
           ROW_NUMBER() OVER (
               PARTITION BY g.cluster_id, g.group_id, g.record_type, COALESCE(g.member_id, '')
               ORDER BY g.offsets_partition DESC, g.offset DESC) AS newest
    FROM group_metadata g
    WHERE g.record_timestamp <= :as_of
      AND (:group_id IS NULL OR g.group_id = :group_id)
      AND (:cluster_id IS NULL OR g.cluster_id = :cluster_id)
)
SELECT w.cluster_id, w.group_id, w.record_type, w.member_id, w.is_tombstone, w.value_version,
       w.value_json, w.offsets_partition, w.offset, w.record_timestamp
FROM written w WHERE w.newest = 1
"""

TOPIC_NAMES_SQL = """
SELECT t.cluster_id, t.topic_id, t.topic_name FROM topic_names t
WHERE :cluster_id IS NULL OR t.cluster_id = :cluster_id
"""


def _args(as_of: Any, group_id: str | None, cluster_id: str | None) -> dict[str, Any]:
    if group_id is not None and not isinstance(group_id, str):
        raise TypeError(f"group_id must be a string, got {group_id!r}")
    if cluster_id is not None and not isinstance(cluster_id, str):
        raise TypeError(f"cluster_id must be a string, got {cluster_id!r}")
    return {"as_of": utc_instant(as_of), "group_id": group_id, "cluster_id": cluster_id}


def _fold(args: dict[str, Any], commits: pa.Table, markers: pa.Table, groups: pa.Table,
          names: pa.Table) -> StateAsOf:
    topic_names = {(r["cluster_id"], r["topic_id"]): r["topic_name"] for r in names.to_pylist()}
    commits = contract("offset_commits").conform(commits) if commits.num_rows else \
        contract("offset_commits").arrow_schema.empty_table()
    groups = contract("group_metadata").conform(groups) if groups.num_rows else \
        contract("group_metadata").arrow_schema.empty_table()
    return state_as_of(commits, markers, groups, args["as_of"], topic_names)


def state_as_of_duckdb(lake: str | LakeLocation | Any, as_of: datetime | str | int,
                       group_id: str | None = None, cluster_id: str | None = None) -> StateAsOf:
    """Offsets and groups at ``as_of`` (a datetime, ISO text or epoch ms; naive = UTC), read
    through DuckDB over ``lake``'s current Delta files."""
    args = _args(as_of, group_id, cluster_id)
    con = duckdb_connection(lake, TABLES)
    try:
        frames = [run_bound_duckdb(con, sql, **args)
                  for sql in (COMMITS_SQL, MARKERS_SQL, GROUP_RECORDS_SQL, TOPIC_NAMES_SQL)]
    finally:
        con.close()
    return _fold(args, *frames)


def state_as_of_spark(spark: SparkSession, lake: str | LakeLocation | Any,
                      as_of: datetime | str | int, group_id: str | None = None,
                      cluster_id: str | None = None) -> StateAsOf:
    """The same through Spark SQL (temp views over the lake tables, parameters bound by
    Spark); the fold runs on the driver over the reduced rows."""
    args = _args(as_of, group_id, cluster_id)
    register_spark_views(spark, lake, TABLES)
    frames = [run_bound_spark(spark, sql, **args).toArrow()
              for sql in (COMMITS_SQL, MARKERS_SQL, GROUP_RECORDS_SQL, TOPIC_NAMES_SQL)]
    return _fold(args, *frames)


def state_as_of_frames(spark: SparkSession, lake: str | LakeLocation | Any,
                       as_of: datetime | str | int, group_id: str | None = None,
                       cluster_id: str | None = None) -> tuple[DataFrame, DataFrame]:
    """:func:`state_as_of_spark` as two DataFrames (offsets, groups), also registered as the
    temp views ``offsets_at`` and ``groups_at`` for Spark SQL."""
    state = state_as_of_spark(spark, lake, as_of, group_id, cluster_id)
    frames = []
    for name, table in (("offsets_at", state.offsets), ("groups_at", state.groups)):
        df = spark.createDataFrame(table) if table.num_rows else spark.createDataFrame(
            [], _ddl(table.schema))
        df.createOrReplaceTempView(name)
        frames.append(df)
    return frames[0], frames[1]


def _ddl(schema: pa.Schema) -> str:
    from pyspark.sql.pandas.types import from_arrow_type

    return ", ".join(f"`{f.name}` {from_arrow_type(f.type).simpleString()}" for f in schema)


__all__ = ["COMMITS_SQL", "GROUP_RECORDS_SQL", "MARKERS_SQL", "TABLES", "state_as_of_duckdb",
           "state_as_of_frames", "state_as_of_spark"]
