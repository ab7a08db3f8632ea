"""`twlog local` as a user runs it: ZooKeeper and brokers up, produce and consume through them, Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import sys

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.trial.unittest import TestCase

from tests.integration.test_cli import twlog
from twlog.coord.zkserver import four_letter_word, free_port


class _Local(ProcessProtocol):
    def __init__(self) -> None:
        self.output = b""
        self.ready: Deferred = Deferred()
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.output += data
        if b"Ctrl-C stops everything" in self.output and not self.ready.called:
            self.ready.callback(self.output.decode())

    errReceived = outReceived

    def processEnded(self, reason) -> None:
        if not self.ready.called:
            self.ready.errback(AssertionError(self.output.decode()))
        self.ended.callback(reason.value.exitCode)


class LocalClusterTests(TestCase):
    timeout = 120

    async def test_local_cluster(self) -> None:
        """twlog local runs ZooKeeper and two registered brokers; Ctrl-C stops them all cleanly."""
        data = os.path.abspath(self.mktemp())
        first_port = free_port()
        local = _Local()
        argv = [sys.executable, "-m", "twlog.cli", "local", "--brokers", "2", "--data", data,
                "--port", str(first_port), "--zookeeper-port", str(free_port())]
        transport = reactor.spawnProcess(local, sys.executable, argv, env=os.environ.copy())

        def kill_if_running():
            if not local.ended.called:
                transport.signalProcess("KILL")
                return local.ended

        self.addCleanup(kill_if_running)
        banner = await local.ready
        zookeeper = re.search(r"ZooKeeper at (127\.0\.0\.1:\d+)", banner).group(1)
        ports = [int(p) for p in re.findall(r"localhost:(\d+)", banner.split("broker(s) at ")[1].split(";")[0])]
        self.assertEqual(len(ports), 2)

        status, _, err = await twlog("produce", "--zookeeper", zookeeper, "-t", "clicks", "--batch-size", "10",
                                     stdin=b"".join(b"%d\n" % i for i in range(100)))
        self.assertEqual(status, 0, err)
        received = b""
        for port in ports:
            _, topics, _ = await twlog("topics", "-b", f"127.0.0.1:{port}")
            self.assertIn(b"clicks\t4 partitions", topics)
            for partition in range(4):
                status, out, err = await twlog("consume", "-b", f"127.0.0.1:{port}", "-t", "clicks",
                                               "-p", str(partition))
                received += out
        self.assertEqual(sorted(received.split()), sorted(b"%d" % i for i in range(100)))

        transport.signalProcess(signal.SIGINT)
        await local.ended
        self.assertIn(b"twlog local: stopped", local.output)
        self.assertEqual(local.output.count(b"stopped cleanly"), 2)
        self.assertEqual(four_letter_word(int(zookeeper.split(":")[1])), b"")  # ZooKeeper is gone
        for broker in ("broker-0", "broker-1"):
            self.assertTrue(os.path.exists(os.path.join(data, broker, ".twlog-clean-shutdown")))
