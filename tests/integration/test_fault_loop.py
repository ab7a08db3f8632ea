"""`twlog bench faults` end to end, briefly: three broker processes under ack=all load, three fault cases once
each (the leader killed, the leader cut off from its followers through the proxy between brokers and then from
ZooKeeper (Jepsen 2013), the leader stopped by SIGTERM), and the history checker's verdict. The long loop (every
case, 50 cycles and more) is the command itself: docs/replication.md."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from twlog.bench.fault_loop import CASES, fault_table, run_faults
from twlog.cli.benches import FAULT_CASES


class FaultLoopTests(TestCase):
    timeout = 300

    def test_case_names_match(self) -> None:
        """The command line's list of cases is the loop's."""
        self.assertEqual(FAULT_CASES, list(CASES))

    async def test_three_cases_no_anomaly(self) -> None:
        root = self.mktemp()
        cases = ["kill-leader", "leader-cut-from-followers", "sigterm-leader"]
        run, result = await run_faults(root, reactor, cases, 3)
        self.assertEqual(run.cycles, cases)
        self.assertTrue(result.valid, result.report())
        self.assertGreater(result.counts["acknowledged"], 100)
        self.assertEqual(result.counts["replica logs"], 6)
        table = fault_table(run, result, 1.0)
        self.assertEqual(table.problems(), [])
        self.assertIn("verdict: no anomaly", table.notes)
