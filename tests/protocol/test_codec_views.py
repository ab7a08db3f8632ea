"""Decoded produce requests hold large message sets as views of their frame, not copies."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import MalformedRequest
from twlog.protocol.codec import (
    ACK_APPENDED,
    VIEW_BYTES,
    AckProduceRequest,
    MultiProduceRequest,
    ProduceRequest,
    decode_request,
    encode_request,
)
from twlog.storage.message import encode_message_set, validate_message_set

LARGE = encode_message_set([b"m" * 1000] * (VIEW_BYTES // 1000 + 1))
SMALL = encode_message_set([b"s" * 10] * 3)


class MessageSetViewTests(SynchronousTestCase):
    def test_large_set_is_a_view_of_the_frame(self) -> None:
        """An ACK_PRODUCE's large set is a read-only view into the frame itself: nothing was copied."""
        frame = encode_request(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, LARGE),)))
        (produce,) = decode_request(frame).produces
        self.assertIsInstance(produce.messages, memoryview)
        self.assertIs(produce.messages.obj, frame)
        self.assertTrue(produce.messages.readonly)
        self.assertEqual(produce.messages, LARGE)
        self.assertEqual(validate_message_set(produce.messages), len(LARGE) // 1009)

    def test_small_set_is_bytes(self) -> None:
        """A small set is a copy (bytes), cheaper to validate than a view."""
        request = decode_request(encode_request(ProduceRequest("t", 3, SMALL)))
        self.assertIs(type(request.messages), bytes)
        self.assertEqual(request, ProduceRequest("t", 3, SMALL))

    def test_frame_given_as_a_memoryview(self) -> None:
        """A frame assembled in place (a memoryview, writable) decodes the same, its sets read-only views."""
        request = MultiProduceRequest((ProduceRequest("tópic", 0, LARGE), ProduceRequest("b", 1, SMALL)))
        buffer = bytearray(encode_request(request))
        decoded = decode_request(memoryview(buffer))
        self.assertEqual(decoded, request)
        self.assertIsInstance(decoded.produces[0].messages, memoryview)
        self.assertTrue(decoded.produces[0].messages.readonly)
        self.assertIs(decoded.produces[0].messages.obj, buffer)

    def test_truncated_view_is_malformed(self) -> None:
        """Every truncation of a frame given as a memoryview is MalformedRequest, never struct.error."""
        frame = memoryview(encode_request(ProduceRequest("t", 0, SMALL)))
        for cut in range(len(frame)):
            self.assertRaises(MalformedRequest, decode_request, frame[:cut])
