# -*- test-case-name: tests.security.test_sasl -*-
"""The broker's side of one connection's SASL exchange (no I/O): L{SaslServerSession}.

A connection names a mechanism (SASL_HANDSHAKE, L{SaslServerSession.handshake}), then sends its tokens
(SASL_AUTHENTICATE, L{SaslServerSession.authenticate}); each gets an L{Outcome}.  SCRAM-SHA-256 and
SCRAM-SHA-512 are scramp's server side (RFC 5802, RFC 7677): two tokens, the client's first and final
messages, answered by the server's first and final messages.  PLAIN (RFC 4616) is one token,
C{authzid NUL authcid NUL password}, checked against the user's stored SCRAM credential
(L{twlog.security.credentials.check_plain}); it is offered on TLS connections only.

An unknown user and a wrong password fail alike (L{FAILED}, Kafka's message), and at the same step: an
unknown user's SCRAM exchange goes on with a made-up credential (salt derived from the user name and a
per-broker secret, so the same each time) and fails at the proof, as RFC 5802 section 5.1 suggests.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping

import attrs
from scramp import ScramMechanism

from twlog.errors import IllegalSaslState, SaslAuthenticationFailed, UnsupportedSaslMechanism
from twlog.security.credentials import PLAIN, SCRAM_MECHANISMS, ScramCredential, check_plain

__all__ = ["FAILED", "Outcome", "SaslServerSession", "UserLookup", "offered_mechanisms"]

#: A user's stored credentials by SCRAM mechanism, or None when there is no such user.
UserLookup = Callable[[str], Mapping[str, ScramCredential] | None]

#: What a failed authentication is told, whatever failed (Kafka's wording).
FAILED = "Authentication failed: Invalid username or password"
#: RFC 4616: each of authzid, authcid and password is at most 255 octets.
PLAIN_FIELD_BYTES = 255


def offered_mechanisms(enabled: tuple[str, ...], tls: bool) -> tuple[str, ...]:
    """The mechanisms a connection is offered: C{enabled}, without PLAIN unless it is over TLS."""
    return tuple(m for m in enabled if m != PLAIN or tls)


@attrs.frozen
class Outcome:
    """The answer to one SASL request: its error code (0, or one of Kafka's SASL codes), a message for a
    failure, the token to send back, and, once authenticated, the user."""

    error: int = 0
    message: str | None = None
    token: bytes = b""
    user: str | None = None

    @property
    def failed(self) -> bool:
        """Whether the exchange is over without authenticating (the connection is closed after the answer)."""
        return self.error != 0


class _Stage(enum.Enum):
    START = "start"  # no handshake yet
    CHOSEN = "chosen"  # a mechanism chosen, no token yet
    SCRAM_FIRST = "scram first"  # the server's first message sent; the client's final one is due
    DONE = "done"  # authenticated
    FAILED = "failed"


class SaslServerSession:
    """One connection's SASL exchange on the broker.

    @param enabled: the mechanisms the broker enables (C{--sasl-mechanisms}).
    @param lookup: a user's stored credentials (L{UserLookup}).
    @param tls: whether the connection is over TLS (PLAIN is offered only then).
    @param secret: the broker's secret for unknown users' made-up salts.
    @param nonce: the server's SCRAM nonce (default: a random one, as it must be; tests replay RFC 7677's example).
    """

    def __init__(self, enabled: tuple[str, ...], lookup: UserLookup, tls: bool, secret: bytes,
                 nonce: str | None = None) -> None:
        self.offered = offered_mechanisms(enabled, tls)
        self._enabled = enabled
        self._lookup = lookup
        self._secret = secret
        self._nonce = nonce
        self._stage = _Stage.START
        self.mechanism: str | None = None
        self._scram = None
        self._user: str | None = None
        #: Why the last failure failed, for the broker's log (never sent: the client is told L{FAILED}).
        self.reason = ""

    @property
    def authenticated(self) -> bool:
        return self._stage is _Stage.DONE

    def handshake(self, mechanism: str) -> Outcome:
        """Choose C{mechanism}: 0, or UnsupportedSaslMechanism (the offered ones are L{offered}), or
        IllegalSaslState after a handshake already made."""
        if self._stage is not _Stage.START:
            return self._fail(IllegalSaslState.code, "SASL_HANDSHAKE after the exchange started")
        if mechanism not in self.offered:
            why = "PLAIN is offered over TLS only" if mechanism == PLAIN and PLAIN in self._enabled else \
                f"mechanism {mechanism[:40]!r} is not enabled"
            return self._fail(UnsupportedSaslMechanism.code, why)
        self.mechanism, self._stage = mechanism, _Stage.CHOSEN
        return Outcome()

    def authenticate(self, token: bytes) -> Outcome:
        """The answer to the client's next token."""
        if self._stage not in (_Stage.CHOSEN, _Stage.SCRAM_FIRST):
            return self._fail(IllegalSaslState.code, f"SASL_AUTHENTICATE in stage {self._stage.value}")
        try:
            if self.mechanism == PLAIN:
                return self._plain(token)
            if self._stage is _Stage.CHOSEN:
                return self._scram_first(token)
            return self._scram_final(token)
        except Exception as e:  # scramp's ScramException, UnicodeDecodeError...: a bad token, one line for the log
            return self._fail(SaslAuthenticationFailed.code, f"{type(e).__name__}: {str(e)[:200]}", FAILED)

    # -- the mechanisms ----------------------------------------------------------------------

    def _plain(self, token: bytes) -> Outcome:
        parts = token.split(b"\0")
        if len(parts) != 3 or any(len(part) > PLAIN_FIELD_BYTES for part in parts):
            return self._fail(SaslAuthenticationFailed.code, "a PLAIN token is not authzid NUL authcid NUL password",
                              FAILED)
        authzid, user, password = (part.decode("utf-8") for part in parts)
        if authzid and authzid != user:
            return self._fail(SaslAuthenticationFailed.code, f"PLAIN authorization id {authzid!r} is not the user",
                              "Authentication failed: the authorization id must be empty or the user name")
        credentials = self._lookup(user) or {}
        for mechanism in SCRAM_MECHANISMS:  # any stored credential will do; SHA-256's first (half PBKDF2's cost)
            if mechanism in credentials and check_plain(credentials[mechanism], mechanism, password):
                return self._done(user)
        self._user = user
        return self._fail(SaslAuthenticationFailed.code, "unknown user or wrong password", FAILED)

    def _scram_first(self, token: bytes) -> Outcome:
        assert self.mechanism is not None
        self._scram = ScramMechanism(self.mechanism).make_server(self._credential, s_nonce=self._nonce)
        self._scram.set_client_first(token.decode("utf-8"))
        first = self._scram.get_server_first()
        self._stage = _Stage.SCRAM_FIRST
        return Outcome(token=first.encode("utf-8"))

    def _credential(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        credential = (self._lookup(user) or {}).get(self.mechanism or "")
        if credential is None:  # a made-up one, the same each time for this user: it fails at the proof
            salt = hmac.new(self._secret, f"{self.mechanism}:{user}".encode(), hashlib.sha256).digest()[:16]
            filler = secrets.token_bytes(64)
            credential = ScramCredential(salt, filler, filler, 4096)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _scram_final(self, token: bytes) -> Outcome:
        try:
            self._scram.set_client_final(token.decode("utf-8"))
        except Exception as e:
            return self._fail(SaslAuthenticationFailed.code, f"unknown user or wrong password ({str(e)[:100]})",
                              FAILED)
        final = self._scram.get_server_final().encode("utf-8")
        assert self._user is not None
        outcome = self._done(self._user)
        return attrs.evolve(outcome, token=final)

    # -- endings -----------------------------------------------------------------------------

    def _done(self, user: str) -> Outcome:
        self._stage, self._user = _Stage.DONE, user
        return Outcome(user=user)

    def _fail(self, code: int, reason: str, message: str | None = None) -> Outcome:
        self._stage = _Stage.FAILED
        self.reason = reason + (f" (user {self._user[:100]!r})" if self._user else "")
        return Outcome(error=code, message=message or reason)
