"""The twlog command against a real broker: produce, consume, offsets, topics, and their errors."""

from __future__ import annotations

import os
import re
import sys

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.zookeeper import fresh_connect_string


class _Command(ProcessProtocol):
    def __init__(self, stdin: bytes) -> None:
        self.stdin = stdin
        self.out = b""
        self.err = b""
        self.ended: Deferred = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.stdin)
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason) -> None:
        self.ended.callback((reason.value.exitCode, self.out, self.err))


def twlog(*args: str, stdin: bytes = b"") -> Deferred:
    """Run the twlog command; fire with (exit status, stdout, stderr)."""
    command = _Command(stdin)
    argv = [sys.executable, "-m", "twlog.cli", *args]
    reactor.spawnProcess(command, sys.executable, argv, env=os.environ.copy())
    return command.ended


class CommandTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.service = await start_broker(self, num_partitions=3, flush_interval_ms=20, segment_bytes=4096)
        self.broker = f"127.0.0.1:{self.service.broker.port}"

    async def test_produce_then_consume(self) -> None:
        """Lines produced from stdin come back from consume, one per line, in order, across segment rolls."""
        lines = b"".join(b"line %d\n" % i for i in range(500))
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "logs", "-p", "0", "--batch-size", "50",
                                     stdin=lines)
        self.assertEqual(status, 0, err)
        self.assertIn(b"sent 500 messages to logs", err)
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "logs", "-p", "0-0")
        self.assertEqual((status, out), (0, lines), err)
        self.assertGreater(len(self.service.logs.get_log("logs", 0).segments), 1)

    async def test_keyed_produce_and_files(self) -> None:
        """A key sends every line of the named files to one partition."""
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"a\nb\nc\n")
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "k", "--key", "member-42", path, path)
        self.assertEqual(status, 0, err)
        counts = [self.service.logs.get_log("k", p) for p in range(3)]
        written = [log.end_offset // 10 if log else 0 for log in counts]
        self.assertEqual(sorted(written), [0, 0, 6])

    async def test_offsets_and_max_messages(self) -> None:
        """offsets prints latest and earliest; consume can start at a printed offset and stop after N."""
        await twlog("produce", "-b", self.broker, "-t", "o", "-p", "0", "--ack", "flushed",
                    stdin=b"".join(b"%05d\n" % i for i in range(10)))
        _, latest, _ = await twlog("offsets", "-b", self.broker, "-t", "o", "-p", "0-0")
        _, earliest, _ = await twlog("offsets", "-b", self.broker, "-t", "o", "-p", "0", "--time", "earliest")
        self.assertEqual((latest, earliest), (b"140\n", b"0\n"))
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "o", "-p", "0-0", "-o", "42", "-n", "2")
        self.assertEqual((status, out), (0, b"00003\n00004\n"), err)

    async def test_follow_wakes_on_new_data(self) -> None:
        """consume --follow waits for messages produced after it started."""
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "f", "-p", "0", stdin=b"x\n")
        self.assertEqual(status, 0, err)
        following = twlog("consume", "-b", self.broker, "-t", "f", "--offset", "earliest", "--follow", "-n", "3")
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "f", "-p", "0", stdin=b"y\nz\n")
        self.assertEqual(status, 0, err)
        status, out, err = await following
        self.assertEqual((status, out), (0, b"x\ny\nz\n"), err)

    async def test_topics(self) -> None:
        """topics lists the broker and its topics with their partition counts."""
        await twlog("produce", "-b", self.broker, "-t", "views", stdin=b"v\n")
        status, out, _ = await twlog("topics", "-b", self.broker)
        self.assertEqual(status, 0)
        self.assertRegex(out, rb"views +0 \(127\.0\.0\.1:\d+\) +3 +0-0 \.\. 0-2")

    async def test_errors_are_one_line(self) -> None:
        """User mistakes and unreachable brokers end with one line on stderr and a non-zero status."""
        cases = [
            (("consume", "-b", self.broker, "-t", "o", "-p", "0-0", "-o", "3"), b"OffsetNotOnBoundary"),
            (("consume", "-b", "127.0.0.1:1", "-t", "o"), b"cannot connect to broker 127.0.0.1:1"),
            (("produce", "-b", self.broker, "-t", "o", "--batch-size", "0"), b"must be positive"),
        ]
        await twlog("produce", "-b", self.broker, "-t", "o", "-p", "0", "--ack", "flushed", stdin=b"abc\n")
        for argv, expected in cases:
            status, _, err = await twlog(*argv)
            self.assertNotEqual(status, 0, argv)
            self.assertIn(expected, err, argv)
            self.assertEqual(err.count(b"\n"), 1, err)
            self.assertNotIn(b"Traceback", err)


class ClusterCommandTests(TestCase):
    timeout = 120

    async def test_produce_and_consume_through_zookeeper(self) -> None:
        """produce --zookeeper spreads over the brokers; a group member reads everything; groups shows no lag."""
        zookeeper = fresh_connect_string()
        brokers = [await start_broker(self, zookeeper=zookeeper, broker_id=i, num_partitions=2,
                                      flush_interval_ms=20) for i in range(2)]
        lines = [b"event %d" % i for i in range(200)]
        status, _, err = await twlog("produce", "--zookeeper", zookeeper, "-t", "events", "--batch-size", "20",
                                     stdin=b"".join(line + b"\n" for line in lines))
        self.assertEqual(status, 0, err)
        status, out, err = await twlog("consume", "--zookeeper", zookeeper, "--group", "g", "-t", "events",
                                       "--streams", "2", "-n", "200")
        self.assertEqual(status, 0, err)
        self.assertEqual(sorted(out.split(b"\n")[:-1]), sorted(lines))
        status, out, err = await twlog("groups", "--zookeeper", zookeeper, "--group", "g")
        self.assertEqual(status, 0, err)
        self.assertIn(b"group g: 0 live member(s), total lag 0 bytes", out)
        self.assertEqual(sum(len(b.broker.logs.logs()) > 0 for b in brokers), 2)

    async def test_group_needs_zookeeper(self) -> None:
        """--group without --zookeeper is a usage error; an unreachable ZooKeeper is said in one line."""
        for argv, expected in ((("consume", "--group", "g", "-t", "x"), 2),
                               (("consume", "--zookeeper", "127.0.0.1:1", "-t", "x"), 1)):
            status, _, err = await twlog(*argv)
            self.assertEqual(status, expected, err)
            self.assertEqual(err.count(b"\n"), 1, err)


class BenchmarkCommandTests(TestCase):
    timeout = 120

    async def test_bench_broker(self) -> None:
        """twlog bench broker runs a broker process and prints a row per test, every message accounted for."""
        status, out, err = await twlog("bench", "broker", "-n", "2000", "--batch", "1,50")
        self.assertEqual(status, 0, err)
        rows = re.findall(r"^(produce, batch \d+, fire-and-forget|consume, 200 KB fetches)\s+([\d,]+)\s+([\d,]+)",
                          out.decode(), re.MULTILINE)
        self.assertEqual([(test, count) for test, count, _ in rows], [
            ("produce, batch 1, fire-and-forget", "2,000"),
            ("produce, batch 50, fire-and-forget", "2,000"),
            ("consume, 200 KB fetches", "2,000"),
        ])
        self.assertTrue(all(int(rate.replace(",", "")) > 0 for _, _, rate in rows))
