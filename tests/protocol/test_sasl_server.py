"""twlog.security: SCRAM credentials in Kafka's format, PLAIN checked against them, and the broker's side of an
exchange, against RFC 7677's example and RFC 5802's formulas computed here."""

from __future__ import annotations

import base64
import hashlib
import hmac

from scramp import ScramClient
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import IllegalSaslState, SaslAuthenticationFailed, TwlogError, UnsupportedSaslMechanism
from twlog.security.credentials import (
    InvalidCredential,
    ScramCredential,
    check_plain,
    make_credential,
    parse_user_config,
    user_config,
    validate_user_name,
)
from twlog.security.sasl import FAILED, SaslServerSession

SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")  # RFC 7677, section 3
RFC7677 = [
    ("n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
     "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
    ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
     "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
]


def rfc5802(name: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest(), hmac.new(salted, b"Server Key", name).digest()


class CredentialTests(SynchronousTestCase):
    def test_keys_are_rfc5802s(self) -> None:
        """scramp's keys are those of RFC 5802's formulas, for both hashes."""
        for mechanism, name in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
            credential = make_credential(mechanism, "pencil", 4096, salt=SALT)
            self.assertEqual((credential.stored_key, credential.server_key), rfc5802(name, "pencil", SALT, 4096))
            self.assertTrue(check_plain(credential, mechanism, "pencil"))
            self.assertFalse(check_plain(credential, mechanism, "pencil "))

    def test_kafka_format(self) -> None:
        """salt=,stored_key=,server_key=,iterations= in base64; the user's JSON as Kafka writes it."""
        credential = ScramCredential(b"s", b"k", b"v", 8192)
        self.assertEqual(credential.text(), "salt=cw==,stored_key=aw==,server_key=dg==,iterations=8192")
        self.assertEqual(ScramCredential.parse(credential.text()), credential)
        value = user_config({"SCRAM-SHA-512": credential, "SCRAM-SHA-256": credential})
        self.assertEqual(value, b'{"version":1,"config":{"SCRAM-SHA-256":"salt=cw==,stored_key=aw==,server_key=dg==,'
                                b'iterations=8192","SCRAM-SHA-512":"salt=cw==,stored_key=aw==,server_key=dg==,'
                                b'iterations=8192"}}')
        self.assertEqual(parse_user_config(value), {"SCRAM-SHA-256": credential, "SCRAM-SHA-512": credential})
        for text in ("salt=cw==,stored_key=aw==,server_key=dg==",
                     "salt=!,stored_key=aw==,server_key=dg==,iterations=4096",
                     "salt=cw==,stored_key=aw==,server_key=dg==,iterations=100", "nonsense"):
            with self.assertRaises(InvalidCredential):
                ScramCredential.parse(text)
        for value in (b"not json", b'{"config": []}'):
            with self.assertRaises(InvalidCredential):
                parse_user_config(value)

    def test_bounds(self) -> None:
        """Kafka's iteration bounds, and user names that are safe znode names."""
        for iterations in (4095, 16385):
            with self.assertRaises(TwlogError):
                make_credential("SCRAM-SHA-256", "p", iterations)
        with self.assertRaises(TwlogError):
            make_credential("SCRAM-SHA-1", "p")
        for name in ("bob/../x", "..", "", "a b", "x" * 256):
            with self.assertRaises(TwlogError):
                validate_user_name(name)
        self.assertEqual(validate_user_name("bob.smith@example-1"), "bob.smith@example-1")


def session(users: dict, tls: bool = False, **kwargs) -> SaslServerSession:
    return SaslServerSession(("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"), users.get, tls, b"secret", **kwargs)


class SessionTests(SynchronousTestCase):
    def test_rfc7677_example(self) -> None:
        """The broker's messages are RFC 7677's, byte for byte, for its example credential and nonce."""
        users = {"user": {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pencil", 4096, salt=SALT)}}
        exchange = session(users, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
        self.assertEqual(exchange.handshake("SCRAM-SHA-256").error, 0)
        for client, server in RFC7677:
            outcome = exchange.authenticate(client.encode())
            self.assertEqual((outcome.error, outcome.token), (0, server.encode()))
        self.assertEqual(outcome.user, "user")
        self.assertTrue(exchange.authenticated)

    def test_unknown_user_fails_like_a_wrong_password(self) -> None:
        """Same step, same answer; an unknown user's made-up salt is the same each time."""
        users = {"bob": {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "right")}}
        salts, outcomes = [], []
        for user, password in (("bob", "wrong"), ("eve", "right"), ("eve", "other")):
            exchange = session(users)
            exchange.handshake("SCRAM-SHA-512")
            client = ScramClient(["SCRAM-SHA-512"], user, password)
            first = exchange.authenticate(client.get_client_first().encode())
            self.assertEqual(first.error, 0)
            client.set_server_first(first.token.decode())
            salts.append(client.salt)
            outcomes.append(exchange.authenticate(client.get_client_final().encode()))
        self.assertEqual({(o.error, o.message, o.token, o.user) for o in outcomes},
                         {(SaslAuthenticationFailed.code, FAILED, b"", None)})
        self.assertEqual(salts[1], salts[2])

    def test_order_and_mechanisms(self) -> None:
        """A token before the handshake, a second handshake, an unknown mechanism, PLAIN without TLS."""
        self.assertEqual(session({}).authenticate(b"x").error, IllegalSaslState.code)
        exchange = session({})
        exchange.handshake("SCRAM-SHA-256")
        self.assertEqual(exchange.handshake("SCRAM-SHA-256").error, IllegalSaslState.code)
        self.assertEqual(session({}).handshake("SCRAM-SHA-1").error, UnsupportedSaslMechanism.code)
        plaintext = session({})
        self.assertEqual(plaintext.offered, ("SCRAM-SHA-256", "SCRAM-SHA-512"))
        self.assertEqual(plaintext.handshake("PLAIN").message, "PLAIN is offered over TLS only")

    def test_plain(self) -> None:
        """RFC 4616 tokens: the user's password, an authorization id other than the user refused, bad tokens."""
        users = {"bob": {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pw")}}
        for token, user in ((b"\0bob\0pw", "bob"), (b"bob\0bob\0pw", "bob"), (b"eve\0bob\0pw", None),
                            (b"\0bob\0pX", None), (b"\0nobody\0pw", None), (b"\0bob", None), (b"\0bob\0\xff", None),
                            (b"\0" + b"b" * 256 + b"\0pw", None)):
            exchange = session(users, tls=True)
            exchange.handshake("PLAIN")
            outcome = exchange.authenticate(token)
            self.assertEqual(outcome.user, user, token)
            self.assertEqual(outcome.error, 0 if user else SaslAuthenticationFailed.code)
