"""Tests for twlog.protocol.produce: PRODUCE, MULTIPRODUCE and ACK_PRODUCE, through a Broker."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import (
    InvalidTopic,
    RequestTimedOut,
    WrongPartition,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_APPENDED,
    ACK_FLUSHED,
    AckProduceRequest,
    ProduceRequest,
)
from twlog.storage.message import encode_message_set

from ..fakes import ManualRunner
from .test_server import BrokerTestMixin


class ProduceHandlerTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker()

    def test_produce_with_bad_crc_is_logged_and_dropped(self) -> None:
        """A fire-and-forget set with a CRC mismatch is logged and writes nothing."""
        data = bytearray(encode_message_set([b"abc"]))
        data[-1] ^= 1
        self.broker.produce(ProduceRequest("t", 0, bytes(data)), "1.2.3.4:5")
        self.assertEqual(self.logs.get_log("t", 0).end_offset, 0)

    def test_ack_produce_reports_offsets(self) -> None:
        """An appended-ack produce answers with each set's offsets, and per-set errors."""
        request = AckProduceRequest(
            ACK_APPENDED,
            1000,
            (
                ProduceRequest("t", 0, encode_message_set([b"x" * 10])),
                ProduceRequest("t", 0, encode_message_set([b"y"])),
                ProduceRequest("t", 9, encode_message_set([b"z"])),
                ProduceRequest("../t", 0, encode_message_set([b"z"])),
            ),
        )
        response = codec.decode_ack_produce_response(self.broker.ack_produce(request))
        error, results = response.error, response.results
        self.assertEqual(error, 0)
        self.assertEqual(
            [(r.error, r.offset, r.next_offset) for r in results],
            [(0, 0, 19), (0, 19, 29), (WrongPartition.code, -1, -1), (InvalidTopic.code, -1, -1)],
        )


class AckFlushedTests(BrokerTestMixin, SynchronousTestCase):
    def test_answers_after_fsync(self) -> None:
        """A flushed-ack produce is answered only when the fsync completes."""
        runner = ManualRunner()
        self.make_broker(runner, flush_messages=1000)
        d = self.broker.ack_produce(
            AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest("t", 0, encode_message_set([b"a"])),))
        )
        self.assertNoResult(d)
        runner.run_all()
        self.assertEqual(codec.decode_ack_produce_response(self.successResultOf(d)).results[0].error, 0)

    def test_times_out(self) -> None:
        """A flushed-ack produce whose fsync does not finish in time reports RequestTimedOut for that set."""
        runner = ManualRunner()
        self.make_broker(runner, flush_messages=1000)
        d = self.broker.ack_produce(
            AckProduceRequest(ACK_FLUSHED, 200, (ProduceRequest("t", 0, encode_message_set([b"a"])),))
        )
        self.clock.advance(0.2)
        (result,) = codec.decode_ack_produce_response(self.successResultOf(d)).results
        self.assertEqual((result.error, result.offset), (RequestTimedOut.code, 0))
