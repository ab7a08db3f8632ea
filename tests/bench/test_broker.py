"""Tests for twlog bench broker's consumption sweep: its options and its side-by-side table (no timing)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.broker import APIS, BrokerRow, SweepCell, format_sweep_table
from twlog.cli.main import build_parser


def cell(fetch_bytes: int, api: str, sendfile: bool, seconds: float, cpu_s: float) -> SweepCell:
    return SweepCell(fetch_bytes, api, sendfile, BrokerRow("consume", 1_000_000, seconds, 200_000_000, cpu_s))


class SweepOptionTests(SynchronousTestCase):
    def test_fetch_sizes_and_rounds(self) -> None:
        """--fetch-bytes takes a comma-separated list of sizes (default: the paper's 200 KiB) and --rounds a count."""
        args = build_parser().parse_args(["bench", "broker", "--fetch-bytes", "65536,262144,1048576,4194304",
                                          "--rounds", "3"])
        self.assertEqual((args.fetch_bytes, args.rounds), ([65536, 262144, 1048576, 4194304], 3))
        args = build_parser().parse_args(["bench", "broker"])
        self.assertEqual((args.fetch_bytes, args.rounds), ([200 * 1024], 1))
        self.assertEqual(build_parser().parse_args(["bench", "storage"]).fetch_bytes, 1024 * 1024)

    def test_bad_sizes_are_usage_errors(self) -> None:
        """A size that is not a positive integer is refused by the parser (exit 2)."""
        for argv in (["bench", "broker", "--fetch-bytes", "65536,0"], ["bench", "broker", "--fetch-bytes", "x"],
                     ["bench", "broker", "--rounds", "0"]):
            with self.assertRaises(SystemExit) as raised:
                build_parser().parse_args(argv)
            self.assertEqual(raised.exception.code, 2)


class SweepTableTests(SynchronousTestCase):
    def test_side_by_side(self) -> None:
        """One line per fetch size and API: the median msg/s through sendfile and copying, their ratio, and the
        brokers' CPU seconds per GB of log bytes (209 bytes a message here)."""
        cells = []
        for api in APIS:
            for seconds, cpu in ((1.0, 0.1), (2.0, 0.3), (4.0, 0.2)):  # medians: 2 s, 0.2 s
                cells.append(cell(65536, api, True, seconds, cpu))
                cells.append(cell(65536, api, False, seconds * 2, cpu * 2))
        table = format_sweep_table(cells, 200)
        self.assertEqual([row[1] for row in table.rows], list(APIS))
        for row in table.rows:
            self.assertEqual(row, ["64", row[1], "500,000", "250,000", "2.00", f"{0.2 / 0.209:.2f}",
                                   f"{0.4 / 0.209:.2f}"])
        self.assertEqual(table.problems(), [])

    def test_sizes_in_kib(self) -> None:
        """Fetch sizes read in KiB, the unit in the header."""
        cells = [cell(size, "batch", mode, 1.0, 0.1) for size in (65536, 4 * 1024 * 1024) for mode in (True, False)]
        table = format_sweep_table(cells, 200)
        self.assertEqual([row[0] for row in table.rows], ["64", "4,096"])
        self.assertIn("fetch (KiB)", table.text())

    def test_cpu_under_a_tick_is_footnoted(self) -> None:
        """A broker CPU time of 0 (under the clock tick) is not shown as 0 s/GB but explained in a footnote."""
        table = format_sweep_table([cell(65536, "batch", mode, 1.0, 0.0) for mode in (True, False)], 200)
        self.assertEqual(table.rows[0][-2:], ["n/a [1]", "n/a [1]"])
        self.assertIn("[1] under one clock tick", table.text())
        self.assertEqual(table.problems(), [])
