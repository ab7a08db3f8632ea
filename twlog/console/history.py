# -*- test-case-name: tests.console.test_history -*-
"""The console's memory of the last hour: named series of (time, value) samples, bounded in age and count.

The samplers (broker metrics, topic sizes, group lag) record into one L{History}; the charts read it
through C{GET /api/history?series=NAME[,NAME...]&minutes=M}.  Series names are dotted paths, listed in
docs/console.md ("Series"): C{cluster.bytes_in}, C{broker.1.bytes_out}, C{topic.clicks.size},
C{group.g.lag}, ...
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

#: How long a sample is kept (seconds): the charts show the last hour.
KEEP_S = 3600.0

#: The most samples kept per series (one every 10 s for an hour is 360).
MAX_SAMPLES = 720

#: The most series kept: with 1,000 groups and 1,000 topics there are some thousands; beyond this the series
#: not recorded for longest are dropped first.
MAX_SERIES = 20_000


class History:
    """Named series of C{(t, value)} samples (C{t} in seconds since the epoch), each at most L{KEEP_S} old."""

    def __init__(self, keep_s: float = KEEP_S, max_samples: int = MAX_SAMPLES, max_series: int = MAX_SERIES) -> None:
        self.keep_s = keep_s
        self.max_samples = max_samples
        self.max_series = max_series
        self._series: dict[str, deque[tuple[float, float]]] = {}

    def record(self, name: str, t: float, value: float | None) -> None:
        """Add a sample to C{name} (a None value is not recorded: unknown is a gap, not a zero)."""
        if value is None:
            return
        samples = self._series.pop(name, None)
        if samples is None:
            samples = deque(maxlen=self.max_samples)
            while len(self._series) >= self.max_series:
                del self._series[next(iter(self._series))]
        samples.append((t, float(value)))
        self._series[name] = samples  # (re-inserted: the dict's order is least recently recorded first)
        self._expire(samples, t)

    def record_many(self, t: float, values: Iterable[tuple[str, float | None]]) -> None:
        for name, value in values:
            self.record(name, t, value)

    def series(self, name: str, since: float) -> list[tuple[float, float]]:
        """The samples of C{name} at or after C{since}, oldest first (empty for a series never recorded)."""
        return [sample for sample in self._series.get(name, ()) if sample[0] >= since]

    def names(self, prefix: str = "") -> list[str]:
        return sorted(name for name in self._series if name.startswith(prefix))

    def latest(self, name: str) -> tuple[float, float] | None:
        samples = self._series.get(name)
        return samples[-1] if samples else None

    def rate(self, name: str) -> float | None:
        """The per-second rate of a counter series over its last two samples (None with fewer, or a reset)."""
        samples = self._series.get(name)
        if not samples or len(samples) < 2:
            return None
        (t0, v0), (t1, v1) = samples[-2], samples[-1]
        if t1 <= t0 or v1 < v0:
            return None
        return (v1 - v0) / (t1 - t0)

    def _expire(self, samples: deque, now: float) -> None:
        while samples and samples[0][0] < now - self.keep_s:
            samples.popleft()
