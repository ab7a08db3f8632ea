"""Nothing invalid is stored, and a bad message never hides the good ones: the validator and the decoder.

Validation on append opens compressed wrappers within a bound on the output, iteratively, refusing
nesting; decoding yields the valid messages before a bad one, then names its offset and the offset after.
"""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import InvalidMessage, MessageSizeTooLarge
from twlog.storage.compression import DecompressedTooLarge, decompress
from twlog.storage.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    CorruptMessage,
    MessageAndOffset,
    compress,
    encode_message,
    encode_message_set,
    iter_messages,
    scan_messages,
    validate_message_set,
)

from .corrupt import NOT_GZIP, gzip_bomb, nested_gzip

GOOD = [b"good-%d" % i for i in range(10)]


class AppendValidationTests(SynchronousTestCase):
    def test_codec_bit_flipped_on_a_plain_message(self) -> None:
        """The CRC does not cover the attributes: a plain magic-1 message claiming gzip is refused."""
        message = bytearray(encode_message(b"plain text", CODEC_NONE))
        message[5] = CODEC_GZIP
        e = self.assertRaises(InvalidMessage, validate_message_set, bytes(message))
        self.assertIn("the gzip message at byte 0", str(e))

    def test_unknown_attribute_bits(self) -> None:
        """Attribute bits beyond the codec, and codec 3, are refused."""
        for attributes in (3, 4, 0x80, 0x41):
            message = bytearray(encode_message(b"x", CODEC_NONE))
            message[5] = attributes
            self.assertRaises(InvalidMessage, validate_message_set, bytes(message))

    def test_wrapper_that_is_not_gzip(self) -> None:
        """A wrapper whose payload does not decompress is refused, though its CRC is right."""
        e = self.assertRaises(InvalidMessage, validate_message_set, encode_message_set(GOOD[:2]) + NOT_GZIP)
        self.assertIn("cannot decompress", str(e))

    def test_inner_crc_checked(self) -> None:
        """A wrapper whose inner message has a bad CRC is refused."""
        inner = bytearray(encode_message_set([b"abc"]))
        inner[-1] ^= 1
        e = self.assertRaises(InvalidMessage, validate_message_set, encode_message(compress(CODEC_GZIP, bytes(inner)),
                                                                                    CODEC_GZIP))
        self.assertIn("inside it, CRC mismatch", str(e))

    def test_empty_and_partial_inner_sets(self) -> None:
        """A wrapper of nothing, or of a partial entry, is refused."""
        for inner in (b"", encode_message_set([b"abc"])[:-1]):
            for codec in (CODEC_GZIP, CODEC_SNAPPY):
                self.assertRaises(InvalidMessage, validate_message_set, encode_message(compress(codec, inner), codec))

    def test_nesting_refused(self) -> None:
        """A compressed message inside a compressed one is refused (0.7 producers never nest), even 2,000 deep."""
        e = self.assertRaises(InvalidMessage, validate_message_set, nested_gzip(2))
        self.assertIn("nesting is refused", str(e))
        self.assertRaises(InvalidMessage, validate_message_set, nested_gzip(2000))

    def test_gzip_bomb_bounded(self) -> None:
        """A 194 KB gzip wrapper inflating to 200 MB is refused as too large, without inflating it."""
        bomb = gzip_bomb(200 * 1000 * 1000)
        self.assertLess(len(bomb), 200_000)
        tracemalloc.start()
        try:
            e = self.assertRaises(MessageSizeTooLarge, validate_message_set, bomb, 1_000_000, 10_000_000)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertIsInstance(e, DecompressedTooLarge)
        self.assertEqual(e.limit, 10_000_000)
        self.assertLess(peak, 40_000_000)

    def test_snappy_bomb_bounded(self) -> None:
        """snappy's declared block lengths are checked against the bound before a block is decoded."""
        wrapper = encode_message_set([b"z" * 200_000], CODEC_SNAPPY)
        self.assertRaises(DecompressedTooLarge, validate_message_set, wrapper, 1_000_000, 100_000)
        self.assertEqual(validate_message_set(wrapper, 1_000_000, 300_000), 1)
        raw = encode_message(bytes(compress(CODEC_SNAPPY, encode_message_set([b"y" * 50_000]))[16 + 4:]),
                             CODEC_SNAPPY)
        self.assertRaises(DecompressedTooLarge, validate_message_set, raw, 1_000_000, 10_000)

    def test_oversize_is_message_size_too_large(self) -> None:
        """One byte over the maximum is MessageSizeTooLarge (6), carrying the size and the limit."""
        message = encode_message(b"x" * 96)  # N = 101
        self.assertEqual(validate_message_set(message, 101), 1)
        e = self.assertRaises(MessageSizeTooLarge, validate_message_set, message, 100)
        self.assertEqual((e.code, e.message_size, e.limit), (6, 101, 100))

    def test_valid_compressed_sets_pass(self) -> None:
        """gzip and snappy sets, and concatenated gzip members, are accepted and counted as one entry each."""
        for codec in (CODEC_GZIP, CODEC_SNAPPY):
            self.assertEqual(validate_message_set(encode_message_set(GOOD, codec) * 2), 2)
        members = b"".join(compress(CODEC_GZIP, encode_message_set(part)) for part in (GOOD[:3], GOOD[3:]))
        wrapper = encode_message(members, CODEC_GZIP)
        self.assertEqual(validate_message_set(wrapper), 1)
        self.assertEqual([m.payload for m in iter_messages(wrapper, 0)], GOOD)


class DecompressTests(SynchronousTestCase):
    def test_bounds(self) -> None:
        """The output never passes the bound: exactly the bound passes, one byte less does not."""
        data = b"a" * 1000
        for codec in (CODEC_GZIP, CODEC_SNAPPY):
            self.assertEqual(decompress(codec, compress(codec, data), 1000), data)
            self.assertRaises(DecompressedTooLarge, decompress, codec, compress(codec, data), 999)

    def test_truncated_and_garbage(self) -> None:
        """Truncated streams and trailing garbage are InvalidMessage."""
        for codec in (CODEC_GZIP, CODEC_SNAPPY):
            packed = compress(codec, b"b" * 1000)
            self.assertRaises(InvalidMessage, decompress, codec, packed[:-3])
        self.assertRaises(InvalidMessage, decompress, CODEC_GZIP, compress(CODEC_GZIP, b"x") + b"junk")
        self.assertRaises(InvalidMessage, decompress, 3, b"x")


# -- properties ------------------------------------------------------------------------------

_sets = st.tuples(
    st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    st.sampled_from([CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY]),
    st.integers(min_value=1, max_value=3),
)
_mutations = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
        st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
        st.tuples(st.just("attributes"), st.integers(min_value=0), st.integers(min_value=0, max_value=255)),
    ),
    min_size=1, max_size=4,
)


def _mutate(data: bytes, mutations) -> bytes:
    buf = bytearray(data)
    for kind, where, value in mutations:
        if not buf:
            break
        i = where % len(buf)
        if kind == "flip":
            buf[i] ^= value
        elif kind == "truncate":
            del buf[i:]
        elif len(buf) > 5:
            buf[5] = value  # the first entry's attributes (or a CRC byte of a magic-0 message)
    return bytes(buf)


class ValidatorProperties(SynchronousTestCase):
    @settings(max_examples=400, deadline=None)
    @given(_sets, _mutations)
    def test_never_stores_what_cannot_be_read(self, spec, mutations) -> None:
        """After random flips, truncations and attribute bytes, the validator either refuses the set with
        InvalidMessage or MessageSizeTooLarge, or the set reads back whole: every CRC valid, everything
        decompressible; nothing else is ever raised."""
        payloads, codec, copies = spec
        data = _mutate(encode_message_set(payloads, codec) * copies, mutations)
        try:
            count = validate_message_set(data, 1000, 10_000)
        except (InvalidMessage, MessageSizeTooLarge):
            items = list(scan_messages(data, 0, whole_buffer=True, max_decompressed_bytes=10_000))
            self.assertTrue(any(type(i) is CorruptMessage for i in items) or not data or
                            self._oversize(data))
            return
        decoded = list(iter_messages(data, 0, whole_buffer=True, max_decompressed_bytes=10_000))
        self.assertEqual(len(list(iter_messages(data, 0, deep=False, whole_buffer=True))), count)
        self.assertTrue(all(type(m) is MessageAndOffset for m in decoded))

    @staticmethod
    def _oversize(data: bytes) -> bool:
        return any(int.from_bytes(data[i:i + 4], "big", signed=True) > 1000 for i in range(0, len(data), 1))
