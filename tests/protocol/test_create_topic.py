"""CREATE_TOPIC (type 9): the byte layout of docs/protocol.md, built by hand, and the broker's answers."""

from __future__ import annotations

import os
import struct

from twisted.trial.unittest import SynchronousTestCase

from tests.protocol.test_server import BrokerTestMixin, frame, responses
from twlog.errors import (
    NO_ERROR,
    InvalidRequest,
    InvalidTopic,
    MalformedRequest,
    ProtocolViolation,
    TopicExists,
    WrongPartition,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_APPENDED,
    AckProduceRequest,
    CreateTopicRequest,
    ErrorResponse,
    MetadataRequest,
    ProduceRequest,
    decode_request,
    decode_response,
)
from twlog.storage.message import encode_message_set

#: `[int16 type = 9][string topic][int32 partitions]`: "clicks" with 2 partitions, written out by hand.
REQUEST = bytes.fromhex("0009" "0006" "636c69636b73" "00000002")


class LayoutTests(SynchronousTestCase):
    def test_decode_from_spec(self) -> None:
        """The documented bytes decode to the request, and encoding it gives them back."""
        self.assertEqual(decode_request(REQUEST), CreateTopicRequest("clicks", 2))
        self.assertEqual(codec.encode_request(CreateTopicRequest("clicks", 2)), REQUEST)
        self.assertEqual(codec.CREATE_TOPIC, 9)

    def test_every_prefix_is_malformed(self) -> None:
        """A truncated CREATE_TOPIC, or one with trailing bytes, is MalformedRequest (never struct.error)."""
        for n in range(len(REQUEST)):
            self.assertRaises(MalformedRequest, decode_request, REQUEST[:n])
        self.assertRaises(MalformedRequest, decode_request, REQUEST + b"\x00")

    def test_negative_count_decodes(self) -> None:
        """The count is a signed int32 on the wire: a negative one parses (the broker refuses it, not the codec)."""
        self.assertEqual(decode_request(bytes.fromhex("0009" "0001" "61" "ffffffff")), CreateTopicRequest("a", -1))

    def test_response_is_error_only(self) -> None:
        """The response is the error code alone; anything after it is the peer's protocol violation."""
        request = CreateTopicRequest("clicks", 2)
        self.assertTrue(codec.expects_response(request))
        self.assertEqual(decode_response(request, b"\x00\x00"), ErrorResponse(NO_ERROR))
        self.assertEqual(decode_response(request, struct.pack(">h", TopicExists.code)), ErrorResponse(15))
        self.assertRaises(ProtocolViolation, decode_response, request, b"\x00\x00\x00")
        self.assertRaises(ProtocolViolation, decode_response, request, b"\x00")

    def test_describe(self) -> None:
        """Logs and errors name the topic and the count."""
        described = codec.describe_request(CreateTopicRequest("clicks", 2))
        self.assertEqual(described, "CREATE_TOPIC clicks with 2 partitions")

    def test_topic_exists_code(self) -> None:
        """TopicExists is wire code 15, a twlog-only code."""
        self.assertEqual(TopicExists.code, 15)


class HandlerTests(BrokerTestMixin, SynchronousTestCase):
    """The broker's answers to CREATE_TOPIC on one connection (StringTransport), over a real log directory."""

    def setUp(self) -> None:
        self.make_broker(num_partitions=4)
        self.protocol, self.transport = self.connect()

    def ask(self, request) -> bytes:
        self.transport.clear()
        self.protocol.dataReceived(frame(request))
        (answer,) = responses(self.transport.value())
        return answer

    def error(self, topic: str, partitions: int) -> int:
        request = CreateTopicRequest(topic, partitions)
        return decode_response(request, self.ask(request)).error

    def test_creates_partitions_below_num_partitions(self) -> None:
        """Error 0; the topic has the count asked for (2 < num_partitions 4), each partition a directory and segment."""
        self.assertEqual(self.error("clicks", 2), NO_ERROR)
        self.assertEqual(self.logs.topics(), {"clicks": 2})
        for p in (0, 1):
            self.assertEqual(os.listdir(os.path.join(self.log_dir, f"clicks-{p}")), ["00000000000000000000.log"])
        self.assertFalse(os.path.exists(os.path.join(self.log_dir, "clicks-2")))
        metadata = decode_response(MetadataRequest(("clicks",)), self.ask(MetadataRequest(("clicks",))))
        self.assertEqual(metadata.topics[0].partitions, 2)

    def test_partition_beyond_count_refused(self) -> None:
        """A produce to partition 2 of a topic created with 2 gets WrongPartition."""
        self.error("clicks", 2)
        request = AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("clicks", 2, encode_message_set([b"x"])),))
        result = decode_response(request, self.ask(request)).results[0]
        self.assertEqual(result.error, WrongPartition.code)

    def test_same_count_again_is_success(self) -> None:
        """Asking again with the same count is idempotent: error 0, nothing changes."""
        self.assertEqual(self.error("clicks", 2), NO_ERROR)
        self.assertEqual(self.error("clicks", 2), NO_ERROR)
        self.assertEqual(self.logs.topics(), {"clicks": 2})

    def test_other_count_is_topic_exists(self) -> None:
        """Another count for an existing topic (created, or by a first write) gets TopicExists (15)."""
        self.error("clicks", 2)
        self.assertEqual(self.error("clicks", 3), TopicExists.code)
        self.logs.get_or_create_log("views", 0)  # a first write: num_partitions (4)
        self.assertEqual(self.error("views", 2), TopicExists.code)
        self.assertEqual(self.error("views", 4), NO_ERROR)

    def test_bad_name_is_invalid_topic(self) -> None:
        """A name that breaks the topic rules gets InvalidTopic (5), the precise code (type 9 is twlog's)."""
        for name in ("a b", "..", "", "x" * 250):
            self.assertEqual(self.error(name, 2), InvalidTopic.code, name)
        self.assertEqual(self.logs.topics(), {})

    def test_bad_count_is_invalid_request_and_connection_stays(self) -> None:
        """A count below 1 or above 1024 gets InvalidRequest (11); the frame parsed, so the connection stays open."""
        for count in (0, -1, 1025, 2**31 - 1):
            self.assertEqual(self.error("clicks", count), InvalidRequest.code, count)
        self.assertFalse(self.transport.disconnecting)
        self.assertEqual(self.logs.topics(), {})
        self.assertEqual(self.error("clicks", 3), NO_ERROR)
