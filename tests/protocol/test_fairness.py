"""Unit tests for fairness between a broker's connections (issue 21, findings 2 and 3): the frame deadline
(request_timeout_s), the queue for the request budget, the bound on requests in flight per connection, and the
turns connections take (twlog.protocol.turns); real BrokerProtocols on StringTransports and a task.Clock."""

from __future__ import annotations

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import Logger
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.broker.tap import Options
from twlog.config import BrokerConfig, LogConfig
from twlog.protocol import codec
from twlog.protocol.budget import BUDGET
from twlog.protocol.codec import (
    ACK_APPENDED,
    AckProduceRequest,
    FetchRequest,
    MetadataRequest,
    OffsetsRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.connection import BrokerProtocolState
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.turns import MIN_SECONDS_PER_TURN, SECONDS_PER_ROUND, TURN, Turns
from twlog.storage.message import encode_message_set

from ..fakes import iteration
from .test_server import BrokerTestMixin, frame, responses

OFFSETS = frame(OffsetsRequest("t", 0, -1, 1))
#: Frames per turn in these tests (the default, FRAMES_PER_TURN, is larger): small numbers read better.
PER_TURN = 16


def ack_produce(size: int) -> bytes:
    """An acknowledged produce, size prefix included, whose message set is about C{size} bytes."""
    return frame(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, encode_message_set([b"p" * size])),)))


class Connections(BrokerTestMixin):
    """A broker and one factory; connections on StringTransports from distinct ports."""

    def start(self, **overrides) -> None:
        self.make_broker(**overrides)
        self.factory = BrokerFactory(self.broker)
        self.factory.turns.frames_per_turn = PER_TURN
        self.events: list[dict] = []
        self.factory._log = Logger(observer=self.events.append)
        self.factory.late_frames._log = self.factory._log
        self._port = 1000

    def connection(self):
        self._port += 1
        protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", self._port))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport


class FrameDeadlineTests(Connections, SynchronousTestCase):
    def setUp(self) -> None:
        self.start(max_request_bytes=4096, max_buffered_request_bytes=8192, max_message_bytes=4096,
                   request_timeout_s=30.0)

    def test_half_sent_frame_is_closed_and_freed(self) -> None:
        """A frame that has not arrived whole 30 s after its first byte: the connection is aborted, its bytes
        go back to the budget at once, and one line says what happened."""
        data = ack_produce(3000)
        protocol, transport = self.connection()
        protocol.dataReceived(data[:2000])
        self.assertEqual(self.factory.budget.total, 1996)
        self.clock.advance(29.9)
        self.assertFalse(transport.disconnecting)
        protocol.dataReceived(data[2000:2500])  # more of the same frame: the deadline does not move
        self.clock.advance(0.1)
        self.assertTrue(transport.disconnected)  # aborted
        self.assertEqual(self.factory.budget.total, 0)
        self.assertEqual(self.factory.late_frames.total, 1)
        (event,) = self.events
        self.assertEqual((event["peer"], event["got"], event["timeout"]), (protocol.peer, 2496, 30.0))
        self.assertEqual(event["needed"], len(data) - 2500)
        protocol.connectionLost(None)
        self.assertFalse(protocol._deadline.running)

    def test_each_frame_gets_its_own_deadline(self) -> None:
        """A client that keeps finishing its frames is never closed, however long it stays; each new frame's
        deadline runs from its own first byte."""
        data = ack_produce(1000)
        protocol, transport = self.connection()
        for _ in range(5):
            protocol.dataReceived(data[:500])
            self.clock.advance(20)
            protocol.dataReceived(data[500:])
        protocol.dataReceived(data + data[:10])  # a frame whole and the next one begun, in one read
        self.clock.advance(29)
        self.assertFalse(transport.disconnecting)
        self.assertEqual(len(responses(transport.value())), 6)
        self.clock.advance(1)
        self.assertTrue(transport.disconnected)

    def test_size_prefix_alone_starts_the_deadline(self) -> None:
        """Even a part of the size prefix is a frame's first byte."""
        protocol, transport = self.connection()
        protocol.dataReceived(b"\x00\x00")
        self.clock.advance(30)
        self.assertTrue(transport.disconnected)

    def test_idle_between_frames_has_no_deadline(self) -> None:
        """Nothing part-way in, nothing to time: no frame timer at all (idle connections are another limit's job,
        --idle-timeout-s: the connection lives until then)."""
        protocol, transport = self.connection()
        before = self.clock.getDelayedCalls()
        protocol.dataReceived(frame(MetadataRequest()))
        self.assertEqual(self.clock.getDelayedCalls(), before)
        self.clock.advance(self.broker.config.idle_timeout_s - 1)
        self.assertFalse(transport.disconnecting)

    def test_no_deadline_while_the_broker_does_not_read(self) -> None:
        """A frame stopped by the budget is not the client's delay: its deadline starts when it is read again."""
        data = ack_produce(3500)
        hogs = [self.connection() for _ in range(2)]
        for hog, _ in hogs:
            hog.dataReceived(data[:3000])
        waiting, waiting_transport = self.connection()
        waiting.dataReceived(data[:100])
        self.assertTrue(waiting.reading_held(BUDGET))
        self.clock.advance(29)
        hogs[0][0].dataReceived(data[3000:])  # handled: room for the waiting frame
        self.assertFalse(waiting.reading_held())
        self.clock.advance(29)
        self.assertFalse(waiting_transport.disconnecting)  # 58 s after its first byte, 29 s of them read
        self.assertTrue(hogs[1][1].disconnected)  # 30 s read and not whole
        self.clock.advance(1)
        self.assertTrue(waiting_transport.disconnected)


class FairQueueTests(Connections, SynchronousTestCase):
    """Finding 2: two half-sent frames fill the budget; a legitimate produce must not wait behind them for ever."""

    def setUp(self) -> None:
        self.start(max_request_bytes=4096, max_buffered_request_bytes=8192, max_message_bytes=4096,
                   request_timeout_s=30.0)

    def test_legitimate_produce_answered_once_the_stalled_are_closed(self) -> None:
        stalled = ack_produce(4000)
        hogs = [self.connection() for _ in range(2)]
        for hog, _ in hogs:
            hog.dataReceived(stalled[: len(stalled) - 64])
        produce = ack_produce(3000)
        legit, transport = self.connection()
        self.clock.advance(10)  # the hogs are 10 s into their frames
        legit.dataReceived(produce[:1000])
        self.assertTrue(legit.reading_held(BUDGET))
        self.assertEqual(transport.producerState, "paused")
        self.clock.advance(19.999)
        self.assertTrue(legit.reading_held(BUDGET))
        self.clock.advance(0.001)  # the hogs' deadline: closed, the budget freed, the waiting frame admitted at once
        self.assertTrue(all(t.disconnected for _, t in hogs))
        self.assertEqual(transport.producerState, "producing")
        legit.dataReceived(produce[1000:])
        (answer,) = responses(transport.value())
        (result,) = codec.decode_ack_produce_response(answer).results
        self.assertEqual((result.error, result.offset), (0, 0))
        self.assertFalse(transport.disconnecting)

    def test_closed_hog_leaves_the_queue_and_the_turns(self) -> None:
        """A connection closed while it waits for the budget or a turn holds nothing and gets no turn."""
        hog, _ = self.connection()
        hog.dataReceived(ack_produce(4000)[:4000])
        other, _ = self.connection()
        other.dataReceived(ack_produce(4000)[:4000])
        late, _ = self.connection()
        late.dataReceived(OFFSETS * (PER_TURN + 1) + ack_produce(4000)[:2000])
        self.assertTrue(self.factory.turns.is_waiting(late))
        late.connectionLost(None)
        self.assertFalse(self.factory.turns.is_waiting(late))
        self.assertEqual(self.factory.budget.stopped, 0)
        iteration(self.clock)
        self.assertEqual(self.factory.turns.turns, 0)


class InflightBoundTests(Connections, SynchronousTestCase):
    def test_default_is_64(self) -> None:
        """Kafka's queued.max.requests in spirit: 64 unanswered requests per connection by default."""
        self.assertEqual(BrokerConfig(LogConfig("x")).max_inflight_per_connection, 64)
        self.assertEqual(BrokerConfig(LogConfig("x")).request_timeout_s, 30.0)

    def test_stops_reading_past_the_bound_until_answers_drain(self) -> None:
        """With 64 requests unanswered the transport is paused; half of them answered, it reads again."""
        self.start(flush_messages=1000, flush_interval_ms=100)
        protocol, transport = self.connection()
        wait = frame(WaitFetchRequest(1000, 1, (FetchRequest("t", 0, 0, 100),)))
        for _ in range(4):  # 16 frames per read (a turn), so four reads
            protocol.dataReceived(wait * 16)
        self.assertEqual(len(protocol._slots), 64)
        self.assertEqual(transport.producerState, "paused")
        self.assertIs(protocol.state, BrokerProtocolState.PAUSED)
        protocol.dataReceived(wait)  # already on its way: buffered, not handled
        self.assertEqual(len(protocol._slots), 64)
        self.clock.advance(1.0)  # the waits end: all answered
        self.assertEqual(transport.producerState, "producing")
        self.assertEqual(len(responses(transport.value())), 64)
        self.clock.advance(1.0)  # the one read after them has waited its second
        self.assertEqual(len(responses(transport.value())), 65)

    def test_options(self) -> None:
        """twistd twlog / twlog broker take both settings, and refuse nonsense in one line."""
        options = Options()
        options.parseOptions(["--request-timeout-s", "2.5", "--max-inflight-per-connection", "8"])
        self.assertEqual((options.config.request_timeout_s, options.config.max_inflight_per_connection), (2.5, 8))
        for args, message in [
            (["--request-timeout-s", "0"], "--request-timeout-s must be a number of seconds above 0, not '0'"),
            (["--request-timeout-s", "soon"], "--request-timeout-s must be a number of seconds above 0"),
            (["--max-inflight-per-connection", "0"], "--max-inflight-per-connection must be at least 1"),
        ]:
            with self.assertRaises(usage.UsageError) as e:
                Options().parseOptions(args)
            self.assertIn(message, str(e.exception))


class TurnTests(Connections, SynchronousTestCase):
    """Finding 3: a connection pipelining small requests must not hold the broker for its whole pipeline."""

    def setUp(self) -> None:
        self.start()

    def answered(self, transport) -> int:
        return len(responses(transport.value()))

    def test_a_read_handles_one_turn(self) -> None:
        """One read carrying 100 requests gets 16 handled; the connection stops reading and waits for a turn."""
        protocol, transport = self.connection()
        protocol.dataReceived(OFFSETS * 100)
        self.assertEqual(self.answered(transport), PER_TURN)
        self.assertTrue(protocol.reading_held(TURN))
        self.assertEqual(transport.producerState, "paused")
        rounds = 0
        while self.factory.turns.waiting:
            iteration(self.clock)
            rounds += 1
        self.assertEqual(self.answered(transport), 100)
        self.assertEqual(rounds, 6)  # 16 in the read, then 16 x 5 and 4 more
        self.assertFalse(protocol.reading_held())
        self.assertEqual(transport.producerState, "producing")

    def test_read_in_the_iteration_of_its_turn(self) -> None:
        """A connection read right after its turn, while others wait, waits for the next round with them; once
        nobody waits, its reads are handled at once again."""
        busy, busy_transport = self.connection()
        other, other_transport = self.connection()
        busy.dataReceived(OFFSETS * 20)
        other.dataReceived(OFFSETS * 40)
        iteration(self.clock)  # busy's last 4 are handled: it reads again; other has 8 left
        self.assertEqual((self.answered(busy_transport), self.answered(other_transport)), (20, 32))
        self.assertFalse(busy.reading_held())
        busy.dataReceived(OFFSETS * 20)  # read in the same iteration: after other's turn
        self.assertEqual(self.answered(busy_transport), 20)
        iteration(self.clock)
        self.assertEqual((self.answered(busy_transport), self.answered(other_transport)), (36, 40))
        iteration(self.clock)
        self.assertEqual(self.answered(busy_transport), 40)
        self.assertEqual(self.factory.turns.waiting, 0)
        busy.dataReceived(OFFSETS * 2)  # nobody waits: at once
        self.assertEqual(self.answered(busy_transport), 42)

    def test_flooders_take_turns_and_a_newcomer_is_served_at_once(self) -> None:
        """20 connections pipelining 1,000 OFFSETS each: each round, every one of them gets one turn (16 requests),
        in the order they queued; a healthy client's request is answered when its read comes, not after them."""
        flooders = [self.connection() for _ in range(20)]
        for protocol, _ in flooders:
            protocol.dataReceived(OFFSETS * 1000)
        self.assertEqual([self.answered(t) for _, t in flooders], [PER_TURN] * 20)
        iteration(self.clock)
        self.assertEqual([self.answered(t) for _, t in flooders], [2 * PER_TURN] * 20)
        healthy, transport = self.connection()
        healthy.dataReceived(frame(FetchRequest("t", 0, 0, 65536)))
        self.assertEqual(self.answered(transport), 1)
        self.assertEqual([self.answered(t) for _, t in flooders], [2 * PER_TURN] * 20)
        for _ in range(61):
            iteration(self.clock)
        self.assertEqual([self.answered(t) for _, t in flooders], [1000] * 20)
        self.assertEqual(self.factory.turns.waiting, 0)

    def test_large_frames_end_a_turn_by_bytes(self) -> None:
        """A turn is 16 frames or 1 MiB of them, whichever comes first (and always at least one frame)."""
        self.start(max_message_bytes=700_000, segment_bytes=8 * 1024 * 1024)
        self.assertEqual(self.factory.turns.bytes_per_turn, 1024 * 1024)
        protocol, transport = self.connection()
        protocol.dataReceived(ack_produce(600_000) * 3)
        self.assertEqual(self.answered(transport), 2)  # 1.2 MB: the second one ends the turn
        iteration(self.clock)
        self.assertEqual(self.answered(transport), 3)

    def test_slow_requests_end_a_turn_by_time(self) -> None:
        """A turn also ends once it has taken its share of a round's time: all of it alone, half of it beside one
        other connection waiting, never less than the minimum; a turn always handles one frame."""
        turns = self.factory.turns
        turns.seconds_per_round = 0.001
        offsets = self.broker.handlers[OffsetsRequest]

        def slow(request, peer, took=0.0003):
            self.clock.rightNow += took  # time passes, and no call runs meanwhile
            return offsets(request, peer)

        self.broker.handlers[OffsetsRequest] = slow
        protocol, transport = self.connection()
        protocol.dataReceived(OFFSETS * 10)
        self.assertEqual(self.answered(transport), 4)  # at 0, 0.3, 0.6 and 0.9 ms of a 1 ms turn
        other, _ = self.connection()
        other.dataReceived(OFFSETS * 10)  # one connection waits: a 0.5 ms turn, 2 handled
        iteration(self.clock)  # protocol's turn (other waits: 0.5 ms), then other's
        self.assertEqual(self.answered(transport), 6)  # at 0 and 0.3 ms
        self.broker.handlers[OffsetsRequest] = lambda request, peer: slow(request, peer, 1.0)
        iteration(self.clock)
        self.assertEqual(self.answered(transport), 7)  # a request slower than a whole turn still gets one

    def test_a_turns_share_of_a_round(self) -> None:
        """The default round is 10 ms, split among the connections waiting, at least 0.5 ms each."""
        turns = Turns(Clock())
        self.assertEqual((turns.frames_per_turn, SECONDS_PER_ROUND, MIN_SECONDS_PER_TURN), (64, 0.01, 0.0005))
        self.assertEqual(turns.seconds_per_turn, 0.01)
        takers = [object() for _ in range(40)]
        for taker in takers[:4]:
            turns.wait(taker)
        self.assertEqual(turns.seconds_per_turn, 0.002)
        for taker in takers[4:]:
            turns.wait(taker)
        self.assertEqual(turns.seconds_per_turn, 0.0005)

    def test_turns_are_round_robin(self) -> None:
        """Turns go in the order connections queued; one that queues again goes after the others."""
        clock = Clock()
        turns = Turns(clock, frames_per_turn=1)
        order: list[str] = []

        class Taker:
            def __init__(self, name: str, turns_wanted: int) -> None:
                self.name, self.left = name, turns_wanted

            def take_turn(self) -> None:
                order.append(self.name)
                self.left -= 1
                if self.left:
                    turns.wait(self)

        a, b, c = Taker("a", 3), Taker("b", 1), Taker("c", 2)
        for taker in (a, b, c, a):
            turns.wait(taker)
        self.assertEqual(turns.waiting, 3)
        iteration(clock)
        self.assertEqual(order, ["a", "b", "c"])
        iteration(clock)
        self.assertEqual(order, ["a", "b", "c", "a", "c"])
        iteration(clock)
        self.assertEqual((order[5:], turns.rounds, turns.turns, clock.getDelayedCalls()), (["a"], 3, 6, []))
