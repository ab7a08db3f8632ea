"""Counting messages and shifting offsets by N messages, against a fake broker's log of messages of many sizes."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.fakelog import FakeBrokers, FakeLog
from twlog.consumer import walk
from twlog.consumer.walk import WalkTooFar, count_messages, shift_offset
from twlog.errors import TwlogError
from twlog.partition import TopicPartition
from twlog.protocol.codec import FetchRequest

TP = TopicPartition("t", "0-0")
ADDRESS = ("127.0.0.1", 9092)


class WalkTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.brokers = FakeBrokers()
        # 40 messages of sizes 1..40 * 7 bytes, after 1000 bytes retention deleted
        self.log = self.brokers.add(ADDRESS, "t", 0, FakeLog([b"x" * (7 * n) for n in range(1, 41)], base=1000))
        self.request = self.brokers.connect(*ADDRESS).request

    def shift(self, offset: int, n: int) -> tuple[int, bool]:
        return self.successResultOf(shift_offset(self.request, TP, offset, n))

    def test_count(self) -> None:
        """The messages starting in [start, end): all, some, none; a range over the bound is not walked."""
        starts, end = self.log.starts, self.log.end
        self.assertEqual(self.successResultOf(count_messages(self.request, TP, starts[0], end, 1 << 20)), 40)
        self.assertEqual(self.successResultOf(count_messages(self.request, TP, starts[30], end, 1 << 20)), 10)
        self.assertEqual(self.successResultOf(count_messages(self.request, TP, starts[3], starts[5], 1 << 20)), 2)
        self.assertEqual(self.successResultOf(count_messages(self.request, TP, end, end, 1 << 20)), 0)
        self.assertIsNone(self.successResultOf(count_messages(self.request, TP, starts[0], end, 100)))

    def test_count_with_small_fetches(self) -> None:
        """A message longer than a fetch costs one request for its header; the count is the same."""
        self.patch(walk, "FETCH_CHUNK", 16)
        self.assertEqual(self.successResultOf(count_messages(self.request, TP, self.log.starts[0], self.log.end,
                                                             1 << 20)), 40)
        fetches = [r for _, r in self.brokers.requests if isinstance(r, FetchRequest)]
        self.assertEqual(len(fetches), 40)

    def test_shift_forward(self) -> None:
        starts = self.log.starts
        self.assertEqual(self.shift(starts[0], 1), (starts[1], False))
        self.assertEqual(self.shift(starts[5], 30), (starts[35], False))
        self.assertEqual(self.shift(starts[35], 5), (self.log.end, False))  # exactly the end
        self.assertEqual(self.shift(starts[35], 6), (self.log.end, True))  # past it: clamped
        self.assertEqual(self.shift(starts[7], 0), (starts[7], False))

    def test_shift_backward(self) -> None:
        starts = self.log.starts
        self.assertEqual(self.shift(starts[1], -1), (starts[0], False))
        self.assertEqual(self.shift(self.log.end, -1), (starts[39], False))
        self.assertEqual(self.shift(self.log.end, -40), (starts[0], False))
        self.assertEqual(self.shift(starts[30], -25), (starts[5], False))
        self.assertEqual(self.shift(starts[3], -4), (starts[0], True))  # before the earliest: clamped

    def test_shift_from_outside_the_log(self) -> None:
        """A committed offset retention deleted shifts from the earliest; one past the end, from the end."""
        self.assertEqual(self.shift(10, 2), (self.log.starts[2], False))
        self.assertEqual(self.shift(self.log.end + 500, -1), (self.log.starts[39], False))

    def test_shift_backward_widens_its_window(self) -> None:
        """Far back in a log of many small messages, the window grows until it holds the messages asked for."""
        log = self.brokers.add(ADDRESS, "t", 1, FakeLog([b"y"] * 20_000))
        tp = TopicPartition("t", "0-1")
        self.assertEqual(self.successResultOf(shift_offset(self.request, tp, log.end, -19_000)),
                         (log.starts[1000], False))

    def test_too_far(self) -> None:
        self.patch(walk, "MAX_WALK_BYTES", 200)
        failure = self.failureResultOf(shift_offset(self.request, TP, self.log.starts[0], 39), WalkTooFar)
        self.assertIn("would read more than 200 bytes", str(failure.value))

    def test_bad_length(self) -> None:
        """A length field that cannot be a message is an error naming where, never a loop."""
        self.log.data = b"\x00\x00\x00\x01" + self.log.data[4:]
        failure = self.failureResultOf(count_messages(self.request, TP, 1000, self.log.end, 1 << 20), TwlogError)
        self.assertEqual(str(failure.value), "t:0-0 has a bad message length 1 at 1000")
