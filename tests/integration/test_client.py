"""The Twisted client and the blocking facade against a real broker on 127.0.0.1."""

from __future__ import annotations

import os
import sys

import attrs
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.threads import deferToThread
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase
from typing_extensions import override

from twlog.blocking import BlockingConsumer, BlockingProducer
from twlog.broker.service import BrokerService
from twlog.client.connection import BrokerConnection
from twlog.client.protocol import READ_BYTES
from twlog.config import BrokerConfig, LogConfig
from twlog.consumer import EARLIEST, LATEST, SimpleConsumer
from twlog.errors import BrokerTimeout, ConnectionFailed, FetchSizeTooSmall, OffsetOutOfRange
from twlog.producer import Producer
from twlog.protocol.codec import ProduceRequest, WaitFetchRequest
from twlog.storage.message import encode_message_set

_LOG_FIELDS = {f.name for f in attrs.fields(LogConfig)}
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def payloads(n: int, start: int = 0) -> list[bytes]:
    """n distinct payloads of varied sizes (0 to 150 bytes after a 6-byte index)."""
    return [b"%05d:" % i + bytes([i % 251]) * ((i * 37) % 151) for i in range(start, start + n)]


class Broker:
    """A broker service on 127.0.0.1 that a test can stop (dropping its connections, as a dying process
    would) and start again on the same port and log directory."""

    def __init__(self, testcase: TestCase, **overrides) -> None:
        self.testcase = testcase
        self.log_dir = testcase.mktemp()
        self.overrides = overrides
        self.port = 0
        self.service: BrokerService | None = None

    async def start(self) -> Broker:
        log = {k: v for k, v in self.overrides.items() if k in _LOG_FIELDS}
        rest = {k: v for k, v in self.overrides.items() if k not in _LOG_FIELDS}
        config = BrokerConfig(log=LogConfig(self.log_dir, **log), port=self.port, interface="127.0.0.1", **rest)
        service = self.service = BrokerService(config, reactor)
        service.startService()
        await service.listening
        self.port = service.broker.port
        self.testcase.addCleanup(self.stop)
        return self

    async def stop(self) -> None:
        """Stop the service: it drops the client connections it accepted, as a dying process would."""
        service, self.service = self.service, None
        if service is None or not service.running:
            return
        await service.stopService()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self, topic: str, partition: int = 0):
        return self.service.logs.get_log(topic, partition)

    def producer(self, **options) -> Producer:
        options.setdefault("connect_attempts", 10)
        producer = Producer(self.address, **options)
        self.testcase.addCleanup(producer.close)
        return producer

    def consumer(self, **options) -> SimpleConsumer:
        options.setdefault("connect_attempts", 10)
        consumer = SimpleConsumer("127.0.0.1", self.port, **options)
        self.testcase.addCleanup(consumer.close)
        return consumer


class Peer(Protocol):
    """A server that reads everything and never answers: a hung broker, or a plain sink."""

    def __init__(self) -> None:
        self.lost: Deferred[None] = Deferred()

    @override
    def connectionLost(self, reason=None) -> None:
        self.lost.callback(None)

    @classmethod
    async def listen(cls, testcase: TestCase) -> PeerServer:
        server = PeerServer()
        server.listening = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(server)
        testcase.addCleanup(server.listening.stopListening)
        return server


class PeerServer(Factory):
    """Builds L{Peer}s and can wait until every connection made to it is closed."""

    noisy = False

    def __init__(self) -> None:
        self.peers: list[Peer] = []

    @override
    def buildProtocol(self, addr) -> Peer:
        peer = Peer()
        self.peers.append(peer)
        return peer

    @property
    def port(self) -> int:
        return self.listening.getHost().port

    async def closed(self) -> None:
        for peer in self.peers:
            await peer.lost


async def read(consumer: SimpleConsumer, topic: str, count: int, offset: int = 0, partition: int = 0) -> list:
    """C{count} messages from C{offset}, through the waiting-fetch stream."""
    got = []
    stream = consumer.stream(topic, partition, offset)
    async for message in stream:
        got.append(message)
        if len(got) == count:
            break
    await stream.close()
    return got


class ProduceConsumeTests(TestCase):
    async def test_fire_and_forget_across_segment_rolls(self) -> None:
        """Fire-and-forget batches come back byte-identical, in order, across many segment files."""
        broker = await Broker(self, segment_bytes=4096, flush_messages=1).start()
        producer = broker.producer()
        items = payloads(300)
        for i in range(0, 300, 10):
            self.assertIsNone(await producer.send("t", items[i : i + 10]))
        got = await read(broker.consumer(), "t", 300)
        self.assertEqual([m.payload for m in got], items)
        self.assertGreater(len(broker.log("t").segments), 5)
        self.assertEqual([m.offset for m in got[1:]], [m.next_offset for m in got[:-1]])

    async def test_appended_mode_offsets(self) -> None:
        """Acknowledged batches get contiguous offsets, and each fetched from its offset starts that batch."""
        broker = await Broker(self, segment_bytes=4096, flush_messages=1).start()
        producer = broker.producer(ack="appended")
        consumer = broker.consumer()
        items = payloads(120)
        results = [await producer.send("t", items[i : i + 12]) for i in range(0, 120, 12)]
        self.assertEqual([r.offset for r in results[1:]], [r.next_offset for r in results[:-1]])
        await broker.log("t").flush()
        for i, result in enumerate(results):
            fetched = await consumer.fetch("t", 0, result.offset)
            self.assertEqual(fetched.messages[0].payload, items[i * 12])
        self.assertEqual(await consumer.offsets("t", 0, LATEST), [results[-1].next_offset])

    async def test_async_batching_and_gzip(self) -> None:
        """Async batches, gzip-compressed, come back byte-identical across segment rolls."""
        broker = await Broker(self, segment_bytes=4096, flush_messages=1).start()
        producer = broker.producer(ack="appended", batch_size=25, linger_ms=5, codec="gzip")
        items = payloads(400)
        queued = [producer.send("t", item) for item in items]
        for d in queued:
            self.assertIsNone(await d)
        await producer.flush()
        got = await read(broker.consumer(), "t", 400)
        self.assertEqual([m.payload for m in got], items)
        self.assertGreater(len(broker.log("t").segments), 1)

    async def test_flush_visibility(self) -> None:
        """Appended but unflushed data is invisible to fetch and OFFSETS; a flush (or ack="flushed") shows it.
        (Under the timer policy: group commit, the default, starts the flush at the end of the append's turn.)"""
        broker = await Broker(self, flush_policy="timer", flush_messages=1_000_000, flush_interval_ms=1_000_000).start()
        consumer = broker.consumer()
        appended = await broker.producer(ack="appended").send("t", [b"a", b"b"])
        self.assertEqual(await consumer.offsets("t", 0, LATEST), [0])
        self.assertEqual(len(await consumer.fetch("t", 0, 0)), 0)
        await broker.log("t").flush()
        self.assertEqual(await consumer.offsets("t", 0, LATEST), [appended.next_offset])
        flushed = await broker.producer(ack="flushed").send("t", b"c")
        self.assertEqual(await consumer.offsets("t", 0, LATEST), [flushed.next_offset])
        self.assertEqual([m.payload for m in await consumer.fetch("t", 0, 0)], [b"a", b"b", b"c"])

    async def test_waiting_fetch_woken_by_new_data(self) -> None:
        """A stream at the end of the log is held by the broker and woken by new data, well before max wait."""
        broker = await Broker(self, flush_messages=1).start()
        arrived: Deferred[None] = Deferred()
        handle = broker.service.broker.handlers[WaitFetchRequest]

        def noting(request, peer="?"):
            result = handle(request, peer)
            if not arrived.called:
                arrived.callback(None)
            return result

        broker.service.broker.handlers[WaitFetchRequest] = noting
        consumer = broker.consumer(max_wait_ms=20_000)
        stream = consumer.stream("t", 0, 0)
        started = reactor.seconds()
        first = stream.__anext__()
        await arrived
        self.assertEqual(broker.service.broker.waiting_fetches(), 1)
        self.assertFalse(first.called)
        await broker.producer(ack="flushed").send("t", b"wake")
        self.assertEqual((await first).payload, b"wake")
        self.assertLess(reactor.seconds() - started, 10)
        await stream.close()

    async def test_rewind_and_fetch_size(self) -> None:
        """Any earlier offset can be fetched again, and a message larger than max_bytes is a clear error."""
        broker = await Broker(self, flush_messages=1).start()
        consumer = broker.consumer()
        result = await broker.producer(ack="flushed").send("t", [b"small", b"L" * 3000, b"tail"])
        everything = await consumer.fetch("t", 0, 0, 10_000)
        self.assertEqual(everything.next_offset, result.next_offset)
        second = everything.messages[1].offset
        with self.assertRaises(FetchSizeTooSmall) as caught:
            await consumer.fetch("t", 0, second, 100)
        self.assertIn("larger than max_bytes=100", str(caught.exception))
        again = await read(consumer, "t", 2, offset=second)
        self.assertEqual([m.payload for m in again], [b"L" * 3000, b"tail"])
        self.assertEqual(await consumer.offsets("t", 0, EARLIEST), [0])
        with self.assertRaises(OffsetOutOfRange):
            await consumer.fetch("t", 0, result.next_offset + 1000)


class FailureTests(TestCase):
    async def test_restart_continues_at_the_right_offsets(self) -> None:
        """After a broker restart on the same log directory, producer and stream carry on where they were."""
        broker = await Broker(self, segment_bytes=4096, flush_messages=1).start()
        producer = broker.producer(ack="flushed")
        consumer = broker.consumer()
        for i in range(0, 50, 10):
            before = await producer.send("t", payloads(10, start=i))
        stream = consumer.stream("t", 0, 0)
        got = [await stream.__anext__() for _ in range(50)]
        pending = stream.__anext__()  # held by the broker when it goes away
        await broker.stop()
        await broker.start()
        after = await producer.send("t", payloads(10, start=50))
        self.assertEqual(after.offset, before.next_offset)
        got.append(await pending)
        got.extend([await stream.__anext__() for _ in range(9)])
        self.assertEqual([m.payload for m in got], payloads(60))
        self.assertEqual(stream.next_offset, after.next_offset)
        self.assertEqual(await consumer.offsets("t", 0, LATEST), [after.next_offset])
        await stream.close()

    async def test_stopped_broker_fails_then_reconnects(self) -> None:
        """A stopped broker gives ConnectionFailed (no hang); once it is back, the producer reconnects."""
        broker = await Broker(self, flush_messages=1).start()
        producer = broker.producer(ack="appended", connect_attempts=2)
        consumer = broker.consumer(connect_attempts=2)
        first = await producer.send("t", b"one")
        await broker.stop()
        with self.assertRaises(ConnectionFailed) as caught:
            await producer.send("t", b"lost")
        self.assertIn(broker.address, str(caught.exception))
        with self.assertRaises(ConnectionFailed):
            await consumer.offsets("t", 0)
        await broker.start()
        second = await producer.send("t", b"two")
        self.assertEqual(second.offset, first.next_offset)

    async def test_request_timeout(self) -> None:
        """A broker that accepts but never answers gives BrokerTimeout, not a hang."""
        server = await Peer.listen(self)
        consumer = SimpleConsumer("127.0.0.1", server.port, timeout_s=0.2)
        with self.assertRaises(BrokerTimeout) as caught:
            await consumer.offsets("t", 0)
        self.assertIn("within 0.2 s", str(caught.exception))
        await consumer.close()
        await server.closed()


    async def test_back_pressure_over_tcp(self) -> None:
        """On a real socket, a full transport buffer holds fire-and-forget sends until it drains."""
        server = await Peer.listen(self)
        connection = BrokerConnection("127.0.0.1", server.port, reactor=reactor)
        # one write larger than the transport's buffer (its bufferSize: the client's READ_BYTES, 1 MiB) pauses us
        big = ProduceRequest("t", 0, encode_message_set([b"x" * (READ_BYTES + 100_000)]))
        await connection.send(big)
        self.assertTrue(connection.current.writes_paused)
        held = connection.send(big)
        self.assertFalse(held.called)
        self.assertIsNone(await held)  # the reactor drained the buffer into the socket and resumed the protocol
        await connection.close()
        await server.closed()


SCRIPT = """
import socket, sys
from twlog.blocking import BlockingConsumer, BlockingProducer
from twlog.errors import ConnectionFailed, OffsetOutOfRange

host, port = sys.argv[1], int(sys.argv[2])
with BlockingProducer(f"{host}:{port}", ack="flushed") as producer:
    result = producer.send("clicks", [b"one", b"two", b"three"])
    print("produced", result.offset, result.next_offset)
with BlockingConsumer(host, port) as consumer:
    offset = consumer.offsets("clicks", 0, -2)[0]
    for message in consumer.stream("clicks", 0, offset):
        print("message", message.payload.decode())
        if message.payload == b"three":
            break
    try:
        consumer.fetch("clicks", 0, 10**6)
    except OffsetOutOfRange as e:
        print("error", type(e).__name__)
free = socket.socket()
free.bind(("127.0.0.1", 0))
unused = free.getsockname()[1]
free.close()
try:
    BlockingConsumer("127.0.0.1", unused, connect_attempts=1).offsets("clicks", 0)
except ConnectionFailed as e:
    print("error", type(e).__name__)
"""


class BlockingFacadeTests(TestCase):
    async def test_facade_in_a_script(self) -> None:
        """A plain script (its own reactor thread) produces, streams with a for loop, and gets typed errors."""
        broker = await Broker(self, flush_messages=1).start()
        env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        out, err, code = await getProcessOutputAndValue(
            sys.executable, ["-c", SCRIPT, "127.0.0.1", str(broker.port)], env=env, path=_ROOT
        )
        self.assertEqual(code, 0, err.decode())
        self.assertEqual(
            out.decode().splitlines(),
            ["produced 0 38", "message one", "message two", "message three",
             "error OffsetOutOfRange", "error ConnectionFailed"],
        )

    async def test_facade_reuses_running_reactor(self) -> None:
        """From a non-reactor thread, the facade uses the reactor already running (here trial's)."""
        broker = await Broker(self, flush_messages=1).start()

        def script() -> tuple[list[bytes], int, str]:
            with BlockingProducer(broker.address, batch_size=2, linger_ms=1) as producer:
                producer.send("t", b"a")
                producer.send("t", [b"b", b"c"])
                producer.flush()
            with BlockingConsumer("127.0.0.1", broker.port) as consumer:
                stream = consumer.stream("t", 0, 0, idle_timeout_s=0.5)
                payloads = [message.payload for message in stream]
                fetched = consumer.fetch("t", 0, 0)
                try:
                    consumer.fetch("bad/topic", 0, 0)
                except Exception as e:
                    error = type(e).__name__
            return payloads, fetched.next_offset, error

        payloads_seen, next_offset, error = await deferToThread(script)
        self.assertEqual(payloads_seen, [b"a", b"b", b"c"])
        self.assertEqual(next_offset, 30)
        self.assertEqual(error, "InvalidTopic")

    async def test_facade_refuses_reactor_thread(self) -> None:
        """Called on the reactor thread, the facade raises instead of waiting forever."""
        with self.assertRaises(RuntimeError) as caught:
            BlockingConsumer("127.0.0.1", 1)
        self.assertIn("reactor thread", str(caught.exception))
