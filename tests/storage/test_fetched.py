"""Reading a fetched buffer (L{twlog.storage.fetched}): the valid messages, and the corrupt ones in line."""

from __future__ import annotations

import tracemalloc

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import FetchSizeTooSmall, InvalidMessage
from twlog.storage.fetched import CorruptMessage, MessageAndOffset, framing_problem, iter_messages, scan_messages
from twlog.storage.message import CODEC_GZIP, encode_message, encode_message_set

from .corrupt import NOT_GZIP, gzip_bomb, nested_gzip

GOOD = [b"good-%d" % i for i in range(10)]


class FetchedBufferTests(SynchronousTestCase):
    """A fetched buffer: partial last entries, too-small fetches, CRCs and compressed payloads."""

    def test_partial_last_entry_is_dropped(self) -> None:
        """A fetch cut in the middle of the last message yields the whole ones before it."""
        data = encode_message_set([b"a" * 10, b"b" * 10])
        decoded = list(iter_messages(data[:-3], 0))
        self.assertEqual([m.payload for m in decoded], [b"a" * 10])

    def test_single_message_larger_than_fetch(self) -> None:
        """A buffer holding only part of its first message is FetchSizeTooSmall, not an empty result."""
        data = encode_message(b"a" * 500)
        e = self.assertRaises(FetchSizeTooSmall, list, iter_messages(data[:100], 42))
        self.assertIn("offset 42 is 509 bytes", str(e))

    def test_corrupt_message_raises(self) -> None:
        """Decoding checks every CRC."""
        data = bytearray(encode_message_set([b"a" * 10]))
        data[-1] ^= 1
        self.assertRaises(InvalidMessage, list, iter_messages(bytes(data), 0))

    def test_corrupt_compressed_payload(self) -> None:
        """A wrapper whose CRC matches but whose gzip data is garbage is InvalidMessage."""
        data = encode_message(b"not gzip at all", CODEC_GZIP)
        e = self.assertRaises(InvalidMessage, list, iter_messages(data, 0))
        self.assertIn("cannot decompress", str(e))

    def test_whole_buffer_partial_is_error(self) -> None:
        """With whole_buffer, trailing garbage is an error rather than silently dropped."""
        data = encode_message_set([b"a"]) + b"\x00\x00"
        self.assertRaises(InvalidMessage, list, iter_messages(data, 0, whole_buffer=True))


class CorruptInLineTests(SynchronousTestCase):
    """A bad message never hides the good ones around it."""

    def setUp(self) -> None:
        self.first = encode_message_set(GOOD[:5])
        self.second = encode_message_set(GOOD[5:])
        self.bad = len(self.first)
        self.after = self.bad + len(NOT_GZIP)
        self.data = self.first + NOT_GZIP + self.second

    def test_good_ones_first(self) -> None:
        """iter_messages yields the 5 good messages, then raises naming the bad offset and the offset after it."""
        got = []
        with self.assertRaises(CorruptMessage) as caught:
            for message in iter_messages(self.data, 1000):
                got.append(message.payload)
        self.assertEqual(got, GOOD[:5])
        error = caught.exception
        self.assertIsInstance(error, InvalidMessage)
        self.assertEqual((error.offset, error.next_offset), (1000 + self.bad, 1000 + self.after))
        self.assertIn(f"the message at offset {1000 + self.bad} is corrupt", str(error))
        self.assertIn(f"the next message starts at offset {1000 + self.after}", str(error))

    def test_scan_messages_goes_on(self) -> None:
        """scan_messages reports the bad one in line and goes on after it."""
        items = list(scan_messages(self.data, 0))
        self.assertEqual([type(i) for i in items], [MessageAndOffset] * 5 + [CorruptMessage] + [MessageAndOffset] * 5)
        self.assertEqual([i.payload for i in items if type(i) is MessageAndOffset], GOOD)

    def test_insane_length_stops(self) -> None:
        """A bad length field: the next boundary is unknown, and the decoder says so and stops."""
        data = self.first + b"\x00\x00\x00\x01" + self.second
        items = list(scan_messages(data, 0))
        self.assertEqual(len(items), 6)
        self.assertIsNone(items[-1].next_offset)
        self.assertIn("where the next message starts is unknown", str(items[-1]))

    def test_nested_and_bomb_on_read(self) -> None:
        """Read, a 2,000-deep nest is InvalidMessage (no RecursionError) and a bomb is InvalidMessage, bounded."""
        for wrapper in (nested_gzip(2000), gzip_bomb(200 * 1000 * 1000)):
            tracemalloc.start()
            try:
                items = list(scan_messages(self.first + wrapper, 0))
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            self.assertEqual([type(i) for i in items], [MessageAndOffset] * 5 + [CorruptMessage])
            self.assertLess(peak, 40_000_000)


class FramingProblemTests(SynchronousTestCase):
    """Where a set stops: a cut or insane length field."""

    def test_partial_last_entry_of_a_fetch(self) -> None:
        """A fetch's partial last entry is no problem: it is dropped."""
        data = encode_message_set([b"a", b"b"])
        self.assertIsNone(framing_problem(data[:-2], len(encode_message(b"a")), 0, whole_buffer=False))

    def test_partial_entry_of_a_whole_buffer(self) -> None:
        """In a whole buffer, a partial entry is corrupt, with no next offset."""
        data = encode_message_set([b"a"])[:-1]
        problem = framing_problem(data, 0, 100, whole_buffer=True)
        self.assertEqual((problem.offset, problem.next_offset), (100, None))

    def test_length_below_minimum(self) -> None:
        """A length field below the minimum is corrupt wherever it is."""
        problem = framing_problem(b"\x00\x00\x00\x01rest", 0, 7, whole_buffer=False)
        self.assertIn("below the minimum", problem.reason)

    def test_first_entry_larger_than_the_fetch(self) -> None:
        """The first entry of a fetch running past it is FetchSizeTooSmall."""
        self.assertRaises(FetchSizeTooSmall, framing_problem, encode_message(b"abc")[:-1], 0, 0, whole_buffer=False)
        self.assertRaises(FetchSizeTooSmall, framing_problem, b"\x00\x00", 0, 0, whole_buffer=False)
