"""twlog broker as a process: it serves until Ctrl-C or SIGTERM, and a broker that cannot start says why in one line."""

from __future__ import annotations

import signal
import time

from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.test_cli import one_line, twlog, twlog_all
from tests.integration.zookeeper import fresh_connect_string
from twlog.coord.zkserver import free_port


class BrokerCommandTests(TestCase):
    timeout = 120

    async def test_serves_and_stops_cleanly(self) -> None:
        """A broker started with twlog broker takes produce and consume; SIGINT and SIGTERM stop it with status 0."""
        for stop in (signal.SIGINT, signal.SIGTERM):
            port = free_port()
            started: list = []
            running = twlog("broker", "--port", str(port), "--log-dir", self.mktemp(), "--flush-interval-ms", "20",
                            started=started)
            process, command = started[0]
            await wait_until(lambda: b"listening on" in command.err, timeout_s=30)
            status, _, err = await twlog("produce", "-b", f"127.0.0.1:{port}", "-t", "t", stdin=b"x\n")
            self.assertEqual(status, 0, err)
            status, out, err = await twlog("consume", "-b", f"127.0.0.1:{port}", "-t", "t")
            self.assertEqual((status, out), (0, b"x\n"), err)
            process.signalProcess(stop)
            status, _, err = await running
            self.assertEqual(status, 0, err)
            self.assertIn(b"stopped cleanly", err)

    async def test_cannot_start_is_one_line(self) -> None:
        """Port in use, log directory in use or a file, broker id taken, ZooKeeper unreachable: exit 1 and one line
        (naming the option to change, where there is one)."""
        zookeeper = fresh_connect_string()
        log_dir = self.mktemp()
        running = await start_broker(self, log_dir, zookeeper=zookeeper, broker_id=3)
        a_file = self.mktemp()
        with open(a_file, "w") as f:
            f.write("not a directory")
        port = running.broker.port
        cases = [
            (("--port", str(port), "--log-dir", self.mktemp()),
             b"port %d is in use (another broker?): choose another with --port\n" % port),
            (("--port", "0", "--log-dir", a_file), b": --log-dir %s is a file, not a directory\n" % a_file.encode()),
            (("--port", "0", "--log-dir", a_file + "/sub"),
             b": --log-dir %s/sub: %s is a file, not a directory\n" % (a_file.encode(), a_file.encode())),
            (("--port", "0", "--log-dir", log_dir),
             b"is in use by another twlog broker: choose another with --log-dir"),
            (("--port", "0", "--log-dir", self.mktemp(), "--broker-id", "3", "-z", zookeeper),
             b"broker id 3 is already registered by a live broker"),
            (("--port", "0", "--log-dir", self.mktemp(), "-z", "127.0.0.1:1"),
             b"cannot reach ZooKeeper at 127.0.0.1:1"),
        ]
        began = time.monotonic()
        results = await twlog_all(*(("broker", *argv) for argv, _ in cases))
        for (argv, expected), (status, _, err) in zip(cases, results, strict=True):
            self.assertEqual(status, 1, (argv, err))
            self.assertIn(b"twlog broker: cannot start broker", err)
            self.assertIn(expected, err, argv)
            one_line(self, err)
            self.assertLess(time.monotonic() - began, 30, argv)

    async def test_bad_option_is_usage_error(self) -> None:
        """An unknown option or a bad value is one line and exit status 2."""
        for argv, expected in ((("--bogus",), b"--bogus not recognized"), (("--port", "abc"), b"whole number")):
            status, _, err = await twlog("broker", *argv)
            self.assertEqual(status, 2, err)
            self.assertIn(expected, err)
            one_line(self, err)

    async def test_help(self) -> None:
        """twlog broker --help lists twistd twlog's options and exits 0."""
        status, out, _ = await twlog("broker", "--help")
        self.assertEqual(status, 0)
        self.assertIn(b"twlog broker [options]", out)
        self.assertIn(b"--log-dir", out)
