"""Tests for the message walk's kernel: the compiled one and the pure-Python one give identical results.

Both kernels run on the same sets (plain, magic-1, gzip and snappy, partial trailing messages, every kind
of corrupt entry, random sets from hypothesis), first through the kernel's own functions (L{walk},
L{whole_end}, C{crc32}), then through their callers with each kernel patched in: the batch decoder, the
produce validation (with its exact error messages), the Spark Arrow path and BOUNDARIES' hop.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SkipTest, SynchronousTestCase

import twlog
from twlog.errors import BrokerError, FetchSizeTooSmall
from twlog.storage import batch as batch_module
from twlog.storage import index as index_module
from twlog.storage import kernel
from twlog.storage import validation as validation_module
from twlog.storage.batch import decode_batch
from twlog.storage.compression import cramjam
from twlog.storage.crc import crc32
from twlog.storage.index import PositionIndex, find_boundary
from twlog.storage.message import (
    CODEC_GZIP,
    CODEC_NONE,
    CODEC_SNAPPY,
    CorruptMessage,
    encode_message,
    encode_message_set,
)
from twlog.storage.validation import scan, validate_message_set

MAGIC1, WRAPPERS, UNIFORM = kernel.MAGIC1, kernel.WRAPPERS, kernel.UNIFORM
#: Every combination of the walk's flags.
FLAGS = [f for f in range(8)]
PAYLOADS = [b"payload %d " % i + b"y" * (i * 13 % 150) for i in range(20)] + [b""]


def compiled():
    if kernel.compiled is None:
        raise SkipTest("the compiled kernel is not built (python setup.py build_ext --inplace)")
    return kernel.compiled


def plain_set() -> bytes:
    return encode_message_set(PAYLOADS)


def magic1_set() -> bytes:
    return b"".join(encode_message(p, CODEC_NONE) for p in PAYLOADS)


def mixed_set() -> bytes:
    parts = [encode_message_set(PAYLOADS[:3]), encode_message(b"m1", CODEC_NONE), encode_message_set(PAYLOADS[3:6]),
             encode_message_set(PAYLOADS[6:12], CODEC_GZIP), encode_message_set(PAYLOADS[12:])]
    if cramjam is not None:
        parts.append(encode_message_set(PAYLOADS[:5], CODEC_SNAPPY))
    return b"".join(parts)


def with_bad_crc(buf: bytes, at: int) -> bytes:
    out = bytearray(buf)
    out[at + 4 + struct.unpack_from(">i", buf, at)[0] - 1] ^= 0xFF
    return bytes(out)


def second(buf: bytes) -> int:
    return 4 + struct.unpack_from(">i", buf, 0)[0]


def corrupt_sets() -> dict[str, bytes]:
    """Sets that end in each way a walk can stop, each after two good messages."""
    good = encode_message_set(PAYLOADS[:2])
    body = b"the payload"
    return {
        "plain": plain_set(),
        "magic 1": magic1_set(),
        "mixed": mixed_set(),
        "gzip": encode_message_set(PAYLOADS, CODEC_GZIP),
        "empty": b"",
        "bad CRC": good + with_bad_crc(encode_message_set([body]), 0) + good,
        "bad CRC magic 1": good + with_bad_crc(encode_message(body, CODEC_NONE), 0),
        "bad CRC wrapper": good + with_bad_crc(encode_message_set(PAYLOADS, CODEC_GZIP), 0),
        "bad magic": good + struct.pack(">iBI", len(body) + 5, 7, crc32(body)) + body,
        "bad attributes": good + struct.pack(">iBBI", len(body) + 6, 1, 0x40, crc32(body)) + body,
        "codec 3": good + struct.pack(">iBBI", len(body) + 6, 1, 3, crc32(body)) + body,
        "short magic 1": good + struct.pack(">iBI", 5, 1, 0),
        "length below minimum": good + struct.pack(">i", 2) + b"\0" * 12,
        "negative length": good + struct.pack(">i", -40) + b"\0" * 12,
        "partial message": good + encode_message_set([body])[:-3],
        "partial header": good + encode_message_set([body])[:6],
        "partial length": good + b"\0\0",
        "huge length": good + struct.pack(">i", 0x7FFFFFFF) + b"\0" * 20,
        "not gzip": good + encode_message(b"this is not gzip data", CODEC_GZIP),
        "nested": good + encode_message(encode_message_set([b"x"], CODEC_GZIP), CODEC_GZIP),
    }


def as_gathered(result):
    data, offsets = result
    return data, list(offsets)


def as_lists(result):
    stop, positions, width, wrappers = result
    return stop, list(positions), width, list(wrappers)


class KernelChoiceTests(SynchronousTestCase):
    def test_pure_python_is_forced_by_the_environment(self) -> None:
        """TWLOG_PURE_PYTHON=1 runs the pure-Python kernel, and twlog --version says so; else the compiled one."""
        root = os.path.dirname(os.path.dirname(os.path.abspath(twlog.__file__)))
        env = dict(os.environ, TWLOG_PURE_PYTHON="1", PYTHONPATH=root)
        code = "from twlog.storage import kernel; print(kernel.KERNEL, kernel.walk.__module__)"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.split(), ["pure", "Python", "twlog.storage.walk_py"])
        version = subprocess.run([sys.executable, "-m", "twlog.cli.main", "--version"], env=env,
                                 capture_output=True, text=True, check=True)
        self.assertEqual(version.stdout.strip(), "twlog 0.1.0 (kernel: pure Python)")
        compiled()
        env.pop("TWLOG_PURE_PYTHON")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.split(), ["compiled", "twlog.storage._kernel"])


class CrcTests(SynchronousTestCase):
    def test_every_length(self) -> None:
        """The compiled CRC-32 is zlib's for every length around the folding steps (64, 16) and long buffers."""
        c = compiled()
        data = bytes((i * 131 + 7) & 0xFF for i in range(70000))
        for n in [*range(0, 300), 1023, 1024, 1025, 65536, 70000]:
            self.assertEqual(c.crc32(data[:n]), zlib.crc32(data[:n]), n)
            self.assertEqual(c.crc32(memoryview(data)[3 : 3 + n]), zlib.crc32(data[3 : 3 + n]), n)

    @given(st.binary(max_size=2000))
    def test_random(self, data: bytes) -> None:
        self.assertEqual(compiled().crc32(data), zlib.crc32(data))


class WalkTests(SynchronousTestCase):
    def test_plain_set(self) -> None:
        """A plain set is taken whole: every entry's position, then the end; width 9, no wrapper."""
        buf = plain_set()
        ends = []
        pos = 0
        for p in PAYLOADS:
            ends.append(pos)
            pos += 9 + len(p)
        for k in (kernel.pure, compiled()):
            self.assertEqual(as_lists(k.walk(buf)), (len(buf), [*ends, len(buf)], 9, []))
            self.assertEqual(k.whole_end(buf), len(buf))

    def test_flags(self) -> None:
        """Magic-1 messages need MAGIC1, wrappers WRAPPERS (their positions listed), UNIFORM stops at a width change."""
        buf = mixed_set()
        m1 = len(encode_message_set(PAYLOADS[:3]))
        wrapper = m1 + len(encode_message(b"m1", CODEC_NONE)) + len(encode_message_set(PAYLOADS[3:6]))
        for k in (kernel.pure, compiled()):
            self.assertEqual(k.walk(buf)[0], m1)
            self.assertEqual(k.walk(buf, 0, -1, 0x7FFFFFFF, UNIFORM | MAGIC1)[0], m1)
            stop, positions, width, wrappers = k.walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1)
            self.assertEqual((stop, width, list(wrappers)), (wrapper, 0, []))
            stop, positions, width, wrappers = k.walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1 | WRAPPERS)
            self.assertEqual((stop, width, wrappers[0]), (len(buf), 0, wrapper))
            after = m1 + len(encode_message(b"m1", CODEC_NONE))
            self.assertEqual(k.walk(buf, m1, -1, 0x7FFFFFFF, UNIFORM | MAGIC1)[:3:2], (after, 10))

    def test_stops(self) -> None:
        """Each corrupt set stops both kernels at the same place, with the same arrays, for every flag,
        start, limit and maximum size."""
        c = compiled()
        for name, buf in corrupt_sets().items():
            for flags in FLAGS:
                for pos, limit in [(0, -1), (0, len(buf) // 2), (second(buf) if buf else 0, -1), (0, 10**9)]:
                    for maximum in (0x7FFFFFFF, 40):
                        args = (buf, pos, limit, maximum, flags)
                        self.assertEqual(as_lists(c.walk(*args)), as_lists(kernel.pure.walk(*args)), (name, args))
                        self.assertEqual(c.whole_end(buf, pos, limit, maximum),
                                         kernel.pure.whole_end(buf, pos, limit, maximum), (name, args))

    def test_stop_positions(self) -> None:
        """Where a walk of every kind of message stops: at the bad entry, after the two good ones."""
        good = len(encode_message_set(PAYLOADS[:2]))
        for k in (kernel.pure, compiled()):
            for name, buf in corrupt_sets().items():
                if name in ("plain", "magic 1", "mixed", "gzip", "empty", "nested", "not gzip"):
                    continue
                self.assertEqual(k.walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1 | WRAPPERS)[0], good, name)

    def test_gather(self) -> None:
        """gather lays the walked payloads end to end with their value offsets, alike in both kernels."""
        for name, buf in corrupt_sets().items():
            stop, positions, _, _ = kernel.pure.walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1 | WRAPPERS)
            del positions[-1]
            expected = kernel.pure.gather(buf, positions, stop)
            self.assertEqual(as_gathered(compiled().gather(buf, positions, stop)), as_gathered(expected), name)
        buf = magic1_set() + plain_set()
        stop, positions, _, _ = kernel.pure.walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1)
        del positions[-1]
        data, offsets = compiled().gather(buf, positions, stop)
        self.assertEqual(data, b"".join(PAYLOADS) * 2)
        self.assertEqual(list(offsets)[-1], 2 * len(b"".join(PAYLOADS)))
        for k in (kernel.pure, compiled()):
            self.assertRaises(ValueError, k.gather, buf, positions, len(buf) + 1)

    def test_buffers(self) -> None:
        """bytes, bytearray and memoryviews (slices included) are read alike."""
        buf = mixed_set()
        for k in (kernel.pure, compiled()):
            expected = as_lists(k.walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1 | WRAPPERS))
            for other in (bytearray(buf), memoryview(buf), memoryview(b"xx" + buf)[2:]):
                self.assertEqual(as_lists(k.walk(other, 0, -1, 0x7FFFFFFF, MAGIC1 | WRAPPERS)), expected)


def entries():
    """One entry of a random set: a plain, magic-1 or compressed message, maybe corrupted or cut."""
    payload = st.binary(max_size=300)
    message = st.one_of(
        payload.map(lambda p: encode_message_set([p])),
        payload.map(lambda p: encode_message(p, CODEC_NONE)),
        st.lists(payload, min_size=1, max_size=4).map(lambda ps: encode_message_set(ps, CODEC_GZIP)),
    )
    return message


@st.composite
def message_sets(draw) -> bytes:
    buf = bytearray(b"".join(draw(st.lists(entries(), max_size=8))))
    damage = draw(st.sampled_from(["none", "flip", "cut", "both"]))
    if buf and damage in ("flip", "both"):
        at = draw(st.integers(0, len(buf) - 1))
        buf[at] ^= draw(st.integers(1, 255))
    if buf and damage in ("cut", "both"):
        del buf[draw(st.integers(0, len(buf) - 1)):]
    return bytes(buf)


class CallerTests(SynchronousTestCase):
    """The walk's callers give the same answers, errors included, with either kernel."""

    def use(self, k) -> None:
        for module in (batch_module, validation_module):
            self.patch(module, "walk", k.walk)
        self.patch(batch_module, "whole_end", k.whole_end)
        self.patch(index_module, "whole_end", k.whole_end)

    def answers(self, k, buf: bytes) -> list:
        self.use(k)
        found = []
        for on_corrupt in ("fail", "skip"):
            try:
                b = decode_batch(buf, 100, topic="t", partition=0, on_corrupt=on_corrupt)
                found.append((list(b), b.next_offset, str(b.corrupt), [str(e) for e in b.skipped], b.payload_bytes,
                              b.columns()))
            except (CorruptMessage, FetchSizeTooSmall) as e:
                found.append((type(e), str(e)))
        found.append(batch_module.whole_entries_end(buf))
        wrappers: list[int] = []
        found.append((scan(buf, 200, 7, wrappers), wrappers))
        try:
            found.append(validate_message_set(buf, 1000))
        except BrokerError as e:
            found.append((type(e), str(e)))
        return found

    def assert_same(self, buf: bytes) -> None:
        c = compiled()
        self.assertEqual(self.answers(c, buf), self.answers(kernel.pure, buf))

    def test_corrupt_sets(self) -> None:
        for name, buf in corrupt_sets().items():
            self.assert_same(buf)
            self.assert_same(buf[: len(buf) * 2 // 3])

    def test_errors(self) -> None:
        """The produce validation's errors, with the compiled kernel, are the ones the Python code raises."""
        self.use(compiled())
        sets = corrupt_sets()
        good = len(encode_message_set(PAYLOADS[:2]))
        cases = {
            "bad CRC": f"CRC mismatch in message at byte {good}",
            "bad magic": f"unknown magic 7 at byte {good}",
            "bad attributes": f"unknown attributes 0x40 at byte {good}",
            "length below minimum": f"message size 2 at byte {good} is below the minimum 5",
            "partial header": f"partial message header at byte {good}",
        }
        for name, problem in cases.items():
            with self.assertRaises(BrokerError) as raised:
                validate_message_set(sets[name])
            self.assertEqual(str(raised.exception), problem)

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(message_sets())
    def test_random_sets(self, buf: bytes) -> None:
        """Random sets, valid and corrupted (a flipped byte, a cut), give the same answers with both kernels."""
        c = compiled()
        for flags in FLAGS:
            self.assertEqual(as_lists(c.walk(buf, 0, -1, 0x7FFFFFFF, flags)),
                             as_lists(kernel.pure.walk(buf, 0, -1, 0x7FFFFFFF, flags)))
        self.assertEqual(c.whole_end(buf), kernel.pure.whole_end(buf))
        stop, positions, _, _ = c.walk(buf, 0, -1, 0x7FFFFFFF, MAGIC1 | WRAPPERS)
        del positions[-1]
        expected = as_gathered(kernel.pure.gather(buf, positions, stop))
        self.assertEqual(as_gathered(c.gather(buf, positions, stop)), expected)
        self.assert_same(buf)

    def test_boundaries(self) -> None:
        """BOUNDARIES' search (find_boundary) answers the same for every position with either kernel."""
        log = b"".join(corrupt_sets()[name] for name in ("plain", "mixed", "bad CRC", "magic 1"))
        log += plain_set()
        index = PositionIndex()
        index.add_set(0, plain_set())

        def pread(pos: int, n: int) -> bytes:
            return log[pos : pos + n]

        found = {}
        for k in (compiled(), kernel.pure):
            self.use(k)
            found[k] = [find_boundary(pread, index, p, len(log), 10**6) for p in range(0, len(log), 7)]
        self.assertEqual(found[compiled()], found[kernel.pure])
        self.assertIn(len(plain_set()), found[kernel.pure])  # an answer after the indexed part, not only the end


# -- Encoding (the producer's side): encode_set and produce_frame ------------------------------------------------

HEAD = b"\x00\x00\x00\x05topic\x00\x00\x00\x03"


class EncodeTests(SynchronousTestCase):
    """Both kernels encode message sets and PRODUCE frames alike, as the Python encoder does."""

    def test_same_as_encode_message_set(self) -> None:
        """encode_set is encode_message_set without a codec; produce_frame frames it with its sizes."""
        for k in (kernel.pure, compiled()):
            for payloads in ([], [b""], PAYLOADS, [bytearray(b"ba"), memoryview(b"xmv")[1:]]):
                expected = encode_message_set([bytes(p) for p in payloads])
                self.assertEqual(k.encode_set(payloads), expected)
                self.assertEqual(k.encode_set(tuple(payloads)), expected)
                frame = k.produce_frame(HEAD, payloads)
                self.assertEqual(frame, struct.pack(">I", len(HEAD) + 4 + len(expected)) + HEAD
                                 + struct.pack(">I", len(expected)) + expected)

    def test_not_bytes(self) -> None:
        """Anything but bytes, bytearray or memoryview is a TypeError naming its type, from either kernel."""
        for k in (kernel.pure, compiled()):
            for bad in ("text", 5, None, [b"x"]):
                for call in (lambda: k.encode_set([b"ok", bad]), lambda: k.produce_frame(HEAD, [bad])):
                    with self.assertRaises(TypeError) as raised:
                        call()
                    self.assertEqual(str(raised.exception),
                                     f"messages must be bytes, not {type(bad).__name__}; encode text first")

    @given(st.lists(st.binary(max_size=400), max_size=60), st.binary(max_size=40))
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def test_random(self, payloads: list[bytes], head: bytes) -> None:
        """On random payloads both kernels give the same bytes, which the walk reads back whole."""
        c = compiled()
        self.assertEqual(c.encode_set(payloads), kernel.pure.encode_set(payloads))
        frame = c.produce_frame(head, payloads)
        self.assertEqual(frame, kernel.pure.produce_frame(head, payloads))
        messages = frame[8 + len(head):]
        stop, positions, _, _ = c.walk(messages)
        self.assertEqual((stop, len(positions) - 1), (len(messages), len(payloads)))
