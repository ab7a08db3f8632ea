"""Unit tests for twlog.protocol.framing: the linear-time frame receiver, on a StringTransport."""

from __future__ import annotations

import struct

from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol.framing import FrameReceiver


class Recorder(FrameReceiver):
    MAX_LENGTH = 1000

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []
        self.too_long: list[int] = []
        self.changes = 0

    def stringReceived(self, frame: bytes) -> None:
        self.frames.append(frame)

    def lengthLimitExceeded(self, length: int) -> None:
        self.too_long.append(length)

    def buffer_changed(self) -> None:
        self.changes += 1


def framed(*frames: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(f)) + f for f in frames)


def connect(receiver: FrameReceiver) -> StringTransport:
    transport = StringTransport()
    receiver.makeConnection(transport)
    return transport


class FrameReceiverTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.receiver = Recorder()
        self.transport = connect(self.receiver)

    def test_every_split(self) -> None:
        """Frames split at every byte boundary, in two reads, come out whole and in order."""
        frames = [b"", b"a", b"hello", bytes(range(256))]
        data = framed(*frames)
        for cut in range(len(data) + 1):
            receiver = Recorder()
            connect(receiver)
            receiver.dataReceived(data[:cut])
            receiver.dataReceived(data[cut:])
            self.assertEqual(receiver.frames, frames, cut)
            self.assertEqual(receiver.buffered_bytes, 0)

    def test_byte_at_a_time(self) -> None:
        """One byte per read: every frame, and nothing copied twice."""
        frames = [b"x" * n for n in (0, 1, 7, 300)]
        data = framed(*frames)
        for i in range(len(data)):
            self.receiver.dataReceived(data[i : i + 1])
        self.assertEqual(self.receiver.frames, frames)
        self.assertLessEqual(self.receiver.frame_copied_bytes, len(data))

    def test_many_frames_in_one_read(self) -> None:
        """A thousand frames in one read are cut out, each copied once."""
        frames = [b"%d" % i for i in range(1000)]
        data = framed(*frames)
        self.receiver.dataReceived(data)
        self.assertEqual(self.receiver.frames, frames)
        self.assertLessEqual(self.receiver.frame_copied_bytes, len(data))

    def test_exact_read_is_not_copied(self) -> None:
        """A read that is exactly one frame's body is handed over as it came."""
        body = b"b" * 500
        self.receiver.dataReceived(struct.pack(">I", 500))
        self.receiver.dataReceived(body)
        self.assertIs(self.receiver.frames[0], body)

    def test_max_length_frame(self) -> None:
        """A frame of exactly MAX_LENGTH bytes is accepted."""
        self.receiver.dataReceived(framed(b"m" * 1000))
        self.assertEqual(self.receiver.frames, [b"m" * 1000])
        self.assertEqual(self.receiver.too_long, [])

    def test_length_limit(self) -> None:
        """One byte over: lengthLimitExceeded as soon as the prefix arrives; nothing after it is delivered."""
        self.receiver.dataReceived(framed(b"ok") + struct.pack(">I", 1001) + b"ab")
        self.assertEqual(self.receiver.too_long, [1001])
        self.assertEqual(self.receiver.frames, [b"ok"])
        self.assertEqual(self.receiver.peek(2), b"ab")
        self.receiver.dataReceived(b"cd" + framed(b"later"))
        self.assertEqual(self.receiver.frames, [b"ok"])

    def test_unsigned_size(self) -> None:
        """As Int32StringReceiver: the size is unsigned, so a "negative" one is just too long."""
        self.receiver.dataReceived(b"\xff\xff\xff\xff")
        self.assertEqual(self.receiver.too_long, [0xFFFFFFFF])

    def test_default_length_limit_drops_the_connection(self) -> None:
        class Receiver(FrameReceiver):
            def stringReceived(self, frame) -> None:
                pass

        receiver = Receiver()
        transport = connect(receiver)
        receiver.dataReceived(struct.pack(">I", FrameReceiver.MAX_LENGTH + 1))
        self.assertTrue(transport.disconnecting)

    def test_buffered_and_needed(self) -> None:
        """What the receiver holds and still needs, as the budget reads them."""
        self.assertEqual((self.receiver.buffered_bytes, self.receiver.needed_bytes), (0, 4))
        self.receiver.dataReceived(b"\x00\x00")
        self.assertEqual((self.receiver.buffered_bytes, self.receiver.needed_bytes), (2, 2))
        self.receiver.dataReceived(b"\x00\x0a" + b"12345")
        self.assertEqual((self.receiver.buffered_bytes, self.receiver.needed_bytes), (5, 5))
        self.receiver.dataReceived(b"67890")
        self.assertEqual((self.receiver.buffered_bytes, self.receiver.needed_bytes), (0, 4))
        self.assertEqual(self.receiver.changes, 3)

    def test_pause_and_resume(self) -> None:
        """Paused: frames stay buffered and the transport stops reading; resumed: they are delivered."""
        self.receiver.pauseProducing()
        self.assertEqual(self.transport.producerState, "paused")
        self.receiver.dataReceived(framed(b"a", b"b"))
        self.assertEqual(self.receiver.frames, [])
        self.receiver.resumeProducing()
        self.assertEqual(self.transport.producerState, "producing")
        self.assertEqual(self.receiver.frames, [b"a", b"b"])

    def test_pause_inside_stringReceived(self) -> None:
        """Pausing from stringReceived stops delivery after that frame, as with Int32StringReceiver."""
        receiver = Recorder()
        connect(receiver)
        receiver.stringReceived = lambda frame: (receiver.frames.append(frame), receiver.pauseProducing())
        receiver.dataReceived(framed(b"1", b"2", b"3"))
        self.assertEqual(receiver.frames, [b"1"])
        receiver.resumeProducing()
        self.assertEqual(receiver.frames, [b"1", b"2"])

    def test_reading_holds(self) -> None:
        """The transport reads again only once every hold is released."""
        self.receiver.hold_reading("budget")
        self.receiver.pauseProducing()
        self.receiver.resumeProducing()
        self.assertEqual(self.transport.producerState, "paused")
        self.assertTrue(self.receiver.reading_held("budget"))
        self.receiver.release_reading("budget")
        self.assertEqual(self.transport.producerState, "producing")
        self.assertFalse(self.receiver.reading_held())

    def test_stop_producing(self) -> None:
        self.receiver.stopProducing()
        self.assertTrue(self.receiver.paused)
        self.assertEqual(self.transport.producerState, "stopped")

    def test_discard(self) -> None:
        """discard_buffer drops what is held and ignores what comes after."""
        self.receiver.dataReceived(b"\x00\x00\x00\x09abc")
        self.receiver.discard_buffer()
        self.assertEqual(self.receiver.buffered_bytes, 0)
        self.receiver.dataReceived(b"defghi" + framed(b"x"))
        self.assertEqual(self.receiver.frames, [])

    def test_send_string(self) -> None:
        self.receiver.sendString(b"abc")
        self.assertEqual(self.transport.value(), b"\x00\x00\x00\x03abc")

    def test_large_frame_in_reads_is_linear(self) -> None:
        """A 10 MB frame in 64 KiB reads copies each byte once (Int32StringReceiver copied ~800 MB)."""
        receiver = Recorder()
        receiver.MAX_LENGTH = 20_000_000
        connect(receiver)
        size = 10_000_000
        data = struct.pack(">I", size) + bytes(size)
        for start in range(0, len(data), 65536):
            receiver.dataReceived(data[start : start + 65536])
        self.assertEqual(len(receiver.frames), 1)
        self.assertEqual(len(receiver.frames[0]), size)
        self.assertLessEqual(receiver.frame_copied_bytes, size + 4)


class InPlaceRecorder(Recorder):
    """Frames of 8 bytes or more are assembled in place."""

    IN_PLACE_BYTES = 8


class InPlaceFrameTests(SynchronousTestCase):
    def test_every_split(self) -> None:
        """Large and small frames split at every pair of byte boundaries come out whole, in order, each byte
        copied once; a large one that waits for more reads comes as a memoryview."""
        frames = [b"abc", bytes(range(40)), b"", b"0123456789", b"x"]
        data = framed(*frames)
        for cut in range(len(data) + 1):
            for cut2 in range(cut, len(data) + 1, 7):
                receiver = InPlaceRecorder()
                connect(receiver)
                for piece in (data[:cut], data[cut:cut2], data[cut2:]):
                    receiver.dataReceived(piece)
                self.assertEqual([bytes(f) for f in receiver.frames], frames, (cut, cut2))
                # A large frame that had to wait for more reads was assembled in place.
                # (its size prefix is bytes 7-10: the read that completes it ends at `end`; its body ends at 51)
                end = next(e for e in (cut, cut2, len(data)) if e > 10)
                self.assertEqual(type(receiver.frames[1]), memoryview if end < 51 else bytes, (cut, cut2))
                self.assertEqual(receiver.buffered_bytes, 0)
                self.assertLessEqual(receiver.frame_copied_bytes, len(data))

    def test_buffered_and_needed(self) -> None:
        """While a frame fills in place, what it holds and what it still needs are counted for the budget."""
        receiver = InPlaceRecorder()
        connect(receiver)
        receiver.dataReceived(struct.pack(">I", 100) + b"a" * 30)
        self.assertEqual((receiver.buffered_bytes, receiver.needed_bytes), (30, 70))
        receiver.dataReceived(b"b" * 70 + struct.pack(">I", 3) + b"c")
        self.assertEqual([bytes(f) for f in receiver.frames], [b"a" * 30 + b"b" * 70])
        self.assertEqual((receiver.buffered_bytes, receiver.needed_bytes), (1, 2))

    def test_pause_with_a_whole_frame_in_place(self) -> None:
        """A paused receiver keeps a complete in-place frame, and what follows it, until resumed."""
        receiver = InPlaceRecorder()
        transport = connect(receiver)
        receiver.dataReceived(struct.pack(">I", 10) + b"0123")
        receiver.pauseProducing()
        receiver.dataReceived(b"456789" + framed(b"next"))
        self.assertEqual(receiver.frames, [])
        self.assertEqual(transport.producerState, "paused")
        receiver.resumeProducing()
        self.assertEqual([bytes(f) for f in receiver.frames], [b"0123456789", b"next"])

    def test_discard_in_place(self) -> None:
        """Discarding drops a half-filled in-place frame; nothing more is delivered."""
        receiver = InPlaceRecorder()
        connect(receiver)
        receiver.dataReceived(struct.pack(">I", 50) + b"a" * 20)
        receiver.discard_buffer()
        receiver.dataReceived(b"a" * 30 + framed(b"late"))
        self.assertEqual((receiver.frames, receiver.buffered_bytes), ([], 0))

    def test_large_frame_in_place_is_one_copy(self) -> None:
        """A 10 MB frame in 64 KiB reads is one buffer of the frame's size, each byte copied into it once."""
        receiver = InPlaceRecorder()
        receiver.MAX_LENGTH = 20_000_000
        connect(receiver)
        size = 10_000_000
        data = struct.pack(">I", size) + bytes(range(256)) * (size // 256) + bytes(size % 256)
        for start in range(0, len(data), 65536):
            receiver.dataReceived(data[start : start + 65536])
        (frame,) = receiver.frames
        self.assertIsInstance(frame, memoryview)
        self.assertEqual(frame, data[4:])
        self.assertEqual(receiver.frame_copied_bytes, size + 4)
