"""twistd twlog's metrics HTTPS options: --metrics-tls-cert, --metrics-tls-key, --metrics-tls-client-ca."""

from __future__ import annotations

import trustme
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactor
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.broker.metrics import metrics_https, metrics_url, serve_metrics
from twlog.broker.tap import Options
from twlog.config import BrokerConfig, LogConfig
from twlog.errors import TwlogError


def parse(*argv: str) -> Options:
    options = Options()
    options.parseOptions(list(argv))
    return options


class MetricsTLSOptionsTests(SynchronousTestCase):
    def test_options_reach_the_config(self) -> None:
        config = parse("--metrics-port", "0", "--metrics-tls-cert", "m.pem", "--metrics-tls-key", "m.key",
                       "--metrics-tls-client-ca", "ca.pem").config
        self.assertEqual((config.metrics_cert, config.metrics_key, config.metrics_client_ca),
                         ("m.pem", "m.key", "ca.pem"))
        plain = parse("--metrics-port", "0").config
        self.assertEqual((plain.metrics_cert, plain.metrics_key, plain.metrics_client_ca), (None, None, None))

    def test_inconsistent_options_name_the_option(self) -> None:
        cases = {
            ("--metrics-tls-cert", "m.pem", "--metrics-tls-key", "m.key"):
                "--metrics-tls-cert, --metrics-tls-key need --metrics-port",
            ("--metrics-port", "0", "--metrics-tls-cert", "m.pem"):
                "--metrics-tls-cert and --metrics-tls-key go together",
            ("--metrics-port", "0", "--metrics-tls-client-ca", "ca.pem"):
                "--metrics-tls-client-ca needs --metrics-tls-cert and --metrics-tls-key",
        }
        for argv, expected in cases.items():
            with self.assertRaises(usage.UsageError) as raised:
                parse(*argv)
            self.assertIn(expected, str(raised.exception))


class MetricsHTTPSTests(SynchronousTestCase):
    def config(self, **fields) -> BrokerConfig:
        return BrokerConfig(log=LogConfig(self.mktemp()), metrics_port=0, **fields)

    def test_plain_site_unchanged(self) -> None:
        site = object()
        self.assertIs(metrics_https(self.config(), site), site)

    def test_unusable_files_one_line(self) -> None:
        config = self.config(metrics_cert="/nonexistent/m.pem", metrics_key="/nonexistent/m.key")
        with self.assertRaises(TwlogError) as raised:
            metrics_https(config, object())
        self.assertEqual(str(raised.exception), "cannot serve metrics over HTTPS: cannot read the --metrics-tls-cert "
                         "certificate /nonexistent/m.pem: No such file or directory")
        failed = self.failureResultOf(_deferred(serve_metrics(MemoryReactor(), config, object())), TwlogError)
        self.assertIn("cannot serve metrics over HTTPS", failed.getErrorMessage())

    def test_https_listener_and_url(self) -> None:
        ca = trustme.CA()
        issued = ca.issue_cert("127.0.0.1")
        cert, key = self.mktemp(), self.mktemp()
        with open(cert, "wb") as f:
            f.write(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        with open(key, "wb") as f:
            f.write(issued.private_key_pem.bytes())
        config = self.config(metrics_cert=cert, metrics_key=key)
        reactor = MemoryReactor()
        port = self.successResultOf(_deferred(serve_metrics(reactor, config, object())))
        served = reactor.tcpServers[0][1]
        self.assertIsInstance(served, TLSMemoryBIOFactory)
        self.assertTrue(metrics_url(config, port).startswith("https://127.0.0.1:"))
        self.assertTrue(metrics_url(self.config(), port).startswith("http://127.0.0.1:"))


def _deferred(coroutine) -> Deferred:
    return Deferred.fromCoroutine(coroutine)
