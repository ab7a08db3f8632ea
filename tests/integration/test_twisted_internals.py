"""Pins the Twisted private attributes twlog reads (L{twlog.protocol.twisted_internals}) on a real reactor.

A client writes to a real TCP connection on 127.0.0.1 whose server does not
read, and the buffered byte count is checked against what was written and
what the kernel holds.  A Twisted release that renames the attributes fails
here, by name, rather than letting sendfile overtake buffered bytes.
"""

from __future__ import annotations

import fcntl
import signal
import struct
import sys
import termios

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import deferLater
from twisted.test.proto_helpers import StringTransport
from twisted.trial.unittest import SynchronousTestCase, TestCase

from twlog.protocol.twisted_internals import buffered_bytes, forget_exit_signal, is_plain_tcp

#: More than loopback's socket buffers take while the peer does not read, so some stays in Twisted's buffer.
CHUNK = 8 * 1024 * 1024


def _queued(sock, request: int) -> int:
    """An ioctl's byte count for C{sock}: SIOCOUTQ (TIOCOUTQ) bytes not yet acknowledged, FIONREAD unread."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), request, b"\0\0\0\0"))[0]


class _Receiver(Protocol):
    """The server side: reads nothing until L{read}, then counts what arrives."""

    def __init__(self) -> None:
        self.connected_d: Deferred[_Receiver] = Deferred()
        self.received = 0

    def connectionMade(self) -> None:
        self.transport.pauseProducing()  # stop reading: the client's bytes pile up
        self.connected_d.callback(self)

    def dataReceived(self, data: bytes) -> None:
        self.received += len(data)

    def read(self) -> None:
        self.transport.resumeProducing()


async def _settled(*counts) -> tuple[int, ...]:
    """The values of C{counts} (callables) once two readings 50 ms apart agree."""
    before = None
    while True:
        now = tuple(count() for count in counts)
        if now == before:
            return now
        before = now
        await deferLater(reactor, 0.05, lambda: None)


class BufferedBytesTests(TestCase):
    timeout = 60

    async def connect(self) -> tuple[Protocol, _Receiver]:
        receiver = _Receiver()
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(Factory.forProtocol(lambda: receiver))
        self.addCleanup(port.stopListening)
        client = await TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port).connect(
            Factory.forProtocol(Protocol)
        )
        self.addCleanup(client.transport.abortConnection)
        self.addCleanup(lambda: receiver.transport and receiver.transport.abortConnection())
        await receiver.connected_d
        return client, receiver

    async def test_buffer_against_written_bytes(self) -> None:
        """On a real TCP transport, the count is what was written less what the kernel took, down to 0."""
        client, receiver = await self.connect()
        transport = client.transport
        self.assertEqual(buffered_bytes(transport), 0)

        transport.write(b"x" * CHUNK)  # before the reactor turns: all in _tempDataBuffer
        self.assertEqual(buffered_bytes(transport), CHUNK)

        server_socket = receiver.transport.getHandle()
        in_kernel = lambda: _queued(transport.getHandle(), termios.TIOCOUTQ) + _queued(server_socket, termios.FIONREAD)  # noqa: E731
        buffered, kernel = await _settled(lambda: buffered_bytes(transport), in_kernel)
        self.assertTrue(0 < buffered < CHUNK, buffered)  # part sent: the rest in dataBuffer after offset
        self.assertEqual(buffered + kernel, CHUNK)

        transport.write(b"y" * 1000)  # dataBuffer (after offset) and _tempDataBuffer both hold bytes now
        self.assertEqual(buffered_bytes(transport), buffered + 1000)

        receiver.read()
        while receiver.received < CHUNK + 1000:
            await deferLater(reactor, 0.01, lambda: None)
        self.assertEqual(receiver.received, CHUNK + 1000)
        self.assertEqual(buffered_bytes(transport), 0)

    async def test_plain_tcp(self) -> None:
        """A real TCP connection is plain TCP (its TLS flag is False); a test transport is not TCP at all."""
        client, _ = await self.connect()
        self.assertIs(client.transport.TLS, False)
        self.assertTrue(is_plain_tcp(client.transport))
        self.assertFalse(is_plain_tcp(StringTransport()))

    if not sys.platform.startswith("linux"):
        test_buffer_against_written_bytes.skip = "SIOCOUTQ and FIONREAD as Linux counts them"  # type: ignore[attr-defined]


class OtherTransportTests(SynchronousTestCase):
    def test_test_transports(self) -> None:
        """A transport that is no file descriptor counts its dataBuffer if it has one, else nothing."""
        self.assertEqual(buffered_bytes(StringTransport()), 0)
        transport = StringTransport()
        transport.dataBuffer = b"abcdef"
        self.assertEqual(buffered_bytes(transport), 6)


class ExitSignalTests(SynchronousTestCase):
    def test_reactor_exit_signal(self) -> None:
        """The installed reactor keeps the signal that stopped it in _exitSignal; forgetting it clears it."""
        saved = reactor._exitSignal  # AttributeError: Twisted renamed what twistd reads
        self.addCleanup(setattr, reactor, "_exitSignal", saved)
        reactor._exitSignal = signal.SIGTERM
        forget_exit_signal(reactor)
        self.assertIsNone(reactor._exitSignal)

    def test_reactor_without_signals(self) -> None:
        """A reactor with no _exitSignal (a fake) is left alone."""
        fake = object()
        forget_exit_signal(fake)
