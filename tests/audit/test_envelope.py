"""Tests for twlog.envelope: the documented version-1 layout, monitoring events, and the producer's AuditTrail."""

from __future__ import annotations

import json
import struct

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.envelope import (
    AUDIT_TOPIC,
    AuditEvent,
    AuditSettings,
    AuditTrail,
    Envelope,
    audit_trail,
    decode_event,
    encode_event,
    open_envelope,
    strip,
    wrap,
)


class EnvelopeTests(SynchronousTestCase):
    def test_layout(self) -> None:
        """The bytes are the table of the module's docstring: magic, version, origin length and origin, instance
        (uint32), creation ms (int64), sequence (int64), then the payload, big-endian."""
        data = wrap(b"hello", "web-1", 0xDEADBEEF, 1_700_000_000_123, 42)
        expected = (b"\x00\xa7" + b"\x01" + b"\x05" + b"web-1" + struct.pack(">I", 0xDEADBEEF)
                    + struct.pack(">q", 1_700_000_000_123) + struct.pack(">q", 42) + b"hello")
        self.assertEqual(data, expected)
        self.assertEqual(len(data) - len(b"hello"), 24 + len("web-1"))

    def test_round_trip(self) -> None:
        data = wrap(b"\x00binary\xff", "h\u00e9te", 7, 5, 9)
        self.assertEqual(open_envelope(data), Envelope("h\u00e9te", 7, 5, 9, b"\x00binary\xff"))
        self.assertEqual(strip(data), b"\x00binary\xff")
        self.assertEqual(open_envelope(wrap(b"", "o", 0, 0, 0)).payload, b"")

    def test_not_an_envelope(self) -> None:
        """A payload of an un-instrumented producer (text never starts with NUL) is left alone."""
        for payload in (b"", b"plain text", b"\x00", b"\x00\xa7", b"\x00\xa7\x01\x05web",
                        b"\x00\xa7\x01\x00" + b"x" * 30):
            self.assertIsNone(open_envelope(payload), payload)
            self.assertEqual(strip(payload), payload)

    def test_unknown_version(self) -> None:
        data = b"\x00\xa7\x02" + wrap(b"p", "o", 0, 0, 0)[3:]
        self.assertRaisesRegex(ValueError, "version 2", open_envelope, data)

    def test_origin_bounds(self) -> None:
        self.assertRaises(ValueError, wrap, b"", "", 0, 0, 0)
        self.assertRaises(ValueError, wrap, b"", "x" * 256, 0, 0, 0)
        self.assertEqual(open_envelope(wrap(b"", "x" * 255, 0, 0, 0)).origin, "x" * 255)

    def test_events(self) -> None:
        event = AuditEvent("t", "o", 3, 60_000, 60_000, 10, 0, 9)
        data = encode_event(event)
        self.assertEqual(json.loads(data)["v"], 1)
        self.assertEqual(decode_event(data), event)
        self.assertIsNone(decode_event(b"not json"))
        self.assertIsNone(decode_event(b'{"topic": "t"}'))


class AuditTrailTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000.5)  # 1,000,500 ms: half way through a 1 s window
        self.published: list[list[bytes]] = []
        self.trail = AuditTrail(self.clock, self.published.append, origin="web-1", window_s=1, instance=5)

    def events(self) -> list[AuditEvent]:
        return [decode_event(e) for batch in self.published for e in batch]

    def test_stamps_with_sequences_per_topic(self) -> None:
        stamped = self.trail.stamp("a", [b"x", b"y"]) + self.trail.stamp("b", [b"z"]) + self.trail.stamp("a", [b"w"])
        opened = [open_envelope(s) for s in stamped]
        self.assertEqual([(e.origin, e.instance, e.created_ms, e.payload) for e in opened],
                         [("web-1", 5, 1_000_500, p) for p in (b"x", b"y", b"z", b"w")])
        self.assertEqual([e.sequence for e in opened], [0, 1, 0, 2])

    def test_reports_each_window_when_it_ends(self) -> None:
        self.trail.stamp("a", [b"1", b"2"])
        self.clock.advance(0.4)
        self.trail.stamp("a", [b"3"])
        self.assertEqual(self.published, [])
        self.clock.advance(0.1)  # the window [1,000,000, 1,001,000) ends
        self.assertEqual(self.events(), [AuditEvent("a", "web-1", 5, 1_000_000, 1000, 3, 0, 2)])
        self.clock.advance(10)
        self.assertEqual(len(self.published), 1)  # nothing sent since: no empty events, no timer left
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_window_still_open_is_reported_later(self) -> None:
        self.trail.stamp("a", [b"1"])
        self.clock.advance(0.5)
        self.trail.stamp("b", [b"2"])  # in the next window
        self.assertEqual([e.window_start_ms for e in self.events()], [1_000_000])
        self.clock.advance(1)
        self.assertEqual([(e.topic, e.window_start_ms, e.count) for e in self.events()],
                         [("a", 1_000_000, 1), ("b", 1_001_000, 1)])

    def test_close_reports_the_current_window(self) -> None:
        self.trail.stamp("a", [b"1"])
        self.trail.close()
        self.assertEqual([(e.topic, e.count) for e in self.events()], [("a", 1)])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_clock_going_back(self) -> None:
        """Creation times never go backwards within a producer, so windows and sequences agree."""
        self.trail.stamp("a", [b"1"])
        self.clock.rightNow -= 5
        (stamped,) = self.trail.stamp("a", [b"2"])
        self.assertEqual(open_envelope(stamped).created_ms, 1_000_500)

    def test_settings(self) -> None:
        clock = Clock()
        self.assertIsNone(audit_trail(False, clock, print))
        self.assertIsNone(audit_trail(None, clock, print))
        self.assertEqual(audit_trail("db-2", clock, print).origin, "db-2")
        self.assertEqual(audit_trail(True, clock, print).window_ms, 60_000)
        trail = audit_trail(AuditSettings("x", 2.5), clock, print)
        self.assertEqual((trail.origin, trail.window_ms), ("x", 2500))
        self.assertRaises(TypeError, audit_trail, 3, clock, print)
        self.assertRaises(ValueError, AuditTrail, clock, print, window_s=0)
        self.assertEqual(AUDIT_TOPIC, "twlog-audit")
