"""DELETE_TOPIC (type 11): the byte layout of docs/protocol.md, built by hand, and the broker's answers,
with requests in flight on the topic when it goes."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import ManualRunner, run_now
from tests.protocol.test_server import BrokerTestMixin, frame, responses
from twlog.config import LogConfig
from twlog.errors import NO_ERROR, InvalidTopic, MalformedRequest, OffsetOutOfRange, TopicDeleted, kafka07_code
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_FLUSHED,
    AckProduceRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    ErrorResponse,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
    WaitFetchRequest,
    decode_request,
    decode_response,
)
from twlog.storage.manager import TOPICS_FILE, LogManager
from twlog.storage.message import encode_message_set

#: `[int16 type = 11][string topic]`: delete "clicks", written out by hand.
REQUEST = bytes.fromhex("000b" "0006" "636c69636b73")


class LayoutTests(SynchronousTestCase):
    def test_decode_from_spec(self) -> None:
        """The documented bytes decode to the request, and encoding it gives them back."""
        self.assertEqual(decode_request(REQUEST), DeleteTopicRequest("clicks"))
        self.assertEqual(codec.encode_request(DeleteTopicRequest("clicks")), REQUEST)
        self.assertEqual(codec.DELETE_TOPIC, 11)

    def test_every_prefix_is_malformed(self) -> None:
        """A truncated DELETE_TOPIC, or one with trailing bytes, is MalformedRequest."""
        for n in range(len(REQUEST)):
            self.assertRaises(MalformedRequest, decode_request, REQUEST[:n])
        self.assertRaises(MalformedRequest, decode_request, REQUEST + b"\x00")

    def test_response_is_error_only(self) -> None:
        """The response is the error code alone."""
        request = DeleteTopicRequest("clicks")
        self.assertTrue(codec.expects_response(request))
        self.assertEqual(decode_response(request, b"\x00\x00"), ErrorResponse(NO_ERROR))
        self.assertEqual(codec.describe_request(request), "DELETE_TOPIC clicks")

    def test_topic_deleted_code(self) -> None:
        """TopicDeleted is wire code 18; a Kafka 0.7 client sees OffsetOutOfRange (it resets its offset)."""
        self.assertEqual(TopicDeleted.code, 18)
        self.assertEqual(kafka07_code(TopicDeleted.code), OffsetOutOfRange.code)


class HandlerTests(BrokerTestMixin, SynchronousTestCase):
    """The broker's answers to DELETE_TOPIC over a real log directory."""

    def setUp(self) -> None:
        self.runner = ManualRunner()
        self.make_broker(runner=self.runner, num_partitions=2, flush_messages=1000, flush_interval_ms=1000)
        self.protocol, self.transport = self.connect()

    def send(self, request) -> None:
        self.protocol.dataReceived(frame(request))

    def answers(self) -> list[bytes]:
        data = self.transport.value()
        self.transport.clear()
        return responses(data)

    def produce_flushed(self, topic: str, partition: int, *payloads: bytes) -> None:
        self.send(AckProduceRequest(ACK_FLUSHED, 1000, (ProduceRequest(topic, partition,
                                                                        encode_message_set(list(payloads))),)))
        self.runner.run_all()
        self.answers()

    def delete(self, topic: str) -> int:
        self.send(DeleteTopicRequest(topic))
        self.runner.run_all()
        (answer,) = self.answers()
        return decode_response(DeleteTopicRequest(topic), answer).error

    def test_deletes_logs_and_count(self) -> None:
        """The topic's directories and recorded count go; the other topics stay; METADATA no longer lists it."""
        self.send(CreateTopicRequest("clicks", 1))
        self.runner.run_all()
        self.produce_flushed("clicks", 0, b"a", b"b")
        self.produce_flushed("views", 1, b"v")
        self.assertEqual(self.delete("clicks"), NO_ERROR)
        self.assertEqual(sorted(os.listdir(self.log_dir)), sorted([".lock", TOPICS_FILE, "views-1"]))
        with open(os.path.join(self.log_dir, TOPICS_FILE)) as f:
            self.assertNotIn("clicks", f.read())
        self.assertEqual(self.logs.topics(), {"views": 2})
        self.send(MetadataRequest())
        (answer,) = self.answers()
        self.assertEqual([t.topic for t in codec.decode_metadata_response(answer).topics], ["views"])

    def test_fetch_after_delete(self) -> None:
        """A fetch of a deleted topic gets TopicDeleted (0.7's FETCH: OffsetOutOfRange), until a write makes it
        again, empty, from offset 0."""
        self.produce_flushed("clicks", 0, b"a")
        self.assertEqual(self.delete("clicks"), NO_ERROR)
        self.send(WaitFetchRequest(0, 0, (FetchRequest("clicks", 0, 10, 100),)))
        (answer,) = self.answers()
        (part,) = codec.decode_multifetch_response(answer).parts
        self.assertEqual(part.error, TopicDeleted.code)
        self.assertEqual(self.fetched(self.broker.fetch(FetchRequest("clicks", 0, 10, 100)))[0],
                         OffsetOutOfRange.code)
        self.produce_flushed("clicks", 0, b"new")
        self.assertEqual(self.fetched(self.broker.fetch(FetchRequest("clicks", 0, 0, 100))), (0, [b"new"]))

    def test_waiting_fetch_is_answered(self) -> None:
        """A WAIT_FETCH waiting on the topic is answered at once, its part on the topic with TopicDeleted."""
        self.produce_flushed("clicks", 0, b"a")
        end = self.logs.get_log("clicks", 0).flushed_offset
        self.send(WaitFetchRequest(30000, 1, (FetchRequest("clicks", 0, end, 100),)))
        self.assertEqual(self.answers(), [])
        self.send(DeleteTopicRequest("clicks"))
        self.runner.run_all()
        waited, deleted = self.answers()
        (part,) = codec.decode_multifetch_response(waited).parts
        self.assertEqual(part.error, TopicDeleted.code)
        self.assertEqual(decode_response(DeleteTopicRequest("clicks"), deleted).error, NO_ERROR)
        self.assertEqual(self.broker.waiting_fetches(), 0)

    def test_produce_waiting_for_its_flush(self) -> None:
        """An acknowledged produce whose fsync is in flight when the topic goes gets TopicDeleted, quietly."""
        self.send(AckProduceRequest(ACK_FLUSHED, 1000, (ProduceRequest("clicks", 0, encode_message_set([b"a"])),)))
        self.assertEqual(len(self.runner.pending), 1)  # the fsync, held
        self.send(DeleteTopicRequest("clicks"))
        self.runner.run_all()
        produced, deleted = self.answers()
        (result,) = codec.decode_ack_produce_response(produced).results
        self.assertEqual(result.error, TopicDeleted.code)
        self.assertEqual(decode_response(DeleteTopicRequest("clicks"), deleted).error, NO_ERROR)
        self.assertEqual(self.flushLoggedErrors(), [])

    def test_unknown_topic_and_bad_name(self) -> None:
        """A topic not held here is answered 0 (deleting is idempotent); a bad name is InvalidTopic."""
        self.assertEqual(self.delete("nosuch"), NO_ERROR)
        self.assertEqual(self.delete("a/b"), InvalidTopic.code)

    def test_restart_after_delete(self) -> None:
        """A restarted broker does not bring a deleted topic back, and removes a delete's leftovers."""
        self.produce_flushed("clicks", 0, b"a")
        self.produce_flushed("views", 0, b"v")
        self.send(DeleteTopicRequest("clicks"))  # the directories are moved away, their removal held
        leftover = [name for name in os.listdir(self.log_dir) if name.startswith(".deleted-clicks-0-")]
        self.assertEqual(len(leftover), 1)
        self.logs.close()
        restarted = LogManager(LogConfig(self.log_dir, num_partitions=2), self.clock, run_now)
        restarted.start()
        self.addCleanup(restarted.close)
        self.assertEqual(restarted.topics(), {"views": 2})
        self.assertEqual(sorted(os.listdir(self.log_dir)), sorted([".lock", "views-0"]))
