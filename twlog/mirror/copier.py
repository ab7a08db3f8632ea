# -*- test-case-name: tests.mirror.test_copier -*-
"""The mirror's target side: batches per topic, a bound on what is in flight, retries until acknowledged.

Messages taken from the source streams are queued per topic and sent to the
target (ACK_PRODUCE, flushed) in batches of C{batch_size}, or after
C{linger_s}.  At most C{max_in_flight} messages are queued or unacknowledged:
at the bound, L{Copier.copy} waits, the source streams fill up and the
source fetches stop (back-pressure, bounded memory).  Such pauses are normal
in a bulk copy (the target acknowledges a batch, the sources fill the room at
once): they are counted (L{PauseCounter}) for the status line, and only a
pause longer than C{long_pause_s} is a line of its own.  A batch the target
cannot take (down, slow, a broker gone) is sent again after a backoff, never
dropped; the first failure of an outage is said once, and so is the recovery.
Once the target acknowledged a batch, each source partition's watermark
moves (L{twlog.mirror.tracker}) and its consumer may commit it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import deferLater
from twisted.logger import Logger

from twlog.consumer.stream import GroupMessage
from twlog.errors import ClientClosed, MessageSizeTooLarge
from twlog.mirror.tracker import Mark, OffsetTracker
from twlog.partition import TopicPartition


class Feed(Protocol):
    """Where mirrored messages come from: one source cluster's consumer of one topic."""

    tracker: OffsetTracker

    def acknowledge(self, partition: TopicPartition, next_offset: int) -> None: ...


class _Batch:
    __slots__ = ("marks", "payloads", "size", "timer")

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.size = 0
        #: (feed, partition name) -> the next offset after its last message in the batch.
        self.marks: dict[tuple[Feed, str], int] = {}
        self.timer = None


class Stats:
    """Messages and bytes acknowledged by the target, per topic, since the start."""

    def __init__(self) -> None:
        self.messages: dict[str, int] = {}
        self.bytes: dict[str, int] = {}

    def add(self, topic: str, messages: int, size: int) -> None:
        self.messages[topic] = self.messages.get(topic, 0) + messages
        self.bytes[topic] = self.bytes.get(topic, 0) + size


class PauseCounter:
    """How often, and how long, copying waited at the C{--max-in-flight} bound since the last L{summary}.

    A pause lasts from the moment a message must wait for room until one can
    go on.  One that lasts C{long_s} is said at once, in one line (C{say});
    the others are only counted, for the status line.

    @param long_s: how long a pause may last before it is said (0: never said).
    """

    def __init__(self, clock, say: Callable[[str], object], long_s: float, bound: int) -> None:
        self._clock = clock
        self._say = say
        self.long_s = long_s
        self.bound = bound
        #: Pauses begun, and seconds spent paused, since the last summary.
        self.count = 0
        self.seconds = 0.0
        self._since: float | None = None  # when the time of the current pause was last added up
        self._long = None

    @property
    def paused(self) -> bool:
        return self._since is not None

    def begin(self, in_flight: int) -> None:
        if self._since is not None:
            return
        self.count += 1
        self._since = self._clock.seconds()
        if self.long_s > 0:
            self._long = self._clock.callLater(self.long_s, self._said_long, in_flight)

    def end(self) -> None:
        if self._since is None:
            return
        self.seconds += self._clock.seconds() - self._since
        self._since = None
        if self._long is not None and self._long.active():
            self._long.cancel()
        self._long = None

    def _said_long(self, in_flight: int) -> None:
        self._long = None
        self._say(f"mirror: fetching from the source paused for {self.long_s:g} s so far: the target has not "
                  f"acknowledged {in_flight:,} messages (the --max-in-flight bound); it resumes by itself once it does")

    def summary(self) -> str:
        """C{paused N times, S s in all, at --max-in-flight (B)} since the last summary (C{""} if none); resets."""
        now = self._clock.seconds()
        if self._since is not None:
            self.seconds += now - self._since
            self._since = now
        if not self.count:
            return ""
        times = "once" if self.count == 1 else f"{self.count:,} times"
        now_paused = ", paused now" if self.paused else ""
        text = f"paused {times}, {self.seconds:.1f} s in all, at --max-in-flight ({self.bound:,}){now_paused}"
        self.count = 1 if self.paused else 0  # a pause still going on counts again in the next summary
        self.seconds = 0.0
        return text


class Copier:
    """Republishes source messages into the target through C{send(topic, payloads) -> Deferred} (acknowledged).

    @param say: C{(line) -> None}: tells the operator (once per outage and recovery).
    @param fatal: C{(exception) -> None}: a batch that can never be written (too large for the target).
    @param long_pause_s: a pause at C{max_in_flight} that lasts this long is said (0: never); shorter ones are
        only counted in L{pauses}.
    """

    _log = Logger()

    def __init__(self, send: Callable[[str, list[bytes]], Deferred], *, clock, say: Callable[[str], object],
                 fatal: Callable[[Exception], object], batch_size: int = 200, linger_s: float = 0.05,
                 max_in_flight: int = 10_000, retry_max_s: float = 5.0, long_pause_s: float = 10.0) -> None:
        if batch_size < 1 or max_in_flight < batch_size:
            raise ValueError("batch_size must be positive and max_in_flight at least batch_size")
        self._send = send
        self._clock = clock
        self._say = say
        self._fatal = fatal
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.max_in_flight = max_in_flight
        self.retry_max_s = retry_max_s
        #: Messages queued or sent and not acknowledged yet.
        self.in_flight = 0
        self.stats = Stats()
        #: Whether the target is failing now (said once per outage).
        self.target_down = False
        #: The pauses at the bound (counted; a long one said).
        self.pauses = PauseCounter(clock, say, long_pause_s, max_in_flight)
        self._batches: dict[str, _Batch] = {}
        self._sending: set[Deferred] = set()
        self._room: list[Deferred] = []
        self._stopped = False

    async def copy(self, message: GroupMessage, feed: Feed) -> bool:
        """Queue C{message} for the target, first waiting while C{max_in_flight} messages are in flight; False if
        the copier was stopped meanwhile (the message is not copied)."""
        while self.in_flight >= self.max_in_flight and not self._stopped:
            self.pauses.begin(self.in_flight)
            waiting: Deferred[None] = Deferred()
            self._room.append(waiting)
            await waiting
        if not self._room:  # (the last waiter has room: the pause is over)
            self.pauses.end()
        if self._stopped:
            return False
        batch = self._batches.get(message.topic)
        if batch is None:
            batch = self._batches[message.topic] = _Batch()
            batch.timer = self._clock.callLater(self.linger_s, self._send_batch, message.topic)
        batch.payloads.append(message.payload)
        batch.size += len(message.payload)
        batch.marks[(feed, message.partition)] = message.next_offset
        self.in_flight += 1
        if len(batch.payloads) >= self.batch_size:
            self._send_batch(message.topic)
        return True

    def flush(self) -> None:
        """Send every queued batch now."""
        for topic in list(self._batches):
            self._send_batch(topic)

    async def drain(self) -> None:
        """Send everything queued and wait until the target acknowledged all of it (or L{stop} was called)."""
        self.flush()
        while self._sending:
            await DeferredList(list(self._sending), consumeErrors=True)

    def stop(self) -> None:
        """Give up: no more retries, and L{copy} calls waiting for room return without copying."""
        self._stopped = True
        for batch in self._batches.values():
            if batch.timer is not None and batch.timer.active():
                batch.timer.cancel()
        self._batches.clear()
        self._wake()

    # -- sending ------------------------------------------------------------------------

    def _send_batch(self, topic: str) -> None:
        batch = self._batches.pop(topic, None)
        if batch is None:
            return
        if batch.timer is not None and batch.timer.active():
            batch.timer.cancel()
        # Marks are added in hand-out order: batches of a topic go out in the order they were filled.
        marks = [(feed, feed.tracker.add(partition, offset))
                 for (feed, partition), offset in batch.marks.items()]
        d = Deferred.fromCoroutine(self._deliver(topic, batch, marks))
        self._sending.add(d)
        d.addBoth(lambda _: self._sending.discard(d))

    async def _deliver(self, topic: str, batch: _Batch, marks: list[tuple[Feed, Mark]]) -> None:
        failures = 0
        while True:
            try:
                await self._send(topic, batch.payloads)
                break
            except ClientClosed:
                return
            except MessageSizeTooLarge as e:
                self._fatal(e)
                return
            except Exception as e:
                if self._stopped:
                    return
                failures += 1
                if not self.target_down:
                    self.target_down = True
                    self._say(f"mirror: the target cannot take {topic} now ({e}); holding {self.in_flight:,} "
                              "messages and retrying until it does")
                await deferLater(self._clock, min(self.retry_max_s, 0.2 * 2 ** min(failures, 8)), lambda: None)
                if self._stopped:
                    return
        if self.target_down and not self._stopped:
            self.target_down = False
            self._say("mirror: the target acknowledges again; copying resumed")
        self.stats.add(topic, len(batch.payloads), batch.size)
        for feed, mark in marks:
            watermark = feed.tracker.done(mark)
            if watermark is not None:
                feed.acknowledge(mark.key, watermark)
        self.in_flight -= len(batch.payloads)
        self._wake()

    def _wake(self) -> None:
        waiting, self._room = self._room, []
        for d in waiting:
            d.callback(None)


__all__ = ["Copier", "Feed", "PauseCounter", "Stats"]
