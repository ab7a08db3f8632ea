"""C{twlog bench latency} and C{twlog bench local} end to end with tiny sizes: real broker processes, a real
twlog local, real sockets on 127.0.0.1."""

from __future__ import annotations

import re

from twisted.trial.unittest import TestCase

from tests.integration.test_cli import twlog


class LatencyBenchCommandTests(TestCase):
    timeout = 180

    async def test_tiny_run(self) -> None:
        """Both policies at one low rate for half a second: every message is received, each row has its latencies
        and fsyncs, the settings and the disk's fsync probe are printed, and the command ends with status 0."""
        status, out, err = await twlog("bench", "latency", "--rates", "200", "--seconds", "0.5",
                                       "--flush-interval-ms", "50", "--fsync-probes", "5")
        self.assertEqual(status, 0, err)
        text = out.decode()
        for policy in ("group", "timer"):
            match = re.search(rf"^{policy}\s+200\s+[\d,]+\s+100/100\s+([\d.,]+)\s+[\d.,]+\s+[\d.,]+\s+[\d.,]+"
                              r"\s+([\d,]+)\s", text, re.MULTILINE)
            self.assertIsNotNone(match, text)
            self.assertGreater(int(match.group(2).replace(",", "")), 0)  # the broker did fsyncs
        self.assertIn("group: --flush-policy group --flush-interval-ms 50", text)
        self.assertIn("fsync of this disk (5 x 20 KB", text)
        self.assertNotIn(b"Traceback", err)

    async def test_bad_policy(self) -> None:
        """An unknown policy is one line on stderr and exit status 2."""
        status, _, err = await twlog("bench", "latency", "--flush-policy", "sometimes")
        self.assertEqual(status, 2)
        self.assertEqual(err.decode().count("\n"), 1, err)
        self.assertIn("sometimes", err.decode())


class LocalBenchCommandTests(TestCase):
    timeout = 240

    async def test_tiny_run(self) -> None:
        """Two producer processes against twlog local --brokers 1 and 2: a row each, every message counted."""
        status, out, err = await twlog("bench", "local", "--messages", "1000")
        self.assertEqual(status, 0, err)
        text = out.decode()
        for brokers in (1, 2):
            self.assertRegex(text, rf"--brokers {brokers}\s+this checkout\s+2\s+2,000\s+[\d.]+\s+[\d,]+\s")
        self.assertNotIn(b"Traceback", err)
