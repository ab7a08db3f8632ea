"""Tests for twlog.client.sync: the blocking connection and its driver of the partition reader, on a fake socket."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.client.reader import PartitionReader
from twlog.client.sync import SyncConnection, read
from twlog.errors import (
    NO_ERROR,
    ConnectionFailed,
    FetchSizeTooSmall,
    NotLeader,
    OffsetNotOnBoundary,
    ProtocolViolation,
    TooManyConnections,
)
from twlog.partition import TopicPartition
from twlog.protocol import codec
from twlog.protocol.frames import frame
from twlog.storage.message import CorruptMessage, encode_message, encode_message_set

SET = encode_message_set([b"a", b"bb", b"ccc"])  # entries of 10, 11 and 12 bytes


def wait_frame(data: bytes, error: int = NO_ERROR) -> bytes:
    return codec.encode_error_response(NO_ERROR) + codec.multifetch_part_header(error, len(data)) + data


def fetch_frame(data: bytes, error: int = NO_ERROR) -> bytes:
    return codec.encode_error_response(error) + data


class FakeSocket:
    """A socket that answers each request with the next scripted frame (or closes), a few bytes per read."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.requests: list[codec.Request] = []
        self.incoming = b""
        self.closed = False

    def settimeout(self, timeout: float) -> None:
        pass

    def setsockopt(self, *args) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.requests.append(codec.decode_request(data[4:]))
        answer = self.answers.pop(0)
        self.incoming += b"" if answer is None else frame(answer)

    def recv(self, n: int) -> bytes:
        got, self.incoming = self.incoming[: min(n, 7)], self.incoming[min(n, 7) :]
        return got

    def close(self) -> None:
        self.closed = True


def connection(*answers: bytes | None, **options) -> tuple[SyncConnection, list[FakeSocket]]:
    sockets: list[FakeSocket] = []

    def connect(address, timeout):
        sockets.append(FakeSocket(list(answers)))
        return sockets[-1]

    return SyncConnection("h", 1, connect=connect, **options), sockets


class SyncConnectionTests(SynchronousTestCase):
    def test_fetch(self) -> None:
        """A fetch is a one-part WAIT_FETCH waiting 0 ms; its bytes come back, read a few at a time."""
        c, sockets = connection(wait_frame(SET))
        self.assertEqual(c.fetch("t", 0, 0, 100), SET)
        [request] = sockets[0].requests
        self.assertEqual((request.max_wait_ms, request.fetches[0].offset), (0, 0))

    def test_fetch_too_small_probes(self) -> None:
        """FetchSizeTooSmall sends the reader's 4-byte probe and names the size it learnt."""
        big = encode_message(b"x" * 50)
        c, sockets = connection(wait_frame(b"", FetchSizeTooSmall.code), fetch_frame(big[:4]))
        error = self.assertRaises(FetchSizeTooSmall, c.fetch, "t", 0, 7, 10)
        self.assertIn(f"offset 7 of t-0 (broker h:1) is {len(big)} bytes", str(error))
        self.assertEqual(sockets[0].requests[1], codec.FetchRequest("t", 0, 7, 4))

    def test_fetch_batch_rereads_a_refused_offset(self) -> None:
        """fetch_batch given the message before a refused offset reads it from there: a CRC-bad one is named."""
        bad = bytearray(encode_message(b"payload"))
        bad[-1] ^= 1
        c, sockets = connection(wait_frame(b"", OffsetNotOnBoundary.code), wait_frame(SET[10:21] + bytes(bad)))
        error = self.assertRaises(CorruptMessage, c.fetch_batch, "t", 0, 21, 100, previous=10)
        self.assertEqual((error.offset, error.next_offset), (21, 21 + len(bad)))
        self.assertEqual(sockets[0].requests[1].fetches[0].offset, 10)

    def test_response_too_large(self) -> None:
        """A response over max_response_bytes drops the connection with ProtocolViolation."""
        c, sockets = connection(wait_frame(SET), max_response_bytes=20)
        self.assertRaises(ProtocolViolation, c.fetch, "t", 0, 0, 100)
        self.assertTrue(sockets[0].closed)

    def test_closed_before_answering(self) -> None:
        """A broker that closes before answering is a ConnectionFailed."""
        c, _ = connection(None)
        self.assertRaises(ConnectionFailed, c.fetch, "t", 0, 0, 100)


class BlockingDriverTests(SynchronousTestCase):
    def test_refresh(self) -> None:
        """NotLeader: the driver asks its refresh for the connection to the leader and sends the fetch there."""
        old, _ = connection(wait_frame(b"", NotLeader.code))
        new, sockets = connection(wait_frame(SET))
        refreshes = []

        def refresh(event):
            refreshes.append(event)
            return new

        reader = PartitionReader(TopicPartition("t", "0"), 0, max_bytes=100)
        self.assertEqual(read(old, reader, refresh).next_offset, 33)
        self.assertEqual([type(e.error) for e in refreshes], [NotLeader])
        self.assertEqual(sockets[0].requests[0].fetches[0].offset, 0)

    def test_refused_connection(self) -> None:
        """A broker at its connection cap answers the first request with the bare code 19: the typed, retriable
        TooManyConnections naming the cap, and the socket is closed (the next call connects again)."""
        c, sockets = connection(codec.encode_error_response(TooManyConnections.code), wait_frame(SET))
        error = self.assertRaises(TooManyConnections, c.fetch, "t", 0, 0, 100)
        self.assertTrue(error.retriable)
        self.assertIn("broker h:1 refused the connection", str(error))
        self.assertIn("--max-connections", str(error))
        self.assertTrue(sockets[0].closed)
