# -*- test-case-name: tests.audit.test_envelope -*-
"""The audit envelope and the monitoring events of the audit trail (the paper's section 4).

An instrumented producer (C{Producer(audit=...)}, C{twlog produce --audit})
wraps each payload in an envelope carrying where and when the message was
made, and every window publishes, per topic, how many messages it made in
that window to the topic L{AUDIT_TOPIC}.  Readers count what they received
against those events (L{twlog.audit}).

The envelope, version 1 (integers big-endian)::

    offset   size  field
    0        2     magic 0x00 0xA7 (a text payload never starts with NUL)
    2        1     version, 1
    3        1     n, the length of the origin (1 to 255)
    4        n     origin: the producing host or a configured name, UTF-8
    4+n      4     instance: unsigned, random per producer object (two runs on one host do not collide)
    8+n      8     creation time, milliseconds since the epoch (signed)
    16+n     8     sequence: per (origin, instance, topic), from 0, one per message (signed)
    24+n     ...   the original payload, unchanged

A monitoring event is a JSON object (UTF-8), not enveloped: C{{"v": 1,
"topic", "origin", "instance", "window_start_ms", "window_ms", "count",
"first_sequence", "last_sequence"}}: C{count} messages of C{topic}, with
creation times in C{[window_start_ms, window_start_ms + window_ms)}, were
published by that producer.  Windows are aligned on multiples of
C{window_ms} since the epoch, so every producer of a window size cuts time
the same way.

This module is pure (no I/O, no reactor import): the producer gives
L{AuditTrail} its clock and a function that publishes events.
"""

from __future__ import annotations

import json
import random
import socket
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

MAGIC = b"\x00\xa7"
VERSION = 1
#: The topic every instrumented producer publishes its monitoring events to.
AUDIT_TOPIC = "twlog-audit"
#: The default window of the monitoring events, in seconds (the paper's "fixed time window").
DEFAULT_WINDOW_S = 60.0

_TAIL = struct.Struct(">Iqq")  # instance, creation time ms, sequence


class Envelope(NamedTuple):
    """An opened envelope: where and when the message was made, and the original payload."""

    origin: str
    instance: int
    created_ms: int
    sequence: int
    payload: bytes


class AuditEvent(NamedTuple):
    """One monitoring event: C{count} messages of C{topic} made by one producer in one window."""

    topic: str
    origin: str
    instance: int
    window_start_ms: int
    window_ms: int
    count: int
    first_sequence: int
    last_sequence: int


def wrap(payload: bytes, origin: str, instance: int, created_ms: int, sequence: int) -> bytes:
    """C{payload} in a version-1 envelope."""
    name = origin.encode("utf-8")
    if not 1 <= len(name) <= 255:
        raise ValueError(f"an audit origin is 1 to 255 bytes of UTF-8, not {len(name)}: {origin!r}")
    return b"".join((MAGIC, bytes((VERSION, len(name))), name, _TAIL.pack(instance, created_ms, sequence), payload))


def open_envelope(data: bytes) -> Envelope | None:
    """The envelope C{data} is, or None if it is not one (a payload of an un-instrumented producer).

    @raise ValueError: it starts like an envelope of a version this code does not know.
    """
    if len(data) < 4 or data[:2] != MAGIC:
        return None
    if data[2] != VERSION:
        raise ValueError(f"audit envelope version {data[2]} (this twlog reads version {VERSION})")
    n = data[3]
    end = 4 + n + _TAIL.size
    if n == 0 or len(data) < end:
        return None
    try:
        origin = bytes(data[4:4 + n]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    instance, created_ms, sequence = _TAIL.unpack_from(data, 4 + n)
    return Envelope(origin, instance, created_ms, sequence, bytes(data[end:]))


def strip(data: bytes) -> bytes:
    """The original payload: C{data} without its envelope (C{data} itself if it has none)."""
    opened = open_envelope(data)
    return data if opened is None else opened.payload


def encode_event(event: AuditEvent) -> bytes:
    """A monitoring event as the JSON published to L{AUDIT_TOPIC}."""
    return json.dumps({"v": 1, **event._asdict()}, sort_keys=True).encode("utf-8")


def decode_event(data: bytes) -> AuditEvent | None:
    """The monitoring event C{data} holds, or None if it is not one."""
    try:
        value = json.loads(bytes(data).decode("utf-8"))
        return AuditEvent(**{field: value[field] for field in AuditEvent._fields})
    except (ValueError, KeyError, TypeError):
        return None


def default_origin() -> str:
    """The producing host's name."""
    return socket.gethostname() or "localhost"


class AuditTrail:
    """An instrumented producer's half of the audit: stamps envelopes, counts per window, publishes events.

    @param clock: C{seconds()} and C{callLater} (the reactor, or a C{task.Clock} in tests).
    @param publish: C{(list of encoded events) -> object}: sends them to L{AUDIT_TOPIC}.
    @param origin: the origin name (default: the host name).
    @param window_s: the window of the monitoring events.
    @param instance: this producer's instance number (default: random).
    """

    def __init__(self, clock, publish: Callable[[list[bytes]], Any], origin: str | None = None,
                 window_s: float = DEFAULT_WINDOW_S, instance: int | None = None,
                 rng: random.Random | None = None) -> None:
        if not window_s > 0:
            raise ValueError(f"the audit window must be positive, not {window_s!r}")
        self.origin = origin or default_origin()
        wrap(b"", self.origin, 0, 0, 0)  # refuse a bad origin now
        self.window_ms = max(1, int(round(window_s * 1000)))
        self.instance = instance if instance is not None else (rng or random.SystemRandom()).getrandbits(32)
        self._clock = clock
        self._publish = publish
        self._sequences: dict[str, int] = {}
        self._last_ms = 0
        #: (window start, topic) -> [count, first sequence, last sequence], for windows not published yet.
        self._windows: dict[tuple[int, str], list[int]] = {}
        self._timer = None
        self._closed = False

    def stamp(self, topic: str, payloads: Sequence[bytes]) -> list[bytes]:
        """C{payloads} in envelopes, counted in the current window (the report is scheduled if need be)."""
        now_ms = max(self._last_ms, int(self._clock.seconds() * 1000))  # never backwards within a producer
        self._last_ms = now_ms
        start = now_ms - now_ms % self.window_ms
        first = self._sequences.get(topic, 0)
        self._sequences[topic] = first + len(payloads)
        window = self._windows.get((start, topic))
        if window is None:
            self._windows[(start, topic)] = [len(payloads), first, first + len(payloads) - 1]
        else:
            window[0] += len(payloads)
            window[2] = first + len(payloads) - 1
        if self._timer is None and not self._closed:
            delay = (start + self.window_ms) / 1000 - self._clock.seconds()
            self._timer = self._clock.callLater(max(delay, 0.0), self._report)
        return [wrap(p, self.origin, self.instance, now_ms, s) for s, p in enumerate(payloads, first)]

    def due(self, now_ms: int | None = None) -> list[AuditEvent]:
        """Take the events of every window that ended by C{now_ms} (None: every window, ended or not)."""
        events = []
        for (start, topic), (count, first, last) in sorted(self._windows.items()):
            if now_ms is None or start + self.window_ms <= now_ms:
                events.append(AuditEvent(topic, self.origin, self.instance, start, self.window_ms, count, first, last))
                del self._windows[(start, topic)]
        return events

    def close(self) -> None:
        """Publish the events of every window, the current one too (the producer is closing)."""
        self._closed = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self._send(self.due())

    def _report(self) -> None:
        self._timer = None
        self._send(self.due(int(self._clock.seconds() * 1000)))
        if self._windows and not self._closed:  # a window still open: report it when it ends
            start = min(start for start, _ in self._windows)
            self._timer = self._clock.callLater(
                max((start + self.window_ms) / 1000 - self._clock.seconds(), 0.0), self._report)

    def _send(self, events: list[AuditEvent]) -> None:
        if events:
            self._publish([encode_event(event) for event in events])


class AuditSettings(NamedTuple):
    """How a producer audits: C{Producer(audit=AuditSettings(origin="web-1", window_s=10))}."""

    #: The origin name in every envelope (None: the host name).
    origin: str | None = None
    #: The window of the monitoring events, in seconds.
    window_s: float = DEFAULT_WINDOW_S


def audit_trail(audit: AuditSettings | bool | str | None, clock, publish: Callable[[list[bytes]], Any]
                ) -> AuditTrail | None:
    """The producer's C{audit} argument as an L{AuditTrail}: False/None (off), True (the host name, 60 s
    windows), an origin name, or L{AuditSettings}."""
    if audit is None or audit is False:
        return None
    if audit is True:
        audit = AuditSettings()
    elif isinstance(audit, str):
        audit = AuditSettings(origin=audit)
    elif not isinstance(audit, AuditSettings):
        raise TypeError(f"audit must be a bool, an origin name or AuditSettings, not {type(audit).__name__}")
    return AuditTrail(clock, publish, origin=audit.origin, window_s=audit.window_s)
