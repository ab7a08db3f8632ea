"""Tests for the kernel's produce-frame walk (L{kernel.produce_frames}, L{kernel.join_sets}), the broker's bulk
produce path (L{twlog.protocol.runs}): the compiled and the pure-Python kernels give identical results on the
same buffers (well-formed runs, every kind of frame a walk must stop at, random buffers from hypothesis), and
what they take is what the codec decodes and the validation accepts.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SkipTest, SynchronousTestCase

from twlog.errors import MalformedRequest
from twlog.protocol import codec
from twlog.protocol.frames import frame
from twlog.storage import kernel
from twlog.storage.message import CODEC_GZIP, CODEC_NONE, encode_message, encode_message_set
from twlog.storage.validation import validate_message_set

F, R = kernel.FRAME_FIELDS, kernel.RUN_FIELDS
#: No bound but the buffer: max_frame_bytes, max_frames, max_bytes, max_set_bytes, max_message_bytes.
OPEN = (1 << 31, 1 << 30, 1 << 40, 1 << 31, 0x7FFFFFFF)


def compiled():
    if kernel.compiled is None:
        raise SkipTest("the compiled kernel is not built (python setup.py build_ext --inplace)")
    return kernel.compiled


def produce(topic: str, partition: int, payloads: list[bytes]) -> bytes:
    """A PRODUCE frame, size prefix included."""
    return frame(codec.encode_request(codec.ProduceRequest(topic, partition, encode_message_set(payloads))))


def both(buf, *args):
    """The two kernels' results on the same arguments, checked equal."""
    pure = kernel.pure.produce_frames(buf, *args)
    fast = compiled().produce_frames(buf, *args)
    as_lists = lambda r: (r[0], list(r[1]), list(r[2]))  # noqa: E731
    assert as_lists(pure) == as_lists(fast), (as_lists(pure), as_lists(fast))
    return pure[0], pure[1], list(pure[2])


class ProduceFramesTests(SynchronousTestCase):
    def test_runs_group_consecutive_frames_of_one_partition(self) -> None:
        frames = [produce("a", 0, [b"x"]), produce("a", 0, [b"y", b"z"]), produce("a", 1, [b"w"]),
                  produce("b", 1, []), produce("a", 1, [b"v"])]
        buf = b"".join(frames)
        stop, fields, runs = both(buf, 0, -1, *OPEN)
        self.assertEqual(stop, len(buf))
        self.assertEqual(len(fields), 5 * F)
        sets = lambda *payloads: len(encode_message_set(payloads))  # noqa: E731
        self.assertEqual(runs, [0, 2, 3, sets(b"x") + sets(b"y", b"z"), 2, 1, 1, sets(b"w"), 3, 1, 0, 0,
                                4, 1, 1, sets(b"v")])
        for i, raw in enumerate(frames):  # each frame's fields are what the codec reads
            at = fields[i * F]
            request = codec.decode_request(buf[at + 4 : fields[i * F + 1]])
            self.assertEqual(buf[fields[i * F + 2] : fields[i * F + 2] + fields[i * F + 3]].decode(), request.topic)
            self.assertEqual(fields[i * F + 4], request.partition)
            self.assertEqual(buf[fields[i * F + 5] : fields[i * F + 6]], request.messages)
            self.assertEqual(fields[i * F + 7], validate_message_set(request.messages))
        for join in (kernel.pure.join_sets, compiled().join_sets):
            self.assertEqual(join(buf, fields, 0, 2), encode_message_set([b"x", b"y", b"z"]))
            self.assertEqual(join(buf, fields, 3, 3), b"")
            self.assertRaises(ValueError, join, buf, fields, 4, 6)

    def test_stops_at_any_frame_it_does_not_take(self) -> None:
        good = produce("t", 0, [b"one", b"two"])
        body = good[4:]
        bad_crc = bytearray(good)
        bad_crc[-1] ^= 1
        cases = {
            "partial": good[:-1],
            "size prefix alone": good[:3],
            "another type": frame(codec.encode_request(codec.OffsetsRequest("t", 0, -1, 1))),
            "trailing bytes": frame(body + b"\0"),
            "short set": frame(body[:-1]),
            "bad crc": bytes(bad_crc),
            "compressed": frame(codec.encode_request(codec.ProduceRequest(
                "t", 0, encode_message(encode_message_set([b"z"]), CODEC_GZIP)))),
            "negative topic length": frame(b"\0\0\xff\xff" + b"\0" * 10),
            "topic past the frame": frame(b"\0\0\0\x40" + b"\0" * 12),
            "too short": frame(b"\0\0\0\0\0\0\0\0"),
            "negative set size": frame(b"\0\0\0\0" + b"\0\0\0\0" + b"\xff\xff\xff\xff"),
        }
        for name, tail in cases.items():
            buf = good + tail + good
            stop, fields, runs = both(buf, 0, -1, *OPEN)
            self.assertEqual((stop, len(fields), runs[:2]), (len(good), F, [0, 1]), name)
        magic1 = frame(codec.encode_request(codec.ProduceRequest("t", 0, encode_message(b"m", CODEC_NONE))))
        self.assertEqual(both(magic1, 0, -1, *OPEN)[0], len(magic1))

    def test_bounds(self) -> None:
        good = produce("t", 3, [b"p" * 100])
        buf = good * 5
        size = len(good) - 4
        self.assertEqual(both(buf, 0, -1, size - 1, *OPEN[1:])[0], 0)  # max_frame_bytes
        self.assertEqual(both(buf, 0, -1, OPEN[0], 2, *OPEN[2:])[0], 2 * len(good))  # max_frames
        self.assertEqual(both(buf, 0, -1, *OPEN[:2], size + 1, *OPEN[3:])[0], 2 * len(good))  # max_bytes: one more
        self.assertEqual(both(buf, 0, -1, *OPEN[:3], 100, OPEN[4])[0], 0)  # max_set_bytes
        self.assertEqual(both(buf, 0, -1, *OPEN[:4], 100)[0], 0)  # max_message_bytes: the entry is 110 bytes
        self.assertEqual(both(buf, len(good), 3 * len(good) - 1, *OPEN)[0], 2 * len(good))  # pos, limit
        self.assertEqual(both(memoryview(buf), 0, -1, *OPEN)[0], len(buf))


@st.composite
def buffers(draw) -> bytes:
    """Runs of PRODUCE frames for a few partitions, some cut, corrupted or followed by something else."""
    frames = []
    for _ in range(draw(st.integers(0, 8))):
        payloads = draw(st.lists(st.binary(max_size=40), max_size=4))
        frames.append(produce(draw(st.sampled_from(["a", "b", "é"])), draw(st.integers(-1, 2)), payloads))
    buf = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(0, 2))):
        if buf:
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(buf)))
    return bytes(buf[:cut]) + draw(st.binary(max_size=20))


class HypothesisTests(SynchronousTestCase):
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(buffers(), st.integers(1, 9), st.integers(1, 400), st.integers(0, 60))
    def test_both_kernels_agree(self, buf: bytes, max_frames: int, max_bytes: int, max_set: int) -> None:
        compiled()
        stop, fields, runs = both(buf, 0, -1, 1 << 20, max_frames, max_bytes, max_set, 50)
        self.assertEqual(sum(runs[1::R]), len(fields) // F)
        for i in range(len(fields) // F):  # everything taken decodes (or names a topic that is not UTF-8, which
            # the broker decodes per run), and its set validates to its count
            raw = buf[fields[i * F] + 4 : fields[i * F + 1]]
            try:
                buf[fields[i * F + 2] : fields[i * F + 2] + fields[i * F + 3]].decode()
            except UnicodeDecodeError:
                self.assertRaises(MalformedRequest, codec.decode_request, raw)
                continue
            request = codec.decode_request(raw)
            self.assertEqual(validate_message_set(request.messages, 50), fields[i * F + 7])
        self.assertEqual(kernel.pure.join_sets(buf, fields, 0, len(fields) // F),
                         compiled().join_sets(buf, fields, 0, len(fields) // F))
