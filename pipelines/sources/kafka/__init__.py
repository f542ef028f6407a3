"""The Kafka source: read ``__consumer_offsets`` read_committed over the Kafka protocol, or
through Spark's own kafka connector (errors, options, wire client, range reader, Spark sources)."""
