"""Tests of the Spark reader (twlog.spark) against real brokers, with one local Spark session per process.

Spark actions block, and the brokers run in trial's reactor in this process,
so the tests run every Spark action in a thread (L{spark_call}) while the
reactor keeps serving the brokers to Spark's Python workers over loopback.
"""

from __future__ import annotations

import atexit
import os

from twisted.internet.threads import deferToThread

#: The driver JVM's options in the tests: only the quick JIT compiler (C1).  A test's Spark jobs are small, and a
#: session's start-up and first jobs are mostly compiling: measured on a 2-CPU machine, a session and one groupBy
#: took 14 s of the JVM's CPU time instead of 22 s, and about 4 s less wall time.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

#: Spark settings for the Spark jobs the tests run as processes of their own (examples/etl_parquet.py, the README's
#: snippets, fresh sessions): no web UI, 2 shuffle partitions instead of Spark's 200 (a groupBy of a few rows
#: otherwise plans 200 tasks), the JVM options above.  What the jobs compute does not depend on them.
SUBPROCESS_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
                   "spark.ui.showConsoleProgress": "false", "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS}

_spark = None


def spark_session():
    """The local[2] session, bound to loopback, started on first use and stopped at exit; None without pyspark."""
    global _spark
    if _spark is None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", __import__("sys").executable)
        from pyspark.sql import SparkSession

        from twlog.spark.source import register

        _spark = (
            SparkSession.builder.master("local[2]")
            .appName("twlog-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
            .getOrCreate()
        )
        _spark.sparkContext.setLogLevel("ERROR")
        register(_spark)
        atexit.register(_spark.stop)
    return _spark


def spark_env(env: dict[str, str]) -> dict[str, str]:
    """C{env} for a process that starts a Spark session: L{SUBPROCESS_CONF} given to it through PYSPARK_SUBMIT_ARGS
    (read by pyspark when it launches the JVM; settings the job's own builder sets still win)."""
    conf = " ".join(f"--conf {key}={value}" for key, value in SUBPROCESS_CONF.items())
    return {**env, "PYSPARK_SUBMIT_ARGS": f"{conf} pyspark-shell"}


def spark_call(function, *args, **kwargs):
    """Run a blocking Spark call in a thread; a Deferred of its result (the reactor keeps running)."""
    return deferToThread(function, *args, **kwargs)
