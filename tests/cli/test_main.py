"""Tests for the twlog command line: parsing, errors, and the benchmarks it runs."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

from twisted.internet import reactor
from twisted.trial.unittest import SynchronousTestCase, TestCase

from twlog.bench.core import format_storage_table, run_storage_benchmark
from twlog.cli.main import main


def run_main(*argv: str) -> tuple[int, str, str]:
    """Run twlog in process; return (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as e:
            status = e.code
    return status, out.getvalue(), err.getvalue()


class CommandLineTests(SynchronousTestCase):
    def test_help_for_every_command(self) -> None:
        """--help works for the command and each subcommand, exiting 0."""
        for argv in (["--help"], ["bench", "--help"], ["bench", "storage", "--help"], ["bench", "crc", "--help"]):
            status, out, _ = run_main(*argv)
            self.assertEqual(status, 0, argv)
            self.assertIn("usage: twlog", out)

    def test_bad_number_is_one_line(self) -> None:
        """A bad option value is one line on stderr and exit status 2, no traceback."""
        status, _, err = run_main("bench", "storage", "--messages", "lots")
        self.assertEqual(status, 2)
        self.assertEqual(err.count("\n"), 1)
        self.assertIn("'lots' is not a whole number", err)
        self.assertNotIn("Traceback", err)

    def test_unknown_command(self) -> None:
        """An unknown subcommand is a usage error."""
        status, _, err = run_main("frobnicate")
        self.assertEqual(status, 2)
        self.assertIn("invalid choice", err)

    def test_crc_benchmark_table(self) -> None:
        """twlog bench crc prints a row for zlib and for crcmod's C extension."""
        status, out, _ = run_main("bench", "crc", "--count", "200")
        self.assertEqual(status, 0)
        self.assertIn("crcmod C extension in use: True", out)
        self.assertIn("zlib.crc32 (hot path)", out)
        self.assertIn("crcmod crc-32 (C extension)", out)


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
        self.assertIn("overhead B/msg", table)
        self.assertEqual(len(table.splitlines()), 5)

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
