"""Confluent's wire format: magic byte 0, a 4-byte big-endian schema id, the Avro body."""

from twisted.trial.unittest import SynchronousTestCase

from twlog.avro.wire import WireFormatError, frame, unframe


class WireTests(SynchronousTestCase):
    def test_layout(self) -> None:
        """The header is byte 0 then the id big-endian, as Confluent's serializers write it."""
        self.assertEqual(frame(258, b"body"), b"\x00\x00\x00\x01\x02body")
        schema_id, body = unframe(b"\x00\x00\x00\x01\x02body")
        self.assertEqual((schema_id, bytes(body)), (258, b"body"))

    def test_largest_id(self) -> None:
        self.assertEqual(unframe(frame(2**32 - 1, b""))[0], 2**32 - 1)
        self.assertRaises(ValueError, frame, 2**32, b"")
        self.assertRaises(ValueError, frame, -1, b"")

    def test_not_the_wire_format(self) -> None:
        """A short payload or another magic byte is refused, naming why."""
        with self.assertRaises(WireFormatError) as short:
            unframe(b"\x00\x00\x01")
        self.assertIn("3 bytes", str(short.exception))
        with self.assertRaises(WireFormatError) as magic:
            unframe(b"{\"a\": 1}")
        self.assertIn("magic byte 123", str(magic.exception))
