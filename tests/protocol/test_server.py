"""Unit tests for twlog.protocol.server (the dispatch to the handler families) and the connection protocol,
without a network; each family's own tests are in test_produce, test_fetch and test_metadata."""

from __future__ import annotations

import struct
import typing
import zlib

import attrs
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.config import BrokerConfig, LogConfig
from twlog.errors import (
    ERRORS,
    UNKNOWN,
    InvalidMessage,
    InvalidRequest,
    OffsetOutOfRange,
    RequestTooLarge,
    WrongPartition,
    kafka07_code,
)
from twlog.protocol import codec, replication_codec, sasl_codec
from twlog.protocol.codec import (
    ACK_APPENDED,
    ACK_NONE,
    AckProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiProduceRequest,
    OffsetsRequest,
    OffsetsResponse,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.connection import BROKER_MOVES, BrokerProtocolState
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.replica_status_codec import ReplicaStatusRequest
from twlog.protocol.server import Broker
from twlog.statemachine import IllegalTransition, StateMachine
from twlog.storage.manager import LogManager
from twlog.storage.message import encode_message_set, iter_messages
from twlog.storage.segment import FileRegion

from ..fakes import run_now


def frame(request) -> bytes:
    """A request as it travels: size prefix and frame."""
    data = codec.encode_request(request)
    return struct.pack(">i", len(data)) + data


def responses(data: bytes) -> list[bytes]:
    """Split a byte stream into response frames (size prefixes removed)."""
    out, pos = [], 0
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        out.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(data), "a partial response"
    return out


B = BrokerProtocolState


class BrokerTestMixin:
    def make_broker(self, runner=run_now, **overrides) -> Broker:
        log_settings = dict(flush_messages=1, segment_bytes=4096, num_partitions=2)
        broker_settings = {}
        log_fields = {f.name for f in attrs.fields(LogConfig)}
        for key, value in overrides.items():
            (log_settings if key in log_fields else broker_settings)[key] = value
        self.clock = Clock()
        self.log_dir = self.mktemp()
        config = BrokerConfig(log=LogConfig(self.log_dir, **log_settings), port=0, **broker_settings)
        self.logs = LogManager(config.log, self.clock, runner)
        self.logs.start()
        self.addCleanup(self.logs.close)
        self.broker = Broker(self.logs, config, self.clock)
        return self.broker

    def connect(self):
        """A protocol on a StringTransport, like one client connection."""
        protocol = BrokerFactory(self.broker).buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def fetched(self, response) -> tuple[int, list[bytes]]:
        """Decode a FETCH handler's parts into (error, payloads)."""
        data = b"".join(p if isinstance(p, bytes) else p.read() for p in response)
        result = codec.decode_fetch_response(data[4:])
        return result.error, [m.payload for m in iter_messages(result.messages, 0)]


class HandlerTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker()

    def test_produce_then_fetch(self) -> None:
        """A produced set can be fetched back byte for byte once flushed."""
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a", b"b"])))
        self.assertEqual(self.fetched(self.broker.fetch(FetchRequest("t", 0, 0, 1000))), (0, [b"a", b"b"]))

    def test_every_request_type_has_a_handler(self) -> None:
        """Every request type the codec decodes is dispatched to a handler of one of the families, but
        REPLICA_FETCH, EPOCH_END_OFFSET and REPLICA_STATUS (12, 13, 15), which the broker answers as unknown
        types until the replica side is installed (tests/replica); CLUSTER_METADATA_V2 (14) is served.  SASL's
        (16, 17) are answered by the connection itself (twlog.protocol.authentication), or as unknown types by a
        broker that does not authenticate."""
        self.assertEqual(set(self.broker.handlers),
                         set(typing.get_args(codec.Request)) - {replication_codec.ReplicaFetchRequest,
                                                                replication_codec.EpochEndOffsetRequest,
                                                                ReplicaStatusRequest, *sasl_codec.SASL_REQUESTS})
        self.assertIs(self.broker.handlers[FetchRequest].__self__, self.broker._fetching)

    def test_families_share_the_error_counts(self) -> None:
        """Errors counted by any family land in the one error_counts table the metrics read."""
        self.broker.fetch(FetchRequest("t", 9, 0, 100))
        self.broker.produce(ProduceRequest("t", 9, encode_message_set([b"a"])))
        self.broker.count_error(codec.OFFSETS, 1)
        self.assertEqual(self.broker.error_counts, {
            (codec.FETCH, WrongPartition.code): 1, (codec.PRODUCE, WrongPartition.code): 1, (codec.OFFSETS, 1): 1})

    def test_port_and_cluster_reach_the_metadata_family(self) -> None:
        """The port and cluster set on the broker are the ones METADATA and CLUSTER_METADATA describe."""
        self.broker.port = 9094
        self.assertEqual(codec.decode_metadata_response(self.broker.metadata(MetadataRequest())).port, 9094)
        self.assertEqual((self.broker.port, self.broker.cluster), (9094, None))

    def test_advertised_port_is_the_one_described(self) -> None:
        """With --advertised-port, METADATA and CLUSTER_METADATA name it, not the port listened on."""
        self.make_broker(advertised_port=19094)
        self.broker.port = 9094
        self.assertEqual(codec.decode_metadata_response(self.broker.metadata(MetadataRequest())).port, 19094)
        cluster = codec.decode_cluster_metadata_response(self.broker.cluster_metadata(codec.ClusterMetadataRequest()))
        self.assertEqual([(b.broker_id, b.port) for b in cluster.brokers], [(0, 19094)])

class ProtocolTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker(flush_messages=1000, flush_interval_ms=100, max_inflight_per_connection=4,
                         max_request_bytes=2048)
        self.protocol, self.transport = self.connect()

    def test_responses_in_request_order(self) -> None:
        """A slow (waiting) fetch holds back the responses after it, which then come in order."""
        self.protocol.dataReceived(
            frame(WaitFetchRequest(1000, 1, (FetchRequest("t", 0, 0, 100),)))
            + frame(OffsetsRequest("t", 0, -2, 1))
            + frame(MetadataRequest())
        )
        self.assertEqual(self.transport.value(), b"")
        self.protocol.dataReceived(frame(ProduceRequest("t", 0, encode_message_set([b"hello"]))))
        self.clock.advance(0.1)
        first, second, third = responses(self.transport.value())
        (part,) = codec.decode_multifetch_response(first).parts
        self.assertEqual([m.payload for m in iter_messages(part.messages, 0)], [b"hello"])
        self.assertEqual(codec.decode_offsets_response(second), OffsetsResponse(0, (0,)))
        self.assertEqual(codec.decode_metadata_response(third).error, 0)

    def test_produce_gets_no_response(self) -> None:
        """PRODUCE, MULTIPRODUCE and ACK_PRODUCE with no ack are answered with nothing."""
        data = encode_message_set([b"a"])
        self.protocol.dataReceived(
            frame(ProduceRequest("t", 0, data))
            + frame(MultiProduceRequest((ProduceRequest("t", 1, data),)))
            + frame(AckProduceRequest(ACK_NONE, 0, (ProduceRequest("t", 0, data),)))
        )
        self.assertEqual(self.transport.value(), b"")
        self.assertEqual(self.logs.get_log("t", 0).end_offset, 20)

    def test_malformed_frame_closes_after_answering(self) -> None:
        """A frame that does not parse gets InvalidRequest after earlier answers, then the connection closes."""
        self.protocol.dataReceived(frame(OffsetsRequest("t", 0, -2, 1)) + struct.pack(">ih", 2, 99))
        first, second = responses(self.transport.value())
        self.assertEqual(codec.decode_error(second), InvalidRequest.code)
        self.assertTrue(self.transport.disconnecting)

    def test_decoded_type_without_handler(self) -> None:
        """A request the codec decodes but the broker has no handler for is answered as an unknown type:
        InvalidRequest after the earlier answers, then the connection closes (never a KeyError)."""
        del self.broker.handlers[MetadataRequest]
        self.protocol.dataReceived(frame(OffsetsRequest("t", 0, -2, 1)) + frame(MetadataRequest()))
        first, second = responses(self.transport.value())
        self.assertEqual(codec.decode_offsets_response(first), OffsetsResponse(0, (0,)))
        self.assertEqual(codec.decode_error(second), InvalidRequest.code)
        self.assertTrue(self.transport.disconnecting)

    def test_truncated_body(self) -> None:
        """A frame whose body stops short is InvalidRequest, never a crash."""
        data = codec.encode_request(WaitFetchRequest(0, 0, (FetchRequest("t", 0, 0, 100),)))[:-3]
        self.protocol.dataReceived(struct.pack(">i", len(data)) + data)
        self.assertEqual(codec.decode_error(responses(self.transport.value())[0]), InvalidRequest.code)
        self.assertTrue(self.transport.disconnecting)

    def test_truncated_body_of_a_kafka07_type(self) -> None:
        """A truncated FETCH (a 0.7 type) gets Unknown (-1), the nearest code a 0.7 client knows."""
        data = codec.encode_request(FetchRequest("t", 0, 0, 100))[:-3]
        self.protocol.dataReceived(struct.pack(">i", len(data)) + data)
        self.assertEqual(codec.decode_error(responses(self.transport.value())[0]), UNKNOWN)
        self.assertTrue(self.transport.disconnecting)

    def test_oversize_frame_refused_before_buffering(self) -> None:
        """A size prefix over max_request_bytes is refused at once, before its body arrives."""
        self.protocol.dataReceived(struct.pack(">ih", 10_000_000, codec.ACK_PRODUCE))
        (response,) = responses(self.transport.value())
        self.assertEqual(codec.decode_error(response), RequestTooLarge.code)
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual(self.protocol.buffered_bytes, 0)
        self.assertEqual(self.protocol.factory.budget.total, 0)

    def test_oversize_frame_of_a_kafka07_type(self) -> None:
        """An oversized PRODUCE (a 0.7 type), or a frame whose type has not arrived, gets Unknown (-1)."""
        for head in (struct.pack(">ih", 10_000_000, codec.PRODUCE), struct.pack(">i", 10_000_000)):
            protocol, transport = self.connect()
            protocol.dataReceived(head)
            (response,) = responses(transport.value())
            self.assertEqual(codec.decode_error(response), UNKNOWN)
            self.assertTrue(transport.disconnecting)

    def test_invalid_produce_in_ack_mode(self) -> None:
        """An acknowledged produce with a corrupt set gets InvalidMessage for it and the connection stays open."""
        data = bytearray(encode_message_set([b"abc"]))
        data[-1] ^= 1
        self.protocol.dataReceived(frame(AckProduceRequest(ACK_APPENDED, 100, (ProduceRequest("t", 0, bytes(data)),))))
        (result,) = codec.decode_ack_produce_response(responses(self.transport.value())[0]).results
        self.assertEqual(result.error, InvalidMessage.code)
        self.assertFalse(self.transport.disconnecting)

    def test_back_pressure(self) -> None:
        """With max_inflight_per_connection unanswered, the broker stops reading; it resumes as they are answered."""
        wait = frame(WaitFetchRequest(1000, 1, (FetchRequest("t", 0, 0, 100),)))
        self.protocol.dataReceived(wait * 4 + frame(MetadataRequest()))
        self.assertEqual(self.transport.producerState, "paused")
        self.assertEqual(len(self.protocol._slots), 4)  # the fifth waits, unparsed
        self.clock.advance(1.0)
        self.assertEqual(self.transport.producerState, "producing")
        self.assertEqual(len(responses(self.transport.value())), 5)

    def test_every_transition(self) -> None:
        """Each move of BROKER_MOVES happens (reading, paused by a backlog, closing after a bad frame, closed),
        and no move outside it: a lost connection is final."""
        moves = set()

        def step(protocol, action, *args) -> None:
            before = protocol.state
            action(*args)
            if protocol.state is not before:
                moves.add((before, protocol.state))

        wait = frame(WaitFetchRequest(1000, 1, (FetchRequest("t", 0, 0, 100),)))
        protocol = self.protocol
        self.assertIs(protocol.state, B.READING)
        step(protocol, protocol.dataReceived, wait * 4)  # READING -> PAUSED
        self.assertIs(protocol.state, B.PAUSED)
        step(protocol, self.clock.advance, 1.0)  # PAUSED -> READING
        self.assertIs(protocol.state, B.READING)
        step(protocol, protocol.dataReceived, wait * 4)
        step(protocol, protocol.connectionLost, None)  # PAUSED -> CLOSED
        protocol, transport = self.connect()
        step(protocol, protocol.dataReceived, wait + struct.pack(">ih", 2, 99))  # READING -> CLOSING
        self.assertIs(protocol.state, B.CLOSING)
        self.assertFalse(transport.disconnecting)  # the waiting fetch is answered first
        self.clock.advance(1.0)
        self.assertTrue(transport.disconnecting)
        step(protocol, protocol.connectionLost, None)  # CLOSING -> CLOSED
        protocol, _ = self.connect()
        step(protocol, protocol.connectionLost, None)  # READING -> CLOSED
        self.assertEqual(moves, set(StateMachine("b", B.READING, BROKER_MOVES).transitions()))
        self.assertRaises(IllegalTransition, protocol.connectionLost, None)
        self.assertIs(protocol.state, B.CLOSED)
        with self.assertRaises(AttributeError):
            protocol.state = B.READING

    def test_writing(self) -> None:
        """writing says whether a response is being written: not once the transport took it."""
        self.protocol.dataReceived(frame(MetadataRequest()))
        self.assertFalse(self.protocol.writing)
        self.assertEqual(len(responses(self.transport.value())), 1)

    def test_connection_lost_cancels_waiting_fetches(self) -> None:
        """A client that goes away leaves no waiting fetch behind."""
        self.protocol.dataReceived(frame(WaitFetchRequest(1000, 1, (FetchRequest("t", 0, 0, 100),))))
        self.assertEqual(self.broker.waiting_fetches(), 1)
        self.protocol.connectionLost(None)
        self.assertEqual(self.broker.waiting_fetches(), 0)


# -- Kafka 0.7's request types, written out by hand from 0.7's layouts (not through twlog's codec) --------------


def string07(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def request07(kind: int, body: bytes) -> bytes:
    """[int32 size][int16 request type][body]."""
    return struct.pack(">ih", 2 + len(body), kind) + body


def fetch_body07(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    """A FETCH body, also one fetch of a MULTIFETCH: topic, int32 partition, int64 offset, int32 max size."""
    return string07(topic) + struct.pack(">iqi", partition, offset, max_size)


def message07(payload: bytes) -> bytes:
    """One magic-0 message set entry: [int32 N][int8 magic 0][uint32 crc32(payload)][payload]."""
    return struct.pack(">ibI", 1 + 4 + len(payload), 0, zlib.crc32(payload)) + payload


def produce07(topic: str, partition: int, message_set: bytes) -> bytes:
    return request07(0, string07(topic) + struct.pack(">ii", partition, len(message_set)) + message_set)


def fetch07(topic: str, partition: int, offset: int, max_size: int) -> bytes:
    return request07(1, fetch_body07(topic, partition, offset, max_size))


def multifetch07(*fetches: tuple[str, int, int, int]) -> bytes:
    return request07(2, struct.pack(">h", len(fetches)) + b"".join(fetch_body07(*f) for f in fetches))


def offsets07(topic: str, partition: int, time: int, max_offsets: int) -> bytes:
    return request07(4, string07(topic) + struct.pack(">iqi", partition, time, max_offsets))


def fetch_response07(frame_: bytes) -> tuple[int, bytes]:
    """A FETCH response frame (size removed): [int16 error][message set bytes]."""
    return struct.unpack_from(">h", frame_)[0], frame_[2:]


def multifetch_response07(frame_: bytes) -> tuple[int, list[tuple[int, bytes]]]:
    """[int16 error], then parts [int32 2 + n][int16 error][n bytes] to the end of the frame."""
    (error,) = struct.unpack_from(">h", frame_)
    parts, pos = [], 2
    while pos < len(frame_):
        size, part_error = struct.unpack_from(">ih", frame_, pos)
        parts.append((part_error, frame_[pos + 6 : pos + 4 + size]))
        pos += 4 + size
    return error, parts


def offsets_response07(frame_: bytes) -> tuple[int, list[int]]:
    """[int16 error][int32 count][count x int64 offset]; an error-only frame has no count."""
    (error,) = struct.unpack_from(">h", frame_)
    if len(frame_) == 2:
        return error, []
    (count,) = struct.unpack_from(">i", frame_, 2)
    return error, list(struct.unpack_from(f">{count}q", frame_, 6))


KAFKA07 = range(-1, 5)
#: Every error twlog added to 0.7's: what a 0.7 client must never see on types 0-4.
TWLOG_ONLY = sorted((cls for code, cls in ERRORS.items() if code not in KAFKA07), key=lambda c: c.code)


class Kafka07CodeTests(SynchronousTestCase):
    def test_table(self) -> None:
        """0.7's codes stay; every twlog-only code has its nearest 0.7 code; an unknown code is Unknown."""
        self.assertEqual([kafka07_code(c) for c in KAFKA07], list(KAFKA07))
        self.assertEqual({cls.__name__: kafka07_code(cls.code) for cls in TWLOG_ONLY}, {
            "InvalidTopic": -1, "MessageSizeTooLarge": 2, "FetchSizeTooSmall": 4, "OffsetNotOnBoundary": 1,
            "RequestTimedOut": -1, "RequestTooLarge": -1, "InvalidRequest": -1, "BrokerShuttingDown": -1,
            "StorageFailed": -1, "TooManyOpenFiles": -1, "TopicExists": -1, "NotLeader": 3,
            "LeaderNotAvailable": -1, "TopicDeleted": 1, "TooManyConnections": -1,
            "TooManyConnectionsFromAddress": -1, "OutcomeUnknown": -1, "NotEnoughReplicas": -1,
            "NotEnoughReplicasAfterAppend": -1, "FencedLeaderEpoch": -1, "UnknownLeaderEpoch": -1, "NotFollower": -1,
            "ReplicatedTopic": -1, "UnsupportedSaslMechanism": -1, "IllegalSaslState": -1,
            "SaslAuthenticationFailed": -1,
            "TopicAuthorizationFailed": -1, "GroupAuthorizationFailed": -1, "ClusterAuthorizationFailed": -1,
        })
        self.assertEqual(kafka07_code(99), UNKNOWN)


class Kafka07Tests(BrokerTestMixin, SynchronousTestCase):
    """Request types 0-4 behave as on a Kafka 0.7 broker; twlog's types 5-7 keep twlog's precise codes."""

    def setUp(self) -> None:
        self.make_broker()
        self.protocol, self.transport = self.connect()
        self.big = message07(b"x" * 200)  # 209 bytes
        self.small = message07(b"y")
        self.protocol.dataReceived(produce07("t", 0, self.big + self.small))
        self.assertEqual(self.transport.value(), b"")  # PRODUCE: no response

    def answers(self, data: bytes) -> list[bytes]:
        self.transport.clear()
        self.protocol.dataReceived(data)
        return responses(self.transport.value())

    def test_fetch_oversize_first_message_is_partial(self) -> None:
        """A FETCH whose first message exceeds the max size gets error 0 and exactly max size bytes of it."""
        for max_size in (1, 3, 4, 50, 208):
            (answer,) = self.answers(fetch07("t", 0, 0, max_size))
            self.assertEqual(fetch_response07(answer), (0, self.big[:max_size]), max_size)
        (answer,) = self.answers(fetch07("t", 0, 0, 209))
        self.assertEqual(fetch_response07(answer), (0, self.big))
        (answer,) = self.answers(fetch07("t", 0, 0, 10_000))  # capped at the end of the (flushed) log
        self.assertEqual(fetch_response07(answer), (0, self.big + self.small))
        self.assertFalse(self.transport.disconnecting)

    def test_partial_message_is_zero_copy(self) -> None:
        """The partial bytes are a file region of the segment, as any fetch's."""
        header, region = self.broker.fetch(FetchRequest("t", 0, 0, 50))
        self.assertEqual(header, struct.pack(">ih", 52, 0))
        self.assertIsInstance(region, FileRegion)
        self.assertEqual((region.position, region.length, region.read()), (0, 50, self.big[:50]))

    def test_partial_message_stops_at_the_flushed_end(self) -> None:
        """Unflushed bytes after the partial message's offset are not sent."""
        self.make_broker(flush_messages=1000, flush_interval_ms=100)
        self.protocol, self.transport = self.connect()
        self.protocol.dataReceived(produce07("t", 0, self.big))
        self.clock.advance(0.1)
        self.protocol.dataReceived(produce07("t", 0, self.small))  # appended, not flushed
        (answer,) = self.answers(fetch07("t", 0, 0, 1000))
        self.assertEqual(fetch_response07(answer), (0, self.big))
        (answer,) = self.answers(fetch07("t", 0, 0, 100))
        self.assertEqual(fetch_response07(answer), (0, self.big[:100]))

    def test_multifetch_oversize_first_message_is_partial(self) -> None:
        """Each MULTIFETCH part follows FETCH: a partial first message with error 0."""
        (answer,) = self.answers(multifetch07(("t", 0, 0, 100), ("t", 0, 209, 100), ("t", 0, 0, 7)))
        self.assertEqual(multifetch_response07(answer), (0, [(0, self.big[:100]), (0, self.small), (0, self.big[:7])]))

    def test_misaligned_offset(self) -> None:
        """An offset inside a message gets OffsetOutOfRange (1) on FETCH and MULTIFETCH."""
        (fetch,) = self.answers(fetch07("t", 0, 3, 100))
        (multi,) = self.answers(multifetch07(("t", 0, 3, 100), ("t", 0, 0, 300)))
        self.assertEqual(fetch_response07(fetch), (OffsetOutOfRange.code, b""))
        self.assertEqual(multifetch_response07(multi), (0, [(OffsetOutOfRange.code, b""), (0, self.big + self.small)]))

    def test_invalid_topic(self) -> None:
        """A topic name twlog refuses gets Unknown (-1) on FETCH, MULTIFETCH and OFFSETS."""
        (fetch,) = self.answers(fetch07("a/b", 0, 0, 100))
        (multi,) = self.answers(multifetch07(("a/b", 0, 0, 100)))
        (offsets,) = self.answers(offsets07("..", 0, -1, 1))
        self.assertEqual(fetch_response07(fetch), (UNKNOWN, b""))
        self.assertEqual(multifetch_response07(multi), (0, [(UNKNOWN, b"")]))
        self.assertEqual(offsets_response07(offsets), (UNKNOWN, []))

    def test_offsets(self) -> None:
        """OFFSETS answers in 0.7's layout."""
        (latest,) = self.answers(offsets07("t", 0, -1, 1))
        (earliest,) = self.answers(offsets07("t", 0, -2, 1))
        self.assertEqual((offsets_response07(latest), offsets_response07(earliest)), ((0, [219]), (0, [0])))

    def test_every_twlog_error_on_kafka07_types(self) -> None:
        """Whatever twlog-only condition a read meets, FETCH, MULTIFETCH and OFFSETS answer a code in -1..4,
        the one kafka07_code names; WAIT_FETCH and METADATA carry the precise code."""
        for cls in TWLOG_ONLY:
            def refuse(topic, cls=cls):
                raise cls(f"refused {topic}")

            self.patch(self.logs, "partition_count", refuse)
            (fetch,) = self.answers(fetch07("t", 0, 0, 100))
            (multi,) = self.answers(multifetch07(("t", 0, 0, 100)))
            (offsets,) = self.answers(offsets07("t", 0, -1, 1))
            nearest = kafka07_code(cls.code)
            self.assertIn(nearest, KAFKA07, cls)
            self.assertEqual(fetch_response07(fetch), (nearest, b""), cls)
            self.assertEqual(multifetch_response07(multi), (0, [(nearest, b"")]), cls)
            self.assertEqual(offsets_response07(offsets), (nearest, []), cls)
            (wait, metadata) = self.answers(frame(WaitFetchRequest(0, 0, (FetchRequest("t", 0, 0, 100),))) +
                                            frame(MetadataRequest(("t",))))
            self.assertEqual([p.error for p in codec.decode_multifetch_response(wait).parts], [cls.code], cls)
            self.assertEqual([t.error for t in codec.decode_metadata_response(metadata).topics], [cls.code], cls)
        self.assertFalse(self.transport.disconnecting)

    def test_every_twlog_error_from_a_handler(self) -> None:
        """A handler that fails with a twlog-only error answers a 0.7 type (1, 2, 4) with a code in -1..4 and
        twlog's types (5, 6, 7) with the precise code, in an error-only response."""
        kafka07 = [fetch07("t", 0, 0, 100), multifetch07(("t", 0, 0, 100)), offsets07("t", 0, -1, 1)]
        twlog = [frame(AckProduceRequest(ACK_APPENDED, 0, ())), frame(WaitFetchRequest(0, 0, ())),
                 frame(MetadataRequest())]
        for cls in TWLOG_ONLY:
            def refuse(request, peer="?", cls=cls):
                raise cls("refused")

            for kind in list(self.broker.handlers):
                self.broker.handlers[kind] = refuse
            answers = self.answers(b"".join(kafka07 + twlog))
            codes = [struct.unpack(">h", a)[0] for a in answers]
            self.assertEqual([len(a) for a in answers], [2] * 6, cls)
            self.assertEqual(codes, [kafka07_code(cls.code)] * 3 + [cls.code] * 3, cls)
            self.assertTrue(set(codes[:3]) <= set(KAFKA07), cls)

    def test_malformed_kafka07_frame(self) -> None:
        """A malformed MULTIFETCH (a count running past the frame) gets -1, then the connection closes."""
        (answer,) = self.answers(request07(2, struct.pack(">h", 5) + fetch_body07("t", 0, 0, 100)))
        self.assertEqual(struct.unpack(">h", answer)[0], UNKNOWN)
        self.assertTrue(self.transport.disconnecting)
