"""The smaller findings of issue 20 against real brokers: each says what happened, in one line where it fails."""

from __future__ import annotations

import json

from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_cli import one_line, twlog


class OneBrokerTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.service = await start_broker(self, num_partitions=2, flush_interval_ms=20)
        self.broker = f"127.0.0.1:{self.service.broker.port}"
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "clicks", "-p", "0-0",
                                     stdin=b"a\nb\nc\n")
        self.assertEqual(status, 0, err)

    async def test_offsets_before_every_segment(self) -> None:
        """offsets --time older than every segment says so, with the earliest offset, and exits 1."""
        status, out, err = await twlog("offsets", "-b", self.broker, "-t", "clicks", "-p", "0-0",
                                       "--time", "1970-01-01T00:00")
        self.assertEqual((status, out), (1, b""))
        one_line(self, err)
        self.assertIn(b"no segment of partition 0-0 of 'clicks' was last modified before 1970-01-01T00:00:00 UTC",
                      err)
        self.assertIn(b"its earliest offset is 0 (--time earliest)", err)
        status, out, err = await twlog("offsets", "-b", self.broker, "-t", "clicks", "--time", "1970-01-01T00:00")
        self.assertEqual((status, out), (1, b""))
        self.assertIn(b"the earliest offsets are 0-0: 0, 0-1: 0", err)

    async def test_did_you_mean(self) -> None:
        """A mistyped topic name is refused naming the topic it was probably meant to be."""
        for command in (("consume",), ("offsets",), ("topics", "describe")):
            status, out, err = await twlog(*command, "-b", self.broker, "-t", "clikcs")
            self.assertEqual((status, out), (1, b""), command)
            one_line(self, err)
            self.assertIn(b"topic 'clikcs' does not exist on 127.0.0.1:", err)
            self.assertTrue(err.endswith(b"; did you mean 'clicks'?\n"), err)

    async def test_describe(self) -> None:
        """topics describe (and topics -t) shows each partition's leader, earliest and latest offset and size."""
        status, out, err = await twlog("topics", "describe", "-b", self.broker, "-t", "clicks", "--json")
        self.assertEqual(status, 0, err)
        described = json.loads(out)
        self.assertEqual(described["topic"], "clicks")
        latest = 3 * (9 + 1)  # three one-byte messages of magic 0: 9 bytes of overhead each
        self.assertEqual(described["partitions"], [
            {"partition": "0-0", "leader": 0, "broker": self.broker, "earliest": 0, "latest": latest, "size": latest},
            {"partition": "0-1", "leader": 0, "broker": self.broker, "earliest": 0, "latest": 0, "size": 0},
        ])
        status, out, err = await twlog("topics", "-b", self.broker, "-t", "clicks")
        self.assertEqual(status, 0, err)
        self.assertIn(b"clicks: 2 partitions on 1 broker", out)
        self.assertRegex(out, rb"0-0 +0 \(127\.0\.0\.1:\d+\) +0 +30 +30")
