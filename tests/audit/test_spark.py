"""Tests for twlog.audit.spark.audit_dataframe over a stand-in DataFrame (a real one: tests/integration/test_audit)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.audit.spark import COLUMNS, audit_dataframe
from twlog.envelope import AuditEvent, encode_event


class FrameStandIn:
    """What audit_dataframe uses of a DataFrame: C{columns} and C{select(...).toLocalIterator()}."""

    def __init__(self, columns, rows) -> None:
        self.columns = list(columns)
        self.rows = rows

    def select(self, *names):
        index = [self.columns.index(n) for n in names]
        return FrameStandIn(names, [tuple(row[i] for i in index) for row in self.rows])

    def toLocalIterator(self):
        return iter(self.rows)


class AuditDataFrameTests(SynchronousTestCase):
    def test_counts_like_the_command(self) -> None:
        rows = [("t", "o", 1, 100, 0, 150), ("t", "o", 1, 200, 1, 260), ("t", "o", 1, 200, 1, 270),
                ("t", None, None, None, None, 300)]
        df = FrameStandIn([*COLUMNS, "seen"], rows)
        events = FrameStandIn(["value"], [(encode_event(AuditEvent("t", "o", 1, 0, 1000, 3, 0, 2)),),
                                          (b"not an event",)])
        (report,) = audit_dataframe(df, events, now_ms=5000, grace_s=0, seen_ms_column="seen")
        self.assertEqual((report.expected, report.received, report.missing, report.duplicated, report.status),
                         (3, 2, 1, 1, "missing"))
        self.assertEqual((report.delay_ms, report.delivered), ((60, 70, 70), 3))  # from the arrival column
        self.assertEqual(report.age_ms, (4800, 4900, 4900))  # creation to now_ms

    def test_without_an_arrival_column_the_delay_is_unknown(self) -> None:
        """No column of arrival times: the age at the audit only, never passed off as a delivery delay."""
        df = FrameStandIn(COLUMNS, [("t", "o", 1, 100, 0)])
        (report,) = audit_dataframe(df, [AuditEvent("t", "o", 1, 0, 1000, 1, 0, 0)], now_ms=5000, grace_s=0)
        self.assertEqual((report.age_ms, report.delay_ms), ((4900, 4900, 4900), None))

    def test_events_as_a_list_and_missing_columns(self) -> None:
        df = FrameStandIn(COLUMNS, [("t", "o", 1, 10, 0)])
        (report,) = audit_dataframe(df, [AuditEvent("t", "o", 1, 0, 1000, 1, 0, 0)], now_ms=9000, grace_s=0)
        self.assertEqual(report.status, "complete")
        self.assertRaisesRegex(ValueError, "envelope=true", audit_dataframe, FrameStandIn(["value"], []), [])
