"""Group streams and the per-broker fetch loop, with a fake connection and a fake clock."""

from __future__ import annotations

from twisted.internet.defer import succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeConnection
from twlog.consumer.stream import BrokerFetcher, GroupMessage, GroupStream, OwnedPartition
from twlog.errors import (
    ConnectionLost,
    FetchSizeTooSmall,
    InvalidMessage,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    RebalanceFailed,
    WrongPartition,
)
from twlog.partition import TopicPartition
from twlog.protocol import codec
from twlog.protocol.codec import FetchRequest, OffsetsRequest, WaitFetchRequest
from twlog.storage.message import CODEC_GZIP, MessageAndOffset, encode_message, encode_message_set, iter_messages


def messages(payloads: list[bytes], offset: int = 0) -> tuple[MessageAndOffset, ...]:
    return tuple(iter_messages(encode_message_set(payloads), offset))


def fetch_frame(*parts: tuple[int, bytes]) -> bytes:
    """A WAIT_FETCH response frame (no size prefix) with one (error, data) per fetch."""
    header = codec.multifetch_response_header(0, [len(d) for _, d in parts])[4:]
    return header + b"".join(codec.multifetch_part_header(e, len(d)) + d for e, d in parts)


class GroupStreamTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.stream = GroupStream("t", "c-0", max_queued=3)
        self.owned = OwnedPartition(TopicPartition("t", "1-2"), 1, self.stream, 0)

    def test_hands_out_in_order_and_moves_consumed(self) -> None:
        """Messages come out in order with their topic and partition; the consumed offset moves as they do."""
        batch = messages([b"a", b"b"])
        self.stream.deliver(self.owned, batch)
        first = self.successResultOf(self.stream.__anext__())
        self.assertEqual(first, GroupMessage("t", TopicPartition("t", "1-2"), 0, batch[0].next_offset, b"a"))
        self.assertEqual(self.owned.consumed, batch[0].next_offset)
        waiting = self.stream.__anext__()
        self.assertEqual(self.successResultOf(waiting).payload, b"b")
        later = self.stream.__anext__()
        self.assertNoResult(later)
        self.stream.deliver(self.owned, messages([b"c"], batch[-1].next_offset))
        self.assertEqual(self.successResultOf(later).payload, b"c")

    def test_clear_and_inactive(self) -> None:
        """Clearing drops what was not handed out; deliveries for an inactive partition are dropped."""
        self.stream.deliver(self.owned, messages([b"a", b"b"]))
        self.stream.clear()
        self.assertEqual(self.stream.queued, 0)
        self.owned.active = False
        self.stream.deliver(self.owned, messages([b"c"]))
        self.assertNoResult(self.stream.__anext__())
        self.assertEqual(self.owned.consumed, 0)

    def test_paused(self) -> None:
        """Paused, a stream hands nothing out, to calls waiting or new, and its partition's consumed offset stays;
        fetched messages are queued (and count against the bound); resumed, the waiting calls get them first, in
        order."""
        self.stream.pause()
        waiting = self.stream.__anext__()
        self.stream.deliver(self.owned, messages([b"a", b"b"]))
        later = self.stream.__anext__()
        self.assertNoResult(waiting)
        self.assertNoResult(later)
        self.assertEqual((self.stream.queued, self.owned.consumed), (2, 0))
        self.stream.resume()
        self.assertEqual((self.successResultOf(waiting).payload, self.successResultOf(later).payload), (b"a", b"b"))
        self.assertEqual(self.stream.queued, 0)
        consumed = self.owned.consumed
        self.stream.pause()
        batch = messages([b"c"], consumed)
        self.stream.deliver(self.owned, batch)
        waiting = self.stream.__anext__()
        self.assertEqual(self.owned.consumed, consumed)
        self.stream.resume()
        self.assertEqual((self.successResultOf(waiting).payload, self.owned.consumed), (b"c", batch[-1].next_offset))

    def test_error_raised_once(self) -> None:
        """A failed rebalance is raised once (to the waiting call), and later calls wait again."""
        waiting = self.stream.__anext__()
        self.stream.set_error(RebalanceFailed("no"))
        self.failureResultOf(waiting, RebalanceFailed)
        self.assertNoResult(self.stream.__anext__())
        idle = GroupStream("t", "c-1", 3)
        idle.set_error(RebalanceFailed("no"))
        self.failureResultOf(idle.__anext__(), RebalanceFailed)
        self.assertNoResult(idle.__anext__())

    def test_partition_error_in_place(self) -> None:
        """A partition's error is raised after its messages queued before it."""
        self.stream.deliver(self.owned, messages([b"a"]))
        self.stream.deliver_error(self.owned, FetchSizeTooSmall("big"))
        self.assertEqual(self.successResultOf(self.stream.__anext__()).payload, b"a")
        self.failureResultOf(self.stream.__anext__(), FetchSizeTooSmall)

    def test_close_ends_iteration(self) -> None:
        """Closing ends waiting and later calls with StopAsyncIteration."""
        waiting = self.stream.__anext__()
        self.stream.close()
        self.failureResultOf(waiting, StopAsyncIteration)
        self.failureResultOf(self.stream.__anext__(), StopAsyncIteration)

    def test_room_listener(self) -> None:
        """A full stream tells its listeners when it has room again."""
        calls = []
        self.stream.add_room_listener(lambda: calls.append(1))
        self.stream.deliver(self.owned, messages([b"a", b"b", b"c", b"d"]))
        self.assertTrue(self.stream.full)
        self.stream.__anext__()
        self.assertEqual(calls, [])  # 3 left: still full
        self.stream.__anext__()
        self.assertEqual(calls, [1])


class FetcherTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.connection = FakeConnection()
        self.stream = GroupStream("t", "c-0", max_queued=2)
        self.p0 = OwnedPartition(TopicPartition("t", "4-0"), 4, self.stream, None)
        self.p1 = OwnedPartition(TopicPartition("t", "4-1"), 4, self.stream, 0)
        self.fetcher = BrokerFetcher(4, [self.p0, self.p1], self.connection, clock=self.clock,
                                     fetch_max_bytes=1000, max_wait_ms=500, reset="smallest",
                                     retry_policy=lambda attempt: 1.0)

    def test_resets_then_fetches_all_partitions_in_one_request(self) -> None:
        """A partition without an offset asks OFFSETS (smallest) first; then one WAIT_FETCH covers every partition."""
        self.fetcher.start()
        request = self.connection.answer(codec.encode_offsets_response(0, [0]))
        self.assertEqual(request, OffsetsRequest("t", 0, -2, 1))
        self.assertEqual(self.p0.consumed, 0)
        request, _ = self.connection.waiting[0]
        self.assertIsInstance(request, WaitFetchRequest)
        self.assertEqual((request.max_wait_ms, request.min_bytes), (500, 1))
        self.assertEqual([(f.partition, f.offset, f.max_bytes) for f in request.fetches], [(0, 0, 1000), (1, 0, 1000)])
        data = encode_message_set([b"x"])
        self.connection.answer(fetch_frame((0, data), (0, b"")))
        self.assertEqual(self.p0.fetch_offset, len(data))
        self.assertEqual(self.successResultOf(self.stream.__anext__()).payload, b"x")
        request, _ = self.connection.waiting[0]
        self.assertEqual([f.offset for f in request.fetches], [len(data), 0])
        self.fetcher.stop()

    def test_back_pressure(self) -> None:
        """A full stream's partitions are not fetched; the loop waits, and fetches again once there is room."""
        self.p0.fetch_offset = 0
        self.fetcher.start()
        self.connection.answer(fetch_frame((0, encode_message_set([b"a", b"b"])), (0, b"")))
        self.assertTrue(self.stream.full)
        self.assertEqual(self.connection.waiting, [])  # idle: nothing to fetch
        self.stream.__anext__()
        self.assertEqual(len(self.connection.waiting), 1)
        self.fetcher.stop()

    def test_out_of_range_resets(self) -> None:
        """OffsetOutOfRange resets the partition per auto_offset_reset and fetches from there."""
        self.p0.fetch_offset = self.p0.consumed = 999
        self.fetcher.start()
        self.connection.answer(fetch_frame((OffsetOutOfRange.code, b""), (0, b"")))
        request = self.connection.answer(codec.encode_offsets_response(0, [40]))
        self.assertEqual(request, OffsetsRequest("t", 0, -2, 1))
        self.assertEqual((self.p0.fetch_offset, self.p0.consumed), (40, 40))
        request, _ = self.connection.waiting[0]
        self.assertEqual([f.offset for f in request.fetches], [40, 0])
        self.fetcher.stop()

    def test_message_too_large_surfaces(self) -> None:
        """A message larger than fetch_max_bytes is raised by the stream, and its partition is not fetched again."""
        self.p0.fetch_offset = 0
        self.fetcher.start()
        big = encode_message_set([b"z" * 2000])[:1000]
        self.connection.answer(fetch_frame((0, big), (0, b"")))
        self.failureResultOf(self.stream.__anext__(), FetchSizeTooSmall)
        request, _ = self.connection.waiting[0]
        self.assertEqual([f.partition for f in request.fetches], [1])
        self.fetcher.stop()

    def test_broker_size_error_names_the_size_needed(self) -> None:
        """FetchSizeTooSmall (7) from the broker: a 4-byte FETCH reads the message's length; the error names it."""
        self.p0.fetch_offset = 0
        self.fetcher.start()
        self.connection.answer(fetch_frame((FetchSizeTooSmall.code, b""), (0, b"")))
        request = self.connection.answer(codec.fetch_response_header(0, 4)[4:] + (2496).to_bytes(4, "big"))
        self.assertEqual(request, FetchRequest("t", 0, 0, 4))
        failure = self.failureResultOf(self.stream.__anext__(), FetchSizeTooSmall)
        self.assertIn("is 2500 bytes, larger than max_bytes=1000; fetch it with max_bytes=2500", str(failure.value))
        self.fetcher.stop()

    def test_stop_drops_late_answers(self) -> None:
        """After stop, nothing more is delivered, and the connection is closed."""
        self.p0.fetch_offset = 0
        self.fetcher.start()
        _, pending = self.connection.waiting[0]
        closed = []
        self.connection.close = lambda: closed.append(True) or succeed(None)  # the answer still comes
        stopped = self.fetcher.stop()
        pending.callback(fetch_frame((0, encode_message_set([b"late"])), (0, b"")))
        self.successResultOf(stopped)
        self.assertEqual(closed, [True])
        self.assertEqual(self.stream.queued, 0)
        self.assertEqual(self.p0.fetch_offset, 0)

    def test_connection_errors_retried(self) -> None:
        """A lost connection is retried after the retry policy's delay."""
        self.p0.fetch_offset = 0
        self.fetcher.start()
        _, pending = self.connection.waiting.pop(0)
        pending.errback(ConnectionLost("gone"))
        self.assertEqual(self.connection.waiting, [])
        self.clock.advance(1.0)
        self.assertEqual(len(self.connection.waiting), 1)
        self.fetcher.stop()

    def test_refused_partition_paused(self) -> None:
        """A partition the broker refuses (WrongPartition) is left out for the retry delay, then fetched again."""
        self.p0.fetch_offset = 0
        self.fetcher.start()
        self.connection.answer(fetch_frame((WrongPartition.code, b""), (0, b"")))
        request, _ = self.connection.waiting[0]
        self.assertEqual([f.partition for f in request.fetches], [1])
        self.clock.advance(1.0)
        self.connection.answer(fetch_frame((0, b"")))  # (the waiting fetch ends after max_wait_ms at the latest)
        request, _ = self.connection.waiting[0]
        self.assertEqual([f.partition for f in request.fetches], [0, 1])
        self.fetcher.stop()


class CorruptMessageTests(SynchronousTestCase):
    """A group stream hands out the good messages before a corrupt one, then the error; or skips it."""

    def setUp(self) -> None:
        self.good, self.more = encode_message_set([b"a", b"b"]), encode_message_set([b"c"])
        self.bad = encode_message(b"not gzip", CODEC_GZIP)
        self.data = self.good + self.bad + self.more

    def fetcher(self, on_corrupt: str):
        connection = FakeConnection()
        stream = GroupStream("t", "c-0", max_queued=10)
        owned = OwnedPartition(TopicPartition("t", "4-0"), 4, stream, 0)
        fetcher = BrokerFetcher(4, [owned], connection, clock=Clock(), fetch_max_bytes=1000, max_wait_ms=500,
                                reset="smallest", retry_policy=lambda attempt: 1.0, on_corrupt=on_corrupt)
        fetcher.start()
        return connection, stream, owned, fetcher

    def test_good_ones_then_the_error(self) -> None:
        connection, stream, owned, fetcher = self.fetcher("fail")
        connection.answer(fetch_frame((0, self.data)))
        self.assertEqual(owned.fetch_offset, len(self.good))
        request = connection.answer(fetch_frame((0, self.data[len(self.good):])))
        self.assertEqual(request.fetches[0].offset, len(self.good))
        got = [self.successResultOf(stream.__anext__()).payload for _ in range(2)]
        error = self.failureResultOf(stream.__anext__(), InvalidMessage).value
        self.assertEqual(got, [b"a", b"b"])
        self.assertEqual((error.offset, error.next_offset), (len(self.good), len(self.good) + len(self.bad)))
        self.assertTrue(owned.failed)
        fetcher.stop()

    def test_skip(self) -> None:
        connection, stream, owned, fetcher = self.fetcher("skip")
        connection.answer(fetch_frame((0, self.data)))
        self.assertEqual([self.successResultOf(stream.__anext__()).payload for _ in range(3)], [b"a", b"b", b"c"])
        self.assertEqual(owned.fetch_offset, len(self.data))
        fetcher.stop()

    def test_refused_boundary_read_from_the_message_before(self) -> None:
        """The broker refuses to read from a known boundary (a CRC-bad message there): the fetcher reads it from
        the message before, and names (or skips to) the offset after it."""
        crc_bad = bytearray(encode_message(b"payload"))
        crc_bad[-1] ^= 1
        for on_corrupt in ("fail", "skip"):
            connection, stream, owned, fetcher = self.fetcher(on_corrupt)
            connection.answer(fetch_frame((0, self.good + bytes(crc_bad)[:5])))  # cut inside the bad one
            boundary = len(self.good)
            connection.answer(fetch_frame((OffsetNotOnBoundary.code, b"")))
            request = connection.answer(fetch_frame((0, self.good[10:] + bytes(crc_bad))))
            self.assertEqual(request.fetches[0].offset, 10)  # the message before the boundary
            for _ in range(2):
                self.successResultOf(stream.__anext__())
            if on_corrupt == "fail":
                error = self.failureResultOf(stream.__anext__(), InvalidMessage).value
                self.assertEqual((error.offset, error.next_offset), (boundary, boundary + len(crc_bad)))
            else:
                self.assertEqual(owned.fetch_offset, boundary + len(crc_bad))
            fetcher.stop()
