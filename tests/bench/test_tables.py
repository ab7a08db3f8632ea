"""Every table of C{twlog bench}, rendered from result objects (nothing runs): each column has a header and a unit
(only the columns of text that name the rows have none), and no cell is empty; a cell without a value says why in
a footnote printed under the table."""

from __future__ import annotations

import argparse
import re

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from twlog.bench.broker import APIS, BrokerRow, SweepCell, format_broker_table, format_sweep_table
from twlog.bench.common import BenchTable, Column
from twlog.bench.compare import Result, render_table, summary
from twlog.bench.crc import format_crc_table
from twlog.bench.frames import FrameRow, format_frames_table
from twlog.bench.hostile import BASELINE, AttackRow, format_hostile_table
from twlog.bench.latency import FlushStats, LatencyRow, latency_table
from twlog.bench.local import LocalRow, local_table
from twlog.bench.rebalance import rebalance_table
from twlog.bench.storage import StorageRow, format_storage_table
from twlog.bench.verdicts import HealthyFetches, Pipelined


class TableRules:
    """The checks every table passes."""

    def assertWellFormed(self, table: BenchTable, rows: int) -> str:
        """C{table} has C{rows} rows, keeps the rules, and every header of a measured column shows its unit in
        the rendered text, on the header line; its text is returned."""
        self.assertEqual(table.problems(), [])
        self.assertEqual(len(table.rows), rows)
        text = table.text()
        lines = text.splitlines()
        header = next(line for line in lines if all(c.name in line for c in table.columns))
        for column in table.columns:
            if not column.names_rows:
                self.assertTrue(column.unit and column.unit.strip(), column)
                self.assertIn(f"{column.name} ({column.unit})", header)
        # Headers are apart: two spaces at least between them (none runs into the next).
        positions = []
        start = 0
        for column in table.columns:
            found = header.index(column.header, start)
            positions.append((found, found + len(column.header)))
            start = found + len(column.header)
        for (_, end), (begin, _) in zip(positions, positions[1:]):
            self.assertGreaterEqual(begin - end, 2, header)
        for row in table.rows:
            for cell in row:
                self.assertTrue(cell.strip())
                for mark in re.findall(r"\[\d+\]", cell):
                    self.assertIn(f"\n{mark} ", "\n" + text)  # the footnote is printed under the table
        return text


class RulesTests(SynchronousTestCase):
    def test_problems_found(self) -> None:
        """A measured column without a unit, an empty cell, and n/a without a footnote are each reported."""
        table = BenchTable("t", [Column.label("test"), Column("time", None), Column("rate", "msg/s"),
                                 Column("", "s")])
        table.add_row("a", "1", "", "n/a")
        self.assertEqual(table.problems(), [
            "column 'time' has no unit", "column 4 has no header", "an empty cell in column 'rate (msg/s)' of row 'a'",
            "'n/a' in column ' (s)' of row 'a' has no footnote"])

    def test_missing_cells_share_footnotes(self) -> None:
        """The same reason gets the same mark; the footnotes print under the table, then the notes."""
        table = BenchTable("t", [Column.label("test"), Column("time", "s"), Column("rate", "msg/s")],
                           notes=["a note"])
        table.add_row("a", table.missing("not run"), table.missing("not run"))
        table.add_row("b", "1.0", table.missing("too short"))
        self.assertEqual(table.problems(), [])
        self.assertEqual(table.rows[0][1:], ["n/a [1]", "n/a [1]"])
        self.assertEqual(table.text().splitlines()[-3:], ["[1] not run", "[2] too short", "a note"])

    def test_row_width_checked(self) -> None:
        table = BenchTable("t", [Column.label("test"), Column("time", "s")])
        self.assertRaises(ValueError, table.add_row, "a")


class EveryTableTests(TableRules, SynchronousTestCase):
    def test_storage(self) -> None:
        rows = [StorageRow(1, 2000, 1e6, 2e5, 40.0, 4e5, 80.0, 209.0, 9.0)]
        text = self.assertWellFormed(format_storage_table(rows, 200), 1)
        self.assertIn("overhead (B/msg)", text)

    def test_broker(self) -> None:
        rows = [BrokerRow("produce, batch 1, fire-and-forget", 2000, 0.01, 400_000, 0.03, 0.006),
                BrokerRow("produce, batch 50, fire-and-forget", 2000, 0.01, 400_000, 0.0, 0.0004),
                BrokerRow("consume", 2000, 0.01, 400_000, 0.03)]
        table = format_broker_table(rows, 200, 7)
        text = self.assertWellFormed(table, 3)
        self.assertIn("[1] under one clock tick", text)
        self.assertEqual([row[-2:] for row in table.rows[:2]], [["0.01", "3.00"], ["0.00", "0.20"]])
        self.assertEqual(table.rows[2][-2:], ["n/a [2]", "n/a [2]"])  # client CPU measured for produce rows only
        self.assertIn("[2] not measured", text)

    def test_consumption(self) -> None:
        """The consumption table (the issue: its header ran its columns together)."""
        cells = [SweepCell(size, api, mode, BrokerRow("consume", 1000, 0.01, 200_000, 0.01 if mode else 0.0))
                 for size in (65536, 1024 * 1024) for api in APIS for mode in (True, False)]
        text = self.assertWellFormed(format_sweep_table(cells, 200), 6)
        self.assertIn("sendfile (msg/s)   copying (msg/s)", text)

    def test_crc(self) -> None:
        self.assertWellFormed(format_crc_table([("zlib.crc32", 100.0), ("crcmod", 300.0)], 200), 2)

    def test_frames(self) -> None:
        self.assertWellFormed(format_frames_table([FrameRow(1_000_000, 0.0), FrameRow(10_000_000, 0.02)], 3), 2)
        table = format_frames_table([FrameRow(1_000_000, 0.0), FrameRow(10_000_000, 0.02)], 3)
        self.assertEqual(table.rows[1][3], "n/a [1]")  # nothing to compare with: said, not left blank

    def test_hostile(self) -> None:
        rows = [AttackRow(BASELINE, HealthyFetches((0.002,) * 10), None, 40_000_000),
                AttackRow("pipelined flood", HealthyFetches(()), Pipelined(2, 10, 20, 20, 1.0), 250_000_000)]
        text = self.assertWellFormed(format_hostile_table(rows), 2)
        self.assertIn("no answer beside this attack", text)

    def test_rebalance(self) -> None:
        args = argparse.Namespace(consumers=3, partitions=6, brokers=2, backoff_ms=500, runs=2,
                                  scenario=["start", "join"])
        rows = [("start", 1.5, 0), ("start", 2.5, 1), ("join", 0.5, 0), ("join", 0.7, 2)]
        table = rebalance_table(rows, args)
        self.assertWellFormed(table, 2)
        self.assertEqual(table.rows[0], ["all join at once", "2.00", "1.50", "2.50", "0,1"])

    def test_latency(self) -> None:
        flushes = FlushStats(10.0, 0.01, ((0.001, 10.0), (float("inf"), 10.0)))
        rows = [LatencyRow("group", 1000, 1000, 1000, 1.0, 1.0, [0.001] * 1000, flushes, 0.1),
                LatencyRow("timer", 1000, 1000, 0, 1.0, float("nan"), [], FlushStats(), 0.1)]
        text = self.assertWellFormed(latency_table(rows, "t"), 2)
        self.assertIn("no message reached the consumer", text)
        self.assertIn("the broker did no fsync", text)

    def test_local(self) -> None:
        self.assertWellFormed(local_table([LocalRow(1, 2, 2000, 1.0, 0.5, 1.2)], "t"), 1)

    def test_compare(self) -> None:
        """twlog beside a peer that ran only some tests: the cells it has no figure for say why."""
        header = {"messages": 1000, "size": 200, "rounds": 1, "fetch_bytes": 200 * 1024, "prefetch": 1000,
                  "versions": {"twlog": "0"}, "systems": ["twlog", "rabbitmq"], "batches": [1, 50]}
        results = [Result(1, "twlog", "produce", 1, 1000, 1.0, 200), Result(1, "twlog", "produce", 50, 1000, 0.1, 200),
                   Result(1, "twlog", "consume", 0, 1000, 0.1, 200),
                   Result(1, "rabbitmq", "produce", 1, 1000, 2.0, 200)]
        rows = summary(results, header["systems"], header["batches"])
        text = self.assertWellFormed(render_table(rows, header["systems"], header, results), 3)
        self.assertIn("RabbitMQ did not run this test", text)


class SparkTableTests(TableRules, SynchronousTestCase):
    def setUp(self) -> None:
        try:
            from twlog.bench import spark
        except ImportError:
            raise SkipTest("pyspark is not installed") from None
        self.spark = spark

    def test_reads(self) -> None:
        """Every read has its rows: count()'s answer, or the rows of the Parquet files written (the issue: empty
        cells in the rows column)."""
        reads = self.spark._Reads(0, None)
        for label in self.spark._round_labels(8):
            reads.results[label] = [(1.0, 2.0, 2, 1000), (1.2, 2.2, 2, 1000)]
        args = argparse.Namespace(size=200, fetch_size=8 << 20, rounds=2, min_partitions=8)
        table = self.spark.reads_table(args, 1000, reads, (1.0, 1.0, 1.0), (1.5, 1.0, 1.0))
        self.assertWellFormed(table, 7)
        self.assertEqual({row[-1] for row in table.rows}, {"1,000"})

    def test_once(self) -> None:
        """The JSON/Avro reads: records decoded and the checksum, named and explained (the issue: an unexplained
        result 19999900000 column)."""
        n = 200_000
        table = self.spark.once_table([("json  -> from_json", 2.0, n / 2.0, (n, n * (n - 1) // 2)),
                                       ("avro  -> columns", 1.0, n / 1.0, (n, n * (n - 1) // 2))], n)
        text = self.assertWellFormed(table, 2)
        self.assertEqual(table.rows[0][-2:], ["200,000", "19,999,900,000"])
        self.assertIn("sum of field i (checksum)", text)
        self.assertIn("sum to n(n-1)/2 = 19,999,900,000", text)
