"""Unit tests for the broker's connection limits (issue 21, item 1): the per-address cap, the idle timeout,
replacing the longest-idle connection at a cap, the refusal's answer, and their rate-limited log lines.

Real BrokerProtocols on StringTransports, one BrokerFactory, time on a task.Clock."""

from __future__ import annotations

import struct

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import (
    CONNECTION_REFUSALS,
    ConnectionFailed,
    TooManyConnections,
    TooManyConnectionsFromAddress,
    error_for,
    kafka07_code,
)
from twlog.protocol import codec
from twlog.protocol.admission import ConnectionTable, EventLog, Refusal, refusal_answer
from twlog.protocol.codec import (
    FetchRequest,
    MetadataRequest,
    OffsetsRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.connection import BrokerProtocol
from twlog.protocol.factory import BrokerFactory

from .test_server import BrokerTestMixin, frame, responses


class HalfClosingTransport(StringTransport):
    """A StringTransport that records a half-close (TCP's shutdown of the write side)."""

    write_closed = False

    def loseWriteConnection(self) -> None:
        self.write_closed = True


class Entry:
    """A connection as the table sees it."""

    def __init__(self, host: str, busy: bool = False) -> None:
        self.host = host
        self.last_active = 0.0
        self.in_progress = busy


class ConnectionTableTests(SynchronousTestCase):
    def test_order_follows_activity(self) -> None:
        """The front is the connection active longest ago, over all and per address; touching one moves it
        to the back; removing forgets it in both."""
        table = ConnectionTable()
        a, b, c = Entry("h1"), Entry("h2"), Entry("h1")
        for when, entry in enumerate((a, b, c)):
            table.add(entry, float(when))
        self.assertIs(table.oldest(), a)
        self.assertEqual((table.count("h1"), table.count("h2"), table.count("h3")), (2, 1, 0))
        table.touch(a, 5.0)
        self.assertIs(table.oldest(), b)
        self.assertIs(table.idle_since(10.0, "h1"), c)
        self.assertEqual(table.expired(1.0), [b])
        self.assertTrue(table.remove(b))
        self.assertFalse(table.remove(b))
        self.assertEqual((len(table), table.count("h2")), (2, 0))

    def test_idle_since_skips_busy_and_young(self) -> None:
        """Only a connection idle since the bound and with nothing in progress is offered; the scan stops at
        the first younger one, and after SCAN_LIMIT busy ones."""
        table = ConnectionTable()
        busy, idle, young = Entry("h", busy=True), Entry("h"), Entry("h")
        table.add(busy, 0.0)
        table.add(idle, 1.0)
        table.add(young, 9.0)
        self.assertIs(table.idle_since(5.0), idle)
        self.assertIsNone(table.idle_since(0.5))
        table.remove(idle)
        self.assertIsNone(table.idle_since(5.0))
        self.patch(ConnectionTable, "SCAN_LIMIT", 1)
        table.add(idle, 1.0)
        table.touch(young, 0.5)  # stays at the back: the order is by activity, not by the time given
        self.assertIsNone(table.idle_since(5.0))  # the busy one used up the scan


class EventLogTests(SynchronousTestCase):
    def test_once_a_minute_with_counts(self) -> None:
        """The first event is logged at once; the next ones within the interval are counted and logged at
        its end in one line; total counts every event."""
        clock, events = Clock(), []
        log = EventLog(clock, Logger(observer=events.append), "{count} from {peer}", interval_s=60.0)
        log.record(peer="a")
        self.assertEqual([(e["count"], e["peer"]) for e in events], [(1, "a")])
        clock.advance(10)
        log.record(peer="b")
        log.record(peer="c")
        self.assertEqual(len(events), 1)
        clock.advance(49.9)
        self.assertEqual(len(events), 1)
        clock.advance(0.1)
        self.assertEqual([(e["count"], e["peer"]) for e in events], [(1, "a"), (2, "c")])
        self.assertEqual(log.total, 3)
        clock.advance(600)
        self.assertEqual(len(events), 2)  # nothing new: no line
        log.record(peer="d")
        self.assertEqual(events[-1]["count"], 1)
        log.record(peer="e")
        log.stop()
        self.assertEqual(events[-1]["count"], 1)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_nothing_scheduled_after_stop(self) -> None:
        """Events after stop (connections closing as the broker stops) schedule nothing: one within the interval
        is counted, and logged with the next line."""
        clock, events = Clock(), []
        log = EventLog(clock, Logger(observer=events.append), "{count} from {peer}", interval_s=60.0)
        log.record(peer="a")
        log.stop()
        log.record(peer="b")
        log.record(peer="c")
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertEqual([(e["count"], e["peer"]) for e in events], [(1, "a")])
        clock.advance(60)
        log.record(peer="d")
        self.assertEqual([(e["count"], e["peer"]) for e in events], [(1, "a"), (3, "d")])
        self.assertEqual((log.total, clock.getDelayedCalls()), (4, []))


class RefusalTests(SynchronousTestCase):
    def refusal(self, code: int = TooManyConnections.code):
        clock, done = Clock(), []
        refusal = Refusal(code, clock, done.append)
        transport = HalfClosingTransport()
        refusal.makeConnection(transport)
        return refusal, transport, clock, done

    def test_twlog_request_gets_the_code(self) -> None:
        """A twlog request type (here WAIT_FETCH, sent in two reads) is answered with one response frame
        carrying the refusal code; the write side is then shut and what follows is discarded."""
        refusal, transport, clock, done = self.refusal()
        data = frame(WaitFetchRequest(0, 1, (FetchRequest("t", 0, 0, 100),)))
        refusal.dataReceived(data[:3])
        self.assertEqual(transport.value(), b"")
        refusal.dataReceived(data[3:] + frame(MetadataRequest()))
        self.assertEqual(responses(transport.value()), [struct.pack(">h", TooManyConnections.code)])
        self.assertTrue(transport.write_closed)
        refusal.connectionLost(None)
        self.assertEqual(done, [refusal])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_kafka07_request_gets_a_clean_close(self) -> None:
        """A Kafka 0.7 request type gets no answer: 0.7 knows no such code, so the connection is shut."""
        for request in (OffsetsRequest("t", 0, -1, 1), FetchRequest("t", 0, 0, 10), ProduceRequest("t", 0, b"")):
            refusal, transport, _, _ = self.refusal(TooManyConnectionsFromAddress.code)
            refusal.dataReceived(frame(request))
            self.assertEqual(transport.value(), b"")
            self.assertTrue(transport.write_closed)

    def test_silent_client_is_closed_after_linger(self) -> None:
        """A client that sends nothing is closed after LINGER_S."""
        refusal, transport, clock, _ = self.refusal()
        clock.advance(Refusal.LINGER_S - 0.1)
        self.assertFalse(transport.disconnecting)
        clock.advance(0.1)
        self.assertTrue(transport.disconnecting)
        self.assertEqual(transport.value(), b"")

    def test_answer(self) -> None:
        self.assertEqual(refusal_answer(frame(MetadataRequest())[:6], 20), struct.pack(">ih", 2, 20))
        self.assertIsNone(refusal_answer(frame(OffsetsRequest("t", 0, -1, 1))[:6], 20))

    def test_codes(self) -> None:
        """The refusal codes are typed, retriable, connection failures naming their cap; a 0.7 client is never
        sent them (its nearest code would be Unknown)."""
        self.assertEqual(CONNECTION_REFUSALS, {19, 20})
        for code, option in ((19, "--max-connections)"), (20, "--max-connections-per-ip)")):
            error = error_for(code, "broker h:1 refused the connection")
            self.assertIsInstance(error, ConnectionFailed)
            self.assertTrue(error.retriable)
            self.assertIn(option, str(error))
            self.assertEqual(kafka07_code(code), -1)


class LimitsTestCase(BrokerTestMixin, SynchronousTestCase):
    settings: dict = {}

    def setUp(self) -> None:
        self.make_broker(**self.settings)
        self.events: list[dict] = []
        self.patch(BrokerFactory, "_log", Logger(observer=self.events.append))
        self.factory = BrokerFactory(self.broker)

    def connect(self, host: str = "10.0.0.1", port: int = 5):
        protocol = self.factory.buildProtocol(IPv4Address("TCP", host, port))
        if protocol is None:
            return None, None
        transport = HalfClosingTransport(peerAddress=IPv4Address("TCP", host, port))
        protocol.makeConnection(transport)
        return protocol, transport

    def timers(self) -> list:
        """The clock's pending calls, but for the logs' retention loop."""
        return [call for call in self.clock.getDelayedCalls() if "Retention" not in repr(call)]

    def lines(self, text: str) -> list[dict]:
        return [e for e in self.events if text in e["log_format"]]


class GlobalCapTests(LimitsTestCase):
    settings = dict(max_connections=2, max_connections_per_ip=None, reap_idle_s=10.0)

    def test_refused_when_none_is_idle_long_enough(self) -> None:
        """At max_connections with no connection idle for reap_idle_s, a new one gets a Refusal answering
        TooManyConnections (19); one log line a minute counts the refusals; a closed connection makes room."""
        first, _ = self.connect()
        self.connect()
        refused, transport = self.connect(host="10.0.0.2")
        self.assertIsInstance(refused, Refusal)
        refused.dataReceived(frame(MetadataRequest()))
        self.assertEqual(responses(transport.value()), [struct.pack(">h", TooManyConnections.code)])
        self.connect()
        self.assertEqual((self.factory.refused, self.factory.reaped, self.factory.accepted), (2, 0, 2))
        (line,) = self.lines("--max-connections) is")
        self.assertEqual((line["count"], line["cap"], line["open"]), (1, 2, 2))
        self.clock.advance(BrokerFactory.EVENT_LOG_INTERVAL_S)
        self.assertEqual([e["count"] for e in self.lines("--max-connections) is")], [1, 1])
        first.connectionLost(None)
        self.assertIsInstance(self.connect()[0], BrokerProtocol)

    def test_longest_idle_is_replaced(self) -> None:
        """At the cap, the connection idle longest (no whole request, none in progress) for at least
        reap_idle_s is closed to make room; one that sent a request since, or has one in progress, is not."""
        oldest, oldest_transport = self.connect(port=1)
        busy, busy_transport = self.connect(port=2)
        self.clock.advance(5)
        busy.dataReceived(frame(MetadataRequest()))  # answered at once: active at 5 s
        self.clock.advance(5)
        newcomer, _ = self.connect(host="10.0.0.2")
        self.assertIsInstance(newcomer, BrokerProtocol)
        self.assertTrue(oldest_transport.disconnecting)
        self.assertFalse(busy_transport.disconnecting)
        self.assertEqual((len(self.factory.connections), self.factory.reaped), (2, 1))
        (line,) = self.lines("to make room at the cap")
        self.assertEqual((line["peer"], line["idle_s"], line["cap"]), ("10.0.0.1:1", 10.0, 2))
        oldest.connectionLost(None)  # the close completes: nothing counted twice
        self.assertEqual(len(self.factory.connections), 2)
        # busy is now the longest-idle, but has a request in progress; newcomer has just sent one: the next
        # connection is refused.
        self.patch(BrokerProtocol, "in_progress", property(lambda p: p is busy))
        self.clock.advance(20)
        newcomer.dataReceived(frame(MetadataRequest()))
        self.assertIsInstance(self.connect(host="10.0.0.3")[0], Refusal)
        self.assertFalse(busy_transport.disconnecting)

    def test_refusals_are_bounded(self) -> None:
        """Past MAX_REFUSALS refused connections still open, the next is closed at once (None)."""
        self.patch(BrokerFactory, "MAX_REFUSALS", 2)
        self.connect()
        self.connect()
        first, _ = self.connect()
        self.connect()
        self.assertEqual(self.connect(), (None, None))
        first.connectionLost(None)
        self.assertIsInstance(self.connect()[0], Refusal)
        self.assertEqual(self.factory.refused, 4)


class PerAddressCapTests(LimitsTestCase):
    settings = dict(max_connections=100, max_connections_per_ip=2, reap_idle_s=10.0)

    def test_one_address_is_capped_others_are_not(self) -> None:
        """A third connection from one address gets TooManyConnectionsFromAddress (20), while other addresses
        connect; after reap_idle_s the address's own longest-idle connection makes room, not another's."""
        mine = [self.connect(port=p) for p in (1, 2)]
        other, other_transport = self.connect(host="10.0.0.9")
        refused, transport = self.connect(port=3)
        self.assertIsInstance(refused, Refusal)
        refused.dataReceived(frame(MetadataRequest()))
        self.assertEqual(responses(transport.value()), [struct.pack(">h", TooManyConnectionsFromAddress.code)])
        self.assertIsInstance(self.connect(host="10.0.0.8")[0], BrokerProtocol)
        (line,) = self.lines("--max-connections-per-ip) is")
        self.assertEqual((line["open"], line["cap"], line["peer"]), (2, 2, "10.0.0.1:3"))
        self.clock.advance(10)
        mine[1][0].dataReceived(frame(MetadataRequest()))
        newcomer, _ = self.connect(port=4)
        self.assertIsInstance(newcomer, BrokerProtocol)
        self.assertEqual([t.disconnecting for _, t in mine], [True, False])
        self.assertFalse(other_transport.disconnecting)
        self.assertEqual((self.factory.reaped_per_ip, self.factory.refused_per_ip), (1, 1))
        self.assertEqual(len(self.lines("from the same address")), 1)


class IdleTimeoutTests(LimitsTestCase):
    settings = dict(idle_timeout_s=600.0)

    def test_closed_after_the_timeout_without_a_whole_request(self) -> None:
        """A connection that sent no whole request frame for idle_timeout_s is closed, even if it sent part
        of one; one that sent a request meanwhile is closed that long after it; one log line counts them."""
        idle, idle_transport = self.connect(port=1)
        partial, partial_transport = self.connect(port=2)
        active, active_transport = self.connect(port=3)
        self.clock.advance(300)
        partial.dataReceived(frame(MetadataRequest())[:5])
        active.dataReceived(frame(MetadataRequest()))
        self.clock.advance(299.9)
        self.assertFalse(idle_transport.disconnecting)
        self.clock.advance(0.1)
        self.assertEqual([t.disconnecting for t in (idle_transport, partial_transport, active_transport)],
                         [True, True, False])
        self.assertEqual(self.factory.idle_closed, 2)
        (line,) = self.lines("--idle-timeout-s")
        self.assertEqual((line["count"], line["timeout_s"]), (1, 600.0))
        self.clock.advance(60)  # the interval's end: the second one closed at 600 s
        self.assertEqual([e["count"] for e in self.lines("--idle-timeout-s")], [1, 1])
        self.clock.advance(240)
        self.assertTrue(active_transport.disconnecting)
        self.assertEqual([e["count"] for e in self.lines("--idle-timeout-s")], [1, 1, 1])
        for protocol in (idle, partial, active):
            protocol.connectionLost(None)
        self.assertEqual(self.timers(), [])  # no connection: no timer

    def test_a_response_written_is_activity(self) -> None:
        """A connection whose response finishes being written is not idle from then (a waiting fetch held
        long), and one whose request is stuck in progress past the timeout is aborted, not closed politely."""
        protocol, transport = self.connect()
        self.clock.advance(500)
        self.factory.active(protocol)  # as when a held response is written
        self.clock.advance(500)
        self.assertFalse(transport.disconnecting)
        self.patch(BrokerProtocol, "in_progress", property(lambda p: True))
        self.clock.advance(100)
        self.assertTrue(transport.disconnected)

    def test_no_timeout(self) -> None:
        """idle_timeout_s 0 closes nothing, and schedules nothing."""
        self.factory.idle_timeout_s = 0
        self.connect()
        self.assertEqual(self.timers(), [])

    def test_shutdown_stops_the_timers(self) -> None:
        """disconnect_all drops every connection and refusal, and leaves no timer behind."""
        self.factory.max_connections = 1
        protocol, transport = self.connect()
        refusal, refusal_transport = self.connect()
        self.factory.disconnect_all()
        self.assertTrue(transport.disconnected and refusal_transport.disconnected)
        protocol.connectionLost(None)
        refusal.connectionLost(None)
        self.assertEqual(self.timers(), [])


class Kafka07RefusalTests(LimitsTestCase):
    settings = dict(max_connections=1)

    def test_kafka07_client_never_sees_a_twlog_code(self) -> None:
        """A 0.7 client's first request on a refused connection is not answered: the broker shuts the
        connection, which a 0.7 client retries as any lost connection."""
        self.connect()
        refused, transport = self.connect(host="10.0.0.2")
        refused.dataReceived(frame(FetchRequest("t", 0, 0, 1000)))
        self.assertEqual(transport.value(), b"")
        self.assertTrue(transport.write_closed)
        self.assertNotIn(codec.FETCH, self.factory.requests)
