"""Tests for `twlog local`'s start-up checks: ports probed as servers bind them, and the data directory's lock."""

from __future__ import annotations

import os
import socket

from twisted.internet.defer import ensureDeferred
from twisted.internet.error import CannotListenError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.local import (
    LOCK_FILE,
    LocalError,
    ZooKeeperWatch,
    check_ports,
    lock_data_directory,
    metrics_port_of,
    usage_text,
)
from twlog.cli.local_console import LocalConsoleError, start_console
from twlog.cli.main import build_parser
from twlog.coord.zkserver import bind_error, free_port, free_ports


def listening_socket(testcase: SynchronousTestCase, port: int = 0) -> socket.socket:
    """A live listener on 127.0.0.1 (C{port}, or any free one), closed after the test."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1)
    testcase.addCleanup(s.close)
    return s


def leave_time_wait(testcase: SynchronousTestCase) -> int:
    """A port whose server stopped after a client connected: only a TIME_WAIT socket is left on it."""
    server = listening_socket(testcase)
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: it is the side left in TIME_WAIT
    client.recv(1)
    client.close()
    server.close()
    return port


class PortProbeTests(SynchronousTestCase):
    def test_listener_is_in_use(self) -> None:
        """A port another socket listens on cannot be bound: bind_error says why."""
        port = listening_socket(self).getsockname()[1]
        self.assertEqual(bind_error(port), "Address already in use")

    def test_time_wait_is_free(self) -> None:
        """The TIME_WAIT connections a stopped server leaves do not make its port taken (a server can bind it)."""
        port = leave_time_wait(self)
        with socket.socket() as plain:  # what the old probe did, without SO_REUSEADDR: "taken"
            self.assertRaises(OSError, plain.bind, ("127.0.0.1", port))
        self.assertIsNone(bind_error(port))

    def test_free_ports_are_consecutive_and_free(self) -> None:
        """free_ports(n) is the first of n consecutive ports that can all be bound."""
        first = free_ports(3)
        self.assertEqual([bind_error(p) for p in range(first, first + 3)], [None, None, None])


class CheckPortsTests(SynchronousTestCase):
    def test_ports_after_restart(self) -> None:
        """Ports with only TIME_WAIT sockets are the ones used: the brokers' are consecutive from --port."""
        zookeeper = leave_time_wait(self)
        first = free_ports(2)
        self.assertEqual(check_ports(zookeeper, first, 2), [first, first + 1])

    def test_zookeeper_port_taken(self) -> None:
        """A ZooKeeper port another process listens on is an error naming it and --zookeeper-port."""
        taken = listening_socket(self).getsockname()[1]
        e = self.assertRaises(LocalError, check_ports, taken, free_ports(1), 1)
        self.assertEqual(str(e), f"cannot use port {taken} for ZooKeeper (Address already in use); "
                                 "pick another with --zookeeper-port")

    def test_broker_port_taken(self) -> None:
        """A taken broker port is an error naming the port, the broker and --port; no other port is tried."""
        first = free_ports(2)
        listening_socket(self, first + 1)
        e = self.assertRaises(LocalError, check_ports, free_port(), first, 2)
        self.assertIn(f"cannot use port {first + 1} for broker 1 (Address already in use)", str(e))
        self.assertIn("--port", str(e))

    def test_same_port_twice(self) -> None:
        """ZooKeeper's port inside the brokers' range is refused."""
        first = free_ports(2)
        e = self.assertRaises(LocalError, check_ports, first + 1, first, 2)
        self.assertIn("--zookeeper-port", str(e))

    def test_past_last_port(self) -> None:
        """Brokers' ports past 65535 are refused before anything is probed."""
        e = self.assertRaises(LocalError, check_ports, free_port(), 65535, 2)
        self.assertIn("65535", str(e))


class MetricsPortTests(SynchronousTestCase):
    def test_default_is_port_plus_100(self) -> None:
        """Metrics are on by default, from --port + 100; --metrics-port moves them, --no-metrics turns them off."""
        parse = build_parser().parse_args
        self.assertEqual(metrics_port_of(parse(["local"])), 9192)
        self.assertEqual(metrics_port_of(parse(["local", "--port", "19092"])), 19192)
        self.assertEqual(metrics_port_of(parse(["local", "--metrics-port", "7000"])), 7000)
        self.assertIsNone(metrics_port_of(parse(["local", "--no-metrics"])))

    def test_metrics_port_taken(self) -> None:
        """A taken metrics port is an error naming it, the broker, --metrics-port and --no-metrics."""
        first = free_ports(2)
        listening_socket(self, first + 1)
        e = self.assertRaises(LocalError, check_ports, free_port(), free_ports(2), 2, first)
        self.assertEqual(str(e), f"cannot use port {first + 1} for broker 1's metrics (Address already in use); "
                                 "pick other ports with --metrics-port (broker N serves metrics on --metrics-port + N)"
                                 ", or --no-metrics")

    def test_metrics_port_shared(self) -> None:
        """A metrics port that is also a broker's port is refused."""
        first = free_ports(3)
        e = self.assertRaises(LocalError, check_ports, free_port(), first, 2, first + 1)
        self.assertIn(f"port {first + 1} is both a broker's (--port) and a broker's metrics port", str(e))

    def test_banner_lists_the_urls(self) -> None:
        """The banner has one metrics line with every broker's URL, and none without metrics."""
        urls = ["http://127.0.0.1:9192/metrics", "http://127.0.0.1:9193/metrics"]
        text = usage_text("127.0.0.1:2181", [9092, 9093], "/d", urls)
        self.assertIn("\nmetrics:  http://127.0.0.1:9192/metrics  http://127.0.0.1:9193/metrics\n", text)
        self.assertNotIn("metrics", usage_text("127.0.0.1:2181", [9092], "/d"))

    def test_banner_names_the_console(self) -> None:
        """With --console, the banner says where the console is."""
        text = usage_text("127.0.0.1:2181", [9092], "/d", console="http://127.0.0.1:8080/")
        self.assertIn("\nconsole:  http://127.0.0.1:8080/\n", text)
        self.assertNotIn("console", usage_text("127.0.0.1:2181", [9092], "/d"))

    def test_console_port_taken(self) -> None:
        """The console cannot listen: one line naming --console-port."""
        reactor = MemoryReactorClock()

        def taken(*args, **kwargs):
            raise CannotListenError("127.0.0.1", 8080, socket.error(98, "Address already in use"))

        reactor.listenTCP = taken
        failure = self.failureResultOf(ensureDeferred(start_console(reactor, "zk:1", 8080, "/d")), LocalConsoleError)
        self.assertEqual(str(failure.value), "cannot listen on 127.0.0.1:8080: the port is taken (another console?): "
                         "give another --console-port (0: any free one)")


class DataLockTests(SynchronousTestCase):
    def test_second_lock_is_refused(self) -> None:
        """A data directory locked by a twlog local cannot be locked again, until the first lets go."""
        data = os.path.abspath(self.mktemp())
        fd = lock_data_directory(data)
        e = self.assertRaises(LocalError, lock_data_directory, data)
        self.assertEqual(str(e), f"{data} is in use by another twlog local (pid {os.getpid()}); stop it, or "
                                 "pick another directory with --data")
        os.close(fd)
        os.close(lock_data_directory(data))

    def test_lock_is_not_a_broker_lock(self) -> None:
        """The lock file is the directory's own, beside the brokers' directories, not inherited by children."""
        data = os.path.abspath(self.mktemp())
        fd = lock_data_directory(data)
        self.addCleanup(os.close, fd)
        self.assertEqual(os.listdir(data), [LOCK_FILE])
        self.assertFalse(os.get_inheritable(fd))


class FakeServerProcess:
    """A ZooKeeper server process: running (poll None) until it ends with C{returncode}."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class FakeServer:
    """C{twlog local}'s ZooKeeperServer: its process, and a start that makes a new one (or fails)."""

    connect_string = "127.0.0.1:2181"
    log_path = "/d/zookeeper/zookeeper.out"

    def __init__(self) -> None:
        self.process: FakeServerProcess | None = FakeServerProcess(100)
        self.start_error: Exception | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error
        self.process = FakeServerProcess(self.pid_next())

    def pid_next(self) -> int:
        self._next = getattr(self, "_next", 100) + 1
        return self._next


class ZooKeeperWatchTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.server = FakeServer()
        self.said: list[str] = []
        self.failed: list[LocalError] = []
        self.watch = ZooKeeperWatch(self.server, self.clock, self.said.append, self.server.start, self.failed.append)
        self.watch.start()

    def test_death_and_return_are_one_line_each(self) -> None:
        """ZooKeeper killed: one line saying so and that it is started again; one line when it is back."""
        self.clock.advance(5)
        self.assertEqual(self.said, [])
        self.server.process.returncode = -9
        self.clock.advance(0.5)
        self.assertEqual(self.said, [
            "twlog local: ZooKeeper (127.0.0.1:2181, pid 100) died (signal 9); starting it again on the same port "
            "and data (the brokers keep serving what they hold, and reconnect)",
            "twlog local: ZooKeeper is back on 127.0.0.1:2181 (pid 101)",
        ])
        self.clock.advance(30)
        self.assertEqual(len(self.said), 2)
        self.server.process.returncode = 1
        self.clock.advance(0.5)
        self.assertIn("(127.0.0.1:2181, pid 101) died (exit status 1)", self.said[2])
        self.assertEqual(self.failed, [])

    def test_cannot_start_again(self) -> None:
        """A ZooKeeper that cannot be started again stops the watch and is an error for twlog local."""
        self.server.start_error = OSError("no space left on device")
        self.server.process.returncode = -9
        self.clock.advance(0.5)
        self.assertEqual([str(e) for e in self.failed],
                         ["ZooKeeper (127.0.0.1:2181) died (signal 9) and cannot be started again: no space left on "
                          "device"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_keeps_dying(self) -> None:
        """A ZooKeeper that dies a fourth time within a minute is not started again."""
        for _ in range(3):
            self.server.process.returncode = 1
            self.clock.advance(0.5)
        self.assertEqual(self.failed, [])
        self.server.process.returncode = 1
        self.clock.advance(0.5)
        self.assertEqual([str(e) for e in self.failed],
                         ["ZooKeeper (127.0.0.1:2181) died (exit status 1), 4 times within 60 s; see "
                          "/d/zookeeper/zookeeper.out"])

    def test_stopped_watch_says_nothing(self) -> None:
        """Once twlog local stops (Ctrl-C), ZooKeeper's end is no news."""
        self.watch.stop()
        self.server.process.returncode = 0
        self.clock.advance(5)
        self.assertEqual(self.said, [])
