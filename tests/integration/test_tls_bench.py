"""twlog bench broker --tls, small: one broker process with both ports, the table of plaintext beside TLS."""

from __future__ import annotations

from twisted.trial.unittest import TestCase

from tests.integration.test_cli import twlog


class TLSBenchTests(TestCase):
    timeout = 120

    async def test_small_run(self):
        code, out, err = await twlog("bench", "broker", "--tls", "--messages", "2000", "--batch", "50",
                                     "--fetch-bytes", "65536,1048576", "--dir", self.mktemp())
        self.assertEqual(code, 0, err)
        text = out.decode()
        self.assertIn("TLS / plaintext (ratio)", text)
        rows = [line.split() for line in text.splitlines() if line.startswith(("produce", "consume"))]
        self.assertEqual([row[0].rstrip(",") for row in rows], ["produce"] + ["consume"] * 4)
        for row in rows:
            self.assertGreater(float(row[-3]), 0)  # the ratio: both transports moved every message
