"""The client's side of SASL (twlog.client.sasl, twlog.client.sasl_twisted): a BrokerConnection authenticates
before its first request, against the broker's own exchange (twlog.security.sasl) on a FakeEndpoint and a Clock,
and says why not in one line."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.client.support import framed, unframe_all
from tests.client.test_protocol import broker_connection
from twlog.client.sasl import SaslExchange, SASLSettings
from twlog.errors import SaslAuthenticationFailed
from twlog.protocol import codec
from twlog.protocol.codec import MetadataRequest, encode_metadata_response
from twlog.protocol.sasl_codec import (
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    encode_authenticate_response,
    encode_handshake_response,
)
from twlog.security.credentials import SCRAM_MECHANISMS, make_credential
from twlog.security.sasl import SaslServerSession

USERS = {"bob": {m: make_credential(m, "secret") for m in SCRAM_MECHANISMS}}
BOB = SASLSettings("SCRAM-SHA-256", "bob", "secret")


class Broker:
    """Answers a client's SASL requests with the broker's own exchange, and METADATA once authenticated."""

    def __init__(self, transport, protocol, forge_final: bool = False) -> None:
        self.transport, self.protocol = transport, protocol
        self.session = SaslServerSession(("SCRAM-SHA-256", "SCRAM-SHA-512"), USERS.get, False, b"k")
        self.forge_final = forge_final
        self.seen: list = []

    def answer(self) -> None:
        """Answer every request written so far."""
        frames = unframe_all(self.transport.value())
        self.transport.clear()
        for frame in frames:
            request = codec.decode_request(frame)
            self.seen.append(request)
            if isinstance(request, SaslHandshakeRequest):
                outcome = self.session.handshake(request.mechanism)
                reply = encode_handshake_response(outcome.error, self.session.offered)
            elif isinstance(request, SaslAuthenticateRequest):
                outcome = self.session.authenticate(request.auth_bytes)
                token = b"v=AAAA" if self.forge_final and outcome.user else outcome.token
                reply = encode_authenticate_response(outcome.error, outcome.message, token)
            else:
                assert self.session.authenticated, request
                reply = encode_metadata_response(0, codec.MetadataResponse(1, "h", 1, ()))
            self.protocol.dataReceived(framed(reply))


class ConnectionTests(SynchronousTestCase):
    def start(self, settings=BOB, **broker):
        connection, endpoint, clock = broker_connection(sasl=settings)
        first, second = connection.request(MetadataRequest()), connection.request(MetadataRequest())
        transport = endpoint.succeed()
        return connection, Broker(transport, connection.current, **broker), (first, second), clock

    def test_authenticates_before_the_first_request(self) -> None:
        """The handshake and both SCRAM messages go first, one at a time; then the requests, in order."""
        connection, broker, (first, second), _ = self.start()
        self.assertIsNone(connection.ready())
        for _ in range(3):
            [request] = [codec.decode_request(f) for f in unframe_all(broker.transport.value())]
            self.assertIsInstance(request, (SaslHandshakeRequest, SaslAuthenticateRequest))
            broker.answer()
        broker.answer()
        self.assertEqual(self.successResultOf(first).error, 0)
        self.assertEqual(self.successResultOf(second).error, 0)
        self.assertEqual([type(r).__name__ for r in broker.seen],
                         ["SaslHandshakeRequest", "SaslAuthenticateRequest", "SaslAuthenticateRequest",
                          "MetadataRequest", "MetadataRequest"])
        self.assertIs(connection.ready(), connection.current)
        third = connection.request(MetadataRequest())  # the same connection: no second exchange
        broker.answer()
        self.assertEqual(self.successResultOf(third).error, 0)
        self.assertEqual(len(broker.seen), 6)

    def test_wrong_password_fails_every_waiting_request(self) -> None:
        """A refusal fails the waiting requests with one line naming the user and mechanism; the connection goes."""
        connection, broker, requests, _ = self.start(SASLSettings("SCRAM-SHA-512", "bob", "wrong"))
        for _ in range(3):
            broker.answer()
        for d in requests:
            message = str(self.failureResultOf(d, SaslAuthenticationFailed).value)
            self.assertIn("authentication failed for user bob (SCRAM-SHA-512) at broker h:1", message)
            self.assertNotIn("\n", message)
        self.assertFalse(broker.transport.connected)

    def test_a_broker_that_cannot_prove_the_password_is_refused(self) -> None:
        """The server's final message is checked (mutual authentication)."""
        connection, broker, requests, _ = self.start(forge_final=True)
        for _ in range(3):
            broker.answer()
        for d in requests:
            self.assertIn("did not prove it knows the password", str(self.failureResultOf(d).value))

    def test_a_broker_without_sasl(self) -> None:
        """A broker that does not serve SASL answers InvalidRequest: the client says so."""
        connection, broker, requests, _ = self.start()
        broker.transport.clear()
        connection.current.dataReceived(framed(codec.encode_error_response(11)))
        for d in requests:
            self.assertIn("the broker does not serve SASL", str(self.failureResultOf(d).value))

    def test_plain_never_leaves_without_tls(self) -> None:
        """PLAIN without TLS fails before anything is written."""
        connection, broker, (first, _), _ = self.start(SASLSettings("PLAIN", "bob", "secret"))
        self.assertIn("PLAIN sends the password in the clear", str(self.failureResultOf(first).value))
        self.assertEqual(broker.transport.value(), b"")


class ExchangeTests(SynchronousTestCase):
    def test_handshake_refusals(self) -> None:
        """What the client says for each handshake answer."""
        cases = [
            (encode_handshake_response(33, ("SCRAM-SHA-512",)),
             "does not enable SCRAM-SHA-256; it offers SCRAM-SHA-512"),
            (encode_handshake_response(33, ()), "serves no SASL mechanism"),
            (codec.encode_error_response(11), "does not serve SASL"),
        ]
        for frame, expected in cases:
            steps = SaslExchange(BOB, False, "h:1").requests()
            request = next(steps)
            with self.assertRaises(SaslAuthenticationFailed) as raised:
                steps.send(codec.decode_response(request, frame))
            self.assertIn(expected, str(raised.exception))

    def test_password_is_not_in_repr(self) -> None:
        self.assertNotIn("secret", repr(BOB))
        with self.assertRaises(ValueError):
            SASLSettings("GSSAPI", "bob", "x")
