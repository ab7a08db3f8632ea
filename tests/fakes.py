"""Test doubles shared by the suite: thread runners that make fsync deterministic."""

from __future__ import annotations

from twisted.internet.defer import Deferred, maybeDeferred


def run_now(function, *args, **kwargs) -> Deferred:
    """A ThreadRunner that runs the blocking call at once, on the calling thread."""
    return maybeDeferred(function, *args, **kwargs)


class ManualRunner:
    """A ThreadRunner that queues calls until the test runs them, to hold an fsync "in flight"."""

    def __init__(self) -> None:
        self.pending: list[tuple[Deferred, object, tuple, dict]] = []

    def __call__(self, function, *args, **kwargs) -> Deferred:
        d: Deferred = Deferred()
        self.pending.append((d, function, args, kwargs))
        return d

    def run_one(self) -> None:
        """Run the oldest queued call and fire its Deferred."""
        d, function, args, kwargs = self.pending.pop(0)
        maybeDeferred(function, *args, **kwargs).chainDeferred(d)

    def run_all(self) -> None:
        """Run queued calls (including ones queued while running) until none is left."""
        while self.pending:
            self.run_one()

    def fail_one(self, exception: Exception) -> None:
        """Fail the oldest queued call without running it."""
        d, _, _, _ = self.pending.pop(0)
        d.errback(exception)
