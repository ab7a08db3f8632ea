"""`twlog produce` and a broker killed mid-produce (issue 21, finding 7): real broker processes on 127.0.0.1.

A two-broker cluster (each broker a `twlog broker` process, registered in the suite's ZooKeeper, in a fresh
chroot).  `twlog produce` reads its stdin from a pipe the test writes in two parts; between them broker 1 is
killed with SIGKILL, once everything written so far is readable (so no batch is in flight then, and the count
the command gives can be checked exactly):

  - pinned to broker 1's partition, the command stops with exit 1 and one line saying how many lines were
    acknowledged; broker 1 restarted, `--skip-lines` resumes and the partition holds every line once, in order;
  - unpinned, the batches for broker 1 go to broker 0 and the command succeeds, with every line stored once.
"""

from __future__ import annotations

import os
import re
import signal
import sys

from kazoo.client import KazooClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.broker import wait_until
from tests.integration.test_cli import one_line, twlog
from tests.integration.zookeeper import fresh_connect_string
from twlog.consumer import SimpleConsumer
from twlog.coord.zkserver import free_port

TOPIC = "events"


class Process(ProcessProtocol):
    """A twlog command whose stdin the test writes as it goes; C{ended} fires with (status, stdout, stderr)."""

    def __init__(self) -> None:
        self.out = b""
        self.err = b""
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason) -> None:
        self.ended.callback((reason.value.exitCode, self.out, self.err))


def spawn(testcase: TestCase, *args: str) -> Process:
    """Start C{twlog ARGS}; it is killed at the end of the test if still running."""
    process = Process()
    transport = reactor.spawnProcess(process, sys.executable, [sys.executable, "-m", "twlog.cli", *args],
                                     env=os.environ.copy())
    process.transport = transport

    async def stop() -> None:
        if not process.ended.called:
            transport.signalProcess("KILL")
            await process.ended

    testcase.addCleanup(lambda: Deferred.fromCoroutine(stop()))
    return process


async def registered(zookeeper: str, broker_id: int, present: bool = True) -> None:
    """Wait (bounded) until broker C{broker_id} is (or is no longer) registered in C{zookeeper}."""
    zk = KazooClient(zookeeper)
    zk.start(timeout=30)
    try:
        for _ in range(300):
            if (zk.exists(f"/brokers/ids/{broker_id}") is not None) == present:
                return
            await deferLater(reactor, 0.1, lambda: None)
        raise AssertionError(f"broker {broker_id} {'never registered' if present else 'stayed registered'}")
    finally:
        zk.stop()
        zk.close()


async def stored(port: int, partition: int) -> list[bytes]:
    """Every message readable in C{TOPIC}'s C{partition} on the broker at C{port}, in order."""
    consumer = SimpleConsumer("127.0.0.1", port, reactor=reactor)
    try:
        payloads: list[bytes] = []
        offset = 0
        while True:
            fetched = await consumer.fetch(TOPIC, partition, offset)
            if not fetched.messages:
                return payloads
            payloads.extend(m.payload for m in fetched.messages)
            offset = fetched.next_offset
    finally:
        await consumer.close()


class ProduceThroughADeadBrokerTests(TestCase):
    timeout = 120

    def setUp(self) -> None:
        self.zookeeper = fresh_connect_string()
        self.brokers: dict[int, tuple[Process, int, str]] = {}

    async def start(self, broker_id: int, log_dir: str | None = None) -> int:
        """Start broker C{broker_id} (1 partition per topic, on a free port) and wait until it is registered."""
        port = free_port()
        log_dir = log_dir or os.path.abspath(self.mktemp())
        process = spawn(self, "broker", "--broker-id", str(broker_id), "--port", str(port), "--log-dir", log_dir,
                        "--zookeeper", self.zookeeper, "--num-partitions", "1", "--flush-interval-ms", "20")
        await wait_until(lambda: b"listening on" in process.err or process.ended.called, timeout_s=30)
        self.assertFalse(process.ended.called, process.err)
        await registered(self.zookeeper, broker_id)
        self.brokers[broker_id] = (process, port, log_dir)
        return port

    async def kill(self, broker_id: int) -> None:
        process, _, _ = self.brokers[broker_id]
        process.transport.signalProcess(signal.SIGKILL)
        await process.ended

    async def cluster(self) -> None:
        """Two brokers, each holding TOPIC (one partition each: 0-0 and 1-0)."""
        for broker_id in (0, 1):
            await self.start(broker_id)
        status, out, err = await twlog("topics", "create", "-z", self.zookeeper, "-t", TOPIC, "-n", "1")
        self.assertEqual(status, 0, err)

    def port(self, broker_id: int) -> int:
        return self.brokers[broker_id][1]

    async def readable(self, count: int, partitions: dict[int, int]) -> list[bytes]:
        """Wait (bounded) until C{count} messages are readable over C{partitions} (broker id -> partition)."""
        for _ in range(600):
            got = [m for b, p in partitions.items() for m in await stored(self.port(b), p)]
            if len(got) >= count:
                return got
            await deferLater(reactor, 0.05, lambda: None)
        raise AssertionError(f"only {len(got)} of {count} messages became readable")

    async def test_pinned_partition_stops_with_the_count_then_resumes_without_duplicates(self) -> None:
        """Pinned to broker 1's partition: killed after 300 lines were acknowledged, the command says so in one
        line and exits 1; restarted, --skip-lines 300 sends the other 300; the partition holds each line once."""
        await self.cluster()
        lines = [b"line %d" % i for i in range(600)]
        producing = spawn(self, "produce", "-z", self.zookeeper, "-t", TOPIC, "-p", "1-0", "--batch-size", "50")
        producing.transport.write(b"".join(line + b"\n" for line in lines[:300]))
        self.assertEqual(await self.readable(300, {1: 0}), lines[:300])
        await self.kill(1)  # mid-produce: its input is still open
        producing.transport.write(b"".join(line + b"\n" for line in lines[300:]))
        producing.transport.closeStdin()
        status, _, err = await producing.ended
        self.assertEqual(status, 1, err)
        one_line(self, err)
        self.assertRegex(err.decode(), r"^twlog: stopped after 300 of the input's lines were acknowledged \(resume "
                                       r"with --skip-lines 300\): .*broker.*\n$")

        await registered(self.zookeeper, 1, present=False)  # (its session expired: the id is free again)
        await self.start(1, self.brokers[1][2])  # the same log directory, a new port
        self.assertEqual(await stored(self.port(1), 0), lines[:300])
        status, _, err = await twlog("produce", "-z", self.zookeeper, "-t", TOPIC, "-p", "1-0", "--batch-size",
                                     "50", "--skip-lines", "300", stdin=b"".join(line + b"\n" for line in lines))
        self.assertEqual(status, 0, err)
        self.assertEqual(err, b"sent 300 messages to events (after skipping the input's first 300 lines)\n")
        self.assertEqual(await stored(self.port(1), 0), lines)

    async def test_unpinned_batches_go_to_the_live_broker(self) -> None:
        """Unpinned, through both brokers' addresses: after broker 1 is killed, its batches go to broker 0, and
        the command succeeds; with broker 1 back, every line is stored exactly once."""
        await self.cluster()
        lines = [b"line %d" % i for i in range(600)]
        producing = spawn(self, "produce", "-b", f"127.0.0.1:{self.port(0)},127.0.0.1:{self.port(1)}", "-t", TOPIC,
                          "--batch-size", "20")
        producing.transport.write(b"".join(line + b"\n" for line in lines[:300]))
        before = await self.readable(300, {0: 0, 1: 0})
        self.assertEqual(sorted(before), sorted(lines[:300]))
        on_1 = len(await stored(self.port(1), 0))
        self.assertGreater(on_1, 0)  # random batches went to both
        await self.kill(1)
        producing.transport.write(b"".join(line + b"\n" for line in lines[300:]))
        producing.transport.closeStdin()
        status, _, err = await producing.ended
        self.assertEqual(status, 0, err)
        self.assertTrue(err.endswith(b"sent 600 messages to events\n"), err)

        await registered(self.zookeeper, 1, present=False)
        await self.start(1, self.brokers[1][2])
        on_0, after_1 = await stored(self.port(0), 0), await stored(self.port(1), 0)
        self.assertEqual(len(after_1), on_1)  # nothing more reached broker 1
        self.assertEqual(sorted(on_0 + after_1), sorted(lines))
        self.assertEqual(re.findall(rb"Traceback", err), [])
