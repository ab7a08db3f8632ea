"""Tests for C{twlog bench crc}'s measurement and table."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.common import payloads
from twlog.bench.crc import format_crc_table, run_crc_benchmark


class CrcBenchmarkTests(SynchronousTestCase):
    def test_both_implementations_measured(self) -> None:
        """One row per implementation (ISA-L, zlib, crcmod), each a positive time per message; the table says
        which is faster."""
        results = run_crc_benchmark(size=50, count=20, rounds=2)
        self.assertEqual([name for name, _ in results],
                         ["isal_zlib.crc32 (hot path)", "zlib.crc32", "crcmod crc-32 (C extension)"])
        self.assertTrue(all(ns > 0 for _, ns in results))
        table = format_crc_table([("a", 10.0), ("b", 20.0)], 50)
        self.assertEqual(table.rows, [["a", "10", "100,000,000", "1.00"], ["b", "20", "50,000,000", "2.00"]])
        self.assertIn("time relative to the fastest (x)", table.text())

    def test_payloads_are_distinct(self) -> None:
        """The payloads have the size asked for and are all different."""
        data = payloads(100, 30)
        self.assertEqual({len(p) for p in data}, {30})
        self.assertEqual(len(set(data)), 100)
