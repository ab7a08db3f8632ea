"""`twlog registry`'s and `twistd twlog-registry`'s options: usage errors are one line and exit 2."""

import io
from contextlib import redirect_stderr, redirect_stdout

from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.registry import main
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
