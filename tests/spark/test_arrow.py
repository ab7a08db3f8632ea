"""The Spark source's Arrow fast path against the per-message decoder on the same bytes."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.storage.corrupt import NOT_GZIP, nested_gzip
from twlog.spark.arrow import ARROW_SCHEMA, constant_strings, record_batch, rows_from_lists, scan_fetch
from twlog.storage.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    encode_message,
    encode_message_set,
    iter_messages,
)

BOUND = DEFAULT_MAX_DECOMPRESSED_BYTES


def payloads(first: int, count: int) -> list[bytes]:
    """Payloads of varied sizes, the empty one included."""
    return [(b"m%d-" % i) * (i % 7) for i in range(first, first + count)]


def mixed_log() -> bytes:
    """Plain messages, a gzip set, magic-1 uncompressed messages, a snappy set, plain again."""
    return b"".join([
        encode_message_set(payloads(0, 20)),
        encode_message_set(payloads(20, 30), CODEC_GZIP),
        b"".join(encode_message(p, CODEC_NONE) for p in payloads(50, 10)),
        encode_message_set(payloads(60, 25), CODEC_SNAPPY),
        encode_message_set(payloads(85, 15)),
    ])


def expected(buf: bytes, offset: int, end: int) -> list[tuple[int, bytes]]:
    """The (offset, value) rows the per-message decoder gives before C{end}."""
    return [(m.offset, m.payload) for m in iter_messages(buf, offset) if m.offset < end]


def rows_of(rows) -> list[tuple[int, bytes]]:
    data = bytes(rows.data)
    values = [data[a:b] for a, b in zip(rows.value_offsets[:-1].tolist(), rows.value_offsets[1:].tolist())]
    return list(zip(rows.offsets.tolist(), values))


class ScanFetchTests(SynchronousTestCase):
    def test_plain_set(self) -> None:
        """An uncompressed set gives the decoder's rows, and reading goes on after the last message."""
        buf = encode_message_set(payloads(0, 100))
        rows = scan_fetch(buf, 1000, 10**9, BOUND)
        self.assertEqual(rows_of(rows), expected(buf, 1000, 10**9))
        self.assertEqual(rows.next_offset, 1000 + len(buf))
        self.assertEqual(rows.last, 1000 + len(buf) - len(encode_message_set(payloads(99, 1))))

    def test_mixed_and_compressed(self) -> None:
        """Magic 0, magic 1, gzip and snappy sets give the decoder's rows; a wrapper's rows share its offset."""
        buf = mixed_log()
        rows = scan_fetch(buf, 0, len(buf), BOUND)
        self.assertEqual(rows_of(rows), expected(buf, 0, len(buf)))
        self.assertEqual(len(rows.offsets), 100)

    def test_partial_trailing_message(self) -> None:
        """Every cut of a buffer gives the decoder's rows for its whole messages and goes on where the cut one
        starts; a cut inside the first message is left to the decoder (None: FetchSizeTooSmall)."""
        buf = mixed_log()
        first = len(encode_message_set(payloads(0, 1)))
        for cut in range(0, len(buf) + 1, 7):
            rows = scan_fetch(buf[:cut], 0, len(buf), BOUND)
            if cut < first:
                self.assertIsNone(rows)
                continue
            want = expected(buf[:cut], 0, len(buf))
            self.assertEqual(rows_of(rows), want, cut)
            whole = list(iter_messages(buf[:cut], 0, deep=False))
            self.assertEqual(rows.next_offset, whole[-1].next_offset)

    def test_range_end(self) -> None:
        """Rows stop before the range's end, at every message boundary as end, and reading goes on at the end."""
        buf = mixed_log()
        ends = [m.next_offset for m in iter_messages(buf, 50, deep=False)]
        for end in ends:
            rows = scan_fetch(buf, 50, end, BOUND)
            self.assertEqual(rows_of(rows), expected(buf, 50, end))
            self.assertEqual(rows.next_offset, end)

    def test_bad_messages_go_to_the_decoder(self) -> None:
        """A CRC mismatch, an unknown magic, a wrapper that is not gzip, a nested wrapper, a length below the
        minimum: None, so that the per-message decoder names the bad message."""
        good = encode_message_set(payloads(0, 5))
        flipped = bytearray(good)
        flipped[-1] ^= 0xFF
        bad_magic = bytearray(good)
        bad_magic[4] = 7
        for buf in (bytes(flipped), bytes(bad_magic), good + NOT_GZIP, good + nested_gzip(2),
                    good + b"\x00\x00\x00\x01\x00" + good):
            self.assertIsNone(scan_fetch(buf, 0, 10**9, BOUND))


class RecordBatchTests(SynchronousTestCase):
    def test_columns(self) -> None:
        """A batch has the source's schema, constant topic, partition and broker columns, and the rows."""
        buf = mixed_log()
        batch = record_batch(scan_fetch(buf, 0, len(buf), BOUND), "clicks", "0-1", 3)
        self.assertEqual(batch.schema, ARROW_SCHEMA)
        self.assertEqual(batch.num_rows, 100)
        table = batch.to_pydict()
        self.assertEqual(set(table["topic"]), {"clicks"})
        self.assertEqual(set(table["partition"]), {"0-1"})
        self.assertEqual(set(table["broker"]), {3})
        self.assertEqual(list(zip(table["offset"], table["value"])), expected(buf, 0, len(buf)))

    def test_slow_path_rows_build_the_same_batch(self) -> None:
        """Rows from per-message lists make the same batch as the fast path's."""
        buf = mixed_log()
        want = expected(buf, 0, len(buf))
        slow = rows_from_lists([o for o, _ in want], [v for _, v in want], len(buf), None)
        fast = scan_fetch(buf, 0, len(buf), BOUND)
        self.assertEqual(record_batch(slow, "t", "0-0", 0), record_batch(fast, "t", "0-0", 0))

    def test_constant_strings(self) -> None:
        """A constant column holds n copies, also for n = 0 and for non-ASCII text."""
        self.assertEqual(constant_strings("é-1", 3).to_pylist(), ["é-1"] * 3)
        self.assertEqual(constant_strings("x", 0).to_pylist(), [])


class KernelTests(SynchronousTestCase):
    def test_both_kernels(self) -> None:
        """scan_fetch gives the same rows (or None, for the slow path) with the compiled kernel (its walk and
        gather) and the pure-Python one (its walk, numpy's gathering)."""
        from tests.storage.test_kernel import compiled, corrupt_sets
        from twlog.spark import arrow
        from twlog.storage import kernel

        sets = {**corrupt_sets(), "log": mixed_log()}
        found = {}
        for k in (compiled(), kernel.pure):
            self.patch(arrow, "walk", k.walk)
            self.patch(arrow, "gather", k.gather)
            self.patch(arrow, "KERNEL", "compiled" if k is compiled() else "pure Python")
            found[k] = []
            for buf in sets.values():
                for end in (-5, 0, len(buf) // 2, len(buf), 10**9):
                    rows = scan_fetch(buf, 1000, 1000 + end, 10**7)
                    found[k].append(None if rows is None else (rows_of(rows), rows.next_offset, rows.last))
            self.assertIsNone(scan_fetch(sets["log"], 1000, 995, 10**7))  # a range that ends before the fetch
        self.assertEqual(found[compiled()], found[kernel.pure])
        self.assertTrue(any(r is not None for r in found[kernel.pure]))
