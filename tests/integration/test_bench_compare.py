"""C{twlog bench compare} end to end against twlog alone (the peers are optional extras): a real broker process,
the Twisted producer and consumer over 127.0.0.1, a small -n."""

from __future__ import annotations

import json
import os

from twisted.trial.unittest import TestCase

from tests.integration.test_cli import one_line, twlog
from twlog.bench import compare


class CompareCommandTests(TestCase):
    timeout = 180

    async def test_twlog_alone(self) -> None:
        """Two rounds of the paper's tests against twlog: a result per round and test, each having moved every
        message, a summary per test, the table on stdout and status 0."""
        path = self.mktemp()
        status, out, err = await twlog("bench", "compare", "-n", "2000", "--rounds", "2", "--systems", "twlog",
                                       "--json-out", path)
        self.assertEqual(status, 0, err)
        self.assertNotIn(b"Traceback", err)
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(lines[0]["kind"], "run")
        self.assertEqual(lines[0]["systems"], ["twlog"])
        results = [line for line in lines if line["kind"] == "result"]
        self.assertEqual(sorted((r["round"], r["test"], r["batch"]) for r in results),
                         [(1, "consume", 0), (1, "produce", 1), (1, "produce", 50),
                          (2, "consume", 0), (2, "produce", 1), (2, "produce", 50)])
        for r in results:
            self.assertEqual(r["messages"], 2000)
            self.assertEqual(r["points"][-1][0], 2000)
            self.assertGreater(r["msg_s"], 0)
        summaries = [line for line in lines if line["kind"] == "summary"]
        self.assertEqual([(s["test"], s["batch"]) for s in summaries], [("produce", 1), ("produce", 50),
                                                                         ("consume", 0)])
        text = out.decode()
        for row in ("produce, batch 1", "produce, batch 50", "consume, 200 KB fetches"):
            self.assertIn(row, text)
        status, replayed, err = await twlog("bench", "compare", "--from-json", path)
        self.assertEqual(status, 0, err)
        self.assertEqual(replayed, out)  # the same table, from the saved run

    async def test_plots(self) -> None:
        """--plot draws the figures 4 and 5 of the run as PNG files."""
        if compare.Figure is None:
            self.skipTest("matplotlib is not installed (the compare extra)")
        directory = self.mktemp()
        status, out, err = await twlog("bench", "compare", "-n", "500", "--rounds", "1", "--systems", "twlog",
                                       "--batch", "1,10", "--plot", directory)
        self.assertEqual(status, 0, err)
        self.assertEqual(sorted(os.listdir(directory)), ["compare-consume.png", "compare-produce.png"])

    async def test_batch_larger_than_messages(self) -> None:
        """A batch larger than --messages is a usage error: one line, status 2."""
        status, out, err = await twlog("bench", "compare", "-n", "10", "--batch", "50", "--systems", "twlog")
        self.assertEqual(status, 2)
        one_line(self, err)
        self.assertIn(b"--batch 50", err)

    async def test_unreachable_peer(self) -> None:
        """A peer named in --systems that does not listen is a runtime error naming the port and the script."""
        status, out, err = await twlog("bench", "compare", "--systems", "twlog,rabbitmq", "--rabbitmq-port", "1")
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertTrue(b"127.0.0.1:1 " in err or b"pika" in err, err)
