"""`twlog bench spark` as a user runs it: a table on stdout and no traceback on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.spark import spark_env


class SparkBenchTests(SynchronousTestCase):
    def test_no_traceback(self) -> None:
        """The benchmark prints its rows (the minPartitions read with 8 tasks and every row), exits 0, and
        PySpark's daemon prints no BrokenPipeError: every read runs to its end (a read cut short by limit()
        breaks a worker's pipe)."""
        env = spark_env(dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))  # the JVM options of the tests' sessions
        env.pop("PYSPARK_PYTHON", None)  # the benchmark's own default: the Python running it
        result = subprocess.run([sys.executable, "-m", "twlog.cli", "bench", "spark", "--messages", "20000",
                                 "--rounds", "1"], capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        for label in ("twlog -> count()", "json  -> count()", "twlog -> parquet", "json  -> parquet"):
            self.assertIn(label, result.stdout)
        # The one-partition topic: one task without minPartitions, 8 with it, every row either way.
        self.assertRegex(result.stdout, r"bench1 -> count\(\)\s+[\d,]+\s+[\d,]+\s+1\s+20,000\n")
        self.assertRegex(result.stdout, r"bench1 minPartitions 8 -> count\(\)\s+[\d,]+\s+[\d,]+\s+8\s+20,000\n")
        # Spark's own output goes to the log file named under the tables, not onto the progress display.
        for spark_line in ("log4j", "NativeCodeLoader", "WARN", "Setting default log level"):
            self.assertNotIn(spark_line, result.stderr)
        log = re.search(r"Spark's own output \(JVM, log4j, Python workers, py4j\): (\S+)", result.stdout)
        self.assertIsNotNone(log, result.stdout)
        self.addCleanup(os.remove, log.group(1))
        with open(log.group(1)) as f:
            self.assertIn("log4j", f.read())
        # The JSON and Avro reads: every record decoded, and the checksum named (sum of i over 0..n-1).
        for label in ("json  -> from_json", "avro  -> columns"):
            self.assertRegex(result.stdout, re.escape(label) + r"\s+[\d.]+\s+[\d,]+\s+20,000\s+199,990,000\s")
        self.assertIn("sum of field i (checksum)", result.stdout)
        self.assertNotIn("Traceback", result.stderr)
        self.assertNotIn("BrokenPipeError", result.stderr)
        self.assertNotIn("replaced a statically registered data source", result.stderr)
