"""PySpark finds the twlog source by itself: the pyspark_twlog package's DefaultSource."""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase

from twlog.spark.source import TwlogDataSource

_SCRIPT = """
import os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
try:
    spark.read.format("twlog").option("brokers", "127.0.0.1:1").option("subscribe", "x").load().count()
except Exception as e:
    print(str(e))
finally:
    spark.stop()
"""


class AutomaticRegistrationTests(SynchronousTestCase):
    def test_default_source(self) -> None:
        """The pyspark_twlog package exposes the twlog source as PySpark's DefaultSource."""
        import pyspark_twlog

        self.assertIs(pyspark_twlog.DefaultSource, TwlogDataSource)
        self.assertEqual(TwlogDataSource.name(), "twlog")

    def test_new_session_finds_twlog_without_register(self) -> None:
        """A fresh Spark session reads format("twlog") with no register() call: the error is twlog's own."""
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        result = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300,
                                env=env)
        self.assertIn("twlog/spark/source.py", result.stdout, result.stderr[-2000:])
        self.assertIn("ConnectionFailed", result.stdout)
        self.assertNotIn("DATA_SOURCE_NOT_FOUND", result.stdout)


_REGISTER_SCRIPT = """
import sys
from pyspark.sql import SparkSession
from twlog.spark.source import TwlogDataSource, register
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
try:
    register(spark)
    register(spark)
    try:
        spark.read.format("twlog").option("brokers", "127.0.0.1:1").option("subscribe", "x").load().count()
    except Exception as e:
        print("read:", "ConnectionFailed" in str(e))
    print("---- registering again by hand", file=sys.stderr, flush=True)
    spark.dataSource.register(TwlogDataSource)  # what register() did before: Spark warns
    print("---- done", file=sys.stderr, flush=True)
finally:
    spark.stop()
"""


class RegisterTests(SynchronousTestCase):
    def test_register_in_a_new_session_does_not_warn(self) -> None:
        """register() in a session that found twlog by itself leaves it: no "replaced a statically registered data
        source" warning in Spark's log (which a direct spark.dataSource.register call does write, in the same log)."""
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        result = subprocess.run([sys.executable, "-c", _REGISTER_SCRIPT], capture_output=True, text=True, timeout=300,
                                env=env)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("read: True", result.stdout, result.stderr[-3000:])
        before, _, after = result.stderr.partition("---- registering again by hand")
        warning = "The data source twlog replaced a statically registered data source"
        self.assertNotIn(warning, before)
        self.assertIn(warning, after.partition("---- done")[0])
