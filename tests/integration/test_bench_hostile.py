"""C{twlog bench hostile} end to end with tiny sizes: a real broker process per attack, real sockets on 127.0.0.1."""

from __future__ import annotations

import re

from twisted.trial.unittest import TestCase

from tests.integration.test_cli import one_line, twlog

#: Every attack, small: well under a minute in all (the half-sent frames hold for 1 + 1 + 4 s).
TINY = ["--seconds", "2", "--answer-timeout-s", "2", "--idle-connections", "40", "--newcomers", "4", "--idle-s", "1",
        "--stalled-mb", "1.5", "--produce-mb", "2", "--max-buffered-mb", "4", "--request-timeout-s", "1",
        "--flooders", "3", "--pipeline", "2000", "--big-clients", "2", "--big-frame-mb", "2", "--big-frames", "2",
        "--burst", "60"]
ROWS = ["none (healthy client alone)", "idle flood", "half-sent frames", "pipelined flood", "big frames",
        "connection burst"]


class HostileBenchCommandTests(TestCase):
    timeout = 120

    async def test_tiny_run(self) -> None:
        """Every attack runs against a broker and ends by itself: a row each with the healthy client's fetch
        count, p50 and p99 in ms, the attack's own figure, its target and a verdict; status 0, no traceback."""
        status, out, err = await twlog("bench", "hostile", *TINY)
        self.assertEqual(status, 0, err)
        self.assertNotIn(b"Traceback", err)
        text = out.decode()
        header = next(line for line in text.splitlines() if line.startswith("attack "))
        for column in ("healthy fetches (count)", "healthy fetch p50 (ms)", "healthy fetch p99 (ms)",
                       "healthy fetch max (ms)", "broker peak RSS (MB)", "the attack's figure", "target", "result"):
            self.assertIn(column, header)
        for label in ROWS:
            numbers = r"\s+([\d,]+)" + r"\s+([\d.,]+)" * 4  # fetches, p50, p99, max, peak RSS
            match = re.search(rf"^{re.escape(label)}(?: \[\d+\])*{numbers}\s+(.+?)\s{{2,}}(.+?)\s{{2,}}"
                              r"(pass|FAIL|n/a \[\d+\])", text, re.MULTILINE)
            self.assertIsNotNone(match, f"no row for {label!r} in:\n{text}")
            fetches = int(match.group(1).replace(",", ""))
            p50, p99, top = (float(match.group(i).replace(",", "")) for i in (2, 3, 4))
            self.assertGreater(fetches, 0, label)
            self.assertLessEqual(p50, p99, label)
            self.assertLessEqual(p99, top, label)
        self.assertRegex(text, r"\d+/4 newcomers served; \d+ of 40 idle connections held")
        self.assertRegex(text, r"answered at [\d.]+ s, [\d.]+ s after the (broker|bench) closed a stalled sender")
        self.assertRegex(text, r"[\d,]+ of 6,000 OFFSETS answered in [\d.]+ s")
        self.assertRegex(text, r"\d of 4 frames of 2\.0 MB answered in [\d.]+ s")
        self.assertRegex(text, r"connect p50 [\d.,]+ ms, p99 [\d.,]+ ms; answered p99 [\d.,]+ ms; \d+ of 60 failed")
        self.assertIn("[1] no attack: the baseline", text)

    async def test_bad_seconds(self) -> None:
        """A duration out of range is one line on stderr and exit status 2."""
        status, out, err = await twlog("bench", "hostile", "--seconds", "0")
        self.assertEqual(status, 2)
        one_line(self, err)
        self.assertIn("--seconds 0", err.decode())

    async def test_too_many_connections(self) -> None:
        """More connections than this process may open is one line naming the limit, before any broker starts."""
        status, out, err = await twlog("bench", "hostile", "--attacks", "burst", "--burst", "100000000")
        self.assertEqual(status, 2)
        one_line(self, err)
        self.assertIn("ulimit -Hn", err.decode())
