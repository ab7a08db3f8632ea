# -*- test-case-name: tests.bench.test_hostile -*-
"""What each attack of C{twlog bench hostile} measured, its figure, its target and its verdict (pure: no I/O).

Each class holds an attack's raw measurements (L{twlog.bench.attacks} fills them) and says, as text with
its units, what the attack's own figure is (L{IdleFlood.figure}), what the target is (C{target}) and
whether it was met (C{passed}, given the healthy client's fetches beside it).  The targets of the idle
flood, the half-sent frames and the pipelined flood are issue 21's; those of the big frames and the
connection burst are the benchmark's own (L{OWN_TARGETS}).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from twlog.errors import ERRORS

#: The healthy client's fetch p99 under a pipelined flood (issue 21); beside big frames, its slowest fetch.
P99_TARGET_S = 0.050
#: A legitimate produce is answered within this long of the request timeout freeing the budget (issue 21).
ANSWER_MARGIN_S = 1.0
#: A burst's connect p99 stays under the first SYN retransmit (Linux: 1 s), so no connection waited one out.
CONNECT_P99_TARGET_S = 1.0
#: The attacks whose target is the benchmark's own (issue 21 gives none).
OWN_TARGETS = ("big frames", "connection burst")


def percentile(values: Sequence[float], fraction: float) -> float:
    """The C{fraction} (0-1) percentile of C{values}, nearest rank; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = math.ceil(fraction * len(ordered) - 1e-9)  # the smallest value with this fraction at or below it
    return ordered[min(len(ordered), max(1, rank)) - 1]


def error_name(code: int) -> str:
    """A wire error code in words: C{error 3 (WrongPartition)}; a code this client does not know, bare."""
    return f"error {code} ({ERRORS[code].__name__})" if code in ERRORS else f"error {code}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


@attrs.frozen
class HealthyFetches:
    """The healthy client's fetches beside an attack: each one's time (s), and the ones that failed."""

    fetch_s: tuple[float, ...]
    errors: int = 0
    first_error: str | None = None

    def p(self, fraction: float) -> float:
        return percentile(self.fetch_s, fraction)

    @property
    def p99_met(self) -> bool:
        return bool(self.fetch_s) and self.p(0.99) <= P99_TARGET_S

    @property
    def max_met(self) -> bool:
        """Not one fetch slower than the target: a frame that holds the broker's reactor delays one fetch of
        a client that fetches one at a time, too few for its p99 to show."""
        return bool(self.fetch_s) and max(self.fetch_s) <= P99_TARGET_S


@attrs.frozen
class IdleFlood:
    """C{idle} idle connections (C{held} of them kept by the broker), then C{newcomers} new clients."""

    idle: int
    held: int
    newcomers: int
    served: int
    #: Idle connections the broker closed after the newcomers came (reaped to make room).
    reaped: int
    #: Why the first newcomer not served was not.
    failure: str | None = None

    def figure(self) -> str:
        text = (f"{self.served}/{self.newcomers} newcomers served; {self.held:,} of {self.idle:,} idle connections "
                f"held, {self.reaped:,} then closed by the broker")
        return text if self.failure is None else f"{text}; first refused: {self.failure}"

    def target(self) -> str:
        return f"{self.newcomers}/{self.newcomers} served"

    def passed(self, healthy: HealthyFetches) -> bool:
        return self.served == self.newcomers


@attrs.frozen
class HalfSent:
    """C{stalled} senders each stop short of the end of a C{frame_bytes} frame; then a legitimate produce.

    Times are in seconds since the stalled senders started."""

    stalled: int
    frame_bytes: int
    produce_bytes: int
    request_timeout_s: float
    #: From sending the produce to its answer.
    answered_after_s: float | None
    answered_since_stall_s: float | None
    #: When the first stalled sender was closed, freeing its share of the budget, and by whom.
    freed_since_stall_s: float | None
    freed_by: str | None  # "broker", "bench" or None
    error: int = 0
    failure: str | None = None

    @property
    def deadline_s(self) -> float:
        """By when the produce should be answered: the request timeout closes the stalled senders, plus 1 s."""
        return self.request_timeout_s + ANSWER_MARGIN_S

    def figure(self) -> str:
        if self.answered_since_stall_s is None:
            return f"no answer: {self.failure or 'none in time'}"
        text = f"answered at {self.answered_since_stall_s:.2f} s"
        if self.error:
            text += f" with {error_name(self.error)}"
        if self.freed_since_stall_s is not None:
            text += (f", {self.answered_since_stall_s - self.freed_since_stall_s:.2f} s after the {self.freed_by} "
                     f"closed a stalled sender at {self.freed_since_stall_s:.2f} s")
        return text

    def target(self) -> str:
        return f"answered by {self.deadline_s:g} s (request timeout + {ANSWER_MARGIN_S:g} s)"

    def passed(self, healthy: HealthyFetches) -> bool:
        return (self.answered_since_stall_s is not None and not self.error
                and self.answered_since_stall_s <= self.deadline_s)


@attrs.frozen
class Pipelined:
    """C{flooders} connections each pipelining C{requests_each} OFFSETS requests for up to C{seconds}."""

    flooders: int
    requests_each: int
    sent: int
    answered: int
    seconds: float
    #: How the first flooder the broker closed was closed (the broker may close a flooder; that is no failure).
    closed: str | None = None

    def figure(self) -> str:
        rate = self.answered / self.seconds if self.seconds > 0 else 0.0
        text = (f"{self.answered:,} of {self.flooders * self.requests_each:,} OFFSETS answered in "
                f"{self.seconds:.1f} s ({rate:,.0f} /s)")
        return text if self.closed is None else f"{text}; a flooder was closed: {self.closed}"

    def target(self) -> str:
        return f"fetch p99 <= {P99_TARGET_S * 1e3:g} ms"

    def passed(self, healthy: HealthyFetches) -> bool:
        return healthy.p99_met


@attrs.frozen
class BigFrames:
    """C{clients} connections each sending up to C{frames_each} acknowledged produces of C{frame_bytes}."""

    clients: int
    frame_bytes: int
    frames_each: int
    answered: int
    seconds: float
    failure: str | None = None

    def figure(self) -> str:
        text = (f"{self.answered} of {self.clients * self.frames_each} frames of {self.frame_bytes / 1e6:,.1f} MB "
                f"answered in {self.seconds:.1f} s")
        return text if self.failure is None else f"{text}; first failure: {self.failure}"

    def target(self) -> str:
        return f"fetch max <= {P99_TARGET_S * 1e3:g} ms"

    def passed(self, healthy: HealthyFetches) -> bool:
        return healthy.max_met and self.failure is None


@attrs.frozen
class Burst:
    """C{count} connections started at once: the time (s) each that connected took to, and each answered."""

    count: int
    connect_s: tuple[float, ...]
    answered_s: tuple[float, ...]

    @property
    def failed(self) -> int:
        return self.count - len(self.answered_s)

    def figure(self) -> str:
        if not self.connect_s:
            return f"none of {self.count:,} connected"
        answered = f"answered p99 {_ms(percentile(self.answered_s, .99))}" if self.answered_s else "none answered"
        return (f"connect p50 {_ms(percentile(self.connect_s, .5))}, p99 {_ms(percentile(self.connect_s, .99))}; "
                f"{answered}; {self.failed:,} of {self.count:,} failed")

    def target(self) -> str:
        return f"connect p99 < {CONNECT_P99_TARGET_S * 1e3:,.0f} ms, none failed"

    def passed(self, healthy: HealthyFetches) -> bool:
        return (self.failed == 0 and bool(self.connect_s)
                and percentile(self.connect_s, .99) < CONNECT_P99_TARGET_S)


Verdict = IdleFlood | HalfSent | Pipelined | BigFrames | Burst
