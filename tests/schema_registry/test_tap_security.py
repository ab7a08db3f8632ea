"""`twlog registry`'s HTTPS and basic auth options: pairs checked at parse time, files read at start (one line
naming the file), HTTPS through the reactor's SSL listener, basic auth in front of every path."""

from __future__ import annotations

import trustme
from twisted.internet.testing import MemoryReactorClock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.registry import cannot_listen
from twlog.errors import TwlogError
from twlog.schema_registry.auth import BasicAuthWrapper
from twlog.schema_registry.tap import Options


def parse(*argv: str) -> Options:
    options = Options()
    options.parseOptions(["--broker", "127.0.0.1:9092", *argv])
    return options


class SecurityOptionsTests(SynchronousTestCase):
    def setUp(self) -> None:
        ca = trustme.CA()
        issued = ca.issue_cert("127.0.0.1")
        self.cert, self.key, self.passwords = self.mktemp(), self.mktemp(), self.mktemp()
        with open(self.cert, "wb") as f:
            f.write(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        with open(self.key, "wb") as f:
            f.write(issued.private_key_pem.bytes())
        with open(self.passwords, "w") as f:
            f.write("fret: letmein,admin\n")

    def test_pairs(self) -> None:
        for argv, why in [(("--tls-cert", "c.pem"), "--tls-cert and --tls-key go together"),
                          (("--tls-key", "c.key"), "--tls-cert and --tls-key go together"),
                          (("--tls-client-ca", "ca.pem"), "--tls-client-ca needs --tls-cert and --tls-key"),
                          (("--basic-auth-roles", "admin"), "--basic-auth-roles needs --basic-auth-file"),
                          (("--basic-auth-realm", "x"), "--basic-auth-realm needs --basic-auth-file"),
                          (("--basic-auth-read-only-roles", "r"),
                           "--basic-auth-read-only-roles needs --basic-auth-file")]:
            with self.assertRaises(usage.UsageError) as raised:
                parse(*argv)
            self.assertIn(why, str(raised.exception))

    def test_https_and_basic_auth(self) -> None:
        """Both at once: the SSL listener with the certificate's options; the site's root behind the guard."""
        reactor = MemoryReactorClock()
        service = parse("--port", "0", "--tls-cert", self.cert, "--tls-key", self.key, "--basic-auth-file",
                        self.passwords, "--basic-auth-roles", "admin").service(reactor)
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual(self.successResultOf(service.listening), 0)
        self.assertEqual(len(reactor.sslServers), 1)
        port, site, context, _, interface = reactor.sslServers[0]
        self.assertEqual((port, interface), (0, "127.0.0.1"))
        self.assertIsNotNone(context.getContext())
        self.assertIsInstance(site.resource, BasicAuthWrapper)
        self.assertEqual(reactor.tcpServers, [])

    def test_plain_http_by_default(self) -> None:
        reactor = MemoryReactorClock()
        service = parse("--port", "0").service(reactor)
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual((len(reactor.tcpServers), reactor.sslServers), (1, []))
        self.assertNotIsInstance(service.site.resource, BasicAuthWrapper)

    def test_unusable_files_fail_at_start(self) -> None:
        for argv, expected in [
            (("--tls-cert", self.cert, "--tls-key", "/nonexistent/k.pem"),
             "cannot serve HTTPS: cannot read the registry's --tls-cert key /nonexistent/k.pem: No such file or "
             "directory"),
            (("--tls-cert", self.cert, "--tls-key", self.key, "--tls-client-ca", self.passwords),
             f"cannot serve HTTPS: the --tls-client-ca file {self.passwords} holds no PEM certificate"),
            (("--basic-auth-file", "/nonexistent/passwords"),
             "cannot read --basic-auth-file /nonexistent/passwords: No such file or directory"),
        ]:
            reactor = MemoryReactorClock()
            options = parse("--port", "0", *argv)
            service = options.service(reactor)
            service.startService()
            failure = self.failureResultOf(service.listening, TwlogError)
            self.assertTrue(cannot_listen(options, failure.value, failure.getErrorMessage()).startswith(expected))
            self.assertEqual((reactor.tcpServers, reactor.sslServers), ([], []))
            service.stopService()
