"""Tests for twlog.protocol.frames: the one parser of int32-size-prefixed frames, with no I/O."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol.frames import FrameBuffer, FrameTooLarge, frame

FRAMES = [b"", b"a", b"hello", b"x" * 1000]
WIRE = b"".join(frame(f) for f in FRAMES)


class FrameBufferTests(SynchronousTestCase):
    def test_every_split(self) -> None:
        """Fed in two pieces split anywhere, the same frames come out, in order."""
        for cut in range(len(WIRE) + 1):
            buffer = FrameBuffer(10_000)
            got = buffer.feed(WIRE[:cut]) + buffer.feed(WIRE[cut:])
            self.assertEqual(got, FRAMES)
            self.assertEqual((buffer.buffered_bytes, buffer.needed_bytes), (0, 4))

    def test_byte_by_byte_is_linear(self) -> None:
        """One byte at a time, every byte is copied once into its frame."""
        buffer = FrameBuffer(10_000)
        got = [f for i in range(len(WIRE)) for f in buffer.feed(WIRE[i : i + 1])]
        self.assertEqual(got, FRAMES)
        self.assertLessEqual(buffer.frame_copied_bytes, len(WIRE))

    def test_too_large(self) -> None:
        """A size prefix over the limit raises FrameTooLarge naming the size, before the body arrives."""
        buffer = FrameBuffer(4)
        error = self.assertRaises(FrameTooLarge, buffer.feed, frame(b"12345")[:6])
        self.assertEqual(error.length, 5)
        self.assertEqual(buffer.peek(4), b"12")

    def test_pull(self) -> None:
        """append and next_frame hand out one frame at a time; needed_bytes says how much is missing."""
        buffer = FrameBuffer(100)
        buffer.append(frame(b"abc") + frame(b"de")[:3])
        self.assertEqual(buffer.next_frame(), b"abc")
        self.assertIsNone(buffer.next_frame())
        self.assertEqual(buffer.needed_bytes, 1)
        buffer.append(b"\x02de")
        self.assertEqual(buffer.next_frame(), b"de")
        buffer.append(b"\x00")
        buffer.clear()
        self.assertEqual((buffer.buffered_bytes, buffer.needed_bytes), (0, 4))

    def test_in_place(self) -> None:
        """A frame at least in_place_bytes long is assembled in place and comes out as a memoryview."""
        buffer = FrameBuffer(10_000, in_place_bytes=100)
        data = frame(b"y" * 500)
        got = buffer.feed(data[:50]) + buffer.feed(data[50:300]) + buffer.feed(data[300:] + frame(b"z"))
        self.assertIsInstance(got[0], memoryview)
        self.assertEqual([bytes(f) for f in got], [b"y" * 500, b"z"])
