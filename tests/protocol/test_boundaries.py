"""BOUNDARIES (type 10): the byte layout of docs/protocol.md, built by hand, and the broker's answers."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.protocol.test_server import BrokerTestMixin, frame, responses
from twlog.errors import (
    NO_ERROR,
    InvalidRequest,
    InvalidTopic,
    MalformedRequest,
    OffsetOutOfRange,
    ProtocolViolation,
    WrongPartition,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    MAX_BOUNDARY_POSITIONS,
    BoundariesRequest,
    BoundariesResponse,
    ProduceRequest,
    decode_request,
    decode_response,
)
from twlog.storage.message import encode_message_set

#: `[int16 type = 10][string topic][int32 partition][int16 count][int64 position]*count`, by hand:
#: "clicks" partition 1, positions 0 and 5000.
REQUEST = bytes.fromhex("000a" "0006" "636c69636b73" "00000001" "0002" "0000000000000000" "0000000000001388")
#: `[int16 error][int16 count][int64 offset]*count`: error 0, offsets 0 and 5109.
RESPONSE = bytes.fromhex("0000" "0002" "0000000000000000" "00000000000013f5")


class LayoutTests(SynchronousTestCase):
    def test_request_from_spec(self) -> None:
        """The documented bytes decode to the request, and encoding it gives them back."""
        request = BoundariesRequest("clicks", 1, (0, 5000))
        self.assertEqual(decode_request(REQUEST), request)
        self.assertEqual(codec.encode_request(request), REQUEST)
        self.assertEqual(codec.BOUNDARIES, 10)

    def test_every_prefix_is_malformed(self) -> None:
        """A truncated request, one with trailing bytes or a negative count, is MalformedRequest."""
        for n in range(len(REQUEST)):
            self.assertRaises(MalformedRequest, decode_request, REQUEST[:n])
        self.assertRaises(MalformedRequest, decode_request, REQUEST + b"\x00")
        self.assertRaises(MalformedRequest, decode_request, bytes.fromhex("000a" "0001" "61" "00000000" "ffff"))

    def test_response_from_spec(self) -> None:
        """The response decodes to the offsets; an error-only frame has none; a short or long one is the peer's
        protocol violation."""
        request = BoundariesRequest("clicks", 1, (0, 5000))
        self.assertEqual(decode_response(request, RESPONSE), BoundariesResponse(NO_ERROR, (0, 5109)))
        self.assertEqual(codec.encode_boundaries_response(NO_ERROR, [0, 5109]), RESPONSE)
        self.assertEqual(decode_response(request, b"\x00\x01"), BoundariesResponse(OffsetOutOfRange.code))
        for bad in (RESPONSE[:-1], RESPONSE + b"\x00", b"\x00"):
            self.assertRaises(ProtocolViolation, decode_response, request, bad)

    def test_describe(self) -> None:
        """Logs and errors name the partition and how many positions."""
        self.assertEqual(codec.describe_request(BoundariesRequest("clicks", 1, (0, 5000))),
                         "BOUNDARIES clicks-1 at 2 positions")


class HandlerTests(BrokerTestMixin, SynchronousTestCase):
    """The broker's answers on one connection (StringTransport), over a real log directory."""

    def setUp(self) -> None:
        self.make_broker(segment_bytes=64 * 1024)
        self.protocol, self.transport = self.connect()

    def ask(self, topic: str, partition: int, positions) -> BoundariesResponse:
        request = BoundariesRequest(topic, partition, tuple(positions))
        self.transport.clear()
        self.protocol.dataReceived(frame(request))
        (answer,) = responses(self.transport.value())
        return decode_response(request, answer)

    def test_boundaries_of_produced_sets(self) -> None:
        """Each position gets the first message at or after it; past the flushed end, the flushed end."""
        data = encode_message_set([b"x" * 100] * 50)  # 109-byte entries
        self.broker.produce(ProduceRequest("clicks", 0, data))
        self.assertEqual(self.ask("clicks", 0, [0, 1, 109, 110, 5000, len(data)]),
                         BoundariesResponse(NO_ERROR, (0, 109, 109, 218, 5014, len(data))))

    def test_empty_partition(self) -> None:
        """A partition with nothing written answers 0 for position 0; any other position is out of range."""
        self.assertEqual(self.ask("clicks", 1, [0, 0]), BoundariesResponse(NO_ERROR, (0, 0)))
        self.assertEqual(self.ask("clicks", 1, [0, 7]).error, OffsetOutOfRange.code)

    def test_errors(self) -> None:
        """A bad topic name, a wrong partition, a position past the end: their codes; the connection stays."""
        self.broker.produce(ProduceRequest("clicks", 0, encode_message_set([b"a"])))
        self.assertEqual(self.ask("a b", 0, [0]).error, InvalidTopic.code)
        self.assertEqual(self.ask("clicks", 2, [0]).error, WrongPartition.code)
        self.assertEqual(self.ask("clicks", 0, [10**6]).error, OffsetOutOfRange.code)
        self.assertFalse(self.transport.disconnecting)

    def test_too_many_positions(self) -> None:
        """More than MAX_BOUNDARY_POSITIONS positions get InvalidRequest; the frame parsed, so the connection stays."""
        self.broker.produce(ProduceRequest("clicks", 0, encode_message_set([b"a"])))
        self.assertEqual(self.ask("clicks", 0, [0] * (MAX_BOUNDARY_POSITIONS + 1)).error, InvalidRequest.code)
        self.assertFalse(self.transport.disconnecting)
        self.assertEqual(self.ask("clicks", 0, [0] * MAX_BOUNDARY_POSITIONS).error, NO_ERROR)
