"""Tests for twlog.protocol.fetch: FETCH, MULTIFETCH and WAIT_FETCH (and the fetches it holds), through a Broker."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import (
    UNKNOWN,
    FetchSizeTooSmall,
    InvalidFetchSize,
    InvalidTopic,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    WrongPartition,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    FetchRequest,
    MultiFetchRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.storage.message import encode_message_set, iter_messages

from .test_server import BrokerTestMixin


class FetchHandlerTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker()

    #: Fetches of the log C{[a*100, b]} on partition 0, each with its precise error (WAIT_FETCH) and the
    #: code a FETCH (Kafka 0.7's type) gets.
    FETCH_ERRORS = {
        FetchRequest("bad/topic", 0, 0, 100): (InvalidTopic.code, UNKNOWN),
        FetchRequest("t", 2, 0, 100): (WrongPartition.code, WrongPartition.code),
        FetchRequest("t", -1, 0, 100): (WrongPartition.code, WrongPartition.code),
        FetchRequest("t", 0, 500, 100): (OffsetOutOfRange.code, OffsetOutOfRange.code),
        FetchRequest("t", 0, -5, 100): (OffsetOutOfRange.code, OffsetOutOfRange.code),
        FetchRequest("t", 0, 3, 100): (OffsetNotOnBoundary.code, OffsetOutOfRange.code),
        FetchRequest("t", 0, 0, 50): (FetchSizeTooSmall.code, 0),  # FETCH: a partial message
        FetchRequest("t", 0, 0, 0): (InvalidFetchSize.code, InvalidFetchSize.code),
        FetchRequest("t", 1, 7, 100): (OffsetOutOfRange.code, OffsetOutOfRange.code),  # never written: empty at 0
    }

    def test_fetch_errors(self) -> None:
        """FETCH (Kafka 0.7's type) answers each error with a code a 0.7 client knows."""
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a" * 100, b"b"])))
        for request, (_, code) in self.FETCH_ERRORS.items():
            response = self.broker.fetch(request)
            data = b"".join(p if isinstance(p, bytes) else p.read() for p in response)
            self.assertEqual(codec.decode_fetch_response(data[4:]).error, code, request)

    def test_wait_fetch_errors(self) -> None:
        """WAIT_FETCH (twlog's type) answers each error with its precise code: topic, partition, offset, size,
        boundary."""
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a" * 100, b"b"])))
        for request, (code, _) in self.FETCH_ERRORS.items():
            parts = self.broker.wait_fetch(WaitFetchRequest(0, 0, (request,)))
            data = b"".join(p if isinstance(p, bytes) else p.read() for p in parts)
            (part,) = codec.decode_multifetch_response(data[4:]).parts
            self.assertEqual((part.error, part.messages), (code, b""), request)

    def test_fetch_of_unwritten_partition(self) -> None:
        """A partition nobody wrote to reads as an empty log at offset 0."""
        self.assertEqual(self.fetched(self.broker.fetch(FetchRequest("new", 1, 0, 100))), (0, []))

    def test_multifetch_parts_in_order(self) -> None:
        """MULTIFETCH answers each fetch in order, errors included."""
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"zero"])))
        self.broker.produce(ProduceRequest("t", 1, encode_message_set([b"one"])))
        parts = self.broker.multifetch(
            MultiFetchRequest(
                (FetchRequest("t", 1, 0, 100), FetchRequest("t", 5, 0, 100), FetchRequest("t", 0, 0, 100))
            )
        )
        data = b"".join(p if isinstance(p, bytes) else p.read() for p in parts)
        response = codec.decode_multifetch_response(data[4:])
        error, results = response.error, response.parts
        self.assertEqual(error, 0)
        self.assertEqual([r.error for r in results], [0, WrongPartition.code, 0])
        self.assertEqual([m.payload for m in iter_messages(results[2].messages, 0)], [b"zero"])


class WaitingFetchTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker(flush_messages=1000, flush_interval_ms=100)

    def wait(self, offset=0, min_bytes=1, max_wait_ms=5000):
        return self.broker.wait_fetch(WaitFetchRequest(max_wait_ms, min_bytes, (FetchRequest("t", 0, offset, 1000),)))

    def test_answers_at_once_when_data_is_there(self) -> None:
        """A waiting fetch with enough readable bytes is answered immediately."""
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a"])))
        self.clock.advance(0.1)
        self.assertIsInstance(self.wait(), list)

    def test_wakes_on_flush(self) -> None:
        """A waiting fetch is answered when a flush makes data visible, not before."""
        d = self.wait()
        self.assertNoResult(d)
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a"])))
        self.assertNoResult(d)  # appended but not flushed: still invisible
        self.clock.advance(0.1)
        parts = self.successResultOf(d)
        self.assertEqual(len(parts), 3)  # outer header, part header, region
        self.assertEqual(self.broker.waiting_fetches(), 0)

    def test_min_bytes(self) -> None:
        """The broker holds the fetch until min_bytes are readable."""
        d = self.wait(min_bytes=25)
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a"])))
        self.clock.advance(0.1)
        self.assertNoResult(d)
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"b" * 10])))
        self.clock.advance(0.1)
        self.successResultOf(d)

    def test_times_out_empty(self) -> None:
        """With no data, the fetch is answered empty after max_wait_ms."""
        d = self.wait(max_wait_ms=300)
        self.clock.advance(0.299)
        self.assertNoResult(d)
        self.clock.advance(0.001)
        data = b"".join(p if isinstance(p, bytes) else p.read() for p in self.successResultOf(d))
        self.assertEqual(codec.decode_multifetch_response(data[4:]).parts, (codec.FetchResult(0, b""),))

    def test_wait_is_capped(self) -> None:
        """A client cannot hold a fetch longer than max_fetch_wait_ms."""
        self.make_broker(max_fetch_wait_ms=1000)
        d = self.wait(max_wait_ms=2**31 - 1)
        self.clock.advance(1.0)
        self.successResultOf(d)

    def test_error_answers_at_once(self) -> None:
        """A waiting fetch with a bad offset is answered at once with the error."""
        d = self.broker.wait_fetch(WaitFetchRequest(5000, 1, (FetchRequest("t", 0, 77, 1000),)))
        self.assertIsInstance(d, list)

    def test_cancel_forgets_the_waiter(self) -> None:
        """Cancelling (the client went away) removes the waiter and its timer."""
        d = self.wait()
        d.cancel()
        self.failureResultOf(d)
        self.assertEqual(self.broker.waiting_fetches(), 0)
        self.assertEqual([c for c in self.clock.getDelayedCalls() if c.func == self.broker._fetching._wake], [])
