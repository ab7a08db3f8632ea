# -*- test-case-name: tests.producer.test_producer -*-
"""L{Batcher}: an async producer's bounded queue, one batch per partition.

Messages queue per partition and go out as one request when C{batch_size}
messages are queued or C{linger_ms} has passed since the batch's first one.
The queue is bounded (C{max_queued_messages}, counting messages queued or in
flight), and when it is full C{on_full} says what a send does: C{"block"} (it
waits for room) or C{"drop"} (it fails at once with L{QueueFull}, and
C{dropped} counts the messages).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from twlog.errors import ClientClosed, QueueFull
from twlog.partition import TopicPartition

ON_FULL = ("block", "drop")

#: Sends one batch: C{(partition, payloads) -> Deferred} firing once it is delivered.
Deliver = Callable[[TopicPartition, list[bytes]], Deferred]


def check_settings(batch_size: int | None, max_queued_messages: int, on_full: str) -> None:
    """Raise ValueError for settings a L{Batcher} cannot work with (C{batch_size} None: no batching)."""
    if batch_size is not None and batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if max_queued_messages < 1:
        raise ValueError("max_queued_messages must be at least 1")
    if on_full not in ON_FULL:
        raise ValueError(f"on_full must be 'block' or 'drop', not {on_full!r}")


class _Batch:
    """Messages queued for one partition, waiting for C{batch_size} or C{linger_ms}."""

    __slots__ = ("payloads", "timer")

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.timer: IDelayedCall | None = None


class Batcher:
    """Per-partition batches under one bound on the messages queued or in flight."""

    _log = Logger()

    def __init__(
        self, clock, deliver: Deliver, *, batch_size: int, linger_ms: int, max_queued_messages: int, on_full: str
    ) -> None:
        check_settings(batch_size, max_queued_messages, on_full)
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.max_queued_messages = max_queued_messages
        self.on_full = on_full
        self._clock = clock
        self._deliver = deliver
        self._batches: dict[TopicPartition, _Batch] = {}
        self._room_waiters: deque[tuple[int, Deferred[None]]] = deque()
        self._delivery_error: Exception | None = None
        #: Messages queued or being sent.
        self.queued = 0
        #: Messages dropped because the queue was full (C{on_full="drop"}).
        self.dropped = 0
        #: Messages of batches whose delivery failed.
        self.failed = 0

    def reserve(self, count: int) -> Deferred[None]:
        """Room for C{count} messages: at once, after waiting ("block"), or L{QueueFull} ("drop")."""
        if self.queued == 0 or (not self._room_waiters and self.queued + count <= self.max_queued_messages):
            self.queued += count
            return succeed(None)
        if self.on_full == "drop":
            self.dropped += count
            return fail(
                QueueFull(
                    f"the producer's queue is full ({self.queued} of {self.max_queued_messages} messages); "
                    f"dropped {count}"
                )
            )

        def forget(d: Deferred[None]) -> None:
            self._room_waiters = deque(w for w in self._room_waiters if w[1] is not d)

        d: Deferred[None] = Deferred(canceller=forget)
        self._room_waiters.append((count, d))
        return d

    def release(self, count: int) -> None:
        """C{count} reserved messages left the queue (sent, or never queued): wake the sends waiting for room."""
        self.queued -= count
        while self._room_waiters:
            wanted, d = self._room_waiters[0]
            if self.queued and self.queued + wanted > self.max_queued_messages:
                break
            self._room_waiters.popleft()
            self.queued += wanted
            d.callback(None)

    def add(self, target: TopicPartition, payloads: list[bytes]) -> None:
        """Queue C{payloads} (room already reserved) for C{target}; send its batch if it is full."""
        batch = self._batches.get(target)
        if batch is None:
            batch = self._batches[target] = _Batch()
            batch.timer = self._clock.callLater(self.linger_ms / 1000, self._send, target)
        batch.payloads.extend(payloads)
        if len(batch.payloads) >= self.batch_size:
            self._send(target)

    def send_all(self) -> None:
        """Send every queued batch now."""
        for target in list(self._batches):
            self._send(target)

    def take_error(self) -> Exception | None:
        """The first delivery error since the last call, if any (and forget it)."""
        error, self._delivery_error = self._delivery_error, None
        return error

    def close(self) -> None:
        """Fail the sends still waiting for room with L{ClientClosed}."""
        waiters, self._room_waiters = self._room_waiters, deque()
        for _, d in waiters:
            d.errback(ClientClosed("the producer was closed while this send waited for room"))

    def _send(self, target: TopicPartition) -> None:
        batch = self._batches.pop(target, None)
        if batch is None:
            return
        if batch.timer is not None and batch.timer.active():
            batch.timer.cancel()
        count = len(batch.payloads)

        def failed(failure: Failure) -> None:
            self.failed += count
            if self._delivery_error is None:
                self._delivery_error = failure.value
            self._log.warn(
                "could not deliver {count} messages to {partition}: {error}",
                count=count, partition=str(target), error=failure.getErrorMessage(),
            )

        d = self._deliver(target, batch.payloads)
        d.addCallbacks(lambda _: None, failed)
        d.addBoth(lambda _: self.release(count))
