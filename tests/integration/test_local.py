"""`twlog local` as a user runs it: ZooKeeper and brokers up, produce and consume through them, Ctrl-C."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import sys
import time

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, readBody

from tests.integration.test_cli import twlog
from twlog.cli.local_brokers import registered_since
from twlog.client.sync import SyncConnection
from twlog.coord.zk import NoNodeError, ZooKeeper
from twlog.coord.zkserver import four_letter_word, free_port, free_ports
from twlog.protocol.codec import LATEST


class LocalProcess(ProcessProtocol):
    """The `twlog local` process: its output, when its banner is out, and its exit code when it ended."""

    def __init__(self) -> None:
        self.output = b""
        self.ready: Deferred = Deferred()
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.output += data
        if b"Ctrl-C stops everything" in self.output and not self.ready.called:
            self.ready.callback(self.output.decode(errors="replace"))

    errReceived = outReceived

    def processEnded(self, reason) -> None:
        if not self.ready.called:
            self.ready.errback(AssertionError("twlog local ended early:\n" + self.output.decode(errors="replace")))
        self.ended.callback(reason.value.exitCode)


def start_local(testcase: TestCase, *args: str) -> tuple[LocalProcess, object]:
    """Run C{twlog local ARGS} in its own process, killed (by pid) at the end of the test if still running."""
    local = LocalProcess()
    argv = [sys.executable, "-m", "twlog.cli", "local", *args]
    transport = reactor.spawnProcess(local, sys.executable, argv, env=os.environ.copy())

    def kill_if_running():
        if not local.ended.called:
            try:
                transport.signalProcess("KILL")
            except ProcessExitedAlready:  # (it exited; its end is on its way)
                pass
            return local.ended

    testcase.addCleanup(kill_if_running)
    return local, transport


def banner_ports(banner: str) -> tuple[int, list[int]]:
    """ZooKeeper's port and the brokers' ports, from twlog local's banner."""
    zookeeper = int(re.search(r"ZooKeeper at 127\.0\.0\.1:(\d+)", banner).group(1))
    brokers = [int(p) for p in re.findall(r"localhost:(\d+)", banner.split("broker(s) at ")[1].split(";")[0])]
    return zookeeper, brokers


class _Consumer(ProcessProtocol):
    """A `twlog consume --follow`-like process: its stdout, and a Deferred per expected line."""

    def __init__(self) -> None:
        self.output = b""
        self.waiting: list[tuple[bytes, Deferred]] = []
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.output += data
        for line, d in list(self.waiting):
            if line in self.output.split(b"\n"):
                self.waiting.remove((line, d))
                d.callback(None)

    def printed(self, line: bytes) -> Deferred:
        d: Deferred = Deferred()
        self.waiting.append((line, d))
        self.outReceived(b"")
        return d

    def processEnded(self, reason) -> None:
        self.ended.callback(None)


class LocalClusterTests(TestCase):
    timeout = 120

    async def test_local_cluster(self) -> None:
        """twlog local runs ZooKeeper and two registered brokers; Ctrl-C stops them all cleanly."""
        data = os.path.abspath(self.mktemp())
        local, transport = start_local(self, "--brokers", "2", "--data", data, "--port", str(free_ports(2)),
                                       "--zookeeper-port", str(free_port()))
        banner = await local.ready
        zookeeper = re.search(r"ZooKeeper at (127\.0\.0\.1:\d+)", banner).group(1)
        ports = [int(p) for p in re.findall(r"localhost:(\d+)", banner.split("broker(s) at ")[1].split(";")[0])]
        self.assertEqual(len(ports), 2)
        # Each broker serves its metrics on its port + 100, and the banner says where.
        self.assertIn("\nmetrics:  " + "  ".join(f"http://127.0.0.1:{p + 100}/metrics" for p in ports) + "\n", banner)
        response = await Agent(reactor).request(b"GET", b"http://127.0.0.1:%d/metrics" % (ports[1] + 100))
        self.assertIn(b'twlog_broker_info{broker_id="1"} 1.0', await readBody(response))

        status, _, err = await twlog("produce", "--zookeeper", zookeeper, "-t", "clicks", "--batch-size", "10",
                                     stdin=b"".join(b"%d\n" % i for i in range(100)))
        self.assertEqual(status, 0, err)
        for port in ports:  # any one broker lists the whole cluster, and a consume reads every partition
            _, topics, _ = await twlog("topics", "-b", f"127.0.0.1:{port}")
            self.assertRegex(topics, rb"clicks +0 \(127\.0\.0\.1:\d+\) +4 +0-0 \.\. 0-3")
            self.assertRegex(topics, rb"clicks +1 \(127\.0\.0\.1:\d+\) +4 +1-0 \.\. 1-3")
            status, received, err = await twlog("consume", "-b", f"127.0.0.1:{port}", "-t", "clicks")
            self.assertEqual(status, 0, err)
            self.assertEqual(sorted(received.split()), sorted(b"%d" % i for i in range(100)))

        transport.signalProcess(signal.SIGINT)
        await local.ended
        self.assertIn(b"twlog local: stopped", local.output)
        self.assertEqual(local.output.count(b"stopped cleanly"), 2)
        self.assertEqual(four_letter_word(int(zookeeper.split(":")[1])), b"")  # ZooKeeper is gone
        for broker in ("broker-0", "broker-1"):
            self.assertTrue(os.path.exists(os.path.join(data, broker, ".twlog-clean-shutdown")))

    async def test_restart_keeps_ports(self) -> None:
        """Stopped while a group consumer is connected and started again at once, twlog local gets the same
        ports (the TIME_WAIT connections left do not count as taken), and the consumer carries on."""
        data = os.path.abspath(self.mktemp())
        args = ("--data", data, "--port", str(free_ports(1)), "--zookeeper-port", str(free_port()),
                "--flush-interval-ms", "20")
        local, transport = start_local(self, *args)
        zookeeper, brokers = banner_ports(await local.ready)
        status, _, err = await twlog("produce", "--zookeeper", f"127.0.0.1:{zookeeper}", "-t", "clicks",
                                     stdin=b"first\n")
        self.assertEqual(status, 0, err)
        consumer = _Consumer()
        argv = [sys.executable, "-m", "twlog.cli", "consume", "--zookeeper", f"127.0.0.1:{zookeeper}",
                "--group", "g", "--topic", "clicks"]
        consumer_transport = reactor.spawnProcess(consumer, sys.executable, argv, env=os.environ.copy())

        def stop_consumer():
            if not consumer.ended.called:
                consumer_transport.signalProcess("KILL")
                return consumer.ended

        self.addCleanup(stop_consumer)
        await consumer.printed(b"first")

        transport.signalProcess(signal.SIGINT)
        await local.ended
        with socket.socket() as plain:  # what a probe without SO_REUSEADDR saw: ZooKeeper's port "taken"
            self.assertRaises(OSError, plain.bind, ("127.0.0.1", zookeeper))

        again, again_transport = start_local(self, *args)
        self.assertEqual(banner_ports(await again.ready), (zookeeper, brokers))
        status, _, err = await twlog("produce", "--zookeeper", f"127.0.0.1:{zookeeper}", "-t", "clicks",
                                     stdin=b"second\n")
        self.assertEqual(status, 0, err)
        await consumer.printed(b"second")

        # A second twlog local on the same data directory: one line, exit 1, before anything starts.
        status, out, err = await twlog("local", "--data", data, "--port", str(free_ports(1)),
                                       "--zookeeper-port", str(free_port()))
        self.assertEqual((status, out), (1, b""))
        self.assertEqual(err, b"twlog: %s is in use by another twlog local (pid %d); stop it, or pick another "
                         b"directory with --data\n" % (data.encode(), again_transport.pid))

    async def test_port_taken(self) -> None:
        """A port another process listens on stops twlog local with one line naming it and the option."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)
        taken = listener.getsockname()[1]
        data = os.path.abspath(self.mktemp())
        status, out, err = await twlog("local", "--data", data, "--zookeeper-port", str(taken),
                                       "--port", str(free_ports(1)))
        self.assertEqual((status, out), (1, b""))
        self.assertEqual(err, b"twlog: cannot use port %d for ZooKeeper (Address already in use); pick another "
                         b"with --zookeeper-port\n" % taken)
        status, out, err = await twlog("local", "--data", data, "--zookeeper-port", str(free_port()),
                                       "--port", str(taken))
        self.assertEqual((status, out), (1, b""))
        self.assertEqual(err, b"twlog: cannot use port %d for broker 0 (Address already in use); pick other ports "
                         b"with --port (broker N listens on --port + N)\n" % taken)


def child_pids(pid: int) -> list[int]:
    """The child processes of C{pid} (Linux /proc)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [part.decode() for part in f.read().split(b"\0") if part]


class LocalChildrenTests(TestCase):
    timeout = 120

    async def test_brokers_are_processes(self) -> None:
        """Each broker is a twlog broker child of its own (so brokers use cores of their own); one that is killed is
        reported at once while the rest keeps serving, and Ctrl-C still stops the others cleanly, ZooKeeper last."""
        data = os.path.abspath(self.mktemp())
        local, transport = start_local(self, "--brokers", "2", "--data", data, "--port", str(free_ports(2)),
                                       "--zookeeper-port", str(free_port()), "--no-metrics")
        zookeeper, ports = banner_ports(await local.ready)
        brokers = {}
        for pid in child_pids(transport.pid):
            argv = command_line(pid)
            if "--broker-id" in argv:
                brokers[int(argv[argv.index("--broker-id") + 1])] = pid
        self.assertEqual(sorted(brokers), [0, 1])
        self.assertNotIn(transport.pid, brokers.values())

        os.kill(brokers[1], signal.SIGKILL)
        reported = f"twlog local: broker 1 (port {ports[1]}) died (signal 9)".encode()
        while reported not in local.output:
            self.assertFalse(local.ended.called, local.output)
            await deferLater(reactor, 0.05, lambda: None)  # bounded by the test's timeout
        with SyncConnection("127.0.0.1", ports[0]) as broker0:  # the other broker still serves
            self.assertEqual(broker0.offset("clicks", 0, LATEST), 0)

        transport.signalProcess(signal.SIGINT)
        await local.ended
        self.assertEqual(local.output.count(b"stopped cleanly"), 1)
        self.assertIn(b"twlog local: stopped", local.output)
        self.assertEqual(four_letter_word(zookeeper), b"")
        self.assertTrue(os.path.exists(os.path.join(data, "broker-0", ".twlog-clean-shutdown")))

    async def test_broker_cannot_start(self) -> None:
        """A broker child that cannot start (its log directory is a file) is one line naming it, exit status 1, and
        ZooKeeper and the other broker are stopped."""
        data = os.path.abspath(self.mktemp())
        os.makedirs(data)
        with open(os.path.join(data, "broker-1"), "w") as f:
            f.write("not a directory")
        port, zookeeper = free_ports(2), free_port()
        status, out, err = await twlog("local", "--brokers", "2", "--data", data, "--port", str(port),
                                       "--zookeeper-port", str(zookeeper), "--no-metrics")
        self.assertEqual(status, 1, err)
        self.assertRegex(err.decode(), rf"\ntwlog: broker 1 \(port {port + 1}\) cannot start: "
                                       rf"--log-dir .*broker-1 is a file, not a directory\n")
        self.assertNotIn(b"Traceback", err)
        self.assertEqual(four_letter_word(zookeeper), b"")


class _Broker(ProcessProtocol):
    """A `twlog broker` started by hand: its output and its end."""

    def __init__(self) -> None:
        self.output = b""
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.output += data

    errReceived = outReceived

    def processEnded(self, reason) -> None:
        self.ended.callback(None)


async def said(local: LocalProcess, pattern: str, after: int = 0) -> re.Match:
    """Wait until twlog local's output (from byte C{after}) matches C{pattern} (bounded by the test's timeout)."""
    while True:
        match = re.search(pattern, local.output[after:].decode(errors="replace"))
        if match:
            return match
        if local.ended.called:
            raise AssertionError(f"twlog local ended without saying {pattern!r}:\n{local.output.decode()}")
        await deferLater(reactor, 0.05, lambda: None)


async def registration(zk: ZooKeeper, broker_id: int) -> bytes | None:
    try:
        value, _ = await zk.get(f"/brokers/ids/{broker_id}")
    except NoNodeError:
        return None
    return value


class LocalSupervisionTests(TestCase):
    timeout = 300

    async def test_zookeeper_death_broker_restart_and_ready(self) -> None:
        """With twlog local --brokers 2: ZooKeeper killed is one line, started again, and its return one more (the
        brokers say it once each, not every second); a broker killed is one line ending with the command that
        starts it again with the cluster's settings, and that command does (4 partitions a topic); and "ready" comes
        only once every broker has registered, even while a previous run's registration has not expired."""
        data = os.path.abspath(self.mktemp())
        args = ("--brokers", "2", "--data", data, "--port", str(free_ports(2)), "--zookeeper-port", str(free_port()),
                "--no-metrics")
        local, transport = start_local(self, *args)
        zookeeper, ports = banner_ports(await local.ready)
        zk = ZooKeeper(f"127.0.0.1:{zookeeper}", reactor=reactor)
        await zk.start()
        self.addCleanup(lambda: zk.stop() if zk.connected else None)
        for broker_id, port in enumerate(ports):  # registered when ready
            self.assertTrue((await registration(zk, broker_id)).endswith(b":%d" % port))

        # ZooKeeper dies: one line, started again, one line when back; each broker says the loss and return once.
        java = [pid for pid in child_pids(transport.pid) if "java" in command_line(pid)[0]]
        self.assertEqual(len(java), 1)
        mark = len(local.output)
        os.kill(java[0], signal.SIGKILL)
        await said(local, rf"twlog local: ZooKeeper \(127\.0\.0\.1:{zookeeper}, pid {java[0]}\) died \(signal 9\); "
                          "starting it again on the same port and data", mark)
        await said(local, rf"twlog local: ZooKeeper is back on 127\.0\.0\.1:{zookeeper} \(pid \d+\)", mark)
        while local.output[mark:].count(b"ZooKeeper at 127.0.0.1:%d is back" % zookeeper) < 2:
            await said(local, "is back, after", mark)
            await deferLater(reactor, 0.1, lambda: None)
        await deferLater(reactor, 3, lambda: None)  # kazoo used to warn on every reconnection attempt
        outage = local.output[mark:].decode()
        self.assertEqual(outage.count("lost ZooKeeper at"), 2, outage)
        self.assertNotIn("_ToTwistedLog#warn", outage)  # kazoo's warning on each attempt: "Connection dropped: ..."
        self.assertEqual(outage.count("died"), 1, outage)

        # A broker dies: the line ends with the command that starts it again with the cluster's settings.
        brokers = {int(command_line(pid)[command_line(pid).index("--broker-id") + 1]): pid
                   for pid in child_pids(transport.pid) if "--broker-id" in command_line(pid)}
        child_settings = command_line(brokers[1])[3:]
        os.kill(brokers[1], signal.SIGKILL)
        killed_ms = int(time.time() * 1000)
        line = await said(local, r"twlog local: broker 1 \(port \d+\) died \(signal 9\);.*run in another "
                                 r"terminal: (twlog broker [^\n]*)\n")
        command = shlex.split(line.group(1))
        self.assertEqual(command[2:], child_settings)
        self.assertEqual(command[command.index("--num-partitions") + 1], "4")
        self.assertEqual(command[command.index("--flush-interval-ms") + 1], "200")
        hand = _Broker()
        argv = [sys.executable, "-m", "twlog.cli", *command[1:]]
        hand_transport = reactor.spawnProcess(hand, sys.executable, argv, env=os.environ.copy())
        self.addCleanup(lambda: None if hand.ended.called else (hand_transport.signalProcess("KILL"), hand.ended)[1])
        while not registered_since(await registration(zk, 1) or b"", ports[1], killed_ms):  # its old session expires
            self.assertFalse(hand.ended.called, hand.output)
            await deferLater(reactor, 0.2, lambda: None)
        status, _, err = await twlog("produce", "--zookeeper", f"127.0.0.1:{zookeeper}", "-t", "again", "-p", "1-0",
                                     stdin=b"x\n")
        self.assertEqual(status, 0, err)
        _, topics, _ = await twlog("topics", "-b", f"127.0.0.1:{ports[1]}")
        self.assertRegex(topics, rb"again +1 \(127\.0\.0\.1:\d+\) +4 +1-0 \.\. 1-3")  # the cluster's 4, not 1

        # Killed, the hand-started broker leaves a registration behind for its session's timeout: the next twlog
        # local is ready only once broker 1 has registered again (its "listening" line comes long before).
        hand_transport.signalProcess("KILL")
        await hand.ended
        transport.signalProcess(signal.SIGINT)
        await local.ended
        await zk.stop()
        started_ms = int(time.time() * 1000)
        again, again_transport = start_local(self, *args)
        await again.ready
        zk = ZooKeeper(f"127.0.0.1:{zookeeper}", reactor=reactor)
        await zk.start()
        self.addCleanup(lambda: zk.stop() if zk.connected else None)
        for broker_id, port in enumerate(ports):
            self.assertTrue(registered_since(await registration(zk, broker_id) or b"", port, started_ms),
                            again.output.decode())
        again_transport.signalProcess(signal.SIGINT)
        await again.ended
