"""Tests for twlog.consumer.simple: fetch decoding, offsets, and the waiting-fetch stream."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeConnection
from twlog.consumer import EARLIEST, FetchedMessages, SimpleConsumer
from twlog.errors import (
    NO_ERROR,
    ClientClosed,
    ConnectionFailed,
    ConnectionLost,
    FetchSizeTooSmall,
    InvalidMessage,
    InvalidTopic,
    OffsetOutOfRange,
)
from twlog.protocol import codec
from twlog.protocol.codec import FetchRequest, OffsetsRequest, WaitFetchRequest
from twlog.storage.message import CODEC_GZIP, MessageAndOffset, encode_message_set

SET = encode_message_set([b"a", b"bb", b"ccc"])  # entries of 10, 11 and 12 bytes


def fetch_frame(data: bytes, error: int = NO_ERROR) -> bytes:
    return codec.encode_error_response(error) + data


def wait_frame(data: bytes, error: int = NO_ERROR) -> bytes:
    return codec.encode_error_response(NO_ERROR) + codec.multifetch_part_header(error, len(data)) + data


def make_consumer(**options):
    """A SimpleConsumer whose connections are FakeConnections (the first for fetch/offsets, then one per stream)."""
    connections: list[FakeConnection] = []

    def factory() -> FakeConnection:
        connections.append(FakeConnection("h", 1))
        return connections[-1]

    options.setdefault("reactor", Clock())
    consumer = SimpleConsumer("h", 1, connection_factory=factory, **options)
    return consumer, connections, options["reactor"]


class FetchTests(SynchronousTestCase):
    def test_messages_and_next_offset(self) -> None:
        """A fetch yields every message with its offsets, and the offset to fetch next."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(wait_frame(SET))
        fetched = self.successResultOf(consumer.fetch("t", 0, 100, 50))
        self.assertEqual(
            list(fetched),
            [MessageAndOffset(100, 110, b"a"), MessageAndOffset(110, 121, b"bb"), MessageAndOffset(121, 133, b"ccc")],
        )
        self.assertEqual(fetched.next_offset, 133)
        self.assertEqual(connection.requests, [WaitFetchRequest(0, 0, (FetchRequest("t", 0, 100, 50),))])

    def test_partition_by_name(self) -> None:
        """A partition is named as everywhere (C{<broker id>-<n>}, or C{<n>} of a replicated topic): the request
        carries its number; a bare int still works with a DeprecationWarning; a bad name is a ValueError."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.extend([wait_frame(SET), wait_frame(SET), wait_frame(SET)])
        self.successResultOf(consumer.fetch("t", "7-2", 100, 50))
        self.successResultOf(consumer.fetch("t", "5", 100, 50))
        self.successResultOf(consumer.fetch("t", 3, 100, 50))
        (warning,) = self.flushWarnings([self.test_partition_by_name])
        self.assertEqual(warning["category"], DeprecationWarning)
        self.assertIn("name t's partition", warning["message"])
        fetches = [r for r in connection.requests if isinstance(r, WaitFetchRequest)]
        self.assertEqual([r.fetches[0].partition for r in fetches], [2, 5, 3])
        self.assertRaises(ValueError, consumer.fetch, "t", "seven", 100, 50)

    def test_partial_trailing_message_dropped(self) -> None:
        """A fetch cut inside the last entry drops it, and next_offset points at its start."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(wait_frame(SET[:25]))
        fetched = self.successResultOf(consumer.fetch("t", 0, 0, 25))
        self.assertEqual([m.payload for m in fetched], [b"a", b"bb"])
        self.assertEqual(fetched.next_offset, 21)

    def test_empty_fetch(self) -> None:
        """A fetch at the end of the log has no messages and keeps the same offset."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(wait_frame(b""))
        self.assertEqual(self.successResultOf(consumer.fetch("t", 0, 42)), FetchedMessages((), 42))

    def test_crc_checked(self) -> None:
        """A message whose CRC does not match ends the fetch after the valid ones; a fetch from it raises
        InvalidMessage naming the partition, its offset and the offset after it."""
        consumer, (connection,), _ = make_consumer()
        bad = SET[:-1] + b"X"
        connection.responses.append(wait_frame(bad))
        fetched = self.successResultOf(consumer.fetch("t", 0, 0))
        self.assertEqual([m.payload for m in fetched], [b"a", b"bb"])
        self.assertEqual((fetched.next_offset, fetched.corrupt.offset), (21, 21))
        connection.responses.append(wait_frame(bad[21:]))
        error = self.failureResultOf(consumer.fetch("t", 0, 21), InvalidMessage).value
        self.assertEqual((error.offset, error.next_offset), (21, 33))
        self.assertIn("t-0: the message at offset 21 is corrupt (CRC mismatch); the next message starts at "
                      "offset 33", str(error))

    def test_message_larger_than_fetch(self) -> None:
        """A first message that does not fit in max_bytes is a clear FetchSizeTooSmall, not an empty answer."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(wait_frame(SET[:6]))
        failure = self.failureResultOf(consumer.fetch("t", 3, 0, 6), FetchSizeTooSmall)
        self.assertIn("the message at offset 0 of t-3 is 10 bytes, larger than max_bytes=6", str(failure.value))

    def test_broker_says_fetch_too_small(self) -> None:
        """The broker's FetchSizeTooSmall error gets the same clear message."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(FetchSizeTooSmall("broker said so"))
        connection.responses.append(fetch_frame(SET[:4]))  # a FETCH of 4 bytes: the message's length field
        failure = self.failureResultOf(consumer.fetch("t", 0, 7, 6), FetchSizeTooSmall)
        self.assertIn("offset 7 of t-0 is 10 bytes, larger than max_bytes=6; fetch it with max_bytes=10",
                      str(failure.value))
        self.assertEqual(connection.requests[1:], [FetchRequest("t", 0, 7, 4)])

    def test_broker_says_fetch_too_small_and_size_unknown(self) -> None:
        """When the size cannot be learnt, the error still names the offset and max_bytes."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(FetchSizeTooSmall("broker said so"))
        connection.responses.append(ConnectionFailed("gone"))
        failure = self.failureResultOf(consumer.fetch("t", 0, 7, 6), FetchSizeTooSmall)
        self.assertIn("offset 7 of t-0 is larger than max_bytes=6", str(failure.value))

    def test_fetch_of_fewer_bytes_than_a_length_field(self) -> None:
        """max_bytes under 4 can never hold a message: FetchSizeTooSmall, not an endless empty answer."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(wait_frame(SET[:3]))
        self.failureResultOf(consumer.fetch("t", 0, 0, 3), FetchSizeTooSmall)

    def test_compressed_messages(self) -> None:
        """A compressed wrapper is opened; its messages resume at the wrapper until the last one."""
        consumer, (connection,), _ = make_consumer()
        data = encode_message_set([b"x", b"y"], CODEC_GZIP)
        connection.responses.append(wait_frame(data))
        fetched = self.successResultOf(consumer.fetch("t", 0, 0))
        self.assertEqual([(m.payload, m.next_offset) for m in fetched], [(b"x", 0), (b"y", len(data))])
        self.assertEqual(fetched.next_offset, len(data))

    def test_waiting_fetch(self) -> None:
        """fetch() with max_wait_ms sends a WAIT_FETCH and decodes its one part."""
        consumer, (connection,), _ = make_consumer(min_bytes=5)
        connection.responses.append(wait_frame(SET))
        fetched = self.successResultOf(consumer.fetch("t", 0, 0, 100, max_wait_ms=250))
        self.assertEqual(len(fetched), 3)
        self.assertEqual(connection.requests, [WaitFetchRequest(250, 5, (FetchRequest("t", 0, 0, 100),))])

    def test_waiting_fetch_part_error(self) -> None:
        """An error in the WAIT_FETCH part becomes its typed exception."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(wait_frame(b"", OffsetOutOfRange.code))
        failure = self.failureResultOf(consumer.fetch("t", 0, 9, max_wait_ms=10), OffsetOutOfRange)
        self.assertIn("t-0@9", str(failure.value))

    def test_offsets(self) -> None:
        """offsets() asks OFFSETS with the time and count, and returns the offsets newest first."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(codec.encode_offsets_response(NO_ERROR, [300, 0]))
        self.assertEqual(self.successResultOf(consumer.offsets("t", 1, EARLIEST, 2)), [300, 0])
        self.assertEqual(connection.requests, [OffsetsRequest("t", 1, -2, 2)])

    def test_offsets_of_an_invalid_topic(self) -> None:
        """An invalid topic is InvalidTopic before OFFSETS is sent (the broker answers 0.7's types with -1)."""
        consumer, (connection,), _ = make_consumer()
        failure = self.failureResultOf(consumer.offsets("bad/topic", 0), InvalidTopic)
        self.assertIn("OFFSETS bad/topic-0: InvalidTopic (error 5)", str(failure.value))
        self.assertEqual(connection.requests, [])

    def test_closed(self) -> None:
        """After close(), fetches fail with ClientClosed and the connection is closed."""
        consumer, (connection,), _ = make_consumer()
        self.successResultOf(consumer.close())
        self.assertTrue(connection.closed)
        self.failureResultOf(consumer.fetch("t", 0, 0), ClientClosed)
        self.assertRaises(ClientClosed, consumer.stream, "t", 0, 0)


def take(stream, count: int) -> Deferred[list[MessageAndOffset]]:
    """The next C{count} messages of an async iterator, through C{async for}."""

    async def collect() -> list[MessageAndOffset]:
        got = []
        async for message in stream:
            got.append(message)
            if len(got) == count:
                break
        return got

    return Deferred.fromCoroutine(collect())


class StreamTests(SynchronousTestCase):
    def test_stream_uses_waiting_fetch_on_its_own_connection(self) -> None:
        """A stream reads with WAIT_FETCH on a connection of its own, not the one fetch() uses."""
        consumer, connections, _ = make_consumer(max_wait_ms=900, max_bytes=64)
        got = take(consumer.stream("t", 0, 0), 1)
        self.assertEqual(connections[1].requests, [WaitFetchRequest(900, 1, (FetchRequest("t", 0, 0, 64),))])
        self.assertEqual(connections[0].requests, [])
        self.assertNoResult(got)

    def test_stream_is_woken_by_data(self) -> None:
        """The stream waits on the broker, asks again after an empty answer, and yields data as it arrives."""
        consumer, connections, _ = make_consumer()
        stream = consumer.stream("t", 0, 100)
        got = take(stream, 3)
        connection = connections[1]
        self.assertNoResult(got)
        connection.held[0].callback(wait_frame(b""))  # the broker's wait expired with nothing
        connection.held[1].callback(wait_frame(SET[:10]))
        self.assertNoResult(got)
        connection.held[2].callback(wait_frame(SET[10:]))
        messages = self.successResultOf(got)
        self.assertEqual([(m.offset, m.payload) for m in messages], [(100, b"a"), (110, b"bb"), (121, b"ccc")])
        self.assertEqual([r.fetches[0].offset for r in connection.requests], [100, 100, 110])
        self.assertEqual(stream.next_offset, 133)

    def test_next_offset_follows_consumption(self) -> None:
        """next_offset is after the last message handed out, not after the last fetched."""
        consumer, connections, _ = make_consumer()
        stream = consumer.stream("t", 0, 0)
        got = take(stream, 1)
        connections[1].held[0].callback(wait_frame(SET))
        self.assertEqual(self.successResultOf(got)[0].payload, b"a")
        self.assertEqual(stream.next_offset, 10)
        self.assertEqual(self.successResultOf(take(stream, 2))[-1].next_offset, 33)
        self.assertEqual(len(connections[1].requests), 1)

    def test_idle_timeout_ends_stream(self) -> None:
        """With idle_timeout_s, the broker wait is capped by it and the stream ends after that long idle."""
        consumer, connections, clock = make_consumer(max_wait_ms=10_000)
        got = take(consumer.stream("t", 0, 0, idle_timeout_s=2.5), 1)
        self.assertEqual(connections[1].requests[0].max_wait_ms, 2500)
        clock.advance(2.5)
        connections[1].held[0].callback(wait_frame(b""))
        self.assertEqual(self.successResultOf(got), [])

    def test_lost_connection_retried_once(self) -> None:
        """A fetch whose connection broke is retried once; two failures in a row surface."""
        consumer, connections, _ = make_consumer()
        stream = consumer.stream("t", 0, 0)
        got = take(stream, 2)
        held = connections[1].held
        held[0].errback(ConnectionLost("lost"))
        held[1].callback(wait_frame(SET[:10]))
        held[2].errback(ConnectionLost("lost"))
        held[3].callback(wait_frame(SET[10:21]))
        self.assertEqual([m.payload for m in self.successResultOf(got)], [b"a", b"bb"])
        self.assertEqual([r.fetches[0].offset for r in connections[1].requests], [0, 0, 10, 10])
        failing = take(stream, 1)
        held[4].errback(ConnectionLost("lost"))
        held[5].errback(ConnectionFailed("refused"))
        self.failureResultOf(failing, ConnectionFailed)

    def test_unreachable_broker_surfaces(self) -> None:
        """A stream that cannot connect at all fails at once with ConnectionFailed (the connection already retried)."""
        consumer, connections, _ = make_consumer()
        got = take(consumer.stream("t", 0, 0), 1)
        connections[1].held[0].errback(ConnectionFailed("cannot connect to broker h:1"))
        self.failureResultOf(got, ConnectionFailed)
        self.assertEqual(len(connections[1].requests), 1)

    def test_broker_error_surfaces(self) -> None:
        """An out-of-range offset ends the wait with OffsetOutOfRange; the caller rewinds."""
        consumer, connections, _ = make_consumer()
        got = take(consumer.stream("t", 0, 999), 1)
        connections[1].held[0].callback(wait_frame(b"", OffsetOutOfRange.code))
        self.failureResultOf(got, OffsetOutOfRange)

    def test_close_ends_stream(self) -> None:
        """Closing a stream closes its connection and ends the iteration instead of raising."""
        consumer, connections, _ = make_consumer()
        stream = consumer.stream("t", 0, 0)
        got = take(stream, 1)
        self.successResultOf(stream.close())
        self.assertTrue(connections[1].closed)  # (which fails the waiting fetch with ClientClosed)
        self.assertEqual(self.successResultOf(got), [])

    def test_consumer_close_closes_streams(self) -> None:
        """Closing the consumer closes the connections of its open streams."""
        consumer, connections, _ = make_consumer()
        take(consumer.stream("t", 0, 0), 1)
        self.successResultOf(consumer.close())
        self.assertTrue(all(c.closed for c in connections))
