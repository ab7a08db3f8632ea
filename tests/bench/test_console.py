"""C{twlog bench console}'s table, rendered from results (nothing runs)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.bench.test_tables import TableRules
from twlog.bench.console import TARGETS, console_table


class ConsoleTableTests(TableRules, SynchronousTestCase):
    def test_table(self) -> None:
        """One row per page or route: the median and the longest of its times, in ms, and its last status."""
        rows = [(name, [0.010, 0.002, 0.004], 200) for name, _ in TARGETS]
        table = console_table(rows, 1000, 1000, 3)
        text = self.assertWellFormed(table, len(TARGETS))
        self.assertEqual(table.rows[0], ["page /", "4.0", "10.0", "200"])
        self.assertIn("1000 topics, 1000 groups", text)

    def test_targets_cover_the_routes(self) -> None:
        """Every cluster route and page of docs/console.md's table is asked."""
        paths = [path for _, path in TARGETS]
        for route in ("/api/overview", "/api/topics", "/api/topics/{topic}", "/api/topics/{topic}/messages",
                      "/api/brokers", "/api/groups", "/api/groups/{group}", "/api/history"):
            self.assertTrue(any(p.split("?")[0] == route for p in paths), route)
