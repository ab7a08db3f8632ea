"""C{twlog bench replication} end to end with tiny sizes: its own ZooKeeper and three C{twlog broker} processes
on 127.0.0.1, a leader killed and one stopped, a follower caught up.  The tables' structure and that every figure
is a number above 0 are checked; timings are not (the bench reports them, tests do not judge them)."""

from __future__ import annotations

import re

from twisted.trial.unittest import TestCase

from tests.integration.test_cli import one_line, twlog

NUMBER = r"[\d,]+(?:\.\d+)?"


def figures(text: str, label: str, count: int) -> list[float]:
    """The C{count} figures of the row named C{label} (the first cells after it), as numbers."""
    match = re.search(rf"^{label} +((?:{NUMBER} +){{{count - 1}}}{NUMBER})(?: |$)", text, re.MULTILINE)
    assert match is not None, f"no row {label!r} with {count} figures in:\n{text}"
    return [float(cell.replace(",", "")) for cell in match.group(1).split()]


class ReplicationBenchCommandTests(TestCase):
    timeout = 420

    async def test_tiny_run(self) -> None:
        """One round of each measurement with a 2 s session: three tables, a row per replication factor and ack,
        per way of stopping the leader and for the follower, every figure above 0 (the producer errors and the
        rounds whose leader was the controller are counts, 0 or more); no traceback, status 0."""
        status, out, err = await twlog("bench", "replication", "--messages", "500", "--rounds", "1",
                                       "--catch-up-mb", "1", "--session-timeout-s", "2", "--size", "100")
        self.assertEqual(status, 0, err)
        self.assertNotIn(b"Traceback", err)
        text = out.decode()
        self.assertIn("replication: produce throughput, batch 50, 100-byte messages, 1 partition", text)
        for factor in (1, 2, 3):
            for ack in ("appended", "all"):
                rounds, *measured = figures(text, f"{factor} +{ack}", 6)
                self.assertEqual(rounds, 1)
                self.assertTrue(all(value > 0 for value in measured), (factor, ack, measured))
        self.assertRegex(text, r"RF 3 with ack=all reaches \d+% of RF 1 with ack=appended: (meets|does NOT meet) "
                         r"issue 22's target of 40%\.")

        self.assertIn("replication: failover of a leader under ack=all load (RF 3, min.insync.replicas 2, brokers' "
                      "ZooKeeper session 2 s)", text)
        for how, target in (("kill -9", 4.0), ("SIGTERM", 1.0)):
            rounds, first, worst, elected, pause, errors, row_target = figures(text, how, 7)
            self.assertEqual((rounds, row_target), (1, target))
            self.assertTrue(all(value > 0 for value in (first, worst, elected, pause)), (how, first, elected, pause))
            self.assertGreaterEqual(errors, 0)
            self.assertRegex(text, rf"\n{how}\s.*\s(meets|does NOT meet)\s+[01]\s")

        rounds, *measured = figures(text, "restarted after SIGTERM", 6)
        self.assertEqual(rounds, 1)
        self.assertTrue(all(value > 0 for value in measured), measured)
        self.assertIn("the machine's 1-minute load average", text)

    async def test_too_few_brokers(self) -> None:
        """Fewer than three brokers is one line and exit status 2, before anything starts."""
        status, _, err = await twlog("bench", "replication", "--brokers", "2")
        self.assertEqual(status, 2)
        one_line(self, err)
        self.assertIn("--brokers must be at least 3", err.decode())
