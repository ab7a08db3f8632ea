"""Tests for the options of twlog mirror, twlog audit and produce/consume --audit (twlog.cli.mirror_parsers)."""

from __future__ import annotations

import argparse
import io
import time
from contextlib import redirect_stderr

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.main import build_parser
from twlog.cli.mirror import settings_from
from twlog.cli.mirror_parsers import grace_option, regex_option, seconds_option, since_option


class OptionTests(SynchronousTestCase):
    def test_since(self) -> None:
        now = time.time() * 1000
        self.assertLess(abs(since_option("15m") - (now - 15 * 60_000)), 5000)
        self.assertLess(abs(since_option("2h") - (now - 2 * 3_600_000)), 5000)
        self.assertEqual(since_option("1700000000000"), 1_700_000_000_000)
        self.assertEqual(since_option("2024-05-01T12:00"), 1_714_564_800_000)
        for bad in ("yesterday", "latest", "15x"):
            self.assertRaises(argparse.ArgumentTypeError, since_option, bad)

    def test_numbers_and_regex(self) -> None:
        self.assertEqual(seconds_option("0.5"), 0.5)
        self.assertRaises(argparse.ArgumentTypeError, seconds_option, "0")
        self.assertEqual(grace_option("0"), 0.0)
        self.assertRaises(argparse.ArgumentTypeError, grace_option, "-1")
        self.assertEqual(regex_option("a|b").pattern, "a|b")
        self.assertRaisesRegex(argparse.ArgumentTypeError, "not a regular expression", regex_option, "(")


class ParserTests(SynchronousTestCase):
    def parse(self, *argv: str):
        return build_parser().parse_args(list(argv))

    def test_mirror(self) -> None:
        args = self.parse("mirror", "--from", "a:1", "--from", "b:2/x", "--to", "c:3", "--blacklist", "tmp.*",
                          "--batch-size", "500", "--max-in-flight", "100")
        settings = settings_from(args)
        self.assertEqual(settings.sources, ("a:1", "b:2/x"))
        self.assertEqual(settings.blacklist.pattern, "tmp.*")
        self.assertIsNone(settings.whitelist)
        self.assertEqual(settings.max_in_flight, 500)  # never below one batch
        self.assertEqual(settings.group_name, "twlog-mirror-c_3")

    def test_mirror_client_configs(self) -> None:
        """--from-client-config and --to-client-config: Kafka client settings for the sources' consumers and the
        target's producer, each its own (MirrorMaker's --consumer.config and --producer.config); a bad one is one
        line naming the option and the file."""
        from twlog.client.sasl import SASLSettings
        from twlog.client.tls import TLSSettings
        from twlog.errors import TwlogError
        from twlog.mirror.mirror import Mirror

        source, target = self.mktemp(), self.mktemp()
        with open(source, "w") as f:
            f.write("security.protocol=SASL_SSL\nssl.ca.location=/a.pem\nsasl.mechanism=SCRAM-SHA-256\n"
                    'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                    'username="amy" password="a";\n')
        with open(target, "w") as f:
            f.write("security.protocol=SSL\nssl.truststore.location=/b.pem\nssl.truststore.type=PEM\n")
        settings = settings_from(self.parse("mirror", "--from", "a:1", "--to", "c:3", "--from-client-config", source,
                                            "--to-client-config", target))
        from twisted.internet.task import Clock

        mirror = Mirror(settings, reactor=Clock(), say=print)
        self.assertEqual((mirror.source_options.tls, mirror.source_options.sasl),
                         (TLSSettings("/a.pem"), SASLSettings("SCRAM-SHA-256", "amy", "a")))
        self.assertEqual((mirror.target_options.tls, mirror.target_options.sasl), (TLSSettings("/b.pem"), None))
        self.assertEqual((mirror.sources[0].view.listener, mirror.target_options.listener), ("SSL", "SSL"))
        self.assertEqual(settings_from(self.parse("mirror", "--from", "a:1", "--to", "c:3")).source_tls, None)
        # A client.properties of twlog local --secure names its brokers: the mirror says it does not use them.
        with open(target, "a") as f:
            f.write("bootstrap.servers=127.0.0.1:9093\n")
        said = io.StringIO()
        with redirect_stderr(said):
            settings = settings_from(self.parse("mirror", "--from", "a:1", "--to", "c:3", "--to-client-config", target))
        self.assertEqual(settings.target_tls, TLSSettings("/b.pem"))
        self.assertEqual(said.getvalue(), f"mirror: --to-client-config {target}: bootstrap.servers is not used (the "
                         "mirror finds the brokers in the ZooKeeper of --to)\n")
        with open(target, "a") as f:
            f.write("ssl.keystore.location=/k.p12\n")
        with self.assertRaises(TwlogError) as raised:
            settings_from(self.parse("mirror", "--from", "a:1", "--to", "c:3", "--to-client-config", target))
        self.assertEqual(str(raised.exception), f"--to-client-config {target}: ssl.keystore.location is a JKS (the "
                         "default) store: twlog reads PEM files only: set ssl.keystore.type=PEM with a PEM file (or "
                         "ssl.certificate.location and ssl.key.location)")

    def test_mirror_usage_errors(self) -> None:
        for argv in (["mirror", "--to", "c:3"], ["mirror", "--from", "a:1"],
                     ["mirror", "--from", "a:1", "--to", "c:3", "--whitelist", "x", "--blacklist", "y"],
                     ["mirror", "--from", "a", "--to", "c:3"]):
            err = io.StringIO()
            with redirect_stderr(err), self.assertRaises(SystemExit) as exit:
                self.parse(*argv)
            self.assertEqual(exit.exception.code, 2)
            self.assertEqual(err.getvalue().count("\n"), 1, err.getvalue())

    def test_audit_and_produce_consume(self) -> None:
        args = self.parse("audit", "-z", "h:1", "-t", "clicks", "--window-s", "120", "--json")
        self.assertEqual((args.topic, args.window_s, args.grace_s, args.json, args.since), ("clicks", 120.0, 30.0,
                                                                                           True, None))
        args = self.parse("produce", "-t", "t", "--audit", "--audit-origin", "web-1", "--audit-window-s", "10")
        self.assertEqual((args.audit, args.audit_origin, args.audit_window_s), (True, "web-1", 10.0))
        self.assertFalse(self.parse("produce", "-t", "t").audit)
        self.assertTrue(self.parse("consume", "-t", "t", "--audit").audit)
