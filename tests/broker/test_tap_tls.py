"""twistd twlog's TLS options: --tls-port, --tls-cert, --tls-key, --tls-client-ca and --no-plaintext."""

from __future__ import annotations

from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.broker.tap import Options


def parse(*argv: str) -> Options:
    options = Options()
    options.parseOptions(list(argv))
    return options


class TLSOptionsTests(SynchronousTestCase):
    def test_options_reach_the_config(self) -> None:
        """Each option lands in its BrokerConfig field; without them, no TLS and the plaintext port on."""
        config = parse("--tls-port", "9093", "--tls-cert", "b.pem", "--tls-key", "b.key",
                       "--tls-client-ca", "ca.pem").config
        self.assertEqual((config.tls_port, config.tls_cert, config.tls_key, config.tls_client_ca, config.plaintext),
                         (9093, "b.pem", "b.key", "ca.pem", True))
        plain = parse().config
        self.assertEqual((plain.tls_port, plain.plaintext), (None, True))
        only = parse("--tls-port", "0", "--tls-cert", "b.pem", "--tls-key", "b.key", "--no-plaintext").config
        self.assertFalse(only.plaintext)

    def test_inconsistent_options_name_the_option(self) -> None:
        """Every inconsistent combination is a usage error naming the command line's options."""
        cases = {
            ("--tls-port", "9093"): "--tls-port needs --tls-cert and --tls-key",
            ("--tls-cert", "b.pem"): "--tls-cert need --tls-port",
            ("--no-plaintext",): "--no-plaintext needs --tls-port",
            ("--tls-port", "9092", "--tls-cert", "b", "--tls-key", "k"): "--tls-port must differ from port",
            ("--tls-port", "9093", "--tls-cert", "b", "--tls-key", "k", "--no-plaintext", "--zookeeper", "z:2181"):
                "--zookeeper with --no-plaintext",
        }
        for argv, expected in cases.items():
            with self.assertRaises(usage.UsageError) as raised:
                parse(*argv)
            self.assertIn(expected, str(raised.exception))
