# -*- test-case-name: tests.protocol.test_fairness -*-
"""L{FrameDeadline}: a request frame must arrive whole within C{request_timeout_s} of its first byte.

Without the deadline, two clients that sent 95 MiB of a 100 MiB frame and
stopped held the request budget (L{twlog.protocol.budget}) for as long as
they stayed connected: a legitimate 69 MB produce waited for them.  The
deadline runs only while the broker reads the connection (time it spends
stopped by the budget, the in-flight bound or a turn is the broker's, not
the client's), and each frame gets its own.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

__all__ = ["FrameDeadline"]


class FrameDeadline:
    """The deadline of the frame a connection is receiving: calls C{expired()} if it runs out."""

    def __init__(self, clock: IReactorTime, timeout_s: float, expired: Callable[[], object]) -> None:
        self._clock = clock
        self.timeout_s = timeout_s
        self._expired = expired
        self._call: IDelayedCall | None = None
        self._frame = -1  # which frame the running deadline is for

    @property
    def running(self) -> bool:
        """Whether the deadline runs."""
        return self._call is not None

    def watch(self, running: bool, frame: int) -> None:
        """Keep the deadline of frame number C{frame} running while C{running}; a new frame starts a new one."""
        if self._call is not None:
            if running and self._frame == frame:
                return  # the same frame, still coming
            self._call.cancel()
            self._call = None
        if running:
            self._frame = frame
            self._call = self._clock.callLater(self.timeout_s, self._expire)

    def cancel(self) -> None:
        """Stop the deadline (the connection is gone)."""
        self.watch(False, -1)

    def _expire(self) -> None:
        self._call = None
        self._expired()
