"""Tests for twlog bench zk-outage's options and table (no timing; the run itself is
C{tests.integration.test_zk_outage})."""

from __future__ import annotations

from importlib import import_module

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.zk_outage import OutageResult, outage_table
from twlog.cli.main import build_parser


class OutageOptionTests(SynchronousTestCase):
    def test_defaults_and_entry_point(self) -> None:
        """By default a 20 s and a 60 s outage at 1,000 msg/s with the members' 6 s session timeout; the command
        runs main_zk_outage."""
        args = build_parser().parse_args(["bench", "zk-outage"])
        self.assertEqual((args.outages, args.rate, args.session_timeout_s), ([20, 60], 1000, 6.0))
        module_name, _, function_name = args.run.partition(":")
        self.assertTrue(callable(getattr(import_module(module_name), function_name)))
        self.assertEqual(build_parser().parse_args(["bench", "zk-outage", "--outages", "5,10"]).outages, [5, 10])


class OutageTableTests(SynchronousTestCase):
    def test_counts_and_shares(self) -> None:
        """Duplicates are deliveries beyond the first of each message, as a share of all deliveries; missing is
        what was produced and never delivered; a run that did not catch up says why in a footnote."""
        args = build_parser().parse_args(["bench", "zk-outage"])
        caught_up = OutageResult(20, produced=30_000, delivered=31_500, distinct=30_000, expired_sessions=0,
                                 catch_up_s=1.25)
        late = OutageResult(60, produced=70_000, delivered=69_000, distinct=69_000, expired_sessions=2,
                            catch_up_s=None)
        self.assertEqual((caught_up.duplicates, caught_up.missing), (1_500, 0))
        self.assertAlmostEqual(caught_up.duplicate_share, 1_500 / 31_500)
        self.assertEqual((late.duplicates, late.missing, late.duplicate_share), (0, 1_000, 0.0))
        table = outage_table([caught_up, late], args)
        self.assertEqual(table.problems(), [])
        self.assertEqual(table.rows[0], ["20", "30,000", "31,500", "1,500", "4.76", "0", "0", "1.2"])
        self.assertEqual(table.rows[1][-1], "n/a [1]")
        self.assertIn("[1] not caught up while the producer went on (--after-s)", table.lines_under())
