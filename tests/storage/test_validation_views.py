"""Validation of memoryview inputs and of compressed sets by whole-buffer work; large segment writes.

The broker validates and appends message sets that are views of request frames; a view must be
judged exactly as the same bytes are, with every bound still enforced.
"""

from __future__ import annotations

import os
import tracemalloc

from hypothesis import given, settings
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import InvalidMessage, MessageSizeTooLarge
from twlog.storage.compression import DecompressedTooLarge, decompress
from twlog.storage.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    check_wrapper,
    compress,
    encode_message,
    encode_message_set,
    iter_messages,
    validate_message_set,
)
from twlog.storage.segment import Segment

from .test_validation import _mutate, _mutations, _sets

GOOD = [b"good-%d" % i for i in range(10)]


def _outcome(function, *args):
    try:
        return ("ok", function(*args))
    except (InvalidMessage, MessageSizeTooLarge) as e:
        return (type(e).__name__, str(e))


class MemoryviewValidationTests(SynchronousTestCase):
    def test_views_validate_as_bytes(self) -> None:
        """Plain, gzip and snappy sets given as a memoryview, a bytearray, or a view into a larger buffer
        count the same as the bytes."""
        for codec in (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY):
            data = encode_message_set(GOOD, codec) * 3
            expected = validate_message_set(data)
            padded = memoryview(b"\xff" * 7 + data + b"\xff" * 5)[7:-5]
            for given_as in (memoryview(data), bytearray(data), padded):
                self.assertEqual(validate_message_set(given_as), expected, (codec, type(given_as)))

    def test_bounds_hold_on_views(self) -> None:
        """Through a view: an oversize entry is MessageSizeTooLarge with its size, a wrapper past the
        decompression bound DecompressedTooLarge, a bad inner CRC InvalidMessage."""
        message = memoryview(encode_message(b"x" * 96))
        e = self.assertRaises(MessageSizeTooLarge, validate_message_set, message, 100)
        self.assertEqual((e.message_size, e.limit), (101, 100))
        for codec in (CODEC_GZIP, CODEC_SNAPPY):
            wrapper = memoryview(encode_message_set([b"z" * 5000], codec))
            self.assertRaises(DecompressedTooLarge, validate_message_set, wrapper, 1_000_000, 4000)
        inner = bytearray(encode_message_set(GOOD))
        inner[-1] ^= 1
        bad = memoryview(encode_message(compress(CODEC_GZIP, bytes(inner)), CODEC_GZIP))
        e = self.assertRaises(InvalidMessage, validate_message_set, bad)
        self.assertIn("inside it, CRC mismatch", str(e))

    @settings(max_examples=300, deadline=None)
    @given(_sets, _mutations)
    def test_views_judged_as_bytes(self, spec, mutations) -> None:
        """After random damage, a memoryview of a set gets exactly the verdict (count, or error and
        message) the bytes get."""
        payloads, codec, copies = spec
        data = _mutate(encode_message_set(payloads, codec) * copies, mutations)
        self.assertEqual(_outcome(validate_message_set, memoryview(data), 1000, 10_000),
                         _outcome(validate_message_set, data, 1000, 10_000))


class CompressedValidationTests(SynchronousTestCase):
    def test_check_wrapper_counts(self) -> None:
        """check_wrapper opens a wrapper's payload in place and counts its inner messages."""
        for codec in (CODEC_GZIP, CODEC_SNAPPY):
            payload = compress(codec, encode_message_set(GOOD))
            self.assertEqual(check_wrapper(codec, memoryview(payload), 10_000), len(GOOD))

    def test_check_wrapper_refuses(self) -> None:
        """Empty inner sets, nested wrappers and partial inner messages are refused, naming why."""
        for codec in (CODEC_GZIP, CODEC_SNAPPY):
            e = self.assertRaises(InvalidMessage, check_wrapper, codec, compress(codec, b""), 10_000)
            self.assertIn("holds no message", str(e))
            nested = encode_message_set(GOOD[:1]) + encode_message_set(GOOD, CODEC_GZIP)
            e = self.assertRaises(InvalidMessage, check_wrapper, codec, compress(codec, nested), 10_000)
            self.assertIn("nesting is refused", str(e))
            partial = encode_message_set(GOOD)[:-3]
            e = self.assertRaises(InvalidMessage, check_wrapper, codec, compress(codec, partial), 10_000)
            self.assertIn("inside it, partial message", str(e))

    def test_snappy_java_blocks(self) -> None:
        """A snappy-java stream of several 32 KiB blocks decodes into one buffer, exactly at the bound;
        one byte less is refused before anything is decoded."""
        inner = encode_message_set([os.urandom(100) * 3 for _ in range(400)])  # about 122 KB: 4 blocks
        packed = compress(CODEC_SNAPPY, inner)
        self.assertEqual(bytes(decompress(CODEC_SNAPPY, memoryview(packed), len(inner))), inner)
        self.assertEqual(check_wrapper(CODEC_SNAPPY, packed, len(inner)), 400)
        self.assertRaises(DecompressedTooLarge, decompress, CODEC_SNAPPY, packed, len(inner) - 1)

    def test_snappy_bound_checked_before_decoding(self) -> None:
        """Blocks declaring 100 MB in all are refused from their headers: almost nothing is allocated."""
        block = compress(CODEC_SNAPPY, b"\0" * 32 * 1024)[16:]  # one block: length, then compressed bytes
        stream = compress(CODEC_SNAPPY, b"")[:16] + block * 3200
        tracemalloc.start()
        try:
            self.assertRaises(DecompressedTooLarge, decompress, CODEC_SNAPPY, stream, 10_000_000)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 2_000_000)

    def test_readers_get_bytes(self) -> None:
        """Readers opening a snappy wrapper of several blocks get bytes payloads, all of them."""
        payloads = [os.urandom(200) for _ in range(400)]
        wrapper = encode_message_set(payloads, CODEC_SNAPPY)
        decoded = [m.payload for m in iter_messages(memoryview(wrapper), 0, whole_buffer=True)]
        self.assertEqual(decoded, payloads)
        self.assertTrue(all(type(p) is bytes for p in decoded))


class LargeSegmentWriteTests(SynchronousTestCase):
    def test_large_view_written_whole(self) -> None:
        """A 3 MB memoryview appended after a small buffered append lands whole and in order on disk."""
        directory = self.mktemp()
        os.makedirs(directory)
        segment = Segment.open(directory, 0, create=True)
        self.addCleanup(segment.close)
        small, large = b"head", os.urandom(3 * 1024 * 1024 + 5)
        segment.append(small)
        segment.append(memoryview(large))
        segment.write_out()
        self.assertEqual(segment.size, len(small) + len(large))
        with open(segment.path, "rb") as f:
            self.assertEqual(f.read(), small + large)
