"""Tests for twlog local's broker children: start detection, the one line when one cannot start, the report of one
that dies, and stopping them (SIGTERM, then SIGKILL after the timeout)."""

from __future__ import annotations

import shlex
import sys

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper
from twlog.cli.broker import parse
from twlog.cli.local_brokers import (
    BrokerChild,
    LocalError,
    broker_argv,
    registered_since,
    restart_command,
    stop_children,
    wait_registered,
)
from twlog.cli.main import build_parser
from twlog.coord.registration import broker_value

STARTED = (b"2026-01-01T00:00:00+0000 [twlog.broker.service.BrokerService#info] broker 1 listening on "
           b"127.0.0.1:9093\n")


class FakeProcess:
    """The transport of a child process: the signals sent to it."""

    def __init__(self) -> None:
        self.signals: list[str] = []
        self.exited = False

    def signalProcess(self, name: str) -> None:
        if self.exited:
            raise ProcessExitedAlready()
        self.signals.append(name)


class BrokerChildTests(SynchronousTestCase):
    def child(self, broker_id: int = 1, metrics_port: int | None = 9193) -> BrokerChild:
        self.written: list[bytes] = []
        self.reported: list[str] = []
        child = BrokerChild(broker_id, 9092 + broker_id, metrics_port, self.written.append, self.reported.append)
        child.makeConnection(FakeProcess())
        return child

    def end(self, child: BrokerChild, code: int | None = 0, signal: int | None = None) -> None:
        child.transport.exited = True
        reason = ProcessDone(0) if code == 0 else ProcessTerminated(exitCode=code, signal=signal)
        child.processEnded(Failure(reason))

    def test_output_is_held_until_started(self) -> None:
        """The broker's start-up log comes out only once it says it listens; then everything is relayed."""
        child = self.child()
        child.childDataReceived(2, b"2026 [x#info] broker 1: 0 partitions under d\n")
        self.assertEqual((self.written, child.started.called), ([], False))
        child.childDataReceived(2, STARTED)
        self.assertIs(self.successResultOf(child.started), child)
        self.assertEqual(b"".join(self.written), b"2026 [x#info] broker 1: 0 partitions under d\n" + STARTED)
        child.childDataReceived(2, b"later\n")
        self.assertEqual(self.written[-1], b"later\n")

    def test_cannot_start_is_one_line(self) -> None:
        """A child that ends before starting fails `started` with twlog broker's reason, named by broker and port."""
        child = self.child()
        child.childDataReceived(2, b"twlog broker: cannot start broker 1 (port 9093, --log-dir /d/broker-1): "
                                   b"/d/broker-1 is in use by another twlog broker\n")
        self.end(child, 1)
        error = self.failureResultOf(child.started, LocalError).value
        self.assertEqual(str(error), "broker 1 (port 9093, metrics port 9193) cannot start: /d/broker-1 is in use by "
                                     "another twlog broker")
        self.assertEqual((self.written, self.reported), ([], []))
        self.assertEqual(self.successResultOf(child.ended), 1)

    def test_death_is_reported_at_once(self) -> None:
        """A started broker that ends unasked is one line for the user, naming it and how it ended."""
        child = self.child()
        child.childDataReceived(2, STARTED)
        self.end(child, None, signal=9)
        self.assertEqual(self.reported, ["twlog local: broker 1 (port 9093, metrics port 9193) died (signal 9); the "
                                         "other brokers and ZooKeeper keep running"])
        self.assertIsNone(self.successResultOf(child.ended))

    def test_asked_stop_is_not_reported(self) -> None:
        """Stopping sends SIGTERM (the broker's clean stop); its end is then no news."""
        child = self.child(metrics_port=None)
        child.childDataReceived(2, STARTED)
        d = child.stop()
        self.assertEqual(child.transport.signals, ["TERM"])
        self.end(child, 0)
        self.assertEqual((self.successResultOf(d), self.reported), (0, []))

    def test_start_timeout_kills(self) -> None:
        """A broker that never says it started is killed, and `started` fails saying how long it had."""
        child = self.child(metrics_port=None)
        child.start_timed_out()
        self.assertEqual(child.transport.signals, ["KILL"])
        self.assertIn("broker 1 (port 9093) did not start within", str(self.failureResultOf(child.started).value))

    def test_stop_children_then_kill(self) -> None:
        """All children get SIGTERM at once; one still running at the timeout gets SIGKILL; the result fires when
        every child has ended, so ZooKeeper is stopped after the brokers."""
        clock = Clock()
        children = [self.child(0), self.child(1)]
        for child in children:
            child.childDataReceived(2, STARTED)
        d = stop_children(clock, children, timeout_s=60)
        self.assertEqual([c.transport.signals for c in children], [["TERM"], ["TERM"]])
        self.end(children[0], 0)
        self.assertNoResult(d)
        clock.advance(60)
        self.assertEqual(children[1].transport.signals, ["TERM", "KILL"])
        self.end(children[1], None, signal=9)
        self.successResultOf(d)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_stopping_an_ended_child(self) -> None:
        """A child that already ended is not signalled."""
        child = self.child()
        child.childDataReceived(2, STARTED)
        self.end(child, 0)
        self.assertEqual(self.successResultOf(child.stop()), 0)
        self.assertEqual(child.transport.signals, [])


class ArgvTests(SynchronousTestCase):
    def test_child_command_line(self) -> None:
        """A child runs twlog broker with the cluster's settings, its own id, port, directory and metrics port."""
        argv = broker_argv(1, 9093, "/d/broker-1", "127.0.0.1:2181", 4, 200, "group", 9193)
        self.assertEqual(argv[0], sys.executable)
        self.assertEqual(argv[3:], ["--broker-id", "1", "--port", "9093", "--log-dir", "/d/broker-1", "--zookeeper",
                                    "127.0.0.1:2181", "--num-partitions", "4", "--flush-interval-ms", "200",
                                    "--flush-policy", "group", "--metrics-port", "9193"])
        self.assertNotIn("--metrics-port", broker_argv(0, 9092, "d", "z", 1, 200, "timer", None))

    def test_local_flush_policy_option(self) -> None:
        """twlog local defaults to group commit; --flush-policy timer is the paper's timer."""
        self.assertEqual(build_parser().parse_args(["local"]).flush_policy, "group")
        self.assertEqual(build_parser().parse_args(["local", "--flush-policy", "timer"]).flush_policy, "timer")


class RestartCommandTests(SynchronousTestCase):
    def test_command_has_the_cluster_settings(self) -> None:
        """The command printed for a dead broker is twlog broker with exactly the child's settings, which twlog
        broker parses to the same configuration (4 partitions, a 200 ms flush, not its own defaults of 1 and 1000)."""
        argv = broker_argv(1, 9093, "/my data/broker-1", "127.0.0.1:2181", 4, 200, "group", 9193)
        command = restart_command(argv)
        self.assertEqual(command, "twlog broker --broker-id 1 --port 9093 --log-dir '/my data/broker-1' --zookeeper "
                                  "127.0.0.1:2181 --num-partitions 4 --flush-interval-ms 200 --flush-policy group "
                                  "--metrics-port 9193")
        words = shlex.split(command)
        self.assertEqual(words[:2], ["twlog", "broker"])
        config = parse(words[2:]).config
        self.assertEqual((config.broker_id, config.port, config.log.log_dir, config.zookeeper),
                         (1, 9093, "/my data/broker-1", "127.0.0.1:2181"))
        self.assertEqual((config.log.num_partitions, config.log.flush_interval_ms), (4, 200))
        defaults = parse(["--log-dir", "d"]).config.log
        self.assertNotEqual((defaults.num_partitions, defaults.flush_interval_ms), (4, 200))

    def test_death_line_ends_with_the_command(self) -> None:
        reported: list[str] = []
        argv = broker_argv(1, 9093, "/d/broker-1", "127.0.0.1:2181", 4, 200, "group", None)
        child = BrokerChild(1, 9093, None, lambda data: None, reported.append, restart=restart_command(argv))
        child.makeConnection(FakeProcess())
        child.childDataReceived(2, STARTED)
        child.processEnded(Failure(ProcessTerminated(exitCode=None, signal=9)))
        self.assertEqual(reported, ["twlog local: broker 1 (port 9093) died (signal 9); the other brokers and "
                                    "ZooKeeper keep running; to start it again with the cluster's settings, run in "
                                    "another terminal: " + restart_command(argv)])


class ReadyTests(SynchronousTestCase):
    """"Ready" waits for every broker's registration of this run, not for its "listening" line."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.zk = FakeZooKeeper()
        self.zk.start()
        self.children = [BrokerChild(n, 9092 + n, None, lambda data: None, lambda line: None, spawned_ms=5000)
                         for n in (0, 1)]

    def register(self, broker_id: int, created_ms: int) -> None:
        value = broker_value("127.0.0.1", 9092 + broker_id, created_ms).encode()
        path = f"/brokers/ids/{broker_id}"
        if self.successResultOf(self.zk.exists(path)) is None:
            self.successResultOf(self.zk.create(path, value, makepath=True))
        else:
            self.successResultOf(self.zk.set(path, value))

    def wait(self, timeout_s: float = 60.0) -> Deferred:
        return Deferred.fromCoroutine(wait_registered(self.zk, self.children, self.clock, timeout_s=timeout_s))

    def test_registration_of_this_run(self) -> None:
        self.assertTrue(registered_since(b"127.0.0.1-5000:127.0.0.1:9093", 9093, 5000))
        self.assertFalse(registered_since(b"127.0.0.1-4999:127.0.0.1:9093", 9093, 5000))  # a previous run's
        self.assertFalse(registered_since(b"127.0.0.1-6000:127.0.0.1:9094", 9093, 5000))  # another port
        self.assertTrue(registered_since(b"[::1]-6000:[::1]:9093", 9093, 5000))
        self.assertFalse(registered_since(b"garbage", 9093, 5000))

    def test_waits_for_every_broker(self) -> None:
        """A previous run's registration (its session not expired yet) does not count; ready once all are in."""
        self.register(0, 4000)  # left by the previous run
        self.register(1, 5100)
        d = self.wait()
        self.clock.advance(5)
        self.assertNoResult(d)
        self.register(0, 5200)  # broker 0's old session expired, and it registered
        self.clock.advance(0.1)
        self.successResultOf(d)

    def test_not_registered_in_time(self) -> None:
        self.register(0, 5100)
        d = self.wait(timeout_s=10)
        self.clock.advance(10.1)
        error = self.failureResultOf(d, LocalError).value
        self.assertEqual(str(error), "broker 1 (port 9093) did not register in ZooKeeper within 10 s")

    def test_ended_before_registering(self) -> None:
        d = self.wait()
        self.children[1].ended.callback(1)
        self.clock.advance(0.1)
        self.assertIn("broker 1 (port 9093) ended before it registered", str(self.failureResultOf(d).value))
