# -*- test-case-name: tests.protocol.test_sasl_codec -*-
"""Types 16 SASL_HANDSHAKE and 17 SASL_AUTHENTICATE on the wire (pure: no I/O, no Twisted).

Modelled on Kafka's SaslHandshake (v1) and SaslAuthenticate (v0): the client names a mechanism, the broker
answers with an error code and the mechanisms it enables; then the client sends the mechanism's tokens one
SASL_AUTHENTICATE at a time and the broker answers each with an error code, an error message (a null string
on success) and its own token.  docs/protocol.md, "Authentication requests", is the reference.  A token is
C{[int32 n][n bytes]}, at most L{MAX_TOKEN_BYTES}; every malformed or truncated input raises
L{MalformedRequest} (requests) or L{ProtocolViolation} (responses), never C{struct.error}.
"""

from __future__ import annotations

import attrs

from twlog.errors import MalformedRequest
from twlog.protocol.primitives import I16, I32, need, read_int16, read_int32, read_many, read_str, write_str
from twlog.protocol.responses import peer_violation

__all__ = [
    "MAX_MECHANISMS", "MAX_TOKEN_BYTES", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "TYPES", "SaslAuthenticateRequest",
    "SaslAuthenticateResponse", "SaslHandshakeRequest", "SaslHandshakeResponse", "decode_authenticate_response",
    "decode_handshake_response", "describe_request", "encode_authenticate_response", "encode_handshake_response",
    "encode_request", "read_request",
]

SASL_HANDSHAKE = 16
SASL_AUTHENTICATE = 17
TYPES = frozenset((SASL_HANDSHAKE, SASL_AUTHENTICATE))

#: The largest SASL token either side accepts (a SCRAM message is about 200 bytes; PLAIN's at most 3 x 255).
MAX_TOKEN_BYTES = 64 * 1024
#: The most mechanisms a SASL_HANDSHAKE answer may list.
MAX_MECHANISMS = 64


@attrs.frozen
class SaslHandshakeRequest:
    """Type 16: authenticate with C{mechanism} (C{SCRAM-SHA-256}, C{SCRAM-SHA-512}, C{PLAIN})."""

    mechanism: str


@attrs.frozen
class SaslAuthenticateRequest:
    """Type 17: the client's next token of the mechanism chosen by SASL_HANDSHAKE."""

    auth_bytes: bytes


@attrs.frozen
class SaslHandshakeResponse:
    """SASL_HANDSHAKE's answer: 0, or UnsupportedSaslMechanism (33) or IllegalSaslState (34); and the broker's
    enabled mechanisms either way."""

    error: int
    mechanisms: tuple[str, ...] = ()


@attrs.frozen
class SaslAuthenticateResponse:
    """SASL_AUTHENTICATE's answer: 0 (the exchange goes on, or is done), SaslAuthenticationFailed (58) or
    IllegalSaslState (34) with a message (None on success), and the broker's token (empty when it has none)."""

    error: int
    error_message: str | None = None
    auth_bytes: bytes = b""


SaslRequest = SaslHandshakeRequest | SaslAuthenticateRequest
SASL_REQUESTS = (SaslHandshakeRequest, SaslAuthenticateRequest)


def _read_token(buf, pos: int, what: str) -> tuple[bytes, int]:
    size, pos = read_int32(buf, pos)
    if size > MAX_TOKEN_BYTES:
        raise MalformedRequest(f"a {size}-byte {what} exceeds the {MAX_TOKEN_BYTES}-byte limit")
    need(buf, pos, size, what)
    return bytes(buf[pos : pos + size]), pos + size


def _write_token(token: bytes) -> bytes:
    if len(token) > MAX_TOKEN_BYTES:
        raise ValueError(f"a {len(token)}-byte SASL token exceeds the {MAX_TOKEN_BYTES}-byte limit")
    return I32.pack(len(token)) + token


def read_request(kind: int, buf, pos: int) -> tuple[SaslRequest, int]:
    """The body of a type-C{kind} (16 or 17) request at C{pos}; the position after it."""
    if kind == SASL_HANDSHAKE:
        mechanism, pos = read_str(buf, pos)
        return SaslHandshakeRequest(mechanism), pos
    token, pos = _read_token(buf, pos, "SASL token")
    return SaslAuthenticateRequest(token), pos


def encode_request(request: SaslRequest) -> bytes:
    """The frame (without size prefix) of C{request}."""
    if isinstance(request, SaslHandshakeRequest):
        return I16.pack(SASL_HANDSHAKE) + write_str(request.mechanism)
    return I16.pack(SASL_AUTHENTICATE) + _write_token(request.auth_bytes)


def describe_request(request: SaslRequest) -> str:
    """A short description, for messages (never the token: it may hold a password)."""
    if isinstance(request, SaslHandshakeRequest):
        return f"SASL_HANDSHAKE {request.mechanism}"
    return f"SASL_AUTHENTICATE ({len(request.auth_bytes)} bytes)"


# -- responses ---------------------------------------------------------------------------------


def encode_handshake_response(error: int, mechanisms) -> bytes:
    """The frame of a SASL_HANDSHAKE answer."""
    return b"".join([I16.pack(error), I16.pack(len(mechanisms)), *map(write_str, mechanisms)])


def encode_authenticate_response(error: int, message: str | None, token: bytes = b"") -> bytes:
    """The frame of a SASL_AUTHENTICATE answer (C{message} None: a null string, C{int16} -1)."""
    text = I16.pack(-1) if message is None else write_str(message)
    return I16.pack(error) + text + _write_token(token)


def _only_error(frame: bytes) -> int | None:
    if len(frame) == 2:
        return I16.unpack(frame)[0]
    return None


@peer_violation
def decode_handshake_response(frame: bytes) -> SaslHandshakeResponse:
    """A SASL_HANDSHAKE answer (an error-only frame too)."""
    error = _only_error(frame)
    if error is not None:
        return SaslHandshakeResponse(error)
    error, pos = read_int16(frame, 0)
    count, pos = read_int16(frame, pos)
    if count > MAX_MECHANISMS:
        raise MalformedRequest(f"{count} mechanisms (at most {MAX_MECHANISMS})")
    mechanisms, pos = read_many(frame, pos, count, read_str)
    _done(frame, pos)
    return SaslHandshakeResponse(error, mechanisms)


@peer_violation
def decode_authenticate_response(frame: bytes) -> SaslAuthenticateResponse:
    """A SASL_AUTHENTICATE answer (an error-only frame too)."""
    error = _only_error(frame)
    if error is not None:
        return SaslAuthenticateResponse(error)
    error, pos = read_int16(frame, 0)
    length = I16.unpack_from(frame, pos)[0] if len(frame) >= pos + 2 else 0
    if length == -1:
        message, pos = None, pos + 2
    else:
        message, pos = read_str(frame, pos)
    token, pos = _read_token(frame, pos, "SASL token")
    _done(frame, pos)
    return SaslAuthenticateResponse(error, message, token)


def _done(frame: bytes, pos: int) -> None:
    if pos != len(frame):
        raise MalformedRequest(f"{len(frame) - pos} unexpected bytes after the response")


RESPONSE_DECODERS = {SaslHandshakeRequest: decode_handshake_response,
                     SaslAuthenticateRequest: decode_authenticate_response}
