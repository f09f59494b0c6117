"""tidemq for Apache Spark: the `tidemq` Python data source and the `tidemq-ingest` command.

    from tidemq.client.spark import register, local_session

    spark = local_session("local[2]")        # or any SparkSession, then register(spark)
    df = spark.read.format("tidemq").option("namesrvAddr", "127.0.0.1:9876") \\
        .option("topic", "Orders").load()

Modules: `source` (the data source and its batch and stream readers), `options` (option parsing
and the offsets JSON), `records` (the schema and Arrow decoding), `reader` (the executor side),
`brokers` (name server and broker look-ups), `session` (a SparkSession with the settings the
source needs), `ingest` (the streaming ingest command). See client/spark/README.md.

The names below import pyspark and pyarrow (the `spark` extra) when first used, not when the
package is: `tidemq-ingest` without the extra says so in one line instead of a traceback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidemq.client.spark.session import local_session, register
    from tidemq.client.spark.source import FORMAT, TideMQDataSource

__all__ = ["FORMAT", "TideMQDataSource", "local_session", "register"]


def __getattr__(name: str) -> Any:
    if name in ("local_session", "register"):
        from tidemq.client.spark import session

        return getattr(session, name)
    if name in ("FORMAT", "TideMQDataSource"):
        from tidemq.client.spark import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
