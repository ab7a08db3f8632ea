# -*- test-case-name: tests.client.test_sasl -*-
"""The client's side of SASL: L{SASLSettings}, and the exchange both clients drive (L{SaslExchange}; no I/O).

Right after connecting (after TLS), before any other request, a client with C{ClientOptions(sasl=...)} sends
SASL_HANDSHAKE with its mechanism, then SASL_AUTHENTICATE with each token of the exchange
(L{twlog.protocol.sasl_codec}): for SCRAM-SHA-256/512, scramp's client side (the client-first and client-final
messages; the server's final message is checked, so a broker that does not know the password is caught); for
PLAIN, one token (RFC 4616), sent only over TLS.  The Twisted L{twlog.client.connection.BrokerConnection} and the
blocking L{twlog.client.sync.SyncConnection} each send the requests L{SaslExchange} gives them.  Every failure
is one line: C{authentication failed for user bob (SCRAM-SHA-256): ...}.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
from scramp import ScramClient

from twlog.errors import (
    IllegalSaslState,
    InvalidRequest,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanism,
)
from twlog.protocol.sasl_codec import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

__all__ = ["DEFAULT_MECHANISM", "MECHANISMS", "SASLSettings", "SaslExchange"]

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
#: The mechanism of C{--user} without C{--sasl-mechanism}: the strongest SCRAM (what C{twlog users add} makes).
DEFAULT_MECHANISM = "SCRAM-SHA-512"
#: The iterations a client accepts from a broker (Kafka's bounds; RFC 7677's least): a bogus broker can neither
#: make it spin nor have it weaken the proof.
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


@attrs.frozen
class SASLSettings:
    """Authenticate as C{username} with C{password}, by C{mechanism} (one of L{MECHANISMS})."""

    mechanism: str
    username: str
    password: str = attrs.field(repr=False)

    def __attrs_post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown SASL mechanism {self.mechanism!r} (one of {', '.join(MECHANISMS)})")


class SaslExchange:
    """The requests of one SASL exchange, one at a time: L{requests} is a generator sent each response.

    @param tls: whether the connection is over TLS (PLAIN is refused without it, before the password is sent).
    @param address: the broker's C{host:port}, for messages.
    """

    def __init__(self, settings: SASLSettings, tls: bool, address: str) -> None:
        self.settings = settings
        self._tls = tls
        self._address = address

    def failure(self, why: str) -> SaslAuthenticationFailed:
        """The one-line error of a failed exchange."""
        s = self.settings
        return SaslAuthenticationFailed(f"authentication failed for user {s.username} ({s.mechanism}) at broker "
                                        f"{self._address}: {why}")

    def requests(self) -> Iterator[SaslHandshakeRequest | SaslAuthenticateRequest]:
        """Yield each request; be sent its decoded response.  Returns once authenticated.

        @raise SaslAuthenticationFailed: the broker refused, or answered what SASL does not allow.
        """
        s = self.settings
        if s.mechanism == "PLAIN" and not self._tls:
            raise self.failure("PLAIN sends the password in the clear: it needs TLS (--tls-ca)")
        answer = yield SaslHandshakeRequest(s.mechanism)
        self._check_handshake(answer)
        if s.mechanism == "PLAIN":
            token = b"\0" + s.username.encode("utf-8") + b"\0" + s.password.encode("utf-8")
            self._check((yield SaslAuthenticateRequest(token)))
            return
        try:
            client = ScramClient([s.mechanism], s.username, s.password)
            first = client.get_client_first()
        except Exception as e:  # scramp: a user name or password SASLprep refuses
            raise self.failure(f"{e.args[0] if e.args else e}") from None
        answer = self._check((yield SaslAuthenticateRequest(first.encode("utf-8"))))
        try:
            server_first = answer.auth_bytes.decode("utf-8")
            client.set_server_first(server_first)
            iterations = int(client.iterations)
            if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
                raise ValueError(f"the broker asks for {iterations} iterations (not {MIN_ITERATIONS} to "
                                 f"{MAX_ITERATIONS})")
            final = client.get_client_final()
        except Exception as e:
            raise self.failure(f"the broker's SCRAM message is not valid: {e.args[0] if e.args else e}") from None
        answer = self._check((yield SaslAuthenticateRequest(final.encode("utf-8"))))
        try:
            client.set_server_final(answer.auth_bytes.decode("utf-8"))
        except Exception as e:
            raise self.failure(f"the broker did not prove it knows the password ({e.args[0] if e.args else e}): "
                               "it may not be the broker it claims to be") from None

    def _check_handshake(self, answer: SaslHandshakeResponse) -> None:
        if answer.error == 0:
            return
        offered = ", ".join(answer.mechanisms) or "none"
        if answer.error == InvalidRequest.code:
            raise self.failure("the broker does not serve SASL (started without --sasl-mechanisms, or before SASL "
                               "was built)")
        if answer.error == UnsupportedSaslMechanism.code:
            plain = (" (PLAIN is offered over TLS only)" if self.settings.mechanism == "PLAIN" and not self._tls
                     else "")
            raise self.failure(f"the broker does not enable {self.settings.mechanism}{plain}; it offers {offered}"
                               if answer.mechanisms else "the broker serves no SASL mechanism (no --sasl-mechanisms)")
        raise self.failure(f"the broker answered the handshake with error {answer.error}")

    def _check(self, answer: SaslAuthenticateResponse) -> SaslAuthenticateResponse:
        if answer.error == 0:
            return answer
        if answer.error == SaslAuthenticationFailed.code:
            raise self.failure(answer.error_message or "invalid username or password")
        if answer.error == IllegalSaslState.code:
            raise self.failure(f"the broker says the exchange is out of order: {answer.error_message}")
        raise self.failure(f"the broker answered with error {answer.error}: {answer.error_message or ''}".rstrip(": "))
