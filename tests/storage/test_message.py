"""Tests for twlog.storage.message: the on-disk and on-wire message format."""

from __future__ import annotations

import struct
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import InvalidMessage, MessageSizeTooLarge
from twlog.storage import message
from twlog.storage.crc import crc32, crcmod_crc32, crcmod_uses_extension, zlib_crc32
from twlog.storage.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    OVERHEAD,
    encode_message,
    encode_message_set,
    iter_messages,
    scan,
    validate_message_set,
)

payload_lists = st.lists(st.binary(max_size=300), max_size=30)


class CrcTests(SynchronousTestCase):
    def test_crcmod_runs_its_c_extension(self) -> None:
        """crcmod uses its C extension, never the pure-Python fallback."""
        self.assertTrue(crcmod_uses_extension())

    @given(st.binary(max_size=2000))
    def test_hot_path_crc_equals_crcmod(self, data: bytes) -> None:
        """The hot-path CRC-32 (ISA-L's) gives crcmod's predefined crc-32 and zlib's for any input."""
        self.assertEqual(crc32(data), crcmod_crc32(data))
        self.assertEqual(crc32(data), zlib_crc32(data))

    @given(st.binary(max_size=600), st.integers(0, 300), st.integers(0, 300))
    def test_hot_path_crc_of_views(self, data: bytes, start: int, length: int) -> None:
        """The hot path reads memoryview slices and bytearrays in place, with zlib's results."""
        view = memoryview(data)[start : start + length]
        self.assertEqual(crc32(view), zlib_crc32(bytes(view)))
        self.assertEqual(crc32(bytearray(view)), zlib_crc32(bytes(view)))


class EncodingTests(SynchronousTestCase):
    def test_magic0_layout(self) -> None:
        """A magic-0 message is [int32 N][int8 0][uint32 crc][payload], big-endian."""
        payload = b"hello"
        self.assertEqual(
            encode_message(payload),
            struct.pack(">iBI", len(payload) + 5, 0, zlib.crc32(payload)) + payload,
        )

    def test_magic1_layout(self) -> None:
        """A magic-1 message carries its codec in the attribute byte."""
        payload = b"zz"
        self.assertEqual(
            encode_message(payload, CODEC_GZIP),
            struct.pack(">iBBI", len(payload) + 6, 1, 1, zlib.crc32(payload)) + payload,
        )

    def test_overhead_is_nine_bytes(self) -> None:
        """Each uncompressed message costs exactly 9 bytes beyond its payload."""
        payloads = [b"x" * 200] * 50
        self.assertEqual(OVERHEAD, 9)
        self.assertEqual(len(encode_message_set(payloads)), 50 * (200 + 9))

    @given(payload_lists)
    def test_round_trip(self, payloads: list[bytes]) -> None:
        """Any payloads survive encode then decode, with offsets chained by entry size."""
        data = encode_message_set(payloads)
        decoded = list(iter_messages(data, 1000, whole_buffer=True))
        self.assertEqual([m.payload for m in decoded], payloads)
        offset = 1000
        for m, payload in zip(decoded, payloads):
            self.assertEqual((m.offset, m.next_offset), (offset, offset + 9 + len(payload)))
            offset = m.next_offset

    @given(payload_lists.filter(bool), st.sampled_from([CODEC_GZIP, CODEC_SNAPPY]))
    @settings(max_examples=50)
    def test_compressed_round_trip(self, payloads: list[bytes], codec: int) -> None:
        """A compressed set is one wrapper whose inner messages decode back in order."""
        data = encode_message_set(payloads, codec)
        self.assertEqual(validate_message_set(data), 1)
        decoded = list(iter_messages(data, 0))
        self.assertEqual([m.payload for m in decoded], payloads)
        self.assertEqual([m.next_offset for m in decoded][-1], len(data))
        self.assertTrue(all(m.next_offset == 0 for m in decoded[:-1]))

    def test_shallow_iteration_keeps_wrapper(self) -> None:
        """deep=False yields the compressed wrapper itself."""
        data = encode_message_set([b"a", b"b"], CODEC_GZIP)
        (wrapper,) = iter_messages(data, 0, deep=False)
        self.assertEqual(message.decompress(CODEC_GZIP, wrapper.payload), encode_message_set([b"a", b"b"]))

    def test_snappy_uses_snappy_java_framing(self) -> None:
        """Snappy payloads use the framing Kafka 0.7 clients wrote (snappy-java's stream header)."""
        data = encode_message_set([b"abc" * 100], CODEC_SNAPPY)
        self.assertTrue(data[10:].startswith(b"\x82SNAPPY\x00"))

    def test_compression_shrinks_log_data(self) -> None:
        """gzip of repetitive log lines is smaller than the plain set."""
        lines = [b'{"page": "/home", "member": %d}' % i for i in range(100)]
        self.assertLess(len(encode_message_set(lines, CODEC_GZIP)), len(encode_message_set(lines)) // 3)

    def test_unknown_codec(self) -> None:
        """Compressing with an unknown codec is InvalidMessage."""
        self.assertRaises(InvalidMessage, encode_message_set, [b"a"], 3)

    def test_no_codec_compressed_is_plain(self) -> None:
        """encode_message_set with CODEC_NONE is the plain set."""
        self.assertEqual(encode_message_set([b"q"], CODEC_NONE), encode_message(b"q"))


class ValidationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.data = encode_message_set([b"a" * 10, b"b" * 20, b"c" * 30])

    def test_valid_set_counts_messages(self) -> None:
        """A valid set validates to its message count."""
        self.assertEqual(validate_message_set(self.data), 3)
        self.assertEqual(validate_message_set(b""), 0)

    def test_crc_mismatch(self) -> None:
        """A flipped payload byte fails with a CRC error naming the message's byte position."""
        corrupt = bytearray(self.data)
        corrupt[19 + 9 + 3] ^= 0xFF
        e = self.assertRaises(InvalidMessage, validate_message_set, bytes(corrupt))
        self.assertIn("CRC mismatch in message at byte 19", str(e))

    def test_every_truncation_is_rejected(self) -> None:
        """Every strict prefix that cuts a message is rejected; prefixes at boundaries are valid."""
        boundaries = {0, 19, 48, 87}
        for cut in range(len(self.data)):
            if cut in boundaries:
                self.assertEqual(scan(self.data[:cut]).problem, None)
            else:
                result = scan(self.data[:cut])
                self.assertIsNotNone(result.problem, cut)
                self.assertEqual(result.valid_bytes, max(b for b in boundaries if b <= cut))
                self.assertGreater(result.needed, 0)
                self.assertRaises(InvalidMessage, validate_message_set, self.data[:cut])

    def test_size_below_minimum(self) -> None:
        """An entry shorter than a header is rejected, not read as a message."""
        result = scan(struct.pack(">i", 3) + b"\x00" * 8)
        self.assertIn("below the minimum", result.problem)
        self.assertEqual(result.needed, 0)

    def test_negative_size(self) -> None:
        """A negative size is rejected."""
        self.assertIn("below the minimum", scan(struct.pack(">iBI", -7, 0, 0)).problem)

    def test_unknown_magic(self) -> None:
        """A magic byte other than 0 or 1 is rejected."""
        data = bytearray(encode_message(b"x"))
        data[4] = 7
        self.assertIn("unknown magic 7", scan(bytes(data)).problem)

    def test_unknown_attributes(self) -> None:
        """Attribute bits outside the codec field, or codec 3, are rejected."""
        for attributes in (3, 0x10):
            data = bytearray(encode_message(b"x", 0))
            data[5] = attributes
            self.assertIn("unknown attributes", scan(bytes(data)).problem)

    def test_too_large(self) -> None:
        """A message above the maximum size is rejected even when its CRC is right."""
        e = self.assertRaises(MessageSizeTooLarge, validate_message_set, encode_message(b"x" * 100), 50)
        self.assertIn("exceeds the maximum 50", str(e))
        self.assertEqual((e.message_size, e.limit), (105, 50))

    def test_accepts_memoryview_and_bytearray(self) -> None:
        """Validation works on any buffer, without copying it first."""
        self.assertEqual(validate_message_set(memoryview(self.data)), 3)
        self.assertEqual(validate_message_set(bytearray(self.data)), 3)
