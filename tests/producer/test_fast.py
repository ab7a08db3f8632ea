"""Tests for the producer's fire-and-forget hot path (L{twlog.producer.fast}) over a real L{ClientProtocol}:
one frame per batch built by the kernel, frames gathered into one write, routes kept while the router's
knowledge is the same, and the semantics of the general path kept (errors, back-pressure, close)."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeConnection
from twlog.client.protocol import ClientProtocol
from twlog.client.writes import GATHER_BYTES
from twlog.errors import ClientClosed
from twlog.producer.fast import produce_head
from twlog.producer.producer import Producer
from twlog.protocol import codec
from twlog.protocol.codec import ProduceRequest
from twlog.protocol.framing import PREFIX_BYTES
from twlog.storage.message import encode_message_set, iter_messages


class ProtocolConnection(FakeConnection):
    """A FakeConnection whose fire-and-forget sends go through a real ClientProtocol on a StringTransport."""

    def __init__(self, clock: Clock, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.protocol = ClientProtocol(clock, peer=self.address)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def ready(self) -> ClientProtocol | None:
        return self.protocol if self.protocol.writable and not self.closed else None

    def send(self, request: codec.Request):
        self.sent.append(request)
        return self.protocol.send(request)

    def close(self):
        self.protocol.prepare_close(ClientClosed("closed"))
        return super().close()

    def written(self) -> list[ProduceRequest]:
        """The requests written to the transport so far, decoded."""
        data, found = self.transport.value(), []
        while data:
            size = int.from_bytes(data[:PREFIX_BYTES], "big")
            found.append(codec.decode_request(data[PREFIX_BYTES:PREFIX_BYTES + size]))
            data = data[PREFIX_BYTES + size:]
        return found


def make(partitions: int = 2, **options):
    clock = Clock()
    connections: list[ProtocolConnection] = []

    def factory(host: str, port: int) -> ProtocolConnection:
        connections.append(ProtocolConnection(clock, host, port, 0, {"t": partitions, "u": 1}))
        return connections[-1]

    producer = Producer([("b0", 9092)], reactor=clock, connection_factory=factory, **options)
    producer.partitions("t")
    producer.partitions("u")
    return producer, connections[0], clock


def payloads_of(request: ProduceRequest) -> list[bytes]:
    return [m.payload for m in iter_messages(request.messages, 0, whole_buffer=True)]


class FastPathTests(SynchronousTestCase):
    def test_frames_gathered_into_one_write(self) -> None:
        """Batches sent in one reactor turn go out as one write at the next, each its own PRODUCE, in order."""
        producer, connection, clock = make()
        sends = [producer.send("t", [b"m%d" % i, b"n"], partition_index=i % 2) for i in range(5)]
        sends.append(producer.send("u", b"single"))
        for d in sends:
            self.assertIsNone(self.successResultOf(d))
        self.assertEqual(connection.transport.value(), b"")  # gathered, not written yet
        self.assertEqual(connection.sent, [])  # (not the general path's send)
        clock.advance(0)
        written = connection.written()
        self.assertEqual([(r.topic, r.partition) for r in written], [("t", 0), ("t", 1)] * 2 + [("t", 0), ("u", 0)])
        self.assertEqual([payloads_of(r) for r in written], [[b"m%d" % i, b"n"] for i in range(5)] + [[b"single"]])

    def test_gathered_bytes_written_at_the_threshold(self) -> None:
        """Once GATHER_BYTES have gathered they are written at once, without waiting for the next turn."""
        producer, connection, _ = make()
        big = b"x" * (GATHER_BYTES // 4)
        for _ in range(3):
            producer.send("t", big, partition_index=0)
        self.assertEqual(connection.transport.value(), b"")
        producer.send("t", big, partition_index=0)
        self.assertEqual([payloads_of(r) for r in connection.written()], [[big]] * 4)

    def test_requests_keep_their_order_behind_gathered_frames(self) -> None:
        """A request with an answer goes out after the frames gathered before it."""
        producer, connection, _ = make()
        producer.send("t", b"first", partition_index=0)
        connection.protocol.request(codec.OffsetsRequest("t", 0, -1, 1))
        written = connection.written()
        self.assertEqual(payloads_of(written[0]), [b"first"])
        self.assertIsInstance(written[1], codec.OffsetsRequest)

    def test_frame_is_the_codec_encoding(self) -> None:
        """The kernel's frame is byte for byte what the codec encodes for the same PRODUCE."""
        producer, connection, clock = make()
        producer.send("t", [b"a", bytearray(b"bc"), memoryview(b"def")], partition_index=1)
        clock.advance(0)
        frame = codec.encode_request(ProduceRequest("t", 1, encode_message_set([b"a", b"bc", b"def"])))
        self.assertEqual(connection.transport.value(), len(frame).to_bytes(PREFIX_BYTES, "big") + frame)
        self.assertEqual(produce_head("t", 1), frame[:2 + 2 + 1 + 4])

    def test_errors_as_the_general_path(self) -> None:
        """Text, empty batches and indices out of range fail as they always have; nothing is written."""
        producer, connection, clock = make()
        failure = self.failureResultOf(producer.send("t", [b"ok", "text"], partition_index=0), TypeError)
        self.assertIn("must be bytes, not str", str(failure.value))
        self.failureResultOf(producer.send("t", "text", partition_index=0), TypeError)
        self.failureResultOf(producer.send("t", [], partition_index=0), ValueError)
        self.failureResultOf(producer.send("t", b"x", partition_index=7), ValueError)
        clock.advance(0)
        self.assertEqual(connection.transport.value(), b"")

    def test_back_pressure(self) -> None:
        """While the transport is paused the send is held, unfired (through the general path), and written on
        resume, in order after what was gathered."""
        producer, connection, clock = make()
        producer.send("t", b"before", partition_index=0)
        connection.protocol.pauseProducing()
        held = producer.send("t", b"held", partition_index=0)
        self.assertNoResult(held)
        connection.protocol.resumeProducing()
        self.successResultOf(held)
        clock.advance(0)
        self.assertEqual([payloads_of(r) for r in connection.written()], [[b"before"], [b"held"]])
        self.assertTrue(connection.protocol.writable)

    def test_route_follows_the_router(self) -> None:
        """A kept route is dropped once the router's partitions change: the next send is routed afresh."""
        producer, connection, clock = make()
        producer.send("t", b"a", partition_index=1)
        connection.partitions["t"] = 3
        producer._router.forget("t")
        self.assertEqual(len(self.successResultOf(producer.partitions("t"))), 3)
        producer.send("t", b"b", partition_index=2)
        clock.advance(0)
        self.assertEqual([(r.partition, payloads_of(r)) for r in connection.written()], [(1, [b"a"]), (2, [b"b"])])

    def test_close_writes_what_was_gathered(self) -> None:
        """close() writes the gathered frames before closing; later sends fail with ClientClosed."""
        producer, connection, _ = make()
        self.successResultOf(producer.send("t", b"last", partition_index=0))
        self.successResultOf(producer.close())
        self.assertEqual([payloads_of(r) for r in connection.written()], [[b"last"]])
        self.failureResultOf(producer.send("t", b"late", partition_index=0), ClientClosed)

    def test_flush_writes_what_was_gathered(self) -> None:
        """flush() hands the gathered frames to the transport at once, not at the next reactor turn."""
        producer, connection, _ = make()
        producer.send("t", b"gathered", partition_index=0)
        self.successResultOf(producer.flush())
        self.assertEqual([payloads_of(r) for r in connection.written()], [[b"gathered"]])

    def test_keys_and_random(self) -> None:
        """Keyed and random batches take the hot path too, each routed afresh."""
        producer, connection, clock = make()
        producer.send("t", b"k", key="some key")
        producer.send("t", b"r")
        clock.advance(0)
        self.assertEqual([payloads_of(r) for r in connection.written()], [[b"k"], [b"r"]])
        self.assertEqual(connection.sent, [])
