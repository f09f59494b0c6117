"""A SparkSession set up for the tidemq source, and `register()` for sessions made elsewhere.

Spark starts Python workers with PYSPARK_PYTHON (default: `python3` on PATH), and every one of
them imports this package: the source's module for `.load()`, the planner, the streaming offset
runner and the executors. So the interpreter must be one where tidemq and pyarrow are installed;
`local_session` defaults PYSPARK_PYTHON to the running interpreter (a venv's python works even
when the venv is not activated). On a cluster, install tidemq with its `spark` extra on every
worker and point PYSPARK_PYTHON at that interpreter (see client/spark/README.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from tidemq.client.memory import GLIBC_TUNABLES
from tidemq.client.spark.source import TideMQDataSource

# Start-up and noise: no web UI (a port and a second of start-up), no progress bars in logs,
# few shuffle partitions (the source's queries rarely shuffle; 200 empty tasks cost seconds).
DEFAULT_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
}

# Python workers keep freed memory (client/memory.py): every pull response is a block of a
# megabyte or more, and glibc would otherwise map fresh pages for each one.
WORKER_ENV_CONF: Mapping[str, str] = {"spark.executorEnv.GLIBC_TUNABLES": GLIBC_TUNABLES}

# For short-lived sessions (tests): a JVM that starts faster and stays slower (C1 only).
FAST_START_CONF: Mapping[str, str] = {
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def register(spark: Any) -> None:
    """Make `format("tidemq")` known to `spark` (idempotent within one session)."""
    spark.dataSource.register(TideMQDataSource)


def local_session(
    master: str | None = "local[2]",
    app_name: str = "tidemq",
    conf: Mapping[str, str] | None = None,
    *,
    fast_start: bool = False,
    log_level: str = "WARN",
    defaults: bool = True,
) -> Any:
    """getOrCreate() a session with DEFAULT_CONF (then `conf`) and the source registered.

    `master=None` leaves the master to spark-submit; `defaults=False` leaves out DEFAULT_CONF
    (under spark-submit, the cluster's settings apply). getOrCreate() returns an existing
    session unchanged (its master and settings win), as Spark always does.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Otherwise Spark resolves the host name, warns, and may bind to a non-loopback address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        **(DEFAULT_CONF if defaults else {}),
        **(WORKER_ENV_CONF if defaults else {}),
        **(FAST_START_CONF if fast_start else {}),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
