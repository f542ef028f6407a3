"""offsetlake: Kafka's ``__consumer_offsets`` as Delta Lake tables.

Data flows through the sub-packages in this order:

``sources`` (segment files, Kafka) -> ``decode`` (pure-Python codec) -> ``history``
(append-only Delta tables) -> ``state`` (the coordinator's replay, as current-state
tables) -> ``reconcile`` (checks against the live cluster's own answers).
"""

from pipelines.without_pandas import block_pandas_in_own_workers

__version__ = "0.1.0"

block_pandas_in_own_workers()
