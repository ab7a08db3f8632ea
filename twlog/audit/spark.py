# -*- test-case-name: tests.audit.test_spark,tests.integration.test_audit -*-
"""The audit of Spark-loaded data: the same counting (L{twlog.audit.count}) over a DataFrame.

The DataFrame is what the C{twlog} source reads with the option C{envelope}
(C{"true"}): columns C{topic}, C{origin}, C{instance}, C{created_ms},
C{sequence} (rows of un-instrumented producers have a null C{origin}); or
any DataFrame with those columns, such as the output of a load job that kept
them.  The monitoring events are the C{twlog-audit} topic read by the same
source (a DataFrame with a binary C{value} column), or L{AuditEvent}s.
"""

from __future__ import annotations

from collections.abc import Iterable

from twlog.audit.count import AuditCount, WindowReport
from twlog.audit.read import now_ms as _now_ms
from twlog.envelope import AuditEvent, Envelope, decode_event

#: The columns the counting reads.
COLUMNS = ("topic", "origin", "instance", "created_ms", "sequence")


def _events(events) -> Iterable[AuditEvent]:
    if hasattr(events, "select"):  # a DataFrame of the twlog-audit topic
        for row in events.select("value").toLocalIterator():
            event = decode_event(bytes(row[0]))
            if event is not None:
                yield event
    else:
        yield from events


def audit_dataframe(df, events, *, topics: Iterable[str] | None = None, window_s: float | None = None,
                    grace_s: float = 30.0, since_ms: int | None = None, now_ms: int | None = None,
                    seen_ms_column: str | None = None) -> list[WindowReport]:
    """The per-window audit (L{WindowReport}s, oldest first) of the rows of C{df} against C{events}.

    @param df: a DataFrame with the columns L{COLUMNS} (the twlog source with C{envelope} true).
    @param events: the C{twlog-audit} topic as a DataFrame (its C{value} column), or L{AuditEvent}s.
    @param topics: only these topics (default: the topics of C{df}'s rows).
    @param window_s: the report window (default: the events' largest window).
    @param grace_s: a window is pending until this long after its end.
    @param seen_ms_column: a column with when each row arrived (ms since the epoch) where it was received, such
        as an ingestion time a load job kept: the delivery delay (creation to arrival) is measured from it.
        Without it the delivery delay is unknown (None) and only the age at the audit (creation to now) is given.
    @raise ValueError: C{df} lacks a column, or the window is not a multiple of the events' window.
    """
    lacking = [c for c in COLUMNS if c not in df.columns]
    if lacking:
        raise ValueError(f"the DataFrame has no column {', '.join(lacking)}: read it with the option envelope=true")
    now = _now_ms() if now_ms is None else now_ms
    count = AuditCount(None if window_s is None else int(round(window_s * 1000)))
    wanted = None if topics is None else set(topics)
    for event in _events(events):
        count.add_event(event)
    seen: set[str] = set()
    columns = [*COLUMNS, seen_ms_column] if seen_ms_column else list(COLUMNS)
    for row in df.select(*columns).toLocalIterator():
        topic, origin, instance, created_ms, sequence = row[:5]
        if wanted is not None and topic not in wanted:
            continue
        seen.add(topic)
        envelope = None if origin is None else Envelope(origin, instance, created_ms, sequence, b"")
        count.add_message(topic, envelope, now, row[5] if seen_ms_column else None)
    return count.report(now, int(grace_s * 1000), topics=seen if wanted is None else wanted, since_ms=since_ms)


__all__ = ["COLUMNS", "audit_dataframe"]
