"""Kafka's record-batch format: framing, readers, the transaction fold, the writer (pure: no Spark, no sockets)."""
