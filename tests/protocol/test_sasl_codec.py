"""Types 16 SASL_HANDSHAKE and 17 SASL_AUTHENTICATE on the wire: their bytes, their bounds, and garbage."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import MalformedRequest, ProtocolViolation
from twlog.protocol import codec
from twlog.protocol.sasl_codec import (
    MAX_TOKEN_BYTES,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode_authenticate_response,
    decode_handshake_response,
    encode_authenticate_response,
    encode_handshake_response,
)


class RequestTests(SynchronousTestCase):
    def test_bytes(self) -> None:
        """The layouts of docs/protocol.md: type, then a string; type, then [int32 n][n bytes]."""
        self.assertEqual(codec.encode_request(SaslHandshakeRequest("PLAIN")), b"\x00\x10\x00\x05PLAIN")
        self.assertEqual(codec.encode_request(SaslAuthenticateRequest(b"\0u\0p")), b"\x00\x11\x00\x00\x00\x04\0u\0p")
        for request in (SaslHandshakeRequest("SCRAM-SHA-512"), SaslAuthenticateRequest(b"n,,n=bob,r=x")):
            self.assertEqual(codec.decode_request(codec.encode_request(request)), request)

    def test_malformed(self) -> None:
        """A token over MAX_TOKEN_BYTES, one past the frame, a negative length, trailing bytes: malformed."""
        for frame in (b"\x00\x11" + struct.pack(">i", MAX_TOKEN_BYTES + 1) + b"x" * (MAX_TOKEN_BYTES + 1),
                      b"\x00\x11" + struct.pack(">i", 10) + b"short", b"\x00\x11\xff\xff\xff\xff",
                      b"\x00\x10\x00\x01ab", b"\x00\x10\x00\x09PLAIN"):
            with self.assertRaises(MalformedRequest):
                codec.decode_request(frame)
        with self.assertRaises(ValueError):
            codec.encode_request(SaslAuthenticateRequest(b"x" * (MAX_TOKEN_BYTES + 1)))

    def test_description_never_shows_the_token(self) -> None:
        self.assertEqual(codec.describe_request(SaslAuthenticateRequest(b"\0bob\0secret")),
                         "SASL_AUTHENTICATE (11 bytes)")


class ResponseTests(SynchronousTestCase):
    def test_round_trips(self) -> None:
        """Both answers, a null message, and the error-only frame any response may be."""
        frame = encode_handshake_response(33, ("SCRAM-SHA-256", "SCRAM-SHA-512"))
        self.assertEqual(frame, b"\x00\x21\x00\x02\x00\x0dSCRAM-SHA-256\x00\x0dSCRAM-SHA-512")
        self.assertEqual(decode_handshake_response(frame),
                         SaslHandshakeResponse(33, ("SCRAM-SHA-256", "SCRAM-SHA-512")))
        frame = encode_authenticate_response(0, None, b"v=abc")
        self.assertEqual(frame, b"\x00\x00\xff\xff\x00\x00\x00\x05v=abc")
        self.assertEqual(decode_authenticate_response(frame), SaslAuthenticateResponse(0, None, b"v=abc"))
        self.assertEqual(decode_authenticate_response(encode_authenticate_response(58, "no")),
                         SaslAuthenticateResponse(58, "no", b""))
        self.assertEqual(decode_authenticate_response(b"\x00\x0b"), SaslAuthenticateResponse(11))
        self.assertEqual(decode_handshake_response(b"\x00\x0b"), SaslHandshakeResponse(11))

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=200))
    def test_garbage_is_a_protocol_violation(self, frame: bytes) -> None:
        """Any bytes decode or raise ProtocolViolation, never anything else."""
        for decode in (decode_handshake_response, decode_authenticate_response):
            try:
                decode(frame)
            except ProtocolViolation:
                pass

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=200))
    def test_garbage_request_is_malformed(self, body: bytes) -> None:
        for kind in (b"\x00\x10", b"\x00\x11"):
            try:
                codec.decode_request(kind + body)
            except MalformedRequest:
                pass
