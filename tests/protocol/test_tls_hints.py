"""The broker's words for TLS mistakes: a TLS handshake on the plaintext port, a failed TLS connection."""

from __future__ import annotations

from OpenSSL import SSL
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol.connection import tls_hello_hint
from twlog.protocol.factory import tls_reason


class TLSHintTests(SynchronousTestCase):
    def test_tls_hello_on_the_plaintext_port(self) -> None:
        """A frame length made of a TLS handshake record's first bytes (0x16 0x03 ...) is named as TLS."""
        client_hello = int.from_bytes(bytes([0x16, 0x03, 0x01, 0x02]), "big")
        self.assertIn("--tls-port", tls_hello_hint(client_hello))
        self.assertEqual(tls_hello_hint(200 * 1024 * 1024), "")

    def test_tls_reason(self) -> None:
        """pyOpenSSL's list of (library, function, reason) as one line of reasons."""
        error = SSL.Error([("SSL routines", "", "wrong version number")])
        self.assertEqual(tls_reason(Failure(error)), "wrong version number")
        self.assertEqual(tls_reason(Failure(SSL.Error("odd"))), "odd")
