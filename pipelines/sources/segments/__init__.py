"""Kafka log segment files: finding them (``files``), indexing and planning reads (``index``), and
the Spark data source over them (``spark_source``). The bytes inside are ``record_batches``' job."""
