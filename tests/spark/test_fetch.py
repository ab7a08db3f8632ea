"""Tests for twlog.spark.fetch (the workers' connection: fetches into one buffer, sent ahead) and its use by the
source's reader (twlog.spark.source.read_range), on a fake socket."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.client.options import ClientOptions
from twlog.coord.layout import PartitionLocation
from twlog.errors import NO_ERROR, ConnectionFailed, InvalidMessage, NotLeader, ProtocolViolation
from twlog.partition import TopicPartition
from twlog.protocol import codec
from twlog.protocol.frames import frame
from twlog.spark import arrow, source
from twlog.spark.fetch import FetchConnection
from twlog.storage.message import encode_message, encode_message_set

SET = encode_message_set([b"a", b"bb", b"ccc"])  # entries of 10, 11 and 12 bytes


def wait_frame(data: bytes, error: int = NO_ERROR) -> bytes:
    return codec.encode_error_response(NO_ERROR) + codec.multifetch_part_header(error, len(data)) + data


class FakeSocket:
    """A broker on a fake socket: each fetch is answered from C{log} (or by the next scripted frame), a few
    bytes per read; C{recv_into} as C{recv}."""

    def __init__(self, log: bytes = b"", answers: list[bytes | None] | None = None) -> None:
        self.log = log
        self.answers = answers
        self.requests: list[codec.Request] = []
        self.incoming = b""
        self.closed = False

    def settimeout(self, timeout: float) -> None:
        pass

    def setsockopt(self, *args) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        request = codec.decode_request(data[4:])
        self.requests.append(request)
        if self.answers is not None:
            answer = self.answers.pop(0)
        elif isinstance(request, codec.WaitFetchRequest):
            part = request.fetches[0]
            answer = wait_frame(self.log[part.offset: part.offset + part.max_bytes])
        else:
            answer = codec.encode_offsets_response(NO_ERROR, [len(self.log)])
        self.incoming += b"" if answer is None else frame(answer)

    def recv(self, n: int) -> bytes:
        got, self.incoming = self.incoming[: min(n, 7)], self.incoming[min(n, 7):]
        return got

    def recv_into(self, view: memoryview, n: int) -> int:
        got = self.recv(n)
        view[: len(got)] = got
        return len(got)

    def close(self) -> None:
        self.closed = True


def connection(log: bytes = b"", answers: list[bytes | None] | None = None, **options):
    sockets: list[FakeSocket] = []

    def connect(address, timeout):
        sockets.append(FakeSocket(log, answers))
        return sockets[-1]

    return FetchConnection("h", 1, connect=connect, **options), sockets


def fetch(offset: int, size: int = 100) -> codec.FetchRequest:
    return codec.FetchRequest("t", 0, offset, size)


class FetchConnectionTests(SynchronousTestCase):
    def test_fetch_into_the_buffer(self) -> None:
        """A fetch's message set comes back as a view of the connection's buffer, the same bytes."""
        c, sockets = connection(SET)
        got = c.fetch_part(fetch(10))
        self.assertIsInstance(got, memoryview)
        self.assertEqual(bytes(got), SET[10:])
        self.assertEqual(bytes(c.fetch_part(fetch(0, 10))), SET[:10])
        self.assertEqual(len(sockets[0].requests), 2)

    def test_sent_ahead(self) -> None:
        """A fetch sent ahead is not sent again: the next fetch of the same part takes its answer."""
        c, sockets = connection(SET)
        c.fetch_part(fetch(0, 10))
        c.send_ahead(fetch(10))
        self.assertEqual(len(sockets[0].requests), 2)
        self.assertEqual(bytes(c.fetch_part(fetch(10))), SET[10:])
        self.assertEqual(len(sockets[0].requests), 2)

    def test_other_fetch_drops_the_one_ahead(self) -> None:
        """A fetch of another part first receives and drops the answer sent ahead."""
        c, sockets = connection(SET)
        c.send_ahead(fetch(10))
        self.assertEqual(bytes(c.fetch_part(fetch(21))), SET[21:])
        self.assertEqual([r.fetches[0].offset for r in sockets[0].requests], [10, 21])

    def test_other_request_drops_the_one_ahead(self) -> None:
        """Any other request (OFFSETS) first receives and drops the answer sent ahead."""
        c, sockets = connection(SET)
        c.send_ahead(fetch(10))
        self.assertEqual(c.offset("t", 0, -1), len(SET))
        self.assertEqual(bytes(c.fetch_part(fetch(10))), SET[10:])
        self.assertEqual(len(sockets[0].requests), 3)

    def test_error_answered_ahead(self) -> None:
        """A refusal answered to a fetch sent ahead is raised by the fetch that takes it."""
        c, _ = connection(answers=[wait_frame(b"", NotLeader.code)])
        c.send_ahead(fetch(0))
        self.assertRaises(NotLeader, c.fetch_part, fetch(0))

    def test_response_too_large(self) -> None:
        """A response over max_response_bytes drops the connection with ProtocolViolation."""
        c, sockets = connection(SET, max_response_bytes=20)
        self.assertRaises(ProtocolViolation, c.fetch_part, fetch(0))
        self.assertTrue(sockets[0].closed)

    def test_closed_before_answering(self) -> None:
        """A broker that closes before answering is a ConnectionFailed; the next fetch connects again."""
        c, sockets = connection(answers=[None, wait_frame(SET)])
        self.assertRaises(ConnectionFailed, c.fetch_part, fetch(0))
        self.assertTrue(sockets[0].closed)
        self.assertEqual(len(sockets), 1)


class ReadRangeTests(SynchronousTestCase):
    """The source's reader over a L{FetchConnection}: each next fetch sent ahead, the rows as without it."""

    def read(self, log: bytes, end: int, fetch_size: int, fail_on_data_loss: bool = True):
        sockets: list[FakeSocket] = []

        class Connection(FetchConnection):
            def __init__(self, host, port, options):
                def connect(address, timeout):
                    sockets.append(FakeSocket(log))
                    return sockets[-1]

                super().__init__(host, port, options, connect=connect)

        self.patch(source, "FetchConnection", Connection)
        gather = arrow.gather
        self.sent_when_gathered: list[int] = []  # per fetch walked: the fetches sent by the time it is gathered

        def gathering(*args):
            self.sent_when_gathered.append(len(sockets[0].requests))
            return gather(*args)

        self.patch(arrow, "gather", gathering)
        self.patch(arrow, "KERNEL", "compiled")  # (the pure kernel's gather is the same function)
        tp = PartitionLocation(TopicPartition("t", "0-0"), 0, "h", 1)
        part = source.TwlogPartition(tp, 0, end, fetch_size, ClientOptions(), fail_on_data_loss)
        batches = list(source.read_range(part))
        rows = [(o, v) for b in batches for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist())]
        return rows, [r.fetches[0].offset for r in sockets[0].requests]

    def test_next_fetch_sent_ahead(self) -> None:
        """Every fetch after the first is sent before the last one's bytes are walked, and taken as its answer."""
        payloads = [bytes([65 + i]) * (i + 1) for i in range(8)]
        log = encode_message_set(payloads)
        rows, requested = self.read(log, len(log), 40)
        self.assertEqual([v for _, v in rows], payloads)
        starts = sorted({o for o, _ in rows})
        self.assertEqual(requested[0], 0)
        self.assertEqual(len(requested), len(set(requested)))  # nothing fetched twice
        self.assertTrue(set(requested) <= set(starts))
        walks = len(self.sent_when_gathered)
        self.assertEqual((walks, len(requested)), (len(requested), len(requested)))
        self.assertGreater(walks, 2)
        # each walk but the last has sent the next fetch before the payloads are gathered
        self.assertEqual(self.sent_when_gathered, [*range(2, walks + 1), walks])

    def test_corrupt_message_drops_the_fetch_ahead(self) -> None:
        """A CRC-bad message (sane length) ends the walk before the fetch sent ahead: that answer is dropped, the
        message is skipped (failOnDataLoss false) or fails the task, and the rows are those without it."""
        bad = bytearray(encode_message(b"bad!"))
        bad[-1] ^= 1
        log = encode_message_set([b"one", b"two"]) + bytes(bad) + encode_message_set([b"three"])
        rows, _ = self.read(log, len(log), 1000, fail_on_data_loss=False)
        self.assertEqual([v for _, v in rows], [b"one", b"two", b"three"])
        error = self.assertRaises(InvalidMessage, self.read, log, len(log), 1000)
        self.assertIn("failOnDataLoss=false", str(error))
