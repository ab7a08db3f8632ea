"""The client against the real broker protocol, in memory: iosim pumps, a MemoryReactorClock, no sockets."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.testing import MemoryReactorClock
from twisted.test.iosim import ConnectionCompleter, IOPump
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import ManualRunner
from twlog.config import BrokerConfig, LogConfig
from twlog.consumer import LATEST, SimpleConsumer
from twlog.errors import OffsetOutOfRange
from twlog.producer import Producer
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.server import Broker
from twlog.storage.manager import LogManager


class WireTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.flushes = ManualRunner()  # fsyncs wait until the test runs them
        config = BrokerConfig(log=LogConfig(self.mktemp(), flush_messages=1, segment_bytes=4096), port=9092)
        self.logs = LogManager(config.log, self.reactor, self.flushes)
        self.logs.start()
        self.addCleanup(self.logs.close)
        self.broker = Broker(self.logs, config, self.reactor)
        TCP4ServerEndpoint(self.reactor, 9092).listen(BrokerFactory(self.broker))
        self.completer = ConnectionCompleter(self.reactor)
        self.pumps: list[IOPump] = []

    def settle(self) -> None:
        """Complete connection attempts and move bytes until nothing changes."""
        for _ in range(100):
            pump = self.completer.succeedOnce()
            if pump is not None:
                self.pumps.append(pump)
            moved = [p.flush() for p in self.pumps]
            if pump is None and not any(moved):
                return
        raise AssertionError("the client and broker keep talking")

    def flush_logs(self) -> None:
        """Run the broker's pending fsyncs (making the data visible), then let the answers flow; group
        commit starts the fsync after one just done only once its gap (flush_min_gap_ms) has passed."""
        for _ in range(10):
            self.flushes.run_all()
            self.reactor.advance(self.logs.config.flush_min_gap_ms / 1000)
            if not self.flushes.pending:
                break
        self.settle()

    def test_pipelined_round_trip(self) -> None:
        """Pipelined acknowledged produces, fetches and offsets through the real broker protocol pair up in order."""
        producer = Producer("127.0.0.1:9092", reactor=self.reactor, ack="appended")
        consumer = SimpleConsumer("127.0.0.1", 9092, reactor=self.reactor)
        first = producer.send("t", [b"a", b"bb"])
        second = producer.send("t", b"ccc")
        self.settle()
        self.assertEqual((self.successResultOf(first).offset, self.successResultOf(second).offset), (0, 21))
        self.flush_logs()
        latest = consumer.offsets("t", 0, LATEST)
        fetched = consumer.fetch("t", 0, 0)
        beyond = consumer.fetch("t", 0, 10_000)
        self.settle()
        self.assertEqual(self.successResultOf(latest), [33])
        self.assertEqual([m.payload for m in self.successResultOf(fetched)], [b"a", b"bb", b"ccc"])
        self.failureResultOf(beyond, OffsetOutOfRange)

    def test_stream_woken_by_flush(self) -> None:
        """A stream's waiting fetch is held by the broker and answered when a flush makes new data visible."""
        producer = Producer("127.0.0.1:9092", reactor=self.reactor)
        consumer = SimpleConsumer("127.0.0.1", 9092, reactor=self.reactor, max_wait_ms=60_000)
        stream = consumer.stream("t", 0, 0)
        message: Deferred = stream.__anext__()
        self.settle()
        self.assertEqual(self.broker.waiting_fetches(), 1)
        self.assertNoResult(message)
        producer.send("t", b"news")
        self.settle()
        self.assertNoResult(message)  # appended, not yet flushed: invisible
        self.flush_logs()
        self.assertEqual(self.successResultOf(message).payload, b"news")
        self.assertEqual(stream.next_offset, 13)
