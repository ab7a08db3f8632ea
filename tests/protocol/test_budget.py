"""Unit tests for the shared bound on buffered request bytes (twlog.protocol.budget), through real
BrokerProtocols on StringTransports.  The connection limits are tested in test_admission."""

from __future__ import annotations

import struct

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol.budget import BUDGET, RequestBudget
from twlog.protocol.codec import MetadataRequest, ProduceRequest
from twlog.protocol.factory import BrokerFactory
from twlog.storage.message import encode_message_set

from .test_server import BrokerTestMixin, frame, responses


class FakeHolder:
    """A connection as the budget sees it."""

    def __init__(self) -> None:
        self.buffered_bytes = 0
        self.needed_bytes = 4
        self.held = False

    def hold_reading(self, reason: str) -> None:
        assert reason == BUDGET
        self.held = True

    def release_reading(self, reason: str) -> None:
        self.held = False

    def set(self, budget: RequestBudget, buffered: int, needed: int) -> None:
        self.buffered_bytes, self.needed_bytes = buffered, needed
        budget.update(self)


class RequestBudgetTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.budget = RequestBudget(1000)

    def test_admits_while_frames_fit(self) -> None:
        """A frame is read while its rest fits beside what admitted frames still need; the next one waits."""
        a, b, c = FakeHolder(), FakeHolder(), FakeHolder()
        a.set(self.budget, 100, 300)  # reserves 400 in all
        b.set(self.budget, 100, 400)  # 900
        c.set(self.budget, 50, 200)  # 1150 would not fit
        self.assertEqual((a.held, b.held, c.held), (False, False, True))
        self.assertEqual(self.budget.total, 250)
        self.assertEqual(self.budget.stopped, 1)
        a.set(self.budget, 400, 0)  # a's frame is whole: still admitted
        self.assertFalse(a.held)
        self.assertTrue(c.held)
        a.set(self.budget, 0, 4)  # handled: 400 freed, c fits now
        self.assertFalse(c.held)
        self.assertEqual(self.budget.stopped, 0)
        self.assertEqual(self.budget.peak, 550)

    def test_fewest_needed_first(self) -> None:
        """As space frees, the stopped connection needing the fewest bytes goes first."""
        big = FakeHolder()
        big.set(self.budget, 100, 850)
        large, small = FakeHolder(), FakeHolder()
        large.set(self.budget, 10, 600)
        small.set(self.budget, 10, 100)
        self.assertTrue(large.held and small.held)
        big.set(self.budget, 500, 450)  # still coming: nothing freed
        self.assertTrue(small.held)
        self.budget.forget(big)  # gone: 500 bytes and 450 reserved freed
        self.assertFalse(small.held)
        self.assertFalse(large.held)  # 20 + 100 + 600 fits as well

    def test_equals_in_the_order_they_stopped(self) -> None:
        """Among stopped connections needing as much, the one stopped first is admitted first."""
        hog = FakeHolder()
        hog.set(self.budget, 100, 800)
        waiting = [FakeHolder() for _ in range(4)]
        for holder in reversed(waiting):  # stopped in the reverse of the order they were made
            holder.set(self.budget, 10, 300)
        self.assertTrue(all(h.held for h in waiting))
        order = []
        for holder in waiting:
            holder.release_reading = lambda reason, h=holder: order.append(waiting.index(h))
        hog.set(self.budget, 0, 4)  # 900 freed: 3 of them fit beside what the 4 need
        self.assertEqual(order, [3, 2, 1])

    def test_holding_nothing_always_reads(self) -> None:
        """A connection whose request came whole holds nothing and is never stopped, even at the bound."""
        hog = FakeHolder()
        hog.set(self.budget, 999, 1)
        healthy = FakeHolder()
        healthy.set(self.budget, 0, 4)
        self.assertFalse(healthy.held)
        self.assertEqual(self.budget.total, 999)

    def test_a_new_frame_is_admitted_again(self) -> None:
        """After its frame, a connection starting a larger one is admitted only if that fits."""
        a, b = FakeHolder(), FakeHolder()
        a.set(self.budget, 100, 100)
        b.set(self.budget, 100, 600)
        a.set(self.budget, 50, 900)  # a's frame was handled and the next one started in the same read
        self.assertTrue(a.held)
        self.assertEqual(self.budget.total, 150)

    def test_never_past_the_bound_but_first_reads(self) -> None:
        """Admitted frames fill the bound exactly; stopped ones add only their first read."""
        admitted = [FakeHolder() for _ in range(4)]
        for h in admitted:
            h.set(self.budget, 50, 200)
        for h in admitted:
            h.set(self.budget, 250, 0)
        self.assertEqual(self.budget.total, 1000)
        late = FakeHolder()
        late.set(self.budget, 30, 500)
        self.assertTrue(late.held)
        self.assertEqual(self.budget.peak, 1030)


def produce_frame(size: int) -> bytes:
    """A PRODUCE request, size prefix included, whose message set is about C{size} bytes."""
    return frame(ProduceRequest("t", 0, encode_message_set([b"p" * max(size - 9, 1)])))


class BrokerBudgetTests(BrokerTestMixin, SynchronousTestCase):
    """The budget in the broker: real BrokerProtocols on StringTransports, one factory."""

    def setUp(self) -> None:
        self.make_broker(max_request_bytes=2048, max_buffered_request_bytes=4096, max_message_bytes=2048)
        self.factory = BrokerFactory(self.broker)

    def connection(self):
        protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def test_stops_and_resumes_readers(self) -> None:
        """Partial frames are accounted; the connection whose frame does not fit stops reading until one is handled."""
        data = produce_frame(1900)
        a, a_transport = self.connection()
        b, b_transport = self.connection()
        c, c_transport = self.connection()
        a.dataReceived(data[:1000])
        b.dataReceived(data[:1000])
        c.dataReceived(data[:500])
        self.assertEqual(self.factory.budget.total, 996 + 996 + 496)  # size prefixes are not kept
        self.assertEqual((a_transport.producerState, b_transport.producerState, c_transport.producerState),
                         ("producing", "producing", "paused"))
        healthy, healthy_transport = self.connection()
        healthy.dataReceived(frame(MetadataRequest()))
        self.assertEqual(len(responses(healthy_transport.value())), 1)
        self.assertEqual(healthy_transport.producerState, "producing")
        a.dataReceived(data[1000:])  # a's frame is whole: handled, and its bytes freed
        self.assertEqual(self.logs.get_log("t", 0).end_offset, len(encode_message_set([b"p" * 1891])))
        self.assertEqual(c_transport.producerState, "producing")
        self.assertEqual(self.factory.budget.total, 996 + 496)
        c.dataReceived(data[500:])
        b.connectionLost(None)
        self.assertEqual(self.factory.budget.total, 0)
        self.assertLessEqual(self.factory.budget.peak, 4096)

    def test_pending_requests_and_budget_together(self) -> None:
        """A connection held by the budget stays paused when its requests in flight drain, and the reverse."""
        data = produce_frame(1900)
        hog, _ = self.connection()
        hog.dataReceived(data[:1500])
        other, _ = self.connection()
        other.dataReceived(data[:1500])
        late, transport = self.connection()
        late.dataReceived(data[:200])
        self.assertTrue(late.reading_held(BUDGET))
        late.pauseProducing()
        late.resumeProducing()
        self.assertEqual(transport.producerState, "paused")
        hog.dataReceived(data[1500:])
        self.assertEqual(transport.producerState, "producing")

    def test_oversize_and_malformed_frames_free_their_bytes(self) -> None:
        protocol, transport = self.connection()
        protocol.dataReceived(struct.pack(">ih", 2, 99) + b"x" * 100)
        self.assertTrue(transport.disconnecting)
        self.assertEqual(self.factory.budget.total, 0)
