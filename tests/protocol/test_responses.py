"""Tests for twlog.protocol.responses: typed response decoding, written from docs/protocol.md's byte layouts.

Frames are built by hand with struct (big-endian, explicit formats) from the documented layouts,
so they pin the wire independently of the encoders. A frame here is what follows the int32 size.
"""

from __future__ import annotations

import inspect
import struct

from twisted.trial.unittest import SynchronousTestCase

from twlog import consumer, errors
from twlog.errors import (
    NO_ERROR,
    UNKNOWN,
    BrokerError,
    ConnectionFailed,
    InvalidTopic,
    MalformedRequest,
    OffsetOutOfRange,
    ProtocolViolation,
    RequestTimedOut,
    WrongPartition,
    check,
    error_for,
    error_message,
    raise_for,
)
from twlog.protocol import codec, primitives, responses
from twlog.protocol.codec import (
    EARLIEST,
    LATEST,
    AckProduceRequest,
    AckProduceResponse,
    FetchRequest,
    FetchResult,
    MetadataRequest,
    MetadataResponse,
    MultiFetchRequest,
    MultiFetchResponse,
    MultiProduceRequest,
    OffsetsRequest,
    OffsetsResponse,
    ProduceRequest,
    ProduceResult,
    TopicMetadata,
    WaitFetchRequest,
    decode_ack_produce_response,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
    decode_response,
)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def kstr(s: str) -> bytes:
    data = s.encode()
    return i16(len(data)) + data


# The FETCH example of docs/protocol.md: one magic-0 message "hi" (its frame, after the size).
DOC_FETCH_RESPONSE = bytes.fromhex("0000" "00000007" "00d8932aac" "6869")


class SpecLayoutTests(SynchronousTestCase):
    """Each response type decodes from the byte layout docs/protocol.md gives it."""

    def test_fetch_documented_example(self) -> None:
        """The documented FETCH answer decodes to error 0 and its 11 bytes of message set."""
        self.assertEqual(decode_fetch_response(DOC_FETCH_RESPONSE), FetchResult(NO_ERROR, DOC_FETCH_RESPONSE[2:]))

    def test_multifetch_parts_in_order(self) -> None:
        """MULTIFETCH: [int16 error] then per fetch [int32 2 + n][int16 error][n bytes]."""
        frame = i16(0) + i32(2 + 3) + i16(0) + b"abc" + i32(2) + i16(OffsetOutOfRange.code)
        self.assertEqual(
            decode_multifetch_response(frame),
            MultiFetchResponse(NO_ERROR, (FetchResult(0, b"abc"), FetchResult(OffsetOutOfRange.code, b""))),
        )

    def test_offsets_newest_first(self) -> None:
        """OFFSETS: [int16 error][int32 count][count x int64]."""
        frame = i16(0) + i32(3) + i64(1_000) + i64(509) + i64(0)
        self.assertEqual(decode_offsets_response(frame), OffsetsResponse(NO_ERROR, (1_000, 509, 0)))

    def test_offsets_error_with_empty_list(self) -> None:
        """A refused OFFSETS (WrongPartition) carries its error and an empty list."""
        frame = i16(WrongPartition.code) + i32(0)
        self.assertEqual(decode_offsets_response(frame), OffsetsResponse(WrongPartition.code, ()))

    def test_ack_produce_results(self) -> None:
        """ACK_PRODUCE: [int16 error][int16 count], per set topic, partition, error, offset, next offset."""
        frame = (
            i16(0) + i16(2)
            + kstr("clicks") + i32(0) + i16(0) + i64(0) + i64(29)
            + kstr("bad/") + i32(1) + i16(InvalidTopic.code) + i64(-1) + i64(-1)
        )
        self.assertEqual(
            decode_ack_produce_response(frame),
            AckProduceResponse(
                NO_ERROR,
                (ProduceResult("clicks", 0, NO_ERROR, 0, 29), ProduceResult("bad/", 1, InvalidTopic.code, -1, -1)),
            ),
        )

    def test_metadata(self) -> None:
        """METADATA: error, broker id, host, port, then per topic name, error, partition count."""
        frame = (
            i16(0) + i32(7) + kstr("b7.example") + i32(9092) + i16(2)
            + kstr("clicks") + i16(0) + i32(4) + kstr("a/b") + i16(InvalidTopic.code) + i32(0)
        )
        self.assertEqual(
            decode_metadata_response(frame),
            MetadataResponse(
                7, "b7.example", 9092, (TopicMetadata("clicks", 0, 4), TopicMetadata("a/b", InvalidTopic.code, 0))
            ),
        )

    def test_every_response_accepts_error_only(self) -> None:
        """Any response may be the error code alone; each decoder carries the error, with an empty body."""
        frame = i16(InvalidTopic.code)
        self.assertEqual(decode_fetch_response(frame), FetchResult(InvalidTopic.code, b""))
        self.assertEqual(decode_multifetch_response(frame), MultiFetchResponse(InvalidTopic.code, ()))
        self.assertEqual(decode_offsets_response(frame), OffsetsResponse(InvalidTopic.code, ()))
        self.assertEqual(decode_ack_produce_response(frame), AckProduceResponse(InvalidTopic.code, ()))
        self.assertEqual(decode_metadata_response(frame), MetadataResponse(-1, "", -1, (), InvalidTopic.code))

    def test_latest_and_earliest(self) -> None:
        """The OFFSETS times are -1 (latest) and -2 (earliest), defined once in the codec."""
        self.assertEqual((LATEST, EARLIEST), (-1, -2))
        self.assertEqual((consumer.LATEST, consumer.EARLIEST), (LATEST, EARLIEST))  # re-exported where users look


class DecodeResponseTests(SynchronousTestCase):
    def test_picks_the_decoder_for_the_request(self) -> None:
        """decode_response decodes a frame as the response of the request it answers."""
        fetch = FetchRequest("t", 0, 0, 100)
        offsets_frame = i16(0) + i32(1) + i64(42)
        cases = [
            (fetch, DOC_FETCH_RESPONSE, FetchResult(0, DOC_FETCH_RESPONSE[2:])),
            (MultiFetchRequest((fetch,)), i16(0) + i32(2) + i16(0), MultiFetchResponse(0, (FetchResult(0, b""),))),
            (WaitFetchRequest(10, 1, (fetch,)), i16(0), MultiFetchResponse(0, ())),
            (OffsetsRequest("t", 0, LATEST, 1), offsets_frame, OffsetsResponse(0, (42,))),
            (AckProduceRequest(1, 100, ()), i16(0) + i16(0), AckProduceResponse(0, ())),
            (MetadataRequest(), i16(0) + i32(1) + kstr("h") + i32(1) + i16(0), MetadataResponse(1, "h", 1, ())),
        ]
        for request, frame, expected in cases:
            self.assertEqual(decode_response(request, frame), expected, request)

    def test_requests_without_response(self) -> None:
        """Fire-and-forget requests have no response to decode."""
        for request in (ProduceRequest("t", 0, b""), MultiProduceRequest(()), AckProduceRequest(0, 0, ())):
            self.assertRaises(ValueError, decode_response, request, i16(0))


class ViolationTests(SynchronousTestCase):
    """A response that does not parse raises ProtocolViolation: a MalformedRequest and a ConnectionFailed."""

    def assert_violation(self, decode, frame: bytes, label: str) -> None:
        try:
            value = decode(frame)
        except ProtocolViolation as e:
            self.assertIsInstance(e, MalformedRequest)
            self.assertIsInstance(e, ConnectionFailed)
            return
        except Exception as e:
            self.fail(f"{label}: {type(e).__name__} instead of ProtocolViolation: {e}")
        self.fail(f"{label}: decoded to {value!r}")

    def test_truncated_frames(self) -> None:
        """Every strict prefix of a response with a body (beyond the error-only one) is a violation."""
        offsets = i16(0) + i32(2) + i64(9) + i64(0)
        ack = i16(0) + i16(1) + kstr("t") + i32(0) + i16(0) + i64(0) + i64(9)
        metadata = i16(0) + i32(1) + kstr("h") + i32(9092) + i16(1) + kstr("t") + i16(0) + i32(1)
        for decode, frame in [
            (decode_offsets_response, offsets),
            (decode_ack_produce_response, ack),
            (decode_metadata_response, metadata),
        ]:
            for n in range(len(frame)):
                if n != 2:
                    self.assert_violation(decode, frame[:n], f"{decode.__name__} first {n} bytes")
        self.assert_violation(decode_fetch_response, b"", "empty fetch response")
        self.assert_violation(decode_fetch_response, b"\x00", "one-byte fetch response")

    def test_multifetch_part_cut_or_undersized(self) -> None:
        """A MULTIFETCH part cut short, or whose size leaves no room for its error, is a violation."""
        frame = i16(0) + i32(2 + 3) + i16(0) + b"abc"
        for n in range(3, len(frame)):
            self.assert_violation(decode_multifetch_response, frame[:n], f"first {n} bytes")
        for size in (-1, 0, 1):
            self.assert_violation(decode_multifetch_response, i16(0) + i32(size) + i16(0), f"part size {size}")

    def test_trailing_bytes_and_bad_counts(self) -> None:
        """Trailing bytes, negative counts and non-UTF-8 strings are violations."""
        self.assert_violation(decode_offsets_response, i16(0) + i32(1) + i64(9) + b"\x00", "offsets + 1 byte")
        self.assert_violation(decode_offsets_response, i16(0) + i32(-1), "negative offsets count")
        self.assert_violation(decode_ack_produce_response, i16(0) + i16(-1), "negative result count")
        self.assert_violation(decode_metadata_response, i16(0) + i32(1) + i16(1) + b"\xff" + i32(1) + i16(0), "host")
        self.assert_violation(decode_metadata_response, i16(0), "error 0 and no body")

    def test_message_names_the_response(self) -> None:
        """The violation says which response did not parse."""
        with self.assertRaises(ProtocolViolation) as caught:
            decode_offsets_response(i16(0) + i32(5))
        self.assertIn("malformed offsets response", str(caught.exception))

    def test_pure(self) -> None:
        """The response codec and the primitives import nothing from Twisted."""
        for module in (responses, primitives, codec):
            source = inspect.getsource(module)
            self.assertNotIn("import twisted", source, module.__name__)
            self.assertNotIn("from twisted", source, module.__name__)


class ErrorMappingTests(SynchronousTestCase):
    """One mapping from wire codes to exceptions, with one message format."""

    def test_error_for_known_and_unknown_codes(self) -> None:
        """A known code gets its class; an unknown one the catch-all BrokerError."""
        self.assertIs(type(error_for(OffsetOutOfRange.code, "x")), OffsetOutOfRange)
        self.assertIs(type(error_for(999, "x")), BrokerError)
        self.assertIs(type(error_for(UNKNOWN, "x")), BrokerError)

    def test_one_line_message(self) -> None:
        """The message is '<context>: <Name> (error <code>): <meaning>' on one line."""
        self.assertEqual(
            error_message(RequestTimedOut.code, "broker h:1 refused ACK_PRODUCE to t-0"),
            "broker h:1 refused ACK_PRODUCE to t-0: RequestTimedOut (error 9): The broker could not do what the "
            "request asked (an acknowledged flush or ack=all) within its timeout.",
        )
        self.assertNotIn("\n", error_message(errors.StorageFailed.code, "c"))

    def test_check_and_raise_for(self) -> None:
        """check returns a result whose error is 0 and raises the typed exception otherwise."""
        ok = OffsetsResponse(NO_ERROR, (1,))
        self.assertIs(check(ok, "c"), ok)
        raise_for(NO_ERROR, "c")
        with self.assertRaises(WrongPartition) as caught:
            check(FetchResult(WrongPartition.code, b""), "broker h:1 refused FETCH t-7")
        self.assertTrue(str(caught.exception).startswith("broker h:1 refused FETCH t-7: WrongPartition (error 3)"))
