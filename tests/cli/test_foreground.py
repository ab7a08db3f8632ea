"""Tests for L{twlog.cli.foreground.serve}: start, stop on shutdown, and the one line of a failed start."""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.foreground import serve


class FakeReactor:
    """Runs its when-running calls, then (unless a call stopped it early) its before-shutdown triggers."""

    def __init__(self) -> None:
        self.running = False
        self.stopped = False
        self.when_running: list = []
        self.before_shutdown: list = []

    def callWhenRunning(self, f) -> None:
        self.when_running.append(f)

    def addSystemEventTrigger(self, phase: str, event: str, f) -> None:
        assert (phase, event) == ("before", "shutdown")
        self.before_shutdown.append(f)

    def stop(self) -> None:
        self.stopped = True

    def run(self) -> None:
        self.running = True
        for f in self.when_running:
            f()
        for f in self.before_shutdown:
            f()
        self.running = False


class FakeService(Service):
    def __init__(self, error: Exception | None = None) -> None:
        self.listening: Deferred[None] = Deferred()
        self.error = error

    def startService(self) -> None:
        super().startService()
        if self.error is None:
            self.listening.callback(None)
        else:
            self.listening.errback(self.error)


class SlowService(Service):
    """Still starting when stopped: the stop abandons the start, which then fails (as a broker's registration
    does when its ZooKeeper session is closed under it)."""

    def __init__(self) -> None:
        self.listening: Deferred[None] = Deferred()

    def stopService(self) -> None:
        super().stopService()
        self.listening.errback(ConnectionError("ConnectionLoss"))


class ServeTests(SynchronousTestCase):
    def test_started_and_stopped(self) -> None:
        """A service that starts runs until the reactor shuts down, and is stopped before it does."""
        reactor, service = FakeReactor(), FakeService()
        self.assertIsNone(serve(reactor, service))
        self.assertFalse(service.running)
        self.assertFalse(reactor.stopped)

    def test_cannot_start(self) -> None:
        """A service that cannot start stops the reactor, and serve answers why."""
        reactor = FakeReactor()
        self.assertEqual(serve(reactor, FakeService(OSError("port 9092 in use"))), "port 9092 in use")
        self.assertTrue(reactor.stopped)

    def test_stopped_while_starting(self) -> None:
        """A service stopped (SIGTERM) before it finished starting was stopped: the failure of the start it
        abandoned is not a reason it could not start."""
        reactor, service = FakeReactor(), SlowService()
        self.assertIsNone(serve(reactor, service))
        self.assertFalse(service.running)
        self.assertTrue(service.listening.called)

    def test_failure_without_message(self) -> None:
        """A failure with no message is named by its type."""
        self.assertEqual(serve(FakeReactor(), FakeService(ValueError())), "ValueError")


class ReconnectLinesTests(SynchronousTestCase):
    def test_client_service_retry_lines_are_dropped(self) -> None:
        """Twisted's "Scheduling retry" line (one per reconnection attempt) is dropped; its other lines and
        twlog's own are kept."""
        from twisted.logger import Logger, PredicateResult

        from twlog.cli.foreground import CLIENT_SERVICE_NAMESPACE, no_reconnect_lines

        events: list[dict] = []
        retrying = Logger(namespace=f"{CLIENT_SERVICE_NAMESPACE}._Core", observer=events.append)
        retrying.info("Scheduling retry {attempt} to connect {endpoint} in {delay} seconds.", attempt=3,
                      endpoint="e", delay=1.2)
        retrying.info("Stopping factory {factory}", factory="f")
        Logger(namespace="twlog.replica.follower", observer=events.append).info(
            "Scheduling retry of nothing: ours")
        self.assertEqual([no_reconnect_lines(e) for e in events],
                         [PredicateResult.no, PredicateResult.maybe, PredicateResult.maybe])
