"""Where raw records come from: segment files, Kafka (read_committed), Spark's kafka format."""
