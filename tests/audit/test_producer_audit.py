"""Tests for Producer(audit=...): envelopes on the topic's messages, monitoring events to twlog-audit."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.producer.test_producer import make_producer
from twlog.envelope import AUDIT_TOPIC, AuditSettings, decode_event, open_envelope
from twlog.storage.message import iter_messages


def payloads(connection, topic: str) -> list[bytes]:
    return [m.payload for r in connection.sent + connection.requests
            if getattr(r, "topic", None) == topic for m in iter_messages(r.messages, 0)]


class ProducerAuditTests(SynchronousTestCase):
    def test_envelopes_and_events(self) -> None:
        producer, connections, clock = make_producer([(0, {"t": 1, AUDIT_TOPIC: 1})],
                                                     audit=AuditSettings("web-1", window_s=10))
        clock.advance(100)
        self.successResultOf(producer.send("t", [b"a", b"b"]))
        self.successResultOf(producer.send("t", b"c"))
        sent = [open_envelope(p) for p in payloads(connections["b0"], "t")]
        self.assertEqual([(e.origin, e.sequence, e.created_ms, e.payload) for e in sent],
                         [("web-1", 0, 100_000, b"a"), ("web-1", 1, 100_000, b"b"), ("web-1", 2, 100_000, b"c")])
        self.assertEqual(payloads(connections["b0"], AUDIT_TOPIC), [])
        clock.advance(10)
        (event,) = [decode_event(p) for p in payloads(connections["b0"], AUDIT_TOPIC)]
        self.assertEqual((event.topic, event.origin, event.window_start_ms, event.count), ("t", "web-1", 100_000, 3))

    def test_close_publishes_the_open_window(self) -> None:
        producer, connections, clock = make_producer([(0, {"t": 1, AUDIT_TOPIC: 1})], audit="db")
        self.successResultOf(producer.send("t", b"a"))
        self.successResultOf(producer.close())
        (event,) = [decode_event(p) for p in payloads(connections["b0"], AUDIT_TOPIC)]
        self.assertEqual((event.topic, event.count), ("t", 1))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_without_audit_payloads_unchanged(self) -> None:
        producer, connections, _ = make_producer()
        self.successResultOf(producer.send("t", b"a"))
        self.assertEqual(payloads(connections["b0"], "t"), [b"a"])
