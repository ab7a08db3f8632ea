"""The registry clients' HTTPS and basic auth: the URL's user info, the Authorization header sent, the TLS
creator for an https:// registry, and errors that never carry the password."""

from __future__ import annotations

import base64

from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IPolicyForHTTPS

from twlog.avro.client import RegistryClient, RegistryError, SyncRegistryClient, _Policy, split_user_info
from twlog.client.tls import TLSSettings


class UserInfoTests(SynchronousTestCase):
    def test_split(self) -> None:
        self.assertEqual(split_user_info("https://bob:p%40ss@r:8081/x"), ("https://r:8081/x", "bob:p@ss"))
        self.assertEqual(split_user_info("http://r:8081"), ("http://r:8081", None))

    def test_url_and_argument(self) -> None:
        client = SyncRegistryClient("https://bob:pw@r:8081/")
        self.assertEqual((client.url, client.user), ("https://r:8081", "bob"))
        argument_wins = SyncRegistryClient("https://bob:pw@r:8081", user_info="ann:x")
        self.assertEqual(argument_wins.user, "ann")
        self.assertIsNone(SyncRegistryClient("http://r:8081").user)

    def test_refusals(self) -> None:
        for url, kwargs, why in [("https://r:8081", {"user_info": "bob"}, "must be user:password"),
                                 ("http://r:8081", {"tls": TLSSettings()}, "need an https:// URL"),
                                 ("r:8081", {}, "must start with http:// or https://")]:
            with self.assertRaises(ValueError) as raised:
                SyncRegistryClient(url, **kwargs)
            self.assertIn(why, str(raised.exception))


class TwistedClientTests(SynchronousTestCase):
    def test_basic_auth_header_and_401(self) -> None:
        """The request carries `Authorization: Basic base64(user:password)`; a 401 is a RegistryError with
        Confluent's code, and no password in its text."""
        reactor = MemoryReactorClock()
        client = RegistryClient("http://r:8081", reactor=reactor, user_info="bob:s3cret")
        answer = client.schema(1)
        _, port, factory = reactor.tcpClients[0][:3]  # (the memory reactor resolves every name to 127.0.0.1)
        self.assertEqual(port, 8081)
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        sent = transport.value()
        self.assertIn(b"Authorization: Basic " + base64.b64encode(b"bob:s3cret"), sent)
        body = b'{"error_code":401,"message":"Unauthorized"}'
        protocol.dataReceived(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: basic realm=\"r\"\r\n"
                              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        failure = self.failureResultOf(answer, RegistryError)
        self.assertEqual((failure.value.status, failure.value.error_code), (401, 401))
        self.assertNotIn("s3cret", failure.getErrorMessage())
        self.assertIn("Unauthorized (error 401)", failure.getErrorMessage())

    def test_https_policy(self) -> None:
        """An https:// registry's TLS comes from the TLSSettings (a CA file that cannot be read: a one-line
        RegistryError, not a traceback)."""
        policy = _Policy(TLSSettings(ca_file="/nonexistent/ca.pem"))
        self.assertTrue(IPolicyForHTTPS.providedBy(policy))
        reactor = MemoryReactorClock()
        client = RegistryClient("https://r:8081", reactor=reactor, tls=TLSSettings(ca_file="/nonexistent/ca.pem"))
        failure = self.failureResultOf(client.schema(1), RegistryError)
        self.assertEqual(failure.getErrorMessage(), "cannot reach the schema registry at https://r:8081: cannot read "
                         "the CA file /nonexistent/ca.pem: No such file or directory")
        blocking = SyncRegistryClient("https://r:8081", tls=TLSSettings(ca_file="/nonexistent/ca.pem"))
        with self.assertRaises(RegistryError) as raised:
            blocking.schema(1)
        self.assertEqual(str(raised.exception), failure.getErrorMessage())
