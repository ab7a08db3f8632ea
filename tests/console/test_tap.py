"""`twlog console`'s and `twistd twlog-console`'s options and service: usage errors are one line and exit 2, a taken
port one line naming --port and exit 1; the service listens at once and serves while ZooKeeper is unreachable."""

from __future__ import annotations

import io
import socket
from contextlib import redirect_stderr, redirect_stdout

from twisted.application.service import IServiceMaker
from twisted.internet.defer import ensureDeferred, fail
from twisted.internet.error import CannotListenError
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor, MemoryReactorClock
from twisted.plugin import getPlugins
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.console import main
from twlog.console.service import ConsoleService, cannot_listen
from twlog.console.tap import Options, parse_super_users


class OptionsTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        options = Options()
        options.parseOptions(["--zookeeper", "zk:2181"])
        self.assertEqual((options["port"], options["interface"], options["sample-interval"], options["read-only"]),
                         (8080, "127.0.0.1", 10.0, 0))
        service = options.service(MemoryReactor())
        self.assertEqual((service.port, service.context.zookeeper, service.context.read_only,
                          service.sampler.interval_s), (8080, "zk:2181", False, 10.0))

    def test_options_reach_the_context(self) -> None:
        options = Options()
        options.parseOptions(["-z", "zk:1/c", "-p", "0", "--read-only", "--registry", "http://r:8081",
                              "--sample-interval", "2", "--timeout", "1.5"])
        context = options.service(MemoryReactor()).context
        self.assertEqual((context.read_only, context.registry_url, context.timeout_s, context.zookeeper),
                         (True, "http://r:8081", 1.5, "zk:1/c"))
        self.assertEqual((context.options.timeout_s, context.options.connect_attempts), (1.5, 1))

    def test_usage_errors(self) -> None:
        for argv, why in [([], "give --zookeeper"),
                          (["-z", "zk:1", "--port", "http"], "--port must be a whole number"),
                          (["-z", "zk:1", "--sample-interval", "0"],
                           "--sample-interval must be a number of seconds from 1 to 3600"),
                          (["-z", "zk:1", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
                          (["-z", "zk:1", "--super-users", "User:a"], "--super-users needs --login"),
                          (["-z", "zk:1", "--login", "--super-users", "alice"], "User:NAME"),
                          (["-z", "zk:1", "--zookeeper-credentials-file", "/nonexistent"], "/nonexistent"),
                          (["-z", "zk:1", "--client-config", "/nonexistent"], "/nonexistent")]:
            with self.assertRaises(usage.UsageError) as raised:
                Options().parseOptions(argv)
            self.assertIn(why, str(raised.exception), argv)

    def test_super_users(self) -> None:
        self.assertEqual(parse_super_users("User:alice, User:bob"), ("alice", "bob"))
        options = Options()
        options.parseOptions(["-z", "zk:1", "--login", "--super-users", "User:root"])
        self.assertEqual(options.service(MemoryReactor()).super_users, ("root",))

    def test_command_line(self) -> None:
        """A bad option is one line on stderr and exit 2; --help exits 0 and lists the options."""
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(main(["--port", "x", "-z", "zk:1"]), 2)
        self.assertEqual(err.getvalue().count("\n"), 1)
        self.assertIn("twlog console: error: --port must be a whole number", err.getvalue())
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(main(["--help"]), 0)
        for option in ("--zookeeper", "--port", "--interface", "--read-only", "--registry", "--client-config",
                       "--zookeeper-credentials-file", "--sample-interval", "--login", "--super-users", "--tls-cert"):
            self.assertIn(option, out.getvalue())

    def test_twistd_plugin(self) -> None:
        from twisted import plugins

        names = {p.tapname: p for p in getPlugins(IServiceMaker, plugins)}
        self.assertEqual(names["twlog-console"].options, Options)


class ServiceTests(SynchronousTestCase):
    def test_listens_at_once(self) -> None:
        reactor = MemoryReactorClock()
        service = ConsoleService(zookeeper="zk:2181", port=8123, interface="127.0.0.1", reactor=reactor)
        self.patch(service.reader, "start", lambda: None)
        service.startService()
        port, site, _, interface = reactor.tcpServers[0]
        self.assertEqual((port, interface, site), (8123, "127.0.0.1", service.site))
        self.assertEqual(self.successResultOf(service.listening), 8123)
        self.assertTrue(service.url.startswith("http://") and service.url.endswith(":8123/"), service.url)
        self.successResultOf(service.stopService())

    def test_port_taken(self) -> None:
        """A taken port: listening fails, and the one line names --port."""
        error = CannotListenError("127.0.0.1", 8080, socket.error(98, "Address already in use"))
        service = ConsoleService(zookeeper="zk:2181", reactor=MemoryReactor())
        self.assertEqual(cannot_listen(service, error), "cannot listen on 127.0.0.1:8080: the port is taken "
                         "(another console?): give another --port (0: any free one)")

    def test_session_retried_while_zookeeper_is_down(self) -> None:
        """The session is made again every few seconds while ZooKeeper cannot be reached; meanwhile the API
        answers 503 naming it."""
        from tests.fakezk import FakeZooKeeper
        from twlog.console.cluster import RETRY_S, ClusterReader
        from twlog.console.context import ConsoleContext
        from twlog.coord.zk import ZooKeeperUnavailable

        clock = Clock()
        attempts: list[FakeZooKeeper] = []

        class Unreachable(FakeZooKeeper):
            def start(self):
                attempts.append(self)
                if len(attempts) < 3:
                    return fail(ZooKeeperUnavailable("cannot reach ZooKeeper at zk:2181 within 5 s"))
                return super().start()

        context = ConsoleContext(zk=Unreachable(), zookeeper="zk:2181", reactor=clock)
        made: list = []
        reader = ClusterReader(context, Unreachable, made.append)
        reader.start()
        self.assertEqual((len(attempts), made), (1, []))
        with self.assertRaises(Exception) as raised:
            reader.ready_view()
        self.assertEqual(raised.exception.status, 503)
        clock.advance(RETRY_S)
        clock.advance(RETRY_S * 2)
        self.assertEqual(len(attempts), 3)
        self.assertEqual(made, [context.zk])
        self.assertTrue(reader.ready_view().ready)
        self.successResultOf(ensureDeferred(reader.stop()))
