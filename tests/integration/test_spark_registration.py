"""PySpark finds the twlog source by itself (the pyspark_twlog package's DefaultSource), and register() leaves it.

One fresh Spark session in a subprocess answers every question here (a session costs a JVM start, the slowest
part): a read before any register() call, then register() (whose check of the workers' Python passes, as with
PYSPARK_PYTHON pointing at twlog's Python), register() again, a read, and a direct re-registration by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.spark import spark_env
from twlog.spark.source import TwlogDataSource

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

_SCRIPT = """
import sys
from pyspark.sql import SparkSession
from twlog.spark.source import TwlogDataSource, WorkersCannotImportTwlog, register
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())

def read():
    try:
        spark.read.format("twlog").option("brokers", "127.0.0.1:1").option("subscribe", "x").load().count()
    except Exception as e:
        return str(e)
    return "read without an error"

try:
    print(read(), flush=True)
    print("---- register()", flush=True)
    try:
        register(spark)
    except WorkersCannotImportTwlog as e:
        print("refused:", e, flush=True)
    else:
        print("registered", flush=True)
    register(spark)
    print("read:", "ConnectionFailed" in read(), flush=True)
    print("---- registering again by hand", file=sys.stderr, flush=True)
    spark.dataSource.register(TwlogDataSource)  # what register() did before: Spark warns
    print("---- done", file=sys.stderr, flush=True)
finally:
    spark.stop()
"""


class AutomaticRegistrationTests(SynchronousTestCase):
    def test_default_source(self) -> None:
        """The pyspark_twlog package exposes the twlog source as PySpark's DefaultSource."""
        import pyspark_twlog

        self.assertIs(pyspark_twlog.DefaultSource, TwlogDataSource)
        self.assertEqual(TwlogDataSource.name(), "twlog")

    def test_new_session_finds_twlog_and_register_leaves_it(self) -> None:
        """A fresh Spark session reads format("twlog") with no register() call: the error is twlog's own.
        register() in it then passes its check of the workers' Python (PYSPARK_PYTHON is twlog's Python) and leaves
        the source found by itself: no "replaced a statically registered data source" warning in Spark's log
        (which a direct spark.dataSource.register call does write, in the same log)."""
        env = spark_env(dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable))
        result = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300,
                                env=env, cwd=ROOT)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        unregistered, _, registered = result.stdout.partition("---- register()\n")
        self.assertIn("twlog/spark/source.py", unregistered, result.stderr[-2000:])
        self.assertIn("ConnectionFailed", unregistered)
        self.assertNotIn("DATA_SOURCE_NOT_FOUND", unregistered)

        self.assertEqual(registered, "registered\nread: True\n", result.stderr[-3000:])
        before, _, after = result.stderr.partition("---- registering again by hand")
        warning = "The data source twlog replaced a statically registered data source"
        self.assertNotIn(warning, before)
        self.assertIn(warning, after.partition("---- done")[0])
