# -*- test-case-name: tests.audit.test_count -*-
"""The audit's counting: what the monitoring events promised against what a reader received, per window.

One L{AuditCount} is fed monitoring events (L{twlog.envelope.AuditEvent}) and
received envelopes, from any reader: a cluster (L{twlog.audit.read}), a
mirrored cluster, or a Spark DataFrame (L{twlog.audit.spark}); so every stage
of the pipeline is judged by the same rules:

 - a message belongs to the report window its creation time falls in;
 - C{expected} is the sum of the counts the producers reported for the window;
 - C{received} counts distinct messages (origin, instance, sequence); every
   further copy is C{duplicated} (a mirror's or a producer's retry);
 - C{missing} is C{expected - received} (not below 0);
 - a window is C{pending} until C{grace_ms} after its end (its events may not
   have arrived yet); a closed window is C{complete}, C{missing}, or
   C{unreported} (messages but no monitoring event: the events were lost);
 - the age at audit is from the creation time to when the audit read the message: it grows with the time the
   audit runs, and says nothing about delivery;
 - the delivery delay is from the creation time to when the message arrived where it was received (the
   audit following the topic, L{twlog.audit.read.follow_topic}; or a column of arrival times in Spark,
   L{twlog.audit.spark}); it is known only for the messages whose arrival was seen, None for the others.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from twlog.envelope import AuditEvent, Envelope

COMPLETE = "complete"
MISSING = "missing"
PENDING = "pending"
UNREPORTED = "unreported"
#: Statuses that make C{twlog audit} exit 1.
FAILED = (MISSING, UNREPORTED)
PERCENTILES = (50, 90, 99)


class WindowReport(NamedTuple):
    """The audit of one topic, origin and window."""

    topic: str
    origin: str
    window_start_ms: int
    window_ms: int
    expected: int
    received: int
    missing: int
    duplicated: int
    #: Percentiles (p50, p90, p99) in milliseconds of the age of the messages when the audit read them (creation
    #: to the audit's read), None without messages.
    age_ms: tuple[int, int, int] | None
    status: str
    #: Percentiles (p50, p90, p99) in milliseconds of the delivery delay (creation to arrival) of the messages
    #: whose arrival was seen (L{delivered} of them), None when none was.
    delay_ms: tuple[int, int, int] | None = None
    #: How many of the messages the delivery delay counts (the others arrived before the audit looked).
    delivered: int = 0

    def as_json(self) -> dict:
        value = self._asdict()
        del value["age_ms"], value["delay_ms"]
        value["age_at_audit_ms"] = _named(self.age_ms)
        value["delivery_delay_ms"] = _named(self.delay_ms)
        return value


def _named(values: tuple[int, ...] | None) -> dict[str, int] | None:
    return dict(zip((f"p{p}" for p in PERCENTILES), values)) if values else None


def percentiles(values: list[int]) -> tuple[int, ...] | None:
    """The nearest-rank percentiles L{PERCENTILES} of C{values} (None if empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return tuple(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] for p in PERCENTILES)


class _Window:
    __slots__ = ("ages", "copies", "delays", "expected", "reported", "seen")

    def __init__(self) -> None:
        self.expected = 0
        self.reported = False
        self.seen: set[tuple[int, int]] = set()
        self.copies = 0
        self.ages: list[int] = []
        self.delays: list[int] = []


class AuditCount:
    """Counts of one reader, per (topic, origin, report window).

    @param window_ms: the report window; None: the largest window of the events (60 s without events).
        It must be a multiple of every event's window.
    """

    def __init__(self, window_ms: int | None = None) -> None:
        if window_ms is not None and window_ms < 1:
            raise ValueError(f"the report window must be positive, not {window_ms} ms")
        self.window_ms = window_ms
        self._events: dict[tuple, AuditEvent] = {}
        self._messages: list[tuple[str, str, int, int, int, int, int | None]] = []
        #: Messages read that carry no envelope, per topic.
        self.plain: dict[str, int] = {}

    def add_event(self, event: AuditEvent) -> None:
        """One monitoring event; a copy of one already added (a mirror copies at least once) counts once."""
        self._events[(event.topic, event.origin, event.instance, event.window_start_ms, event.first_sequence)] = event

    def add_message(self, topic: str, envelope: Envelope | None, seen_ms: int, arrived_ms: int | None = None) -> None:
        """One message read (None: it has no envelope) by the audit at C{seen_ms}; C{arrived_ms}: when it arrived
        where it was received, if that was seen (None: it arrived before anyone looked)."""
        if envelope is None:
            self.plain[topic] = self.plain.get(topic, 0) + 1
            return
        self._messages.append((topic, envelope.origin, envelope.instance, envelope.sequence, envelope.created_ms,
                               seen_ms, arrived_ms))

    def enveloped(self, topic: str) -> int:
        return sum(1 for m in self._messages if m[0] == topic)

    def events_for(self, topic: str) -> int:
        return sum(1 for e in self._events.values() if e.topic == topic)

    def report_window_ms(self) -> int:
        """The report window: the one asked for, or the largest of the events' (60 s without events)."""
        window_ms = self.window_ms or max((e.window_ms for e in self._events.values()), default=60_000)
        for event in self._events.values():
            if window_ms % event.window_ms:
                raise ValueError(
                    f"a report window of {window_ms / 1000:g} s is not a multiple of the {event.window_ms / 1000:g} s "
                    f"window of {event.origin}'s monitoring events for {event.topic}: use a multiple of it")
        return window_ms

    def report(self, now_ms: int, grace_ms: int, topics: Iterable[str] | None = None,
               since_ms: int | None = None) -> list[WindowReport]:
        """Every window of C{topics} (default: all), oldest first.

        @raise ValueError: the report window is not a multiple of an event's window.
        """
        window_ms = self.report_window_ms()
        wanted = None if topics is None else set(topics)
        windows: dict[tuple[str, str, int], _Window] = {}

        def window(topic: str, origin: str, ms: int) -> _Window | None:
            if wanted is not None and topic not in wanted:
                return None
            start = ms - ms % window_ms
            if since_ms is not None and start + window_ms <= since_ms:
                return None
            return windows.setdefault((topic, origin, start), _Window())

        for event in self._events.values():
            w = window(event.topic, event.origin, event.window_start_ms)
            if w is not None:
                w.expected += event.count
                w.reported = True
        for topic, origin, instance, sequence, created_ms, seen_ms, arrived_ms in self._messages:
            w = window(topic, origin, created_ms)
            if w is None:
                continue
            w.copies += 1
            w.seen.add((instance, sequence))
            w.ages.append(max(0, seen_ms - created_ms))
            if arrived_ms is not None:
                w.delays.append(max(0, arrived_ms - created_ms))
        reports = []
        for (topic, origin, start), w in sorted(windows.items(), key=lambda item: (item[0][2], item[0][0], item[0][1])):
            received = len(w.seen)
            missing = max(0, w.expected - received)
            if now_ms < start + window_ms + grace_ms:
                status = PENDING
            elif not w.reported:
                status = UNREPORTED
            else:
                status = MISSING if missing else COMPLETE
            reports.append(WindowReport(topic, origin, start, window_ms, w.expected, received, missing,
                                        w.copies - received, percentiles(w.ages), status, percentiles(w.delays),
                                        len(w.delays)))
        return reports


__all__ = ["COMPLETE", "FAILED", "MISSING", "PENDING", "UNREPORTED", "AuditCount", "WindowReport", "percentiles"]
