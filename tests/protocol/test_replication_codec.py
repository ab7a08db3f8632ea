"""The replication requests (types 12-14) and ACK_ALL: docs/protocol.md's byte layouts, built by hand.

Frames are written with struct from the documented layouts, so they pin the wire independently of
the codec; then round trips (hypothesis), every truncated prefix, trailing bytes and negative counts.
"""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import (
    ERRORS,
    NO_ERROR,
    FencedLeaderEpoch,
    InvalidTopic,
    LeaderNotAvailable,
    MalformedRequest,
    NotLeader,
    ProtocolViolation,
    ReplicatedTopic,
    UnknownLeaderEpoch,
    error_for,
    kafka07_code,
)
from twlog.protocol.codec import (
    ACK_ALL,
    ACK_FLUSHED,
    AckProduceRequest,
    ProduceRequest,
    decode_request,
    decode_response,
    describe_request,
    encode_request,
    expects_response,
)
from twlog.protocol.replication_codec import (
    ANY_EPOCH,
    CLUSTER_METADATA_V2,
    EPOCH_END_OFFSET,
    NO_BROKER,
    REPLICA_FETCH,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    ClusterMetadataV2Request,
    ClusterMetadataV2Response,
    EpochEndOffset,
    EpochEndOffsetRequest,
    EpochEndOffsetResponse,
    EpochQuery,
    PartitionState,
    ReplicaFetch,
    ReplicaFetchPart,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
    ReplicatedLayout,
    decode_cluster_metadata_v2_response,
    decode_epoch_end_offset_response,
    decode_replica_fetch_response,
    encode_cluster_metadata_v2_response,
    encode_epoch_end_offset_response,
    encode_replica_fetch_response,
    replica_fetch_part_header,
    replica_fetch_response_header,
)
from twlog.protocol.responses import VIEW_CURRENT, VIEW_STANDALONE, BrokerAddress, TopicLayout
from twlog.storage.message import encode_message_set

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TOPICS = st.text(max_size=20)


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def kstr(s: str) -> bytes:
    data = s.encode()
    return i16(len(data)) + data


class PrefixMixin:
    def assert_every_prefix_refused(self, decode, frame: bytes, error=ProtocolViolation, allowed=()) -> None:
        """Every strict prefix of C{frame} (but those in C{allowed}), and C{frame} plus one byte, raise C{error}."""
        for n in range(len(frame)):
            if n not in allowed:
                with self.assertRaises(error, msg=f"prefix of {n} bytes"):
                    decode(frame[:n])
        self.assertRaises(error, decode, frame + b"\x00")


# -- REPLICA_FETCH ------------------------------------------------------------------------

RF_REQUEST = ReplicaFetchRequest(2, 500, 1, (ReplicaFetch("clicks", 0, 7, 4096, 1 << 20),
                                             ReplicaFetch("views", 3, 1, 0, 65536)))
RF_FRAME = (
    i16(12) + i32(2) + i32(500) + i32(1) + i16(2)
    + kstr("clicks") + i32(0) + i32(7) + i64(4096) + i32(1 << 20)
    + kstr("views") + i32(3) + i32(1) + i64(0) + i32(65536)
)
MESSAGES = encode_message_set([b"a", b"bc"])
RF_RESPONSE = ReplicaFetchResponse(NO_ERROR, (
    ReplicaFetchPart(NO_ERROR, 4096, 4096 + len(MESSAGES), 0, 2048, MESSAGES),
    ReplicaFetchPart(FencedLeaderEpoch.code, -1, -1, -1),
))
RF_RESPONSE_FRAME = (
    i16(0) + i16(2)
    + i16(0) + i64(4096) + i64(4096 + len(MESSAGES)) + i64(0) + i64(2048) + i32(len(MESSAGES)) + MESSAGES
    + i16(FencedLeaderEpoch.code) + i64(-1) + i64(-1) + i64(-1) + i64(-1) + i32(0)
)


class ReplicaFetchTests(PrefixMixin, SynchronousTestCase):
    def test_request_layout(self) -> None:
        """[12][replica id][max wait][min bytes][count], then per partition topic, partition, leader epoch,
        fetch offset, max bytes."""
        self.assertEqual(encode_request(RF_REQUEST), RF_FRAME)
        self.assertEqual(decode_request(RF_FRAME), RF_REQUEST)
        self.assertEqual(REPLICA_FETCH, 12)

    def test_request_prefixes_and_trailing_bytes(self) -> None:
        """Every truncated request is malformed (never struct.error), and so is one byte more."""
        self.assert_every_prefix_refused(decode_request, RF_FRAME, MalformedRequest)

    def test_request_negative_count(self) -> None:
        self.assertRaises(MalformedRequest, decode_request, i16(12) + i32(2) + i32(0) + i32(0) + i16(-1))

    def test_response_layout(self) -> None:
        """[error][count], then per part [error][high watermark][leader end][log start][segment base][int32 n]
        [n bytes]."""
        self.assertEqual(encode_replica_fetch_response(NO_ERROR, RF_RESPONSE.parts), RF_RESPONSE_FRAME)
        self.assertEqual(decode_replica_fetch_response(RF_RESPONSE_FRAME), RF_RESPONSE)
        self.assertEqual(decode_response(RF_REQUEST, RF_RESPONSE_FRAME), RF_RESPONSE)

    def test_headers_for_sendfile(self) -> None:
        """The outer header (size prefix included) and each part header, followed by the bytes, are the frame:
        the broker sends the message sets from the file between them."""
        first, second = RF_RESPONSE.parts
        wire = (
            replica_fetch_response_header(NO_ERROR, [len(MESSAGES), 0])
            + replica_fetch_part_header(NO_ERROR, 4096, 4096 + len(MESSAGES), 0, 2048, len(MESSAGES)) + MESSAGES
            + replica_fetch_part_header(FencedLeaderEpoch.code, -1, -1, -1, -1, 0)
        )
        self.assertEqual(wire, i32(len(RF_RESPONSE_FRAME)) + RF_RESPONSE_FRAME)
        self.assertEqual(replica_fetch_response_header(NotLeader.code, []), i32(4) + i16(NotLeader.code) + i16(0))

    def test_error_only(self) -> None:
        """An error-only frame (InvalidRequest, Unknown...) decodes with no parts."""
        self.assertEqual(decode_replica_fetch_response(i16(-1)), ReplicaFetchResponse(-1))

    def test_response_prefixes_and_trailing_bytes(self) -> None:
        """Every strict prefix but the bare error, and one byte more, are protocol violations."""
        self.assert_every_prefix_refused(decode_replica_fetch_response, RF_RESPONSE_FRAME, allowed=(2,))

    def test_response_bad_sizes(self) -> None:
        """A negative count or message-set size, or one running past the frame, is a protocol violation."""
        part = i16(0) + i64(0) + i64(0) + i64(0) + i64(0)
        for frame in (i16(0) + i16(-1), i16(0) + i16(1) + part + i32(-1), i16(0) + i16(1) + part + i32(1)):
            self.assertRaises(ProtocolViolation, decode_replica_fetch_response, frame)

    def test_describe(self) -> None:
        self.assertEqual(describe_request(RF_REQUEST),
                         "REPLICA_FETCH by replica 2 clicks-0@4096 (epoch 7), views-3@0 (epoch 1)")
        self.assertTrue(expects_response(RF_REQUEST))

    @settings(max_examples=50)
    @given(st.integers(-(2**31), 2**31 - 1), INT32, INT32,
           st.lists(st.tuples(TOPICS, INT32, INT32, INT64, INT32), max_size=4))
    def test_request_round_trip(self, replica_id, max_wait_ms, min_bytes, fetches) -> None:
        request = ReplicaFetchRequest(replica_id, max_wait_ms, min_bytes, tuple(ReplicaFetch(*f) for f in fetches))
        self.assertEqual(decode_request(encode_request(request)), request)

    @settings(max_examples=50)
    @given(INT16, st.lists(st.tuples(INT16, INT64, INT64, INT64, INT64, st.binary(max_size=30)), max_size=4))
    def test_response_round_trip(self, error, parts) -> None:
        parts = tuple(ReplicaFetchPart(*p) for p in parts)
        frame = encode_replica_fetch_response(error, parts)
        self.assertEqual(decode_replica_fetch_response(frame), ReplicaFetchResponse(error, parts))


# -- EPOCH_END_OFFSET -----------------------------------------------------------------------

EPOCH_REQUEST = EpochEndOffsetRequest((EpochQuery("clicks", 0, 8, 5), EpochQuery("views", 2, ANY_EPOCH, 0)))
EPOCH_FRAME = (
    i16(13) + i16(2)
    + kstr("clicks") + i32(0) + i32(8) + i32(5)
    + kstr("views") + i32(2) + i32(-1) + i32(0)
)
EPOCH_RESPONSE = EpochEndOffsetResponse(NO_ERROR, (
    EpochEndOffset(NO_ERROR, 5, 81920),
    EpochEndOffset(NO_ERROR, UNDEFINED_EPOCH, UNDEFINED_OFFSET),
))
EPOCH_RESPONSE_FRAME = i16(0) + i16(2) + i16(0) + i32(5) + i64(81920) + i16(0) + i32(-1) + i64(-1)


class EpochEndOffsetTests(PrefixMixin, SynchronousTestCase):
    def test_request_layout(self) -> None:
        """[13][count], then per partition topic, partition, current leader epoch, leader epoch asked about."""
        self.assertEqual(encode_request(EPOCH_REQUEST), EPOCH_FRAME)
        self.assertEqual(decode_request(EPOCH_FRAME), EPOCH_REQUEST)
        self.assertEqual(EPOCH_END_OFFSET, 13)

    def test_request_prefixes_and_trailing_bytes(self) -> None:
        self.assert_every_prefix_refused(decode_request, EPOCH_FRAME, MalformedRequest)
        self.assertRaises(MalformedRequest, decode_request, i16(13) + i16(-1))

    def test_response_layout(self) -> None:
        """[error][count], then per query [error][leader epoch][end offset]; UNDEFINED is -1 and -1."""
        self.assertEqual(encode_epoch_end_offset_response(NO_ERROR, EPOCH_RESPONSE.answers), EPOCH_RESPONSE_FRAME)
        self.assertEqual(decode_epoch_end_offset_response(EPOCH_RESPONSE_FRAME), EPOCH_RESPONSE)
        self.assertEqual(decode_response(EPOCH_REQUEST, EPOCH_RESPONSE_FRAME), EPOCH_RESPONSE)
        self.assertEqual(decode_epoch_end_offset_response(i16(-1)), EpochEndOffsetResponse(-1))

    def test_response_prefixes_and_trailing_bytes(self) -> None:
        self.assert_every_prefix_refused(decode_epoch_end_offset_response, EPOCH_RESPONSE_FRAME, allowed=(2,))
        self.assertRaises(ProtocolViolation, decode_epoch_end_offset_response, i16(0) + i16(-1))

    def test_errors_per_query(self) -> None:
        """A fenced or unknown epoch is that query's error, with UNDEFINED offsets; the others are answered."""
        answers = (EpochEndOffset(FencedLeaderEpoch.code, -1, -1), EpochEndOffset(UnknownLeaderEpoch.code, -1, -1))
        frame = encode_epoch_end_offset_response(NO_ERROR, answers)
        self.assertEqual(decode_epoch_end_offset_response(frame).answers, answers)

    def test_describe(self) -> None:
        self.assertEqual(describe_request(EPOCH_REQUEST), "EPOCH_END_OFFSET clicks-0 epoch 5, views-2 epoch 0")

    @settings(max_examples=50)
    @given(st.lists(st.tuples(TOPICS, INT32, INT32, INT32), max_size=4),
           INT16, st.lists(st.tuples(INT16, INT32, INT64), max_size=4))
    def test_round_trips(self, queries, error, answers) -> None:
        request = EpochEndOffsetRequest(tuple(EpochQuery(*q) for q in queries))
        self.assertEqual(decode_request(encode_request(request)), request)
        answers = tuple(EpochEndOffset(*a) for a in answers)
        frame = encode_epoch_end_offset_response(error, answers)
        self.assertEqual(decode_epoch_end_offset_response(frame), EpochEndOffsetResponse(error, answers))


# -- CLUSTER_METADATA_V2 ---------------------------------------------------------------------

V2_FRAME = (
    i16(0) + i32(1) + i8(VIEW_CURRENT) + i32(2)
    + i16(2) + i32(1) + kstr("a.example") + i32(9092) + i32(2) + kstr("b.example") + i32(9093)
    + i16(3)
    + kstr("logs") + i16(0) + i8(0) + i16(1) + i32(1) + i32(4)
    + kstr("orders") + i16(0) + i8(1) + i16(2)
    + i32(0) + i16(0) + i32(1) + i32(3) + i16(3) + i32(1) + i32(2) + i32(3) + i16(2) + i32(1) + i32(2)
    + i32(1) + i16(LeaderNotAvailable.code) + i32(-1) + i32(6) + i16(3) + i32(3) + i32(1) + i32(2) + i16(0)
    + kstr("a/b") + i16(InvalidTopic.code) + i8(0) + i16(0)
)
V2_VALUE = ClusterMetadataV2Response(
    1, VIEW_CURRENT, 2,
    (BrokerAddress(1, "a.example", 9092), BrokerAddress(2, "b.example", 9093)),
    (
        TopicLayout("logs", 0, ((1, 4),)),
        ReplicatedLayout("orders", 0, (
            PartitionState(0, 0, 1, 3, (1, 2, 3), (1, 2)),
            PartitionState(1, LeaderNotAvailable.code, NO_BROKER, 6, (3, 1, 2), ()),
        )),
        TopicLayout("a/b", InvalidTopic.code),
    ),
)


class ClusterMetadataV2Tests(PrefixMixin, SynchronousTestCase):
    def test_request_layout(self) -> None:
        """[14][count][topics], as type 8's with another type; 0 topics is all."""
        self.assertEqual(encode_request(ClusterMetadataV2Request(("a", "b"))), i16(14) + i16(2) + kstr("a") + kstr("b"))
        self.assertEqual(decode_request(i16(14) + i16(0)), ClusterMetadataV2Request())
        self.assertEqual(CLUSTER_METADATA_V2, 14)
        self.assert_every_prefix_refused(decode_request, i16(14) + i16(1) + kstr("x"), MalformedRequest)
        self.assertEqual(describe_request(ClusterMetadataV2Request()), "CLUSTER_METADATA_V2 (all topics)")

    def test_response_layout(self) -> None:
        """Type 8's layout plus the controller id after the view, and a kind byte per topic: 0 holders as in
        type 8, 1 partitions with their leader, leader epoch, replicas and ISR."""
        self.assertEqual(encode_cluster_metadata_v2_response(NO_ERROR, V2_VALUE), V2_FRAME)
        self.assertEqual(decode_cluster_metadata_v2_response(V2_FRAME), V2_VALUE)
        self.assertEqual(decode_response(ClusterMetadataV2Request(), V2_FRAME), V2_VALUE)

    def test_accessors(self) -> None:
        self.assertEqual(V2_VALUE.addresses, {1: ("a.example", 9092), 2: ("b.example", 9093)})
        self.assertEqual(V2_VALUE.layout("orders").partitions[0].isr, (1, 2))
        self.assertIsNone(V2_VALUE.layout("nope"))

    def test_error_only(self) -> None:
        self.assertEqual(decode_cluster_metadata_v2_response(i16(-1)),
                         ClusterMetadataV2Response(-1, VIEW_STANDALONE, NO_BROKER, (), (), -1))

    def test_prefixes_and_trailing_bytes(self) -> None:
        """Every strict prefix (but the bare error), and one byte more, are protocol violations."""
        self.assert_every_prefix_refused(decode_cluster_metadata_v2_response, V2_FRAME, allowed=(2,))

    def test_bad_kind_and_counts(self) -> None:
        """An unknown topic kind, or a negative count of partitions, replicas or ISR, is a protocol violation."""
        head = i16(0) + i32(1) + i8(1) + i32(1) + i16(0) + i16(1) + kstr("t") + i16(0)
        partition = i32(0) + i16(0) + i32(1) + i32(0)
        for tail in (i8(2) + i16(0), i8(1) + i16(-1), i8(0) + i16(-1),
                     i8(1) + i16(1) + partition + i16(-1), i8(1) + i16(1) + partition + i16(0) + i16(-1)):
            self.assertRaises(ProtocolViolation, decode_cluster_metadata_v2_response, head + tail)
        self.assertEqual(decode_cluster_metadata_v2_response(head + i8(1) + i16(0)).topics,
                         (ReplicatedLayout("t", 0),))

    @settings(max_examples=50)
    @given(INT32, st.integers(0, 3), INT32,
           st.lists(st.tuples(INT32, st.text(max_size=10), INT32), max_size=3),
           st.lists(st.one_of(
               st.builds(lambda t, e, h: TopicLayout(t, e, tuple(h)), TOPICS, INT16,
                         st.lists(st.tuples(INT32, INT32), max_size=3)),
               st.builds(lambda t, e, ps: ReplicatedLayout(t, e, tuple(ps)), TOPICS, INT16, st.lists(st.builds(
                   lambda p, e, leader, epoch, r, i: PartitionState(p, e, leader, epoch, tuple(r), tuple(i)),
                   INT32, INT16, INT32, INT32, st.lists(INT32, max_size=4), st.lists(INT32, max_size=4)),
                   max_size=3)),
           ), max_size=3))
    def test_round_trip(self, broker_id, view, controller_id, brokers, topics) -> None:
        value = ClusterMetadataV2Response(broker_id, view, controller_id,
                                          tuple(BrokerAddress(*b) for b in brokers), tuple(topics))
        frame = encode_cluster_metadata_v2_response(NO_ERROR, value)
        self.assertEqual(decode_cluster_metadata_v2_response(frame), value)


# -- ACK_ALL and the new codes -----------------------------------------------------------------


class AckAllTests(SynchronousTestCase):
    def test_ack_all_on_the_wire(self) -> None:
        """ack=all is the int8 3 of ACK_PRODUCE's ack field, after 0 none, 1 appended, 2 flushed, and it
        is answered (it implies flushed); 4 and up, and negative values, stay malformed."""
        request = AckProduceRequest(ACK_ALL, 5000, (ProduceRequest("t", 0, b""),))
        frame = encode_request(request)
        self.assertEqual(frame[:9], i16(5) + i8(3) + i32(5000) + i16(1))
        self.assertEqual(decode_request(frame), request)
        self.assertTrue(expects_response(request))
        self.assertGreater(ACK_ALL, ACK_FLUSHED)
        for ack in (4, -1):
            self.assertRaises(MalformedRequest, decode_request, i16(5) + i8(ack) + frame[3:])

    def test_replication_codes(self) -> None:
        """Codes 25-30 are the documented ones; a client turns each into its exception, retriable where a later
        attempt (after a refresh) can succeed, with the one message format."""
        expected = {25: ("NotEnoughReplicas", True), 26: ("NotEnoughReplicasAfterAppend", True),
                    27: ("FencedLeaderEpoch", True), 28: ("UnknownLeaderEpoch", True),
                    29: ("NotFollower", False), 30: ("ReplicatedTopic", False)}
        for code, (name, retriable) in expected.items():
            error = error_for(code, "orders-0")
            self.assertEqual((type(error).__name__, error.code, error.retriable), (name, code, retriable))
            self.assertTrue(str(error).startswith(f"orders-0: {name} (error {code}): "), str(error))
            self.assertEqual(kafka07_code(code), -1)
        self.assertIs(ERRORS[ReplicatedTopic.code], ReplicatedTopic)


class DocumentedExampleTests(SynchronousTestCase):
    """The hex examples of docs/protocol.md's replication sections are what the codec writes and reads."""

    def examples(self, heading: str) -> tuple[bytes, bytes]:
        text = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
        section = text[text.index(heading):]
        block = section[section.index("```\nrequest:") + 4:]
        block = block[:block.index("```")]
        request, response = block.split("response:")
        return tuple(bytes.fromhex(" ".join(part.replace("request:", "").split())) for part in (request, response))

    def test_replica_fetch_example(self) -> None:
        request, response = self.examples("### 12 REPLICA_FETCH")
        value = ReplicaFetchRequest(2, 500, 1, (ReplicaFetch("clicks", 0, 3, 4096, 1 << 20),))
        self.assertEqual(request, i32(len(request) - 4) + encode_request(value))
        self.assertEqual(decode_request(request[4:]), value)
        hi = encode_message_set([b"hi"])
        parts = (ReplicaFetchPart(NO_ERROR, 4096, 4096 + len(hi), 0, 0, hi),)
        self.assertEqual(response, replica_fetch_response_header(NO_ERROR, [len(hi)])
                         + replica_fetch_part_header(NO_ERROR, 4096, 4096 + len(hi), 0, 0, len(hi)) + hi)
        self.assertEqual(decode_replica_fetch_response(response[4:]), ReplicaFetchResponse(NO_ERROR, parts))

    def test_epoch_end_offset_example(self) -> None:
        request, response = self.examples("### 13 EPOCH_END_OFFSET")
        self.assertEqual(decode_request(request[4:]), EpochEndOffsetRequest((EpochQuery("clicks", 0, 4, 3),)))
        self.assertEqual(response, i32(len(response) - 4)
                         + encode_epoch_end_offset_response(NO_ERROR, (EpochEndOffset(NO_ERROR, 3, 4107),)))
