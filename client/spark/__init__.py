"""tidemq for Apache Spark: the `tidemq` Python data source and the `tidemq-ingest` command.

    from tidemq.client.spark import register, local_session

    spark = local_session("local[2]")        # or any SparkSession, then register(spark)
    df = spark.read.format("tidemq").option("namesrvAddr", "127.0.0.1:9876") \\
        .option("topic", "Orders").load()

Modules: `source` (the data source and its batch and stream readers), `options` (option parsing
and the offsets JSON), `records` (the schema and Arrow decoding), `reader` (the executor side),
`brokers` (name server and broker look-ups), `session` (a SparkSession with the settings the
source needs), `ingest` (the streaming ingest command). See client/spark/README.md.

Importing this package imports pyspark and pyarrow (the `spark` extra).
"""

from __future__ import annotations

from tidemq.client.spark.session import local_session, register
from tidemq.client.spark.source import FORMAT, TideMQDataSource

__all__ = ["FORMAT", "TideMQDataSource", "local_session", "register"]
