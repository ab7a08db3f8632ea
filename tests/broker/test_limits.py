"""Tests for the broker's descriptor limits (twlog.broker.limits), its new options, and how a stop whose final
flush failed is reported (twlog.broker.service)."""

from __future__ import annotations

import errno
import resource
import signal

from twisted.internet import reactor
from twisted.internet.testing import MemoryReactor
from twisted.logger import globalLogPublisher
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase, TestCase

from twlog.broker import limits
from twlog.broker import service as service_module
from twlog.broker.tap import Options, makeService
from twlog.config import BrokerConfig, LogConfig
from twlog.protocol import twisted_internals
from twlog.storage.message import encode_message_set


class LimitTests(SynchronousTestCase):
    def test_default_max_connections(self) -> None:
        """The limit less the open segments, a quarter for segments to come, and a fixed reserve."""
        self.assertEqual(limits.default_max_connections(1024, 0), 1024 - 256 - 64)
        self.assertEqual(limits.default_max_connections(1024, 100), 1024 - 100 - 256 - 64)
        self.assertEqual(limits.default_max_connections(256, 10), 256 - 10 - 64 - 64)
        self.assertEqual(limits.default_max_connections(64, 500), 1)

    def test_raise_open_files_limit(self) -> None:
        """The soft limit goes up to the hard one."""
        calls = []
        self.assertEqual(limits.raise_open_files_limit(lambda which: (1024, 4096),
                                                       lambda which, value: calls.append((which, value))), 4096)
        self.assertEqual(calls, [(resource.RLIMIT_NOFILE, (4096, 4096))])

    def test_raise_refused(self) -> None:
        """Where the system refuses, the soft limit stays, with a warning."""

        def refuse(which, value):
            raise ValueError("not allowed")

        self.assertEqual(limits.raise_open_files_limit(lambda which: (1024, 4096), refuse), 1024)

    def test_unlimited(self) -> None:
        unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        self.assertEqual(limits.raise_open_files_limit(lambda which: unlimited, self.fail), 1 << 20)


class OptionTests(SynchronousTestCase):
    def parse(self, *argv: str) -> Options:
        options = Options()
        options.parseOptions(list(argv))
        return options

    def test_defaults(self) -> None:
        config = self.parse().config
        self.assertEqual((config.max_buffered_request_bytes, config.max_connections), (256 * 1024 * 1024, None))

    def test_options(self) -> None:
        config = self.parse("--max-buffered-request-bytes", "200_000_000", "--max-connections", "500").config
        self.assertEqual((config.max_buffered_request_bytes, config.max_connections), (200_000_000, 500))

    def test_budget_below_the_largest_request(self) -> None:
        """The budget must hold the largest request, or that request could never be read."""
        e = self.assertRaises(usage.UsageError, self.parse, "--max-request-bytes", "2048",
                              "--max-buffered-request-bytes", "1024")
        self.assertIn("max_buffered_request_bytes must be at least max_request_bytes", str(e))
        self.assertRaises(usage.UsageError, self.parse, "--max-connections", "0")

    def test_connection_limit_options(self) -> None:
        """Issue 21: the per-address cap (1024 by default, "none" for no cap), the idle timeout (600 s), the
        least idle time of a replaced connection (10 s) and the listen backlog (1024)."""
        config = self.parse().config
        self.assertEqual(
            (config.max_connections_per_ip, config.idle_timeout_s, config.reap_idle_s, config.listen_backlog),
            (1024, 600.0, 10.0, 1024),
        )
        config = self.parse("--max-connections-per-ip", "none", "--idle-timeout-s", "0", "--reap-idle-s", "0.5",
                            "--listen-backlog", "4096").config
        self.assertEqual(
            (config.max_connections_per_ip, config.idle_timeout_s, config.reap_idle_s, config.listen_backlog),
            (None, 0.0, 0.5, 4096),
        )
        self.assertEqual(self.parse("--max-connections-per-ip", "8").config.max_connections_per_ip, 8)
        for argv, message in (
            (("--max-connections-per-ip", "0"), "--max-connections-per-ip must be at least 1"),
            (("--idle-timeout-s", "-1"), "--idle-timeout-s must be a number of seconds"),
            (("--reap-idle-s", "soon"), "--reap-idle-s must be a number of seconds"),
            (("--listen-backlog", "0"), "--listen-backlog must be at least 1"),
        ):
            e = self.assertRaises(usage.UsageError, self.parse, *argv)
            self.assertIn(message, str(e))

    def test_listen_backlog_reaches_the_endpoint(self) -> None:
        """The listening port is opened with --listen-backlog (Twisted's default is 50)."""
        memory = MemoryReactor()
        service_module._endpoint(memory, "127.0.0.1", 0, 777).listen(object())
        service_module._endpoint(memory, "::1", 0, 778).listen(object())
        self.assertEqual([port[2] for port in memory.tcpServers], [777, 778])

    def test_twistd_exits_non_zero_on_an_unclean_stop(self) -> None:
        (service,) = makeService(self.parse("--port", "0"))
        self.assertEqual((service.unclean_exit_code, service.cannot_start_exit_code), (1, 1))


class FakeReactor:
    """What L{BrokerService._exit_with} and L{BrokerService._stopped} touch of a reactor."""

    def __init__(self) -> None:
        self._exitSignal = signal.SIGTERM
        self.triggers = []

    def addSystemEventTrigger(self, phase, event, f, *args):
        self.triggers.append((phase, event, f, args))


class UncleanStopTests(TestCase):
    def events(self) -> list[dict]:
        events: list[dict] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        return events

    async def start(self, **kwargs) -> service_module.BrokerService:
        config = BrokerConfig(log=LogConfig(self.mktemp(), flush_interval_ms=600_000), port=0)
        service = service_module.BrokerService(config, reactor, stop_reactor_on_error=False, **kwargs)
        service.startService()
        await service.listening
        return service

    async def test_failed_final_flush_is_unclean(self) -> None:
        """A final flush that fails is logged as an unclean stop, never as "stopped cleanly"."""
        events = self.events()
        service = await self.start()
        self.assertGreaterEqual(service.factory.max_connections, 1)
        log = service.logs.get_or_create_log("t", 0)
        log.append(encode_message_set([b"a"]))
        log._flusher.fail(OSError(errno.EIO, "Input/output error"))
        await service.stopService()
        self.assertIs(service.stopped_cleanly, False)
        texts = [e.get("log_format", "") for e in events]
        self.assertTrue(any("stopped uncleanly" in t for t in texts), texts)
        self.assertFalse(any("stopped cleanly" in t for t in texts), texts)
        self.flushLoggedErrors()

    async def test_clean_stop(self) -> None:
        events = self.events()
        service = await self.start()
        service.logs.get_or_create_log("t", 0).append(encode_message_set([b"a"]))
        await service.stopService()
        self.assertIs(service.stopped_cleanly, True)
        self.assertTrue(any("stopped cleanly" in e.get("log_format", "") for e in events))

    def test_exit_status(self) -> None:
        """With unclean_exit_code, an unclean stop asks for that exit once the reactor is down: no re-raised
        signal, and an exit handler that ends the process with the code."""
        fake = FakeReactor()
        service = service_module.BrokerService.__new__(service_module.BrokerService)
        service._reactor = fake
        service.unclean_exit_code = 1
        service.config = BrokerConfig(log=LogConfig("unused"))
        service._stopped(False)
        ((phase, event, f, args),) = fake.triggers
        self.assertEqual((phase, event, args), ("after", "shutdown", (1,)))
        registered = []
        self.assertEqual(f, service._exit_with)
        f(*args, at_exit=lambda *a: registered.append(a))
        self.assertIsNone(fake._exitSignal)
        self.assertEqual(registered, [(twisted_internals.exit_now, 1)])
        service._stopped(True)
        self.assertEqual(len(fake.triggers), 1)
