"""`twlog bench spark` as a user runs it: a table on stdout and no traceback on stderr."""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase


class SparkBenchTests(SynchronousTestCase):
    def test_no_traceback(self) -> None:
        """The benchmark prints its rows (the minPartitions read with 8 tasks and every row), exits 0, and
        PySpark's daemon prints no BrokenPipeError: every read runs to its end (a read cut short by limit()
        breaks a worker's pipe)."""
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        env.pop("PYSPARK_PYTHON", None)  # the benchmark's own default: the Python running it
        result = subprocess.run([sys.executable, "-m", "twlog.cli", "bench", "spark", "--messages", "20000",
                                 "--rounds", "1"], capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        for label in ("twlog -> count()", "json  -> count()", "twlog -> parquet", "json  -> parquet"):
            self.assertIn(label, result.stdout)
        # The one-partition topic: one task without minPartitions, 8 with it, every row either way.
        self.assertRegex(result.stdout, r"bench1 -> count\(\)\s+[\d,]+\s+[\d,]+\s+1\s+20,000\n")
        self.assertRegex(result.stdout, r"bench1 minPartitions 8 -> count\(\)\s+[\d,]+\s+[\d,]+\s+8\s+20,000\n")
        self.assertNotIn("Traceback", result.stderr)
        self.assertNotIn("BrokenPipeError", result.stderr)
        self.assertNotIn("replaced a statically registered data source", result.stderr)
