"""Tests for the batch decoder: on the same bytes, exactly what the per-message path (scan_messages) gives.

The reference is C{scan_messages}, the per-message decoder every reader used
before, with the corrupt-message rules of issue 9 applied to its items (the
valid messages before a bad one; "fail" stops there, or raises when it is
first; "skip" goes on where the next message starts).  Sets are plain,
magic-1, gzip and snappy wrappers, mixed, corrupt in each way a stored set can
be, and cut at every byte (a fetch's partial trailing message).
"""

from __future__ import annotations

import itertools
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.storage.corrupt import NOT_GZIP, gzip_bomb, nested_gzip
from twlog.errors import FetchSizeTooSmall
from twlog.storage import batch as batch_module
from twlog.storage.batch import decode_batch, whole_entries_end
from twlog.storage.crc import crc32
from twlog.storage.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    CorruptMessage,
    encode_message,
    encode_message_set,
    scan_messages,
)

TOPIC, PARTITION, BASE = "t", 3, 5000


def magic1(payload: bytes) -> bytes:
    """An uncompressed magic-1 message (as Kafka 0.7's producers write)."""
    return encode_message(payload, CODEC_NONE)


def bad_crc(payload: bytes) -> bytes:
    entry = bytearray(encode_message_set([payload]))
    entry[-1] ^= 0xFF
    return bytes(entry)


def bad_magic(payload: bytes) -> bytes:
    return struct.pack(">iBI", len(payload) + 5, 7, crc32(payload)) + payload


def bad_attributes(payload: bytes) -> bytes:
    return struct.pack(">iBBI", len(payload) + 6, 1, 0x40, crc32(payload)) + payload


def insane_length() -> bytes:
    return struct.pack(">i", 2) + b"\0" * 12


def reference(buf: bytes, offset: int, on_corrupt: str = "fail", **options):
    """The per-message path's answer: (messages, next_offset, corrupt, skipped), or the exception it raises."""
    messages, skipped, next_offset = [], [], offset
    for item in scan_messages(buf, offset, **options):
        if type(item) is not CorruptMessage:
            messages.append(item)
            next_offset = item.next_offset
            continue
        error = item.named(TOPIC, PARTITION)
        if on_corrupt == "skip" and error.next_offset is not None:
            skipped.append(error)
            next_offset = error.next_offset
        elif messages or skipped:
            return messages, next_offset, error, skipped
        else:
            raise error
    return messages, next_offset, None, skipped


def described(error: CorruptMessage | None):
    return None if error is None else (str(error), error.offset, error.next_offset)


class SameAsPerMessageMixin:
    def assert_same(self, buf: bytes, offset: int = BASE, on_corrupt: str = "fail", **options) -> None:
        """decode_batch and the per-message path agree on C{buf}: messages, offsets, corrupt, skipped, errors."""
        try:
            expected = reference(buf, offset, on_corrupt, **options)
        except (CorruptMessage, FetchSizeTooSmall) as e:
            with self.assertRaises(type(e)) as raised:
                decode_batch(buf, offset, topic=TOPIC, partition=PARTITION, on_corrupt=on_corrupt, **options)
            self.assertEqual(str(raised.exception), str(e))
            return
        batch = decode_batch(buf, offset, topic=TOPIC, partition=PARTITION, on_corrupt=on_corrupt, **options)
        messages, next_offset, corrupt, skipped = expected
        self.assertEqual(list(batch), messages)
        self.assertEqual(len(batch), len(messages))
        self.assertEqual([bytes(v) for v in batch.views()], [m.payload for m in messages])
        self.assertEqual(batch.next_offset, next_offset)
        self.assertEqual(described(batch.corrupt), described(corrupt))
        self.assertEqual([described(e) for e in batch.skipped], [described(e) for e in skipped])
        self.assertEqual(batch.last_boundary, (messages[-1].offset, messages[-1].next_offset) if messages else None)
        self.assertEqual(batch.payload_bytes, sum(len(m.payload) for m in messages))
        columns = batch.columns()
        self.assertEqual(list(columns.offsets), [m.offset for m in messages])
        self.assertEqual(list(columns.next_offsets), [m.next_offset for m in messages])
        self.assertEqual([bytes(columns.buffer[s:e]) for s, e in zip(columns.starts, columns.ends)],
                         [m.payload for m in messages])
        data, value_offsets = batch.gathered()
        self.assertEqual(data, b"".join(m.payload for m in messages))
        self.assertEqual(list(value_offsets), [0, *itertools.accumulate(len(m.payload) for m in messages)])
        if batch_module.numpy is not None:  # the pure-Python gathering gives the same
            self.patch(batch_module, "numpy", None)
            self.assertEqual(batch.gathered(), (data, value_offsets))
            self.assertEqual(batch.columns(), columns)


PAYLOADS = [b"message %d " % i + b"x" * (i % 7) for i in range(12)] + [b""]


class BatchDecodingTests(SameAsPerMessageMixin, SynchronousTestCase):
    def test_plain_set(self) -> None:
        """A set of magic-0 messages: every one, at its offset; payloads are views into the fetched bytes."""
        buf = encode_message_set(PAYLOADS)
        self.assert_same(buf)
        batch = decode_batch(buf, BASE)
        self.assertEqual(len(batch), len(PAYLOADS))
        self.assertIs(batch.columns().buffer.obj, buf)  # no copy of the fetched bytes

    def test_magic1_and_mixed_sets(self) -> None:
        """Uncompressed magic-1 messages (Kafka 0.7's producers), alone and mixed with magic 0."""
        self.assert_same(b"".join(magic1(p) for p in PAYLOADS))
        mixed = b"".join(magic1(p) if i % 3 else encode_message_set([p]) for i, p in enumerate(PAYLOADS))
        self.assert_same(mixed)

    def test_compressed_sets(self) -> None:
        """gzip and snappy wrappers: inner messages carry the wrapper's offset, the last the offset after it."""
        for codec in (CODEC_GZIP, CODEC_SNAPPY):
            wrapped = encode_message_set(PAYLOADS[:5], codec) + encode_message_set(PAYLOADS[5:], codec)
            self.assert_same(wrapped)
            mixed = encode_message_set(PAYLOADS[:3]) + wrapped + encode_message_set(PAYLOADS[3:6])
            self.assert_same(mixed)
            self.assert_same(mixed, deep=False)

    def test_partial_trailing_message_at_every_cut(self) -> None:
        """A buffer cut at any byte (as a fetch's byte limit cuts it): the whole messages, the rest dropped;
        the first message cut raises FetchSizeTooSmall, as the per-message path does."""
        buf = (encode_message_set(PAYLOADS[:4]) + encode_message_set(PAYLOADS[4:8], CODEC_GZIP)
               + b"".join(magic1(p) for p in PAYLOADS[8:]))
        for cut in range(1, len(buf) + 1):
            self.assert_same(buf[:cut])
            self.assert_same(buf[:cut], whole_buffer=True)

    def test_corrupt_messages(self) -> None:
        """Each kind of bad stored message: the valid ones before it, then it is named (fail) or skipped."""
        good = encode_message_set(PAYLOADS[:3])
        for bad in (bad_crc(b"flipped"), bad_magic(b"magic 7"), bad_attributes(b"attributes 0x40"), NOT_GZIP,
                    nested_gzip(2), encode_message(b"\x00" * 20, CODEC_SNAPPY), insane_length()):
            for buf in (good + bad + good, bad + good, good + bad):
                for on_corrupt in ("fail", "skip"):
                    self.assert_same(buf, on_corrupt=on_corrupt)

    def test_first_message_corrupt_raises_naming_offsets(self) -> None:
        """A corrupt first message raises CorruptMessage naming the partition, its offset and the one after it."""
        bad = bad_crc(b"flipped")
        with self.assertRaises(CorruptMessage) as raised:
            decode_batch(bad + encode_message_set([b"ok"]), BASE, topic=TOPIC, partition=PARTITION)
        self.assertEqual((raised.exception.offset, raised.exception.next_offset), (BASE, BASE + len(bad)))
        self.assertIn(f"{TOPIC}-{PARTITION}", str(raised.exception))

    def test_decompression_bound(self) -> None:
        """A wrapper inflating past the bound is one corrupt message, as on the per-message path."""
        buf = encode_message_set([b"before"]) + gzip_bomb(64 * 1024) + encode_message_set([b"after"])
        for on_corrupt in ("fail", "skip"):
            self.assert_same(buf, on_corrupt=on_corrupt, max_decompressed_bytes=16 * 1024)

    def test_empty(self) -> None:
        """An empty buffer is an empty batch at the fetch's offset."""
        batch = decode_batch(b"", BASE)
        self.assertEqual((len(batch), batch.next_offset, list(batch), batch.last_boundary), (0, BASE, [], None))
        self.assertEqual(bytes(batch.columns().buffer), b"")

    def test_whole_entries_end(self) -> None:
        """The end of the last whole entry, from length fields alone: where the next fetch starts."""
        buf = encode_message_set(PAYLOADS[:3]) + encode_message_set(PAYLOADS[3:6], CODEC_GZIP)
        ends = [m.next_offset for m in scan_messages(buf, 0)]
        for cut in range(len(buf) + 1):
            self.assertEqual(whole_entries_end(buf[:cut]), max([e for e in ends if e <= cut], default=0))
        self.assertEqual(whole_entries_end(encode_message_set([b"a"]) + insane_length()), 10)


def _entry(kind: str, payload: bytes) -> bytes:
    return {
        "plain": lambda: encode_message_set([payload]),
        "magic1": lambda: magic1(payload),
        "gzip": lambda: encode_message_set([payload, payload[::-1]], CODEC_GZIP),
        "snappy": lambda: encode_message_set([payload, b"2"], CODEC_SNAPPY),
        "crc": lambda: bad_crc(payload),
        "magic": lambda: bad_magic(payload),
        "not gzip": lambda: NOT_GZIP,
        "nested": lambda: nested_gzip(1),
    }[kind]()


entries = st.lists(st.tuples(st.sampled_from(["plain", "plain", "magic1", "gzip", "snappy", "crc", "magic",
                                              "not gzip", "nested"]), st.binary(max_size=40)), max_size=12)


class BatchPropertyTests(SameAsPerMessageMixin, SynchronousTestCase):
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(entries, st.integers(0, 4000), st.sampled_from(["fail", "skip"]), st.integers(0, 1_000_000))
    def test_random_sets(self, kinds, cut, on_corrupt, offset) -> None:
        """Random runs of good, compressed and corrupt entries, cut anywhere: the same as the per-message path."""
        buf = b"".join(_entry(kind, payload) for kind, payload in kinds)
        self.assert_same(buf[: max(1, min(cut, len(buf)))] if buf else buf, offset, on_corrupt)
