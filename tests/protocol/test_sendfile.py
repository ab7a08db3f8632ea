"""Tests for ResponseSender: sendfile's short writes, EAGAIN and fallbacks, and the read-and-write path.

No sockets: the transport is a StringTransport that can pretend to buffer,
and sendfile(2) is a scripted fake; the log bytes come from a real file.
"""

from __future__ import annotations

import errno
import os

import attrs
from twisted.internet.error import ConnectionDone
from twisted.test.proto_helpers import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol import sendfile as sendfile_module
from twlog.protocol.sendfile import HIGH_WATER_BYTES, ResponseSender, buffered_bytes, can_sendfile
from twlog.storage.segment import FileRegion

SOCKET_FD = 42
DATA = bytes(range(256)) * 4  # 1024 bytes of log


class FakeTransport(StringTransport):
    """A StringTransport with what the sendfile path uses of a TCP transport.

    With C{buffering}, written bytes also wait in C{dataBuffer} (as in a
    Twisted TCP transport whose socket is full) until L{drain}.
    """

    def __init__(self, buffering: bool = False, socket_takes: list[int | OSError] | None = None) -> None:
        super().__init__()
        self.buffering = buffering
        self.dataBuffer = b""
        self.writing_started = 0
        #: What each direct socket send takes (bytes, or an error to raise); all of it when unscripted.
        self.socket_takes = list(socket_takes or [])
        #: The flags of each direct socket send.
        self.send_flags: list[int] = []

    def send(self, data: bytes, flags: int = 0) -> int:
        """The socket's send(2): bytes it takes go straight to the wire (here: the transport's value)."""
        self.send_flags.append(flags)
        take = self.socket_takes.pop(0) if self.socket_takes else len(data)
        if isinstance(take, OSError):
            raise take
        self.io.write(data[:take])
        return min(take, len(data))

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.buffering:
            self.dataBuffer += data

    def drain(self) -> None:
        self.dataBuffer = b""

    def getHandle(self):
        return self

    def fileno(self) -> int:
        return SOCKET_FD

    def startWriting(self) -> None:
        self.writing_started += 1


@attrs.define
class FakeSegment:
    """What a FileRegion uses of a Segment: its descriptor."""

    fd: int


class FakeSendfile:
    """sendfile(2), scripted: each call takes the next outcome (bytes to send, or an exception to raise).

    Sent bytes are read from the file and kept in C{sent}, so a test can check the bytes on the "wire".
    """

    def __init__(self, *outcomes: int | OSError | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[int, int, int, int]] = []
        self.sent = b""

    def __call__(self, out_fd: int, in_fd: int, position: int, count: int) -> int:
        self.calls.append((out_fd, in_fd, position, count))
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, OSError):
            raise outcome
        sent = count if outcome is None else min(outcome, count)
        self.sent += os.pread(in_fd, sent, position)
        return sent


class SenderTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(DATA)
        self.fd = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, self.fd)

    def region(self, position: int = 0, length: int = len(DATA)) -> FileRegion:
        return FileRegion(FakeSegment(self.fd), position, length, 1000 + position)

    def sender(self, transport, parts, fake: FakeSendfile | None = None, **options) -> tuple[ResponseSender, object]:
        """A started sender (sendfile on when C{fake} is given) and its Deferred."""
        sender = ResponseSender(transport, parts, use_sendfile=fake is not None, send_file=fake, **options)
        return sender, sender.start()


class SendfilePathTests(SenderTestCase):
    def test_whole_region_in_one_call(self) -> None:
        """Header bytes are written, then the region goes out in one sendfile call; the producer leaves."""
        transport, fake = FakeTransport(), FakeSendfile()
        sender, d = self.sender(transport, [b"header", self.region(100, 500)], fake)
        self.successResultOf(d)
        self.assertEqual(transport.value(), b"header")
        self.assertEqual(fake.calls, [(SOCKET_FD, self.fd, 100, 500)])
        self.assertEqual(fake.sent, DATA[100:600])
        self.assertEqual((sender.sendfile_bytes, sender.copied_bytes), (500, 0))
        self.assertIsNone(transport.producer)

    def test_short_writes_resume_where_they_stopped(self) -> None:
        """A short write waits for writability; each resume sends the rest from where the last call ended."""
        transport, fake = FakeTransport(), FakeSendfile(300, 300, 300)
        sender, d = self.sender(transport, [self.region(), b"trailer"], fake)
        self.assertNoResult(d)
        self.assertEqual(transport.writing_started, 1)
        self.assertIs(transport.producer, sender)
        sender.resumeProducing()
        sender.resumeProducing()
        self.assertNoResult(d)
        self.assertEqual(transport.writing_started, 3)
        sender.resumeProducing()
        self.successResultOf(d)
        self.assertEqual([c[2:] for c in fake.calls], [(0, 1024), (300, 724), (600, 424), (900, 124)])
        self.assertEqual(fake.sent, DATA)
        self.assertEqual(transport.value(), b"trailer")  # after the region, never before it
        self.assertEqual(sender.sendfile_bytes, 1024)

    def test_eagain_waits_for_writability(self) -> None:
        """EAGAIN sends nothing and asks to be woken when the socket is writable; the resume sends it all."""
        transport = FakeTransport()
        fake = FakeSendfile(BlockingIOError(errno.EAGAIN, "try again"), BlockingIOError(errno.EAGAIN, "again"))
        sender, d = self.sender(transport, [self.region()], fake)
        self.assertNoResult(d)
        self.assertEqual(transport.writing_started, 1)
        sender.resumeProducing()
        self.assertNoResult(d)
        self.assertEqual(transport.writing_started, 2)
        sender.resumeProducing()
        self.successResultOf(d)
        self.assertEqual([c[2:] for c in fake.calls], [(0, 1024)] * 3)
        self.assertEqual(fake.sent, DATA)

    def test_buffered_bytes_go_first(self) -> None:
        """sendfile waits until bytes already in the transport's buffer (an earlier response, then the
        header, which joins them there) have drained."""
        transport, fake = FakeTransport(buffering=True), FakeSendfile()
        transport.write(b"earlier")
        sender, d = self.sender(transport, [b"header", self.region()], fake)
        self.assertEqual(buffered_bytes(transport), 13)
        self.assertEqual((fake.calls, transport.send_flags), ([], []))
        self.assertNoResult(d)
        transport.drain()
        sender.resumeProducing()
        self.successResultOf(d)
        self.assertEqual(transport.value(), b"earlierheader")
        self.assertEqual(fake.sent, DATA)

    def test_header_goes_straight_to_the_socket(self) -> None:
        """With nothing buffered, the header parts are one send(2) flagged MSG_MORE, and sendfile follows at
        once, in the same turn (no wait for a drain)."""
        transport, fake = FakeTransport(buffering=True), FakeSendfile()
        sender, d = self.sender(transport, [b"head", b"er", self.region(0, 10), b"part", self.region(20, 5)], fake)
        self.successResultOf(d)
        self.assertEqual(transport.send_flags, [sendfile_module._MSG_MORE] * 2)
        self.assertEqual(transport.value(), b"header" + b"part")
        self.assertEqual([c[2:] for c in fake.calls], [(0, 10), (20, 5)])
        self.assertEqual(buffered_bytes(transport), 0)

    def test_header_the_socket_does_not_take_is_buffered(self) -> None:
        """What send(2) does not take (a short send, or EAGAIN) goes to the transport's buffer, and sendfile
        waits for it to drain."""
        for takes, direct in (([2], b"he"), ([BlockingIOError(errno.EAGAIN, "again")], b"")):
            transport, fake = FakeTransport(buffering=True, socket_takes=takes), FakeSendfile()
            sender, d = self.sender(transport, [b"header", self.region()], fake)
            self.assertEqual(transport.dataBuffer, b"header"[len(direct):])
            self.assertEqual(transport.value(), b"header")
            self.assertEqual(fake.calls, [])
            transport.drain()
            sender.resumeProducing()
            self.successResultOf(d)
            self.assertEqual(fake.sent, DATA)

    def test_header_alone_is_written(self) -> None:
        """A response without log bytes (an error) goes through the transport, not the socket."""
        transport, fake = FakeTransport(), FakeSendfile()
        sender, d = self.sender(transport, [b"error response"], fake)
        self.successResultOf(d)
        self.assertEqual((transport.value(), transport.send_flags, fake.calls), (b"error response", [], []))

    def test_several_regions(self) -> None:
        """Regions and byte strings go out in order; empty parts are skipped."""
        transport, fake = FakeTransport(), FakeSendfile()
        sender, d = self.sender(transport, [self.region(0, 10), b"", self.region(5, 0), self.region(20, 5)], fake)
        self.successResultOf(d)
        self.assertEqual([c[2:] for c in fake.calls], [(0, 10), (20, 5)])
        self.assertEqual(sender.sendfile_bytes, 15)

    def test_file_shorter_than_region(self) -> None:
        """sendfile sending 0 bytes means the segment ended early: an error, never made-up bytes."""
        transport, fake = FakeTransport(), FakeSendfile(0)
        _, d = self.sender(transport, [self.region()], fake)
        failure = self.failureResultOf(d, OSError)
        self.assertEqual(failure.value.errno, errno.EIO)
        self.assertIsNone(transport.producer)

    def test_other_errors_fail_the_response(self) -> None:
        """An error that is not 'sendfile unsupported' (a reset peer) fails the response; nothing is copied."""
        transport, fake = FakeTransport(), FakeSendfile(ConnectionResetError(errno.ECONNRESET, "reset"))
        sender, d = self.sender(transport, [self.region()], fake)
        self.failureResultOf(d, ConnectionResetError)
        self.assertEqual((transport.value(), sender.copied_bytes), (b"", 0))
        self.assertIsNone(transport.producer)


class FallbackTests(SenderTestCase):
    def test_unsupported_sendfile_falls_back(self) -> None:
        """EINVAL, ENOSYS, EOPNOTSUPP or ENOTSOCK: the same bytes are read and written instead."""
        for code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK):
            transport, fake = FakeTransport(), FakeSendfile(OSError(code, os.strerror(code)))
            sender, d = self.sender(transport, [b"h", self.region(), b"t"], fake)
            self.successResultOf(d)
            self.assertEqual(transport.value(), b"h" + DATA + b"t", code)
            self.assertEqual((sender.sendfile_bytes, sender.copied_bytes), (0, 1024))
            self.assertEqual(len(fake.calls), 1)  # and never again for this response

    def test_fallback_after_a_short_write_continues_from_there(self) -> None:
        """Bytes sendfile already sent are not sent twice when a later call falls back to copying."""
        transport = FakeTransport()
        fake = FakeSendfile(400, OSError(errno.EINVAL, "Invalid argument"))
        sender, d = self.sender(transport, [self.region()], fake)
        self.assertNoResult(d)
        sender.resumeProducing()
        self.successResultOf(d)
        self.assertEqual(fake.sent + transport.value(), DATA)
        self.assertEqual((sender.sendfile_bytes, sender.copied_bytes), (400, 624))


class CopyPathTests(SenderTestCase):
    def test_copies_in_chunks(self) -> None:
        """Without sendfile the region is read in CHUNK_BYTES pieces and written in order."""
        writes = []
        transport = FakeTransport()
        transport.write = lambda data: (writes.append(data), StringTransport.write(transport, data))
        sender, d = self.sender(transport, [b"head", self.region(10, 350)], chunk_bytes=100)
        self.successResultOf(d)
        self.assertEqual(writes, [b"head", DATA[10:110], DATA[110:210], DATA[210:310], DATA[310:360]])
        self.assertEqual((sender.sendfile_bytes, sender.copied_bytes), (0, 350))

    def test_waits_while_the_buffer_is_full(self) -> None:
        """With more than HIGH_WATER_BYTES buffered the sender stops, and finishes once resumed after a drain."""
        transport = FakeTransport(buffering=True)
        sender, d = self.sender(transport, [b"x" * HIGH_WATER_BYTES, self.region()], chunk_bytes=600)
        self.assertNoResult(d)
        self.assertEqual(sender.copied_bytes, 600)  # one chunk past the high-water mark, then a pause
        transport.drain()
        sender.resumeProducing()
        self.assertEqual(sender.copied_bytes, 1024)
        self.successResultOf(d)
        self.assertEqual(transport.value(), b"x" * HIGH_WATER_BYTES + DATA)

    def test_written_but_buffered_is_not_done(self) -> None:
        """The response counts as written only once at most HIGH_WATER_BYTES of it wait in the buffer."""
        transport = FakeTransport(buffering=True)
        sender, d = self.sender(transport, [b"x" * (HIGH_WATER_BYTES + 1)])
        self.assertNoResult(d)
        transport.drain()
        sender.resumeProducing()
        self.successResultOf(d)

    def test_file_shorter_than_region(self) -> None:
        """A region past the end of the file fails with EIO after the bytes that were there."""
        transport = FakeTransport()
        _, d = self.sender(transport, [self.region(1000, 100)])
        self.assertEqual(self.failureResultOf(d, OSError).value.errno, errno.EIO)
        self.assertEqual(transport.value(), DATA[1000:])

    def test_connection_lost(self) -> None:
        """stopProducing (the connection went away) fails the response with ConnectionDone, once."""
        transport = FakeTransport(buffering=True)
        sender, d = self.sender(transport, [b"x" * (HIGH_WATER_BYTES + 1), self.region()])
        sender.stopProducing()
        self.failureResultOf(d, ConnectionDone)
        sender.stopProducing()
        sender.resumeProducing()
        self.assertIsNone(transport.producer)


class CanSendfileTests(SenderTestCase):
    def test_only_plain_tcp(self) -> None:
        """A transport that is not a TCP connection (here a StringTransport) gets the copying path by default."""
        self.assertFalse(can_sendfile(StringTransport()))
        transport, fake = StringTransport(), FakeSendfile()
        sender = ResponseSender(transport, [self.region()], send_file=fake)
        self.successResultOf(sender.start())
        self.assertEqual((fake.calls, sender.copied_bytes, transport.value()), ([], 1024, DATA))

    def test_buffered_bytes(self) -> None:
        """Bytes in a Twisted transport's buffer: the data buffer past its offset, plus the temporary list."""
        transport = FakeTransport()
        self.assertEqual(buffered_bytes(StringTransport()), 0)
        transport.dataBuffer, transport.offset, transport._tempDataLen = b"abcdef", 2, 5
        self.assertEqual(buffered_bytes(transport), 9)
