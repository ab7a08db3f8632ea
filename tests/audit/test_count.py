"""Tests for twlog.audit.count: the rules every audit (cluster, mirror target, DataFrame) counts by."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.audit.count import AuditCount, percentiles
from twlog.envelope import AuditEvent, Envelope


def event(count: int, start: int = 0, topic: str = "t", origin: str = "o", instance: int = 1,
          window_ms: int = 1000, first: int = 0) -> AuditEvent:
    return AuditEvent(topic, origin, instance, start, window_ms, count, first, first + count - 1)


def message(sequence: int, created_ms: int, origin: str = "o", instance: int = 1) -> Envelope:
    return Envelope(origin, instance, created_ms, sequence, b"")


class CountTests(SynchronousTestCase):
    def test_complete_missing_duplicated(self) -> None:
        count = AuditCount()
        count.add_event(event(3, 0))
        count.add_event(event(2, 1000, first=3))
        for seq, ms in [(0, 10), (1, 20), (2, 30), (2, 30), (3, 1500)]:  # sequence 2 twice, sequence 4 lost
            count.add_message("t", message(seq, ms), ms + 100)
        first, second = count.report(now_ms=10_000, grace_ms=0)
        self.assertEqual((first.expected, first.received, first.missing, first.duplicated, first.status),
                         (3, 3, 0, 1, "complete"))
        self.assertEqual((second.expected, second.received, second.missing, second.status), (2, 1, 1, "missing"))
        self.assertEqual(first.age_ms, (100, 100, 100))
        self.assertEqual((first.delay_ms, first.delivered), (None, 0))  # no arrival seen: unknown, not the age

    def test_age_at_audit_and_delivery_delay(self) -> None:
        """The age is creation to the audit's read; the delivery delay, creation to arrival, counts only the
        messages whose arrival was seen, and is not the age."""
        count = AuditCount()
        count.add_event(event(4, 0))
        count.add_message("t", message(0, 10), 272_010)  # arrived before the audit looked: age only
        count.add_message("t", message(1, 20), 272_020)
        count.add_message("t", message(2, 30), 272_030, arrived_ms=80)
        count.add_message("t", message(3, 40), 272_040, arrived_ms=290)
        (report,) = count.report(now_ms=300_000, grace_ms=0)
        self.assertEqual(report.age_ms, (272_000, 272_000, 272_000))
        self.assertEqual((report.delay_ms, report.delivered), ((50, 250, 250), 2))
        value = report.as_json()
        self.assertEqual(value["age_at_audit_ms"], {"p50": 272_000, "p90": 272_000, "p99": 272_000})
        self.assertEqual(value["delivery_delay_ms"], {"p50": 50, "p90": 250, "p99": 250})
        self.assertNotIn("delay_ms", value)

    def test_pending_until_the_grace_ends(self) -> None:
        count = AuditCount()
        count.add_event(event(2, 0))
        count.add_message("t", message(0, 0), 0)
        (report,) = count.report(now_ms=1999, grace_ms=1000)
        self.assertEqual((report.missing, report.status), (1, "pending"))
        (report,) = count.report(now_ms=2000, grace_ms=1000)
        self.assertEqual(report.status, "missing")

    def test_unreported(self) -> None:
        """Messages of a closed window without any monitoring event: the events were lost."""
        count = AuditCount(1000)
        count.add_message("t", message(0, 5), 5)
        (report,) = count.report(now_ms=5000, grace_ms=0)
        self.assertEqual((report.expected, report.received, report.status), (0, 1, "unreported"))

    def test_window_without_messages_is_all_missing(self) -> None:
        count = AuditCount()
        count.add_event(event(4, 3000))
        (report,) = count.report(now_ms=9000, grace_ms=0)
        self.assertEqual((report.received, report.missing, report.age_ms, report.delay_ms), (0, 4, None, None))

    def test_an_event_copied_twice_counts_once(self) -> None:
        count = AuditCount()
        count.add_event(event(2))
        count.add_event(event(2))
        (report,) = count.report(now_ms=9000, grace_ms=0)
        self.assertEqual(report.expected, 2)

    def test_origins_and_instances(self) -> None:
        """Windows are per origin; two instances of one origin (two runs on one host) add up without colliding."""
        count = AuditCount()
        count.add_event(event(1, origin="a", instance=1))
        count.add_event(event(1, origin="a", instance=2))
        count.add_event(event(1, origin="b"))
        for origin, instance in [("a", 1), ("a", 2), ("b", 1)]:
            count.add_message("t", message(0, 0, origin, instance), 0)
        reports = count.report(now_ms=9000, grace_ms=0)
        self.assertEqual([(r.origin, r.expected, r.received, r.status) for r in reports],
                         [("a", 2, 2, "complete"), ("b", 1, 1, "complete")])

    def test_report_window(self) -> None:
        """A larger report window sums the producers' windows; one that is not a multiple is refused."""
        count = AuditCount(window_ms=2000)
        count.add_event(event(1, 0))
        count.add_event(event(1, 1000, first=1))
        (report,) = count.report(now_ms=9000, grace_ms=0)
        self.assertEqual((report.window_start_ms, report.window_ms, report.expected), (0, 2000, 2))
        bad = AuditCount(1500)
        bad.add_event(event(1))
        self.assertRaisesRegex(ValueError, "not a multiple of the 1 s window", bad.report, 9000, 0)
        self.assertEqual(AuditCount().report_window_ms(), 60_000)

    def test_since_and_topics(self) -> None:
        count = AuditCount()
        count.add_event(event(1, 0))
        count.add_event(event(1, 5000, first=1))
        count.add_event(event(1, 0, topic="other"))
        self.assertEqual([r.window_start_ms for r in count.report(9000, 0, topics=["t"], since_ms=1000)], [5000])
        self.assertEqual(len(count.report(9000, 0)), 3)

    def test_plain_messages(self) -> None:
        count = AuditCount()
        count.add_message("t", None, 0)
        self.assertEqual((count.plain, count.enveloped("t"), count.report(9000, 0)), ({"t": 1}, 0, []))

    def test_percentiles(self) -> None:
        """Nearest rank: p50 of 1..100 is 50, p90 is 90, p99 is 99."""
        self.assertEqual(percentiles(list(range(100, 0, -1))), (50, 90, 99))
        self.assertEqual(percentiles([7]), (7, 7, 7))
        self.assertIsNone(percentiles([]))
