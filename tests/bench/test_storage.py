"""Tests for C{twlog bench storage}: the rows measure the real log, and the command prints its table."""

from __future__ import annotations

import os
import subprocess
import sys

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from twlog.bench.storage import format_storage_table, run_storage_benchmark


class StorageBenchmarkTests(TestCase):
    async def test_rows_measure_the_real_log(self) -> None:
        """The benchmark appends and reads back every message, and measures 9 bytes of overhead."""
        directory = self.mktemp()
        rows = await run_storage_benchmark(reactor, 2000, 200, [1, 50], directory)
        self.assertEqual([(r.batch, r.messages) for r in rows], [(1, 2000), (50, 2000)])
        for row in rows:
            self.assertEqual(row.disk_bytes_per_msg, 209.0)
            self.assertEqual(row.overhead_bytes, 9.0)
            self.assertGreater(row.append_msg_s, 0)
            self.assertGreater(row.read_msg_s, 0)
        self.assertEqual(os.listdir(directory), [])  # cleaned up
        table = format_storage_table(rows, 200)
        self.assertIn("overhead (B/msg)", table.text())
        self.assertEqual([row[:2] for row in table.rows], [["1", "2,000"], ["50", "2,000"]])
        self.assertEqual(table.problems(), [])

    def test_command_end_to_end(self) -> None:
        """`twlog bench storage` runs as a command and prints its table."""
        result = subprocess.run(
            [sys.executable, "-m", "twlog.cli", "bench", "storage", "-n", "1000", "--batch", "10"],
            capture_output=True, text=True, timeout=120,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = [line.split() for line in result.stdout.splitlines() if line.split()[:2] == ["10", "1,000"]]
        self.assertEqual(len(rows), 1, result.stdout)
        self.assertEqual(rows[0][-2:], ["209.00", "9.00"])
