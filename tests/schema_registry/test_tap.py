"""`twlog registry`'s and `twistd twlog-registry`'s options: usage errors are one line and exit 2."""

import errno
import io
import socket
from contextlib import redirect_stderr, redirect_stdout

from twisted.application.service import IServiceMaker
from twisted.internet.error import CannotListenError
from twisted.plugin import getPlugins
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.registry import RegistryOptions, cannot_listen, main
from twlog.schema_registry.tap import Options


class OptionsTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        options = Options()
        options.parseOptions(["--zookeeper", "localhost:2181"])
        self.assertEqual((options["port"], options["interface"], options["max-body-bytes"]),
                         (8081, "127.0.0.1", 1024 * 1024))

    def test_usage_errors(self) -> None:
        for argv, why in [([], "give one of --zookeeper and --broker"),
                          (["-z", "zk:2181", "-b", "h:1"], "give one of --zookeeper and --broker"),
                          (["-b", "nohost"], "is not host:port"),
                          (["-z", "zk:2181", "--port", "http"], "--port must be a whole number"),
                          (["-z", "zk:2181", "--port", "70000"], "--port must be from 0 to 65535")]:
            with self.assertRaises(usage.UsageError) as raised:
                Options().parseOptions(argv)
            self.assertIn(why, str(raised.exception), argv)

    def test_zookeeper_credentials_file(self) -> None:
        """--zookeeper-credentials-file: the registry's ZooKeeper sessions (its journal's) use with it; it needs
        --zookeeper, and a file that cannot be read is a usage error."""
        from twlog.coord.zkauth import ZooKeeperCredentials

        path = self.mktemp()
        with open(path, "w") as f:
            f.write("twlog:secret\n")
        options = Options()
        options.parseOptions(["-z", "zk:2181/r", "--zookeeper-credentials-file", path])
        journal = options.service().journal
        self.assertEqual(journal.options.zookeeper_credentials, ZooKeeperCredentials("twlog", "secret"))
        for argv, why in [(["-b", "h:1", "--zookeeper-credentials-file", path], "needs --zookeeper"),
                          (["-z", "zk:1", "--zookeeper-credentials-file", path + "x"],
                           f"cannot read the ZooKeeper credentials file {path}x: No such file or directory")]:
            with self.assertRaises(usage.UsageError) as raised:
                Options().parseOptions(argv)
            self.assertIn(why, str(raised.exception), argv)

    def test_command_line(self) -> None:
        """twlog registry: a bad option is one line on stderr and exit 2; --help exits 0."""
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(main(["--port", "x", "-z", "zk:1"]), 2)
        self.assertEqual(err.getvalue().count("\n"), 1)
        self.assertIn("twlog registry: error: --port must be a whole number", err.getvalue())
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(main(["--help"]), 0)
        self.assertIn("Confluent Schema Registry", out.getvalue())

    def test_twistd_plugin(self) -> None:
        """twistd finds twlog-registry (twisted/plugins/twlog_registry.py)."""
        makers = {maker.tapname: maker for maker in getPlugins(IServiceMaker)}
        self.assertIn("twlog-registry", makers)
        self.assertIs(makers["twlog-registry"].options, Options)


class CannotListenTests(SynchronousTestCase):
    """Why `twlog registry` cannot listen: one line naming the option to change."""

    def options(self, *argv: str) -> RegistryOptions:
        options = RegistryOptions()
        options.parseOptions(["-z", "zk:2181", *argv])
        return options

    def test_port_taken(self) -> None:
        error = CannotListenError("127.0.0.1", 8081, OSError(errno.EADDRINUSE, "Address already in use"))
        self.assertEqual(cannot_listen(self.options(), error, str(error)),
                         "cannot listen on 127.0.0.1:8081: the port is taken (another registry?): give another --port "
                         "(0: any free one)")

    def test_interface_not_here(self) -> None:
        for cause in (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"),
                      socket.gaierror(-2, "Name or service not known")):
            error = CannotListenError("10.9.9.9", 8081, cause)
            line = cannot_listen(self.options("--interface", "10.9.9.9"), error, str(error))
            self.assertIn("--interface 10.9.9.9 is not an address of this host", line)

    def test_other(self) -> None:
        error = CannotListenError("127.0.0.1", 81, OSError(errno.EMFILE, "Too many open files"))
        line = cannot_listen(self.options("--port", "81"), error, str(error))
        self.assertEqual(line, f"cannot listen on 127.0.0.1:81: {error}: check --port and --interface")
        self.assertNotIn("\n", line)

    def test_request_timeout(self) -> None:
        self.assertEqual(self.options()["request-timeout"], 5.0)
        self.assertEqual(self.options("--request-timeout", "0.5")["request-timeout"], 0.5)
        for bad, why in [("soon", "must be a number of seconds"), ("0", "from above 0 to 3600")]:
            with self.assertRaises(usage.UsageError) as raised:
                self.options("--request-timeout", bad)
            self.assertIn(why, str(raised.exception))
