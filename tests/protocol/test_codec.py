"""Tests for twlog.protocol.codec: the wire protocol as pure functions over frames.

A frame is what follows the int32 size prefix; Twisted's Int32StringReceiver adds and strips
that prefix on requests. Hand-built expectations use struct.pack with explicit big-endian
formats, so they pin the Kafka 0.7 layouts independently of the codec's own Struct objects.
"""

from __future__ import annotations

import inspect
import struct

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.testing import StringTransport
from twisted.protocols.basic import Int32StringReceiver
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import (
    NO_ERROR,
    UNKNOWN,
    FetchSizeTooSmall,
    InvalidTopic,
    MalformedRequest,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    RequestTimedOut,
    WrongPartition,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_APPENDED,
    ACK_FLUSHED,
    ACK_NONE,
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
    decode_error,
    decode_fetch_response,
    decode_metadata_response,
    decode_multifetch_response,
    decode_offsets_response,
    decode_request,
    encode_ack_produce_response,
    encode_error_response,
    encode_metadata_response,
    encode_offsets_response,
    encode_request,
    expects_response,
    fetch_response_header,
    multifetch_part_header,
    multifetch_response_header,
)
from twlog.storage.message import CODEC_GZIP, encode_message, encode_message_set

INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


# -- hand-built wire pieces (independent of the codec) ---------------------------------


def i8(value: int) -> bytes:
    return struct.pack(">b", value)


def i16(value: int) -> bytes:
    return struct.pack(">h", value)


def i32(value: int) -> bytes:
    return struct.pack(">i", value)


def i64(value: int) -> bytes:
    return struct.pack(">q", value)


def kstr(value: str) -> bytes:
    """A Kafka string: [int16 length][utf-8 bytes]."""
    data = value.encode("utf-8")
    return i16(len(data)) + data


def produce_body(topic: str, partition: int, messages: bytes) -> bytes:
    """A 0.7 produce body: [str topic][int32 partition][int32 message-set size][message set]."""
    return kstr(topic) + i32(partition) + i32(len(messages)) + messages


def fetch_body(topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
    """A 0.7 fetch body: [str topic][int32 partition][int64 offset][int32 max size]."""
    return kstr(topic) + i32(partition) + i64(offset) + i32(max_bytes)


def multifetch_wire(error: int, parts: list[tuple[int, bytes]]) -> bytes:
    """A whole MULTIFETCH response as the broker writes it, outer size prefix included."""
    lengths = [len(data) for _, data in parts]
    pieces = [multifetch_response_header(error, lengths)]
    for part_error, data in parts:
        pieces.append(multifetch_part_header(part_error, len(data)))
        pieces.append(data)
    return b"".join(pieces)


def multifetch_frame(error: int, parts: list[tuple[int, bytes]]) -> bytes:
    """A MULTIFETCH response frame: the wire bytes without the outer 4-byte size."""
    return multifetch_wire(error, parts)[4:]


# -- request tables ------------------------------------------------------------------

SET = encode_message_set([b"first", b"", b"third message"])
GZIP_SET = encode_message_set([b"a" * 100, b"b" * 100], CODEC_GZIP)
PARTIAL_SET = SET + encode_message(b"cut short")[:7]
LARGE_SET = encode_message_set([b"x" * 200] * 5000)  # a little over 1 MiB
UNICODE_TOPIC = "tópico-日本語-🎉"
LONGEST_TOPIC = "t" * 0x7FFF  # the longest string an int16 length can carry

REQUESTS: dict[str, codec.Request] = {
    "produce": ProduceRequest("events", 0, SET),
    "produce empty set": ProduceRequest("events", 3, b""),
    "produce unicode topic": ProduceRequest(UNICODE_TOPIC, INT32_MAX, SET),
    "produce empty topic": ProduceRequest("", INT32_MIN, SET),
    "produce gzip set": ProduceRequest("z", 1, GZIP_SET),
    "produce raw bytes": ProduceRequest("z", 1, b"\x00\xff not a message set"),
    "fetch": FetchRequest("events", 0, 0, 1024 * 1024),
    "fetch maxima": FetchRequest("events", INT32_MAX, INT64_MAX, INT32_MAX),
    "fetch minima": FetchRequest("events", INT32_MIN, INT64_MIN, INT32_MIN),
    "fetch negative offset": FetchRequest("events", 0, -1, 0),
    "fetch unicode topic": FetchRequest(UNICODE_TOPIC, 7, 123_456, 300),
    "multifetch": MultiFetchRequest((FetchRequest("a", 0, 0, 100), FetchRequest("b", 1, 509, 200))),
    "multifetch empty": MultiFetchRequest(()),
    "multifetch one": MultiFetchRequest((FetchRequest(UNICODE_TOPIC, INT32_MIN, INT64_MIN, 0),)),
    "multiproduce": MultiProduceRequest((ProduceRequest("a", 0, SET), ProduceRequest("b", 1, b""))),
    "multiproduce empty": MultiProduceRequest(()),
    "multiproduce one": MultiProduceRequest((ProduceRequest(UNICODE_TOPIC, INT32_MAX, GZIP_SET),)),
    "offsets latest": OffsetsRequest("events", 0, -1, 1),
    "offsets earliest": OffsetsRequest("events", 0, -2, INT32_MAX),
    "offsets time": OffsetsRequest("events", 2, 1_700_000_000_000, 10),
    "offsets minima": OffsetsRequest("ü", INT32_MIN, INT64_MIN, 0),
    "offsets maxima": OffsetsRequest(UNICODE_TOPIC, INT32_MAX, INT64_MAX, INT32_MAX),
    "ack produce none": AckProduceRequest(ACK_NONE, 0, (ProduceRequest("a", 0, SET),)),
    "ack produce appended": AckProduceRequest(
        ACK_APPENDED, 5000, (ProduceRequest("a", 0, SET), ProduceRequest(UNICODE_TOPIC, 1, GZIP_SET))
    ),
    "ack produce flushed": AckProduceRequest(ACK_FLUSHED, INT32_MAX, (ProduceRequest("a", 2, b""),)),
    "ack produce empty": AckProduceRequest(ACK_FLUSHED, -1, ()),
    "ack produce int32 extremes": AckProduceRequest(ACK_APPENDED, INT32_MIN, (ProduceRequest("a", 0, SET),)),
    "wait fetch": WaitFetchRequest(500, 1, (FetchRequest("a", 0, 0, 100), FetchRequest("b", 1, 509, 200))),
    "wait fetch empty": WaitFetchRequest(0, 0, ()),
    "wait fetch extremes": WaitFetchRequest(INT32_MAX, INT32_MIN, (FetchRequest("c", 0, INT64_MAX, 1),)),
    "metadata all": MetadataRequest(),
    "metadata some": MetadataRequest(("a", "b", UNICODE_TOPIC)),
    "metadata empty name": MetadataRequest(("",)),
}

#: Requests too big to feed every prefix of; they still round-trip.
LARGE_REQUESTS: dict[str, codec.Request] = {
    "produce large set": ProduceRequest("big", 0, LARGE_SET),
    "multiproduce large sets": MultiProduceRequest(tuple(ProduceRequest("big", p, LARGE_SET) for p in range(3))),
    "ack produce large set": AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("big", 0, LARGE_SET),)),
    "fetch longest topic": FetchRequest(LONGEST_TOPIC, 0, 0, 1),
    "multifetch int16 max count": MultiFetchRequest(tuple(FetchRequest("t", i, i, 1) for i in range(INT16_MAX))),
    "metadata int16 max count": MetadataRequest(tuple(f"topic-{i}" for i in range(INT16_MAX))),
}

ALL_REQUESTS = {**REQUESTS, **LARGE_REQUESTS}


# -- hypothesis strategies -----------------------------------------------------------

int16s = st.integers(INT16_MIN, INT16_MAX)
int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)
strings = st.text(max_size=30)
message_sets = st.one_of(
    st.binary(max_size=200),
    st.lists(st.binary(max_size=60), max_size=6).map(encode_message_set),
)
produces = st.builds(ProduceRequest, strings, int32s, message_sets)
fetches = st.builds(FetchRequest, strings, int32s, int64s, int32s)
requests = st.one_of(
    produces,
    fetches,
    st.builds(MultiFetchRequest, st.lists(fetches, max_size=5).map(tuple)),
    st.builds(MultiProduceRequest, st.lists(produces, max_size=5).map(tuple)),
    st.builds(OffsetsRequest, strings, int32s, int64s, int32s),
    st.builds(
        AckProduceRequest,
        st.sampled_from([ACK_NONE, ACK_APPENDED, ACK_FLUSHED]),
        int32s,
        st.lists(produces, max_size=5).map(tuple),
    ),
    st.builds(WaitFetchRequest, int32s, int32s, st.lists(fetches, max_size=5).map(tuple)),
    st.builds(MetadataRequest, st.lists(strings, max_size=5).map(tuple)),
)
produce_results = st.builds(ProduceResult, strings, int32s, int16s, int64s, int64s)
metadata_values = st.builds(
    MetadataResponse,
    int32s,
    strings,
    int32s,
    st.lists(st.builds(TopicMetadata, strings, int16s, int32s), max_size=6).map(tuple),
)


class _Checks:
    """Assertions shared by the test classes below (mixed into SynchronousTestCase)."""

    def assert_malformed(self, decode, frame: bytes, label: str) -> None:
        """C{decode(frame)} raises MalformedRequest, and nothing else escapes."""
        try:
            value = decode(frame)
        except MalformedRequest:
            return
        except Exception as e:  # a struct.error, IndexError, UnicodeDecodeError... is the bug to catch
            self.fail(f"{label}: {type(e).__name__} instead of MalformedRequest: {e}")
        self.fail(f"{label}: decoded to {value!r} instead of raising MalformedRequest")

    def assert_prefixes_malformed(self, decode, frame: bytes, label: str, allowed=()) -> None:
        """Every strict prefix of C{frame} (except the lengths in C{allowed}) is malformed."""
        for n in range(len(frame)):
            if n not in allowed:
                self.assert_malformed(decode, frame[:n], f"{label}, first {n} of {len(frame)} bytes")


# -- requests ------------------------------------------------------------------------


class RequestRoundTripTests(_Checks, SynchronousTestCase):
    def assert_round_trips(self, kind: type) -> None:
        """Every table entry of type C{kind} decodes back to itself."""
        cases = {name: r for name, r in ALL_REQUESTS.items() if type(r) is kind}
        self.assertTrue(cases, f"no {kind.__name__} in the tables")
        for name, request in cases.items():
            self.assertEqual(decode_request(encode_request(request)), request, name)

    def test_tables_cover_every_request_type(self) -> None:
        """The tables hold at least one request of each of the eight types."""
        self.assertEqual(
            {type(r) for r in ALL_REQUESTS.values()},
            {
                ProduceRequest,
                FetchRequest,
                MultiFetchRequest,
                MultiProduceRequest,
                OffsetsRequest,
                AckProduceRequest,
                WaitFetchRequest,
                MetadataRequest,
            },
        )

    def test_type_numbers(self) -> None:
        """Request types 0-4 carry Kafka 0.7's numbers and 5-7 are twlog's additions."""
        self.assertEqual(
            (
                codec.PRODUCE,
                codec.FETCH,
                codec.MULTIFETCH,
                codec.MULTIPRODUCE,
                codec.OFFSETS,
                codec.ACK_PRODUCE,
                codec.WAIT_FETCH,
                codec.METADATA,
            ),
            (0, 1, 2, 3, 4, 5, 6, 7),
        )
        self.assertEqual((ACK_NONE, ACK_APPENDED, ACK_FLUSHED), (0, 1, 2))

    def test_produce_round_trips(self) -> None:
        """PRODUCE requests, including empty, unicode, compressed and 1 MiB sets, survive encode and decode."""
        self.assert_round_trips(ProduceRequest)

    def test_fetch_round_trips(self) -> None:
        """FETCH requests with int32/int64 extremes, negative offsets and the longest topic survive."""
        self.assert_round_trips(FetchRequest)

    def test_multifetch_round_trips(self) -> None:
        """MULTIFETCH requests with zero, one, several and 32767 fetches survive encode and decode."""
        self.assert_round_trips(MultiFetchRequest)

    def test_multiproduce_round_trips(self) -> None:
        """MULTIPRODUCE requests with zero, one and several (large) sets survive encode and decode."""
        self.assert_round_trips(MultiProduceRequest)

    def test_offsets_round_trips(self) -> None:
        """OFFSETS requests for -1, -2, a time, and int64 extremes survive encode and decode."""
        self.assert_round_trips(OffsetsRequest)

    def test_ack_produce_round_trips(self) -> None:
        """ACK_PRODUCE requests for every ack mode, int32 timeout extremes and an empty list survive."""
        self.assert_round_trips(AckProduceRequest)

    def test_wait_fetch_round_trips(self) -> None:
        """WAIT_FETCH requests with zero and several fetches and int32 extremes survive."""
        self.assert_round_trips(WaitFetchRequest)

    def test_metadata_round_trips(self) -> None:
        """METADATA requests with no topics, some topics and 32767 topics survive."""
        self.assert_round_trips(MetadataRequest)

    def test_metadata_defaults_to_all_topics(self) -> None:
        """A MetadataRequest built without topics asks with an empty list, which means all topics."""
        self.assertEqual(encode_request(MetadataRequest()), i16(7) + i16(0))

    def test_large_message_set_round_trips(self) -> None:
        """A 1 MiB message set comes back byte for byte equal to what was sent."""
        request = decode_request(encode_request(LARGE_REQUESTS["produce large set"]))
        self.assertEqual(len(request.messages), len(LARGE_SET))
        self.assertEqual(request.messages, LARGE_SET)

    @settings(max_examples=300, deadline=None)
    @given(requests)
    def test_arbitrary_requests_round_trip(self, request: codec.Request) -> None:
        """Any request with in-range field values decodes back to itself."""
        self.assertEqual(decode_request(encode_request(request)), request)

    @settings(max_examples=100, deadline=None)
    @given(requests)
    def test_arbitrary_request_prefixes_are_malformed(self, request: codec.Request) -> None:
        """Every strict prefix of any encoded request raises MalformedRequest."""
        self.assert_prefixes_malformed(decode_request, encode_request(request), repr(request)[:80])


class KafkaRequestLayoutTests(SynchronousTestCase):
    def assert_layout(self, request: codec.Request, expected: bytes) -> None:
        """C{request} encodes to exactly C{expected}, and C{expected} decodes to C{request}."""
        self.assertEqual(encode_request(request), expected)
        self.assertEqual(decode_request(expected), request)

    def test_fetch_literal_bytes(self) -> None:
        """A FETCH frame is big-endian: type, string length, topic, partition, offset, max size."""
        self.assert_layout(
            FetchRequest("t", 1, 2, 3),
            b"\x00\x01"  # type 1
            b"\x00\x01t"  # topic "t"
            b"\x00\x00\x00\x01"  # partition 1
            b"\x00\x00\x00\x00\x00\x00\x00\x02"  # offset 2
            b"\x00\x00\x00\x03",  # max size 3
        )

    def test_produce(self) -> None:
        """PRODUCE is [int16 0][str topic][int32 partition][int32 set size][set]."""
        self.assert_layout(
            ProduceRequest("events", 3, SET),
            i16(0) + kstr("events") + i32(3) + i32(len(SET)) + SET,
        )

    def test_produce_unicode_topic_length_counts_bytes(self) -> None:
        """A topic's int16 length counts its UTF-8 bytes, not its characters."""
        topic = "日本"
        self.assert_layout(
            ProduceRequest(topic, 0, b""),
            i16(0) + i16(6) + topic.encode("utf-8") + i32(0) + i32(0),
        )

    def test_fetch(self) -> None:
        """FETCH is [int16 1][str topic][int32 partition][int64 offset][int32 max size]."""
        self.assert_layout(
            FetchRequest("events", 2, INT64_MAX, 1 << 20),
            i16(1) + fetch_body("events", 2, INT64_MAX, 1 << 20),
        )

    def test_multifetch(self) -> None:
        """MULTIFETCH is [int16 2][int16 count] then the FETCH bodies, in order."""
        self.assert_layout(
            REQUESTS["multifetch"],
            i16(2) + i16(2) + fetch_body("a", 0, 0, 100) + fetch_body("b", 1, 509, 200),
        )

    def test_multifetch_empty(self) -> None:
        """A MULTIFETCH with no fetches is its type and a zero count."""
        self.assert_layout(MultiFetchRequest(()), i16(2) + i16(0))

    def test_multiproduce(self) -> None:
        """MULTIPRODUCE is [int16 3][int16 count] then the PRODUCE bodies, in order."""
        self.assert_layout(
            REQUESTS["multiproduce"],
            i16(3) + i16(2) + produce_body("a", 0, SET) + produce_body("b", 1, b""),
        )

    def test_offsets(self) -> None:
        """OFFSETS is [int16 4][str topic][int32 partition][int64 time][int32 max offsets]."""
        self.assert_layout(
            OffsetsRequest("events", 5, -2, 10),
            i16(4) + kstr("events") + i32(5) + i64(-2) + i32(10),
        )

    def test_kafka_07_client_bytes_through_int32_receiver(self) -> None:
        """A 0.7 client's whole request, size prefix included, reaches the codec as a frame that decodes."""
        body = i16(1) + fetch_body("events", 0, 0, 1024)
        wire = i32(len(body)) + body
        frames: list[bytes] = []
        receiver = Int32StringReceiver()
        receiver.stringReceived = frames.append
        receiver.makeConnection(StringTransport())
        for i in range(len(wire)):  # one byte at a time, as TCP may deliver it
            receiver.dataReceived(wire[i : i + 1])
        self.assertEqual([decode_request(f) for f in frames], [FetchRequest("events", 0, 0, 1024)])

    def test_encoded_frames_exclude_the_size_prefix(self) -> None:
        """encode_request returns the frame only; Int32StringReceiver adds the int32 size in front."""
        frame = encode_request(FetchRequest("events", 0, 0, 1024))
        transport = StringTransport()
        sender = Int32StringReceiver()
        sender.makeConnection(transport)
        sender.sendString(frame)
        self.assertEqual(transport.value(), i32(len(frame)) + frame)
        self.assertEqual(frame[:2], i16(codec.FETCH))


class TwlogRequestLayoutTests(SynchronousTestCase):
    def assert_layout(self, request: codec.Request, expected: bytes) -> None:
        """C{request} encodes to exactly C{expected}, and C{expected} decodes to C{request}."""
        self.assertEqual(encode_request(request), expected)
        self.assertEqual(decode_request(expected), request)

    def test_ack_produce(self) -> None:
        """ACK_PRODUCE is [int16 5][int8 ack][int32 timeout ms][int16 count] then PRODUCE bodies."""
        self.assert_layout(
            AckProduceRequest(ACK_FLUSHED, 2500, (ProduceRequest("a", 0, SET), ProduceRequest("b", 1, b""))),
            i16(5) + i8(2) + i32(2500) + i16(2) + produce_body("a", 0, SET) + produce_body("b", 1, b""),
        )

    def test_wait_fetch(self) -> None:
        """WAIT_FETCH is [int16 6][int32 max wait ms][int32 min bytes][int16 count] then FETCH bodies."""
        self.assert_layout(
            REQUESTS["wait fetch"],
            i16(6) + i32(500) + i32(1) + i16(2) + fetch_body("a", 0, 0, 100) + fetch_body("b", 1, 509, 200),
        )

    def test_metadata(self) -> None:
        """METADATA is [int16 7][int16 count] then the topic strings."""
        self.assert_layout(
            MetadataRequest(("a", UNICODE_TOPIC)),
            i16(7) + i16(2) + kstr("a") + kstr(UNICODE_TOPIC),
        )


class MalformedRequestTests(_Checks, SynchronousTestCase):
    def test_every_prefix_of_every_request(self) -> None:
        """Every strict prefix of every table request, down to the empty frame, raises MalformedRequest."""
        for name, request in REQUESTS.items():
            self.assert_prefixes_malformed(decode_request, encode_request(request), name)

    def test_prefixes_of_large_requests(self) -> None:
        """Prefixes of the large requests, cut in the head, the middle and the last bytes, raise MalformedRequest."""
        for name, request in LARGE_REQUESTS.items():
            frame = encode_request(request)
            cuts = set(range(48)) | set(range(len(frame) - 8, len(frame))) | {len(frame) * k // 8 for k in range(8)}
            for n in sorted(cuts):
                self.assert_malformed(decode_request, frame[:n], f"{name}, first {n} of {len(frame)} bytes")

    def test_unknown_ack_mode(self) -> None:
        """An ACK_PRODUCE with an ack mode other than 0, 1, 2 or 3 (all) raises MalformedRequest."""
        for ack in (4, 7, -1, -128, 127):
            frame = struct.pack(">hbih", 5, ack, 1000, 0)
            self.assert_malformed(decode_request, frame, f"ack {ack}")

    def test_trailing_bytes(self) -> None:
        """A request followed by any extra bytes raises MalformedRequest rather than ignoring them."""
        for name, request in REQUESTS.items():
            frame = encode_request(request)
            for extra in (b"\x00", b"\x00\x00", b"garbage", SET):
                self.assert_malformed(decode_request, frame + extra, f"{name} + {extra[:8]!r}")

    def test_unknown_request_types(self) -> None:
        """Request types other than 0-7 raise MalformedRequest, with or without a body."""
        body = fetch_body("events", 0, 0, 100)
        for kind in (8, 9, 999, -1, INT16_MAX, INT16_MIN):
            self.assert_malformed(decode_request, i16(kind), f"type {kind}")
            self.assert_malformed(decode_request, i16(kind) + body, f"type {kind} with a body")

    def test_negative_counts(self) -> None:
        """A negative item count in any counted request raises MalformedRequest, even with items after it."""
        fetch = fetch_body("a", 0, 0, 1)
        produce = produce_body("a", 0, SET)
        heads = {
            "multifetch": (i16(2), fetch),
            "multiproduce": (i16(3), produce),
            "ack produce": (i16(5) + i8(1) + i32(100), produce),
            "wait fetch": (i16(6) + i32(100) + i32(1), fetch),
            "metadata": (i16(7), kstr("a")),
        }
        for name, (head, item) in heads.items():
            for count in (-1, INT16_MIN):
                self.assert_malformed(decode_request, head + i16(count), f"{name} count {count}")
                self.assert_malformed(decode_request, head + i16(count) + item, f"{name} count {count} + item")

    def test_count_larger_than_items(self) -> None:
        """A count naming more items than the frame holds raises MalformedRequest."""
        self.assert_malformed(decode_request, i16(2) + i16(3) + fetch_body("a", 0, 0, 1) * 2, "multifetch")
        self.assert_malformed(decode_request, i16(3) + i16(INT16_MAX) + produce_body("a", 0, b""), "multiproduce")
        self.assert_malformed(decode_request, i16(7) + i16(2) + kstr("a"), "metadata")

    def test_count_smaller_than_items(self) -> None:
        """A count naming fewer items than the frame holds leaves trailing bytes: MalformedRequest."""
        self.assert_malformed(decode_request, i16(2) + i16(1) + fetch_body("a", 0, 0, 1) * 2, "multifetch")
        self.assert_malformed(decode_request, i16(7) + i16(0) + kstr("a"), "metadata")

    def test_non_utf8_topics(self) -> None:
        """A topic whose bytes are not UTF-8 raises MalformedRequest, never UnicodeDecodeError."""
        for raw in (b"\xff", b"\xc3", b"ok\xfe\xff", b"\xed\xa0\x80", b"\xc0\xaf"):
            topic = i16(len(raw)) + raw
            frames = {
                "produce": i16(0) + topic + i32(0) + i32(0),
                "fetch": i16(1) + topic + i32(0) + i64(0) + i32(1),
                "multifetch": i16(2) + i16(2) + fetch_body("a", 0, 0, 1) + topic + i32(0) + i64(0) + i32(1),
                "multiproduce": i16(3) + i16(1) + topic + i32(0) + i32(0),
                "offsets": i16(4) + topic + i32(0) + i64(-1) + i32(1),
                "ack produce": i16(5) + i8(1) + i32(0) + i16(1) + topic + i32(0) + i32(0),
                "wait fetch": i16(6) + i32(0) + i32(0) + i16(1) + topic + i32(0) + i64(0) + i32(1),
                "metadata": i16(7) + i16(2) + kstr("a") + topic,
            }
            for name, frame in frames.items():
                self.assert_malformed(decode_request, frame, f"{name} with topic {raw!r}")

    def test_negative_string_length(self) -> None:
        """A string length below zero raises MalformedRequest."""
        self.assert_malformed(decode_request, i16(1) + i16(-1) + i32(0) + i64(0) + i32(1), "fetch")
        self.assert_malformed(decode_request, i16(7) + i16(1) + i16(INT16_MIN), "metadata")

    def test_string_length_past_the_frame(self) -> None:
        """A string length larger than the rest of the frame raises MalformedRequest."""
        self.assert_malformed(decode_request, i16(1) + i16(INT16_MAX) + b"events", "fetch")

    def test_message_set_size_larger_than_frame(self) -> None:
        """A message-set size that runs past the end of the frame raises MalformedRequest."""
        for size in (len(SET) + 1, 2 * len(SET), INT32_MAX):
            frame = i16(0) + kstr("a") + i32(0) + i32(size) + SET
            self.assert_malformed(decode_request, frame, f"produce set size {size}")
            multi = i16(3) + i16(1) + kstr("a") + i32(0) + i32(size) + SET
            self.assert_malformed(decode_request, multi, f"multiproduce set size {size}")

    def test_message_set_size_swallowing_the_next_produce(self) -> None:
        """A set size that covers the following produce leaves the count unmet: MalformedRequest."""
        second = produce_body("b", 0, SET)
        frame = i16(3) + i16(2) + kstr("a") + i32(0) + i32(len(SET) + len(second)) + SET + second
        self.assert_malformed(decode_request, frame, "multiproduce")

    def test_negative_message_set_size(self) -> None:
        """A negative message-set size raises MalformedRequest."""
        for size in (-1, INT32_MIN):
            frame = i16(0) + kstr("a") + i32(0) + i32(size) + SET
            self.assert_malformed(decode_request, frame, f"produce set size {size}")


class EncodeMisuseTests(SynchronousTestCase):
    def test_topic_too_long(self) -> None:
        """A string of more than 32767 UTF-8 bytes is refused on encode with ValueError."""
        self.assertRaises(ValueError, encode_request, FetchRequest("t" * 0x8000, 0, 0, 1))
        self.assertRaises(ValueError, encode_request, FetchRequest("é" * 0x4000, 0, 0, 1))

    def test_not_a_request(self) -> None:
        """encode_request refuses a value that is not a request with TypeError."""
        self.assertRaises(TypeError, encode_request, FetchResult(0, b""))

    def test_codec_imports_no_twisted(self) -> None:
        """The codec module is pure: it imports nothing from Twisted."""
        source = inspect.getsource(codec)
        self.assertNotIn("import twisted", source)
        self.assertNotIn("from twisted", source)


class ExpectsResponseTests(SynchronousTestCase):
    def test_fire_and_forget_requests(self) -> None:
        """PRODUCE, MULTIPRODUCE and ACK_PRODUCE with ACK_NONE get no response."""
        for name in ("produce", "produce empty set", "multiproduce", "multiproduce empty", "ack produce none"):
            self.assertFalse(expects_response(REQUESTS[name]), name)

    def test_answered_requests(self) -> None:
        """FETCH, MULTIFETCH, OFFSETS, ACK_PRODUCE with an ack, WAIT_FETCH and METADATA get a response."""
        answered = [r for r in ALL_REQUESTS.values() if type(r) not in (ProduceRequest, MultiProduceRequest)]
        answered = [r for r in answered if not (isinstance(r, AckProduceRequest) and r.ack == ACK_NONE)]
        self.assertEqual(
            {type(r) for r in answered},
            {FetchRequest, MultiFetchRequest, OffsetsRequest, AckProduceRequest, WaitFetchRequest, MetadataRequest},
        )
        for request in answered:
            self.assertTrue(expects_response(request), repr(request)[:80])

    def test_ack_modes(self) -> None:
        """Only ACK_NONE silences an acknowledged produce; appended and flushed are answered."""
        self.assertEqual(
            [expects_response(AckProduceRequest(ack, 0, ())) for ack in (ACK_NONE, ACK_APPENDED, ACK_FLUSHED)],
            [False, True, True],
        )


# -- responses -----------------------------------------------------------------------


class ResponseLayoutTests(SynchronousTestCase):
    def test_fetch_response(self) -> None:
        """A FETCH response on the wire is [int32 2+n][int16 error][n bytes of message set]."""
        wire = fetch_response_header(NO_ERROR, len(SET)) + SET
        self.assertEqual(wire, i32(2 + len(SET)) + i16(0) + SET)
        self.assertEqual(struct.unpack(">i", wire[:4])[0], len(wire) - 4)

    def test_fetch_error_response(self) -> None:
        """A FETCH error response is [int32 2][int16 error] with no message set."""
        self.assertEqual(fetch_response_header(OffsetOutOfRange.code, 0), i32(2) + i16(1))

    def test_multifetch_response(self) -> None:
        """MULTIFETCH is [int32 size][int16 error] then per fetch [int32 2+n][int16 error][n bytes]."""
        parts = [(NO_ERROR, SET), (OffsetOutOfRange.code, b""), (NO_ERROR, PARTIAL_SET)]
        body = b"".join(i32(2 + len(d)) + i16(e) + d for e, d in parts)
        wire = multifetch_wire(NO_ERROR, parts)
        self.assertEqual(wire, i32(2 + len(body)) + i16(0) + body)
        self.assertEqual(struct.unpack(">i", wire[:4])[0], len(wire) - 4)

    def test_multifetch_response_without_fetches(self) -> None:
        """A MULTIFETCH response to zero fetches is [int32 2][int16 error]."""
        self.assertEqual(multifetch_response_header(NO_ERROR, []), i32(2) + i16(0))

    def test_multifetch_part_header(self) -> None:
        """One fetch's part header is [int32 2+n][int16 error]."""
        self.assertEqual(multifetch_part_header(FetchSizeTooSmall.code, 1000), i32(1002) + i16(7))

    def test_offsets_response(self) -> None:
        """An OFFSETS response frame is [int16 error][int32 count][int64 offset] * count."""
        self.assertEqual(
            encode_offsets_response(NO_ERROR, [9000, 509, 0]),
            i16(0) + i32(3) + i64(9000) + i64(509) + i64(0),
        )

    def test_error_response(self) -> None:
        """An error-only response frame is just the int16 code."""
        self.assertEqual(encode_error_response(WrongPartition.code), i16(3))
        self.assertEqual(encode_error_response(UNKNOWN), i16(-1))

    def test_ack_produce_response(self) -> None:
        """ACK_PRODUCE's frame is [int16 error][int16 count], then per set its topic, partition, error and offsets."""
        results = [ProduceResult("a", 0, 0, 0, 509), ProduceResult("b", 3, 5, -1, -1)]
        self.assertEqual(
            encode_ack_produce_response(NO_ERROR, results),
            i16(0)
            + i16(2)
            + kstr("a")
            + i32(0)
            + i16(0)
            + i64(0)
            + i64(509)
            + kstr("b")
            + i32(3)
            + i16(5)
            + i64(-1)
            + i64(-1),
        )

    def test_metadata_response(self) -> None:
        """METADATA's frame is error, broker id, host, port, count, then per topic name, error, partitions."""
        metadata = MetadataResponse(4, "broker4.example", 9092, (TopicMetadata("a", 0, 8), TopicMetadata("", 5, 0)))
        self.assertEqual(
            encode_metadata_response(NO_ERROR, metadata),
            i16(0)
            + i32(4)
            + kstr("broker4.example")
            + i32(9092)
            + i16(2)
            + kstr("a")
            + i16(0)
            + i32(8)
            + kstr("")
            + i16(5)
            + i32(0),
        )


class ResponseRoundTripTests(SynchronousTestCase):
    def test_fetch(self) -> None:
        """decode_fetch_response returns the error and the message-set bytes after the header."""
        for error, data in [
            (NO_ERROR, SET),
            (NO_ERROR, b""),
            (NO_ERROR, GZIP_SET),
            (NO_ERROR, LARGE_SET),
            (OffsetOutOfRange.code, b""),
        ]:
            frame = (fetch_response_header(error, len(data)) + data)[4:]
            self.assertEqual(decode_fetch_response(frame), FetchResult(error, data))

    def test_fetch_keeps_partial_trailing_message(self) -> None:
        """A fetch response ending in part of a message is returned verbatim; dropping it is the client's job."""
        frame = (fetch_response_header(NO_ERROR, len(PARTIAL_SET)) + PARTIAL_SET)[4:]
        self.assertEqual(decode_fetch_response(frame).messages, PARTIAL_SET)

    def test_multifetch(self) -> None:
        """decode_multifetch_response returns the outer error and each fetch's error and bytes, in order."""
        cases = [
            (NO_ERROR, []),
            (NO_ERROR, [(NO_ERROR, SET)]),
            (NO_ERROR, [(NO_ERROR, SET), (OffsetOutOfRange.code, b""), (NO_ERROR, b""), (NO_ERROR, PARTIAL_SET)]),
            (NO_ERROR, [(FetchSizeTooSmall.code, b""), (OffsetNotOnBoundary.code, b""), (NO_ERROR, LARGE_SET)]),
            (UNKNOWN, []),
        ]
        for error, parts in cases:
            expected = MultiFetchResponse(error, tuple(FetchResult(e, d) for e, d in parts))
            self.assertEqual(decode_multifetch_response(multifetch_frame(error, parts)), expected)

    def test_offsets(self) -> None:
        """decode_offsets_response returns what encode_offsets_response was given, newest first."""
        for error, offsets in [
            (NO_ERROR, ()),
            (NO_ERROR, (0,)),
            (NO_ERROR, (1_073_741_702, 509, 0)),
            (NO_ERROR, (INT64_MAX, INT64_MIN)),
            (WrongPartition.code, ()),
        ]:
            self.assertEqual(decode_offsets_response(encode_offsets_response(error, offsets)),
                             OffsetsResponse(error, offsets))

    def test_offsets_error_only(self) -> None:
        """An error-only frame decodes as an OFFSETS response with no offsets."""
        self.assertEqual(decode_offsets_response(encode_error_response(InvalidTopic.code)),
                         OffsetsResponse(InvalidTopic.code, ()))

    def test_ack_produce(self) -> None:
        """decode_ack_produce_response returns what encode_ack_produce_response was given."""
        results = (
            ProduceResult("a", 0, NO_ERROR, 0, 509),
            ProduceResult(UNICODE_TOPIC, INT32_MAX, NO_ERROR, INT64_MAX - 10, INT64_MAX),
            ProduceResult("", INT32_MIN, InvalidTopic.code, -1, -1),
        )
        for error, value in [(NO_ERROR, results), (NO_ERROR, ()), (RequestTimedOut.code, results[:1])]:
            self.assertEqual(decode_ack_produce_response(encode_ack_produce_response(error, value)),
                             AckProduceResponse(error, value))

    def test_ack_produce_error_only(self) -> None:
        """An error-only frame decodes as an ACK_PRODUCE response with no results."""
        frame = encode_error_response(RequestTimedOut.code)
        self.assertEqual(decode_ack_produce_response(frame), AckProduceResponse(RequestTimedOut.code, ()))

    def test_metadata(self) -> None:
        """decode_metadata_response returns what encode_metadata_response was given."""
        values = [
            MetadataResponse(0, "127.0.0.1", 9092, ()),
            MetadataResponse(INT32_MAX, "ホスト.example", 65535, (TopicMetadata("a", 0, 1), TopicMetadata("b", 0, 8))),
            MetadataResponse(INT32_MIN, "", INT32_MIN, (TopicMetadata("bad/name", InvalidTopic.code, 0),)),
        ]
        for value in values:
            self.assertEqual(decode_metadata_response(encode_metadata_response(NO_ERROR, value)), value)

    def test_metadata_error_only(self) -> None:
        """An error-only frame decodes as a METADATA response with the error, no address and no topics."""
        self.assertEqual(
            decode_metadata_response(encode_error_response(UNKNOWN)), MetadataResponse(-1, "", -1, (), UNKNOWN)
        )

    def test_decode_error(self) -> None:
        """decode_error reads the int16 error code at the start of any response frame."""
        self.assertEqual(decode_error(encode_offsets_response(WrongPartition.code, [1])), WrongPartition.code)
        self.assertEqual(decode_error(multifetch_frame(UNKNOWN, [(NO_ERROR, SET)])), UNKNOWN)
        self.assertEqual(decode_error(encode_error_response(OffsetOutOfRange.code)), OffsetOutOfRange.code)

    @settings(max_examples=150, deadline=None)
    @given(int16s, st.lists(produce_results, max_size=6).map(tuple))
    def test_arbitrary_ack_produce_responses(self, error: int, results: tuple[ProduceResult, ...]) -> None:
        """Any acknowledged-produce response decodes back to its error and results."""
        self.assertEqual(decode_ack_produce_response(encode_ack_produce_response(error, results)),
                         AckProduceResponse(error, results))

    @settings(max_examples=150, deadline=None)
    @given(int16s, metadata_values)
    def test_arbitrary_metadata_responses(self, error: int, value: MetadataResponse) -> None:
        """Any metadata response with a body decodes back to its error and metadata."""
        self.assertEqual(decode_metadata_response(encode_metadata_response(error, value)),
                         attrs.evolve(value, error=error))

    @settings(max_examples=150, deadline=None)
    @given(int16s, st.lists(int64s, max_size=20).map(tuple))
    def test_arbitrary_offsets_responses(self, error: int, offsets: tuple[int, ...]) -> None:
        """Any offsets response decodes back to its error and offsets."""
        self.assertEqual(decode_offsets_response(encode_offsets_response(error, offsets)),
                         OffsetsResponse(error, offsets))

    @settings(max_examples=150, deadline=None)
    @given(int16s, st.lists(st.tuples(int16s, st.binary(max_size=100)), max_size=6))
    def test_arbitrary_multifetch_responses(self, error: int, parts: list[tuple[int, bytes]]) -> None:
        """Any multifetch response decodes back to its outer error and its parts."""
        expected = MultiFetchResponse(error, tuple(FetchResult(e, d) for e, d in parts))
        self.assertEqual(decode_multifetch_response(multifetch_frame(error, parts)), expected)


class MalformedResponseTests(_Checks, SynchronousTestCase):
    def test_fetch_too_short_for_error(self) -> None:
        """A FETCH response frame shorter than its int16 error raises MalformedRequest."""
        self.assert_prefixes_malformed(decode_fetch_response, i16(0), "fetch response")

    def test_multifetch_prefixes(self) -> None:
        """A MULTIFETCH frame cut inside a part raises MalformedRequest; cut between parts it has fewer parts."""
        parts = [(NO_ERROR, SET), (OffsetOutOfRange.code, b""), (NO_ERROR, PARTIAL_SET)]
        frame = multifetch_frame(NO_ERROR, parts)
        boundaries = {2}
        for _, data in parts:
            boundaries.add(max(boundaries) + 6 + len(data))
        self.assert_prefixes_malformed(decode_multifetch_response, frame, "multifetch response", allowed=boundaries)
        for count, n in enumerate(sorted(boundaries)):
            self.assertEqual(len(decode_multifetch_response(frame[:n]).parts), count, f"first {n} bytes")

    def test_multifetch_bad_part_sizes(self) -> None:
        """A part size below 2 (no room for its error) or past the frame raises MalformedRequest."""
        for size in (-1, 0, 1, INT32_MIN, len(SET) + 3, INT32_MAX):
            frame = i16(0) + i32(size) + i16(0) + SET
            self.assert_malformed(decode_multifetch_response, frame, f"part size {size}")

    def test_offsets_prefixes(self) -> None:
        """Every prefix of an OFFSETS frame other than the error-only one raises MalformedRequest."""
        frame = encode_offsets_response(NO_ERROR, [1000, 509, 0])
        self.assert_prefixes_malformed(decode_offsets_response, frame, "offsets response", allowed={2})

    def test_offsets_bad_counts_and_trailing_bytes(self) -> None:
        """An OFFSETS count that is negative, too large or too small for the frame raises MalformedRequest."""
        for count in (-1, INT32_MIN, 3, INT32_MAX, 1):
            frame = i16(0) + i32(count) + i64(7) + i64(8)
            self.assert_malformed(decode_offsets_response, frame, f"offsets count {count}")

    def test_ack_produce_prefixes(self) -> None:
        """Every prefix of an ACK_PRODUCE frame other than the error-only one raises MalformedRequest."""
        frame = encode_ack_produce_response(
            NO_ERROR, [ProduceResult("a", 0, NO_ERROR, 0, 509), ProduceResult(UNICODE_TOPIC, 1, 5, -1, -1)]
        )
        self.assert_prefixes_malformed(decode_ack_produce_response, frame, "ack produce response", allowed={2})
        self.assert_malformed(decode_ack_produce_response, frame + b"\x00", "ack produce response + 1 byte")

    def test_ack_produce_negative_count(self) -> None:
        """A negative result count in an ACK_PRODUCE response raises MalformedRequest (as counts in requests do)."""
        for count in (-1, INT16_MIN):
            self.assert_malformed(decode_ack_produce_response, i16(0) + i16(count), f"ack produce count {count}")

    def test_ack_produce_non_utf8_topic(self) -> None:
        """A result topic that is not UTF-8 raises MalformedRequest."""
        frame = i16(0) + i16(1) + i16(1) + b"\xff" + i32(0) + i16(0) + i64(0) + i64(9)
        self.assert_malformed(decode_ack_produce_response, frame, "ack produce response")

    def test_metadata_prefixes(self) -> None:
        """Every strict prefix of a METADATA frame with error 0 raises MalformedRequest."""
        value = MetadataResponse(1, "h", 9092, (TopicMetadata("a", 0, 2), TopicMetadata(UNICODE_TOPIC, 0, 1)))
        frame = encode_metadata_response(NO_ERROR, value)
        self.assert_prefixes_malformed(decode_metadata_response, frame, "metadata response")
        self.assert_malformed(decode_metadata_response, frame + b"\x00", "metadata response + 1 byte")

    def test_metadata_negative_count(self) -> None:
        """A negative topic count in a METADATA response raises MalformedRequest (as counts in requests do)."""
        head = i16(0) + i32(1) + kstr("h") + i32(9092)
        for count in (-1, INT16_MIN):
            self.assert_malformed(decode_metadata_response, head + i16(count), f"metadata count {count}")

    def test_metadata_non_utf8_host(self) -> None:
        """A host name that is not UTF-8 raises MalformedRequest."""
        frame = i16(0) + i32(1) + i16(2) + b"\xc3\x28" + i32(9092) + i16(0)
        self.assert_malformed(decode_metadata_response, frame, "metadata response")
