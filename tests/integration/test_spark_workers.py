"""A Spark job whose workers' Python lacks twlog's dependencies: register() says so, clearly, on a real session.

(With PYSPARK_PYTHON set to twlog's Python register() passes: test_spark_registration checks that in its session.)
"""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.internet import reactor
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SkipTest, TestCase

from tests.integration.spark import spark_env

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

#: A job as a user writes it (README, "Spark"), run without PYSPARK_PYTHON pointing at twlog's Python.
JOB = """
import os, sys
from pyspark.sql import SparkSession
from twlog.spark.source import WorkersCannotImportTwlog, register
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
try:
    register(spark)
except WorkersCannotImportTwlog as e:
    print("refused:", e)
else:
    print("registered")
spark.stop()
"""

#: A Python without twlog's dependencies: the system's, which the workers run when PYSPARK_PYTHON is unset.
SYSTEM_PYTHON = "/usr/bin/python3"


class WorkersPythonTests(TestCase):
    timeout = 240

    async def test_workers_python_without_twlog(self) -> None:
        """The workers' Python cannot import twlog: register() names it, the missing module, and PYSPARK_PYTHON."""
        if not os.path.exists(SYSTEM_PYTHON) or subprocess.run([SYSTEM_PYTHON, "-c", "import attrs"],
                                                               capture_output=True).returncode == 0:
            raise SkipTest(f"needs a {SYSTEM_PYTHON} without attrs (as on a fresh machine)")
        env = spark_env(dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=SYSTEM_PYTHON))
        out, err, status = await getProcessOutputAndValue(sys.executable, ["-c", JOB], env=env, path=ROOT,
                                                          reactor=reactor)
        self.assertEqual(status, 0, err[-2000:])
        self.assertIn(f"refused: Spark's Python workers run {SYSTEM_PYTHON} (PYSPARK_PYTHON, by default the python3 "
                      f"on the PATH), which cannot import twlog (ModuleNotFoundError: No module named ".encode(), out)
        self.assertIn(f"set PYSPARK_PYTHON={sys.executable} (the Python that has twlog)".encode(), out)
