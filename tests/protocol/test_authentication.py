"""The broker's authentication gate (twlog.protocol.authentication) on StringTransports and a task.Clock: SCRAM and
PLAIN exchanges, --require-auth refusing requests before authenticating, the deadline of a stalled handshake,
the bound on frames before authenticating, mutual-TLS principals, and a hypothesis fuzz of the exchange."""

from __future__ import annotations

import struct

import trustme
from cryptography import x509
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from OpenSSL import crypto
from scramp import ScramClient
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import ISSLTransport
from twisted.internet.testing import StringTransport
from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from tests.protocol.test_server import BrokerTestMixin
from twlog.errors import SaslAuthenticationFailed, UnsupportedSaslMechanism
from twlog.protocol import codec
from twlog.protocol.authentication import PRE_AUTH_MAX_BYTES, AuthenticatingProtocol, Authentication
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.sasl_codec import (
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    decode_authenticate_response,
    decode_handshake_response,
)
from twlog.security import ANONYMOUS
from twlog.security.credentials import SCRAM_MECHANISMS, make_credential
from twlog.security.principals import certificate_principal

CREDENTIALS = {"bob": {m: make_credential(m, "secret") for m in SCRAM_MECHANISMS}}
ALL = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


@implementer(ISSLTransport)
class TLSTransport(StringTransport):
    """A StringTransport that says it is TLS, with the client's certificate (if any)."""

    def __init__(self, certificate=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.certificate = certificate

    def getPeerCertificate(self):
        return self.certificate


def frames(data: bytes) -> list[bytes]:
    out = []
    while len(data) >= 4:
        (size,) = struct.unpack_from(">i", data)
        out.append(data[4 : 4 + size])
        data = data[4 + size :]
    return out


def framed(*requests) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in map(codec.encode_request, requests))


class GateTestCase(BrokerTestMixin, SynchronousTestCase):
    require = True
    mechanisms = ALL

    def setUp(self) -> None:
        self.make_broker(request_timeout_s=5.0)
        self.events: list[dict] = []
        self.patch(Authentication, "_log", Logger(observer=self.events.append))
        self.auth = Authentication(self.clock, self.mechanisms, self.require, CREDENTIALS.get, timeout_s=5.0)
        self.factory = BrokerFactory(self.broker)
        self.factory.authentication = self.auth

    def connect(self, transport=None) -> tuple[AuthenticatingProtocol, StringTransport]:
        address = IPv4Address("TCP", "10.0.0.1", 5)
        protocol = self.factory.buildProtocol(address)
        transport = transport or StringTransport(peerAddress=address)
        protocol.makeConnection(transport)
        return protocol, transport

    def answers(self, transport) -> list[bytes]:
        out = frames(transport.value())
        transport.clear()
        return out

    def scram(self, protocol, transport, mechanism="SCRAM-SHA-256", user="bob", password="secret"):
        """Run a SCRAM exchange; the last SASL_AUTHENTICATE answer."""
        client = ScramClient([mechanism], user, password)
        protocol.dataReceived(framed(SaslHandshakeRequest(mechanism)))
        self.assertEqual(decode_handshake_response(self.answers(transport)[0]).error, 0)
        protocol.dataReceived(framed(SaslAuthenticateRequest(client.get_client_first().encode())))
        first = decode_authenticate_response(self.answers(transport)[0])
        self.assertEqual(first.error, 0)
        client.set_server_first(first.auth_bytes.decode())
        protocol.dataReceived(framed(SaslAuthenticateRequest(client.get_client_final().encode())))
        final = decode_authenticate_response(self.answers(transport)[0])
        if final.error == 0:
            client.set_server_final(final.auth_bytes.decode())  # the broker proved it holds bob's server key
        return final


class RequiredTests(GateTestCase):
    def test_scram_then_requests(self) -> None:
        """After SCRAM the connection is User:bob and its requests are answered; counted by mechanism."""
        for mechanism in SCRAM_MECHANISMS:
            protocol, transport = self.connect()
            self.assertEqual(protocol.principal, ANONYMOUS)
            self.assertEqual(self.scram(protocol, transport, mechanism).error, 0)
            self.assertEqual(protocol.principal, "User:bob")
            protocol.dataReceived(framed(codec.MetadataRequest()))
            self.assertEqual(codec.decode_metadata_response(self.answers(transport)[0]).error, 0)
            self.assertFalse(transport.disconnecting)
        self.assertEqual(self.auth.successes, {m: 1 for m in SCRAM_MECHANISMS})
        self.assertEqual(self.clock.getDelayedCalls()[0:0], [])  # (no deadline is left behind: below)
        self.assertFalse([c for c in self.clock.getDelayedCalls() if "_auth_late" in repr(c)])

    def test_failures_answer_then_close(self) -> None:
        """A wrong password and an unknown user get the same answer, then the connection closes."""
        answers = []
        for user, password in (("bob", "wrong"), ("eve", "secret")):
            protocol, transport = self.connect()
            final = self.scram(protocol, transport, user=user, password=password)
            self.assertEqual(final.error, SaslAuthenticationFailed.code)
            answers.append((final.error, final.error_message, final.auth_bytes))
            self.assertTrue(transport.disconnecting)
            self.assertEqual(protocol.principal, ANONYMOUS)
        self.assertEqual(answers[0], answers[1])
        self.assertEqual(self.auth.failures, {"SCRAM-SHA-256": 2})
        [line] = [e for e in self.events if "authentication(s) failed" in e["log_format"]]
        self.assertEqual(line["peer"], "10.0.0.1:5")

    def test_request_before_authentication_closes(self) -> None:
        """Any other request first is answered SaslAuthenticationFailed (0.7 types: Unknown) and closed; logged."""
        for request, code in ((codec.MetadataRequest(), SaslAuthenticationFailed.code),
                              (codec.FetchRequest("t", 0, 0, 100), -1)):
            protocol, transport = self.connect()
            protocol.dataReceived(framed(request, codec.MetadataRequest()))
            self.assertEqual(self.answers(transport), [struct.pack(">h", code)])
            self.assertTrue(transport.disconnecting)
        self.assertEqual(self.auth.refused.total, 2)
        [line] = [e for e in self.events if "before authenticating" in e["log_format"]]
        self.assertIn("METADATA", line["request"])

    def test_stalled_handshake_is_closed(self) -> None:
        """Not authenticated within the timeout: dropped, whether silent or halfway through."""
        silent, silent_transport = self.connect()
        halfway, halfway_transport = self.connect()
        halfway.dataReceived(framed(SaslHandshakeRequest("SCRAM-SHA-512")))
        self.clock.advance(4.9)
        self.assertFalse(silent_transport.disconnected or halfway_transport.disconnected)
        self.clock.advance(0.2)
        self.assertTrue(silent_transport.disconnected and halfway_transport.disconnected)
        self.assertEqual(self.auth.late.total, 2)

    def test_frames_before_authentication_are_bounded(self) -> None:
        """Before authenticating a frame may be PRE_AUTH_MAX_BYTES at most; after, the broker's limit."""
        protocol, transport = self.connect()
        protocol.dataReceived(struct.pack(">ih", PRE_AUTH_MAX_BYTES + 1, 17))
        self.assertTrue(transport.disconnecting)
        self.assertEqual(protocol.buffered_bytes, 0)
        protocol, transport = self.connect()
        self.scram(protocol, transport)
        self.assertEqual(protocol.MAX_LENGTH, self.broker.config.max_request_bytes)
        protocol, transport = self.connect()
        protocol.dataReceived(b"\x00\x00\x00\x01\x00")  # a frame too short to hold a type
        self.assertTrue(transport.disconnecting)
        self.assertNotIn(None, self.factory.requests)

    def test_plain_over_tls_only(self) -> None:
        """PLAIN is offered over TLS only; there it checks the stored SCRAM credential."""
        protocol, transport = self.connect()
        protocol.dataReceived(framed(SaslHandshakeRequest("PLAIN")))
        answer = decode_handshake_response(self.answers(transport)[0])
        self.assertEqual((answer.error, answer.mechanisms), (UnsupportedSaslMechanism.code, SCRAM_MECHANISMS))
        self.assertTrue(transport.disconnecting)
        for password, error in (("secret", 0), ("wrong", SaslAuthenticationFailed.code)):
            protocol, transport = self.connect(TLSTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", 5)))
            protocol.dataReceived(framed(SaslHandshakeRequest("PLAIN"), SaslAuthenticateRequest(
                b"\0bob\0" + password.encode())))
            handshake, authenticate = self.answers(transport)
            self.assertEqual(decode_handshake_response(handshake).mechanisms, ALL)
            self.assertEqual(decode_authenticate_response(authenticate).error, error)
            self.assertEqual(protocol.principal, "User:bob" if error == 0 else ANONYMOUS)

    def test_mutual_tls_principal(self) -> None:
        """A verified client certificate makes the connection User:<subject DN> and authenticated."""
        pem = trustme.CA().issue_cert("client.example", common_name="client").cert_chain_pems[0].bytes()
        certificate = crypto.load_certificate(crypto.FILETYPE_PEM, pem)
        protocol, transport = self.connect(TLSTransport(certificate, peerAddress=IPv4Address("TCP", "10.0.0.1", 5)))
        protocol.handshakeCompleted()
        # RFC 2253: the certificate's attributes (O, OU, CN) from the most specific, as Kafka prints them
        parts = [f"{key.decode()}={value.decode()}" for key, value in certificate.get_subject().get_components()]
        self.assertEqual(parts[-1], "CN=client")
        self.assertEqual(protocol.principal, "User:" + ",".join(reversed(parts)))
        protocol.dataReceived(framed(codec.MetadataRequest()))
        self.assertEqual(codec.decode_metadata_response(self.answers(transport)[0]).error, 0)
        self.clock.advance(10)
        self.assertFalse(transport.disconnected)
        self.assertEqual(self.auth.successes, {"TLS": 1})

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "", "GSSAPI"]),
           st.lists(st.binary(max_size=300), min_size=1, max_size=4))
    def test_fuzzed_exchange_closes(self, mechanism: str, tokens: list[bytes]) -> None:
        """Random tokens after a handshake: every answer is a SASL answer, the client never authenticates, and the
        connection ends closed without buffering anything."""
        protocol, transport = self.connect(TLSTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", 5)))
        protocol.dataReceived(framed(SaslHandshakeRequest(mechanism), *map(SaslAuthenticateRequest, tokens)))
        answers = self.answers(transport)
        self.assertEqual(decode_handshake_response(answers[0]).mechanisms, ALL)
        for answer in answers[1:]:
            decode_authenticate_response(answer)
        if not transport.disconnecting:  # waiting for more (a SCRAM first message that parsed): the deadline ends it
            self.clock.advance(5)
            self.assertTrue(transport.disconnected)
        self.assertFalse(protocol.authenticated)
        self.assertEqual(protocol.buffered_bytes, 0)


class OptionalTests(GateTestCase):
    require = False

    def test_anonymous_and_authenticated_side_by_side(self) -> None:
        """Without --require-auth an anonymous connection is served and has no deadline."""
        anonymous, transport = self.connect()
        anonymous.dataReceived(framed(codec.MetadataRequest()))
        self.assertEqual(codec.decode_metadata_response(self.answers(transport)[0]).error, 0)
        self.clock.advance(60)
        self.assertFalse(transport.disconnected)
        self.assertEqual(anonymous.principal, ANONYMOUS)
        bob, transport = self.connect()
        self.assertEqual(self.scram(bob, transport).error, 0)
        self.assertEqual(bob.principal, "User:bob")


class NoSaslTests(GateTestCase):
    mechanisms = ()

    def test_handshake_says_no_mechanism(self) -> None:
        """A broker authenticating by certificate only answers a handshake with no mechanism at all."""
        protocol, transport = self.connect()
        protocol.dataReceived(framed(SaslHandshakeRequest("SCRAM-SHA-256")))
        answer = decode_handshake_response(self.answers(transport)[0])
        self.assertEqual((answer.error, answer.mechanisms), (UnsupportedSaslMechanism.code, ()))


class SubjectTests(SynchronousTestCase):
    def test_rfc2253_escapes(self) -> None:
        """Special characters in a DN's values are escaped as RFC 2253 (and Kafka's X500Principal) escape them."""
        class Certificate:
            subject = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "FR"),
                                 x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc."),
                                 x509.NameAttribute(NameOID.COMMON_NAME, 'a+b "c" <d>;')])

        self.assertEqual(certificate_principal(Certificate()),
                         'User:CN=a\\+b \\"c\\" \\<d\\>\\;,O=Example\\, Inc.,C=FR')
