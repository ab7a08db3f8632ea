# -*- test-case-name: tests.protocol.test_admission -*-
"""The broker's connection limits: who gets in, who is closed for idling, and the log lines about both.

L{twlog.protocol.factory.BrokerFactory} decides; this module holds the
parts it decides with:

  - L{ConnectionTable}: the open connections in order of their last activity
    (a whole request frame received, a response written), over all and per
    address, so that the longest-idle one is found without scanning them all;
  - L{Refusal}: the protocol of a refused connection, which reads the first
    request's header and answers it with the refusal code (twlog's request
    types) or closes without a word (Kafka 0.7's), then closes;
  - L{EventLog}: one kind of event counted, and logged at most once a minute
    with the count since the last line.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol as TypingProtocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from typing_extensions import override

from twlog.protocol import codec


class Tracked(TypingProtocol):
    """A connection as the table sees it."""

    #: The client's address (its host), the key of the per-address cap.
    host: str
    #: When it last received a whole request frame or finished writing a response (or connected).
    last_active: float

    @property
    def in_progress(self) -> bool:
        """Whether a request of its is being handled or answered (it is not idle, whatever its age)."""


class ConnectionTable:
    """Open connections, oldest activity first, over all and per address.

    Each activity moves a connection to the end of both orders (L{touch}, two
    O(1) moves), so the front is always the longest-idle one.
    """

    #: The most connections looked at to find one to replace: those in progress are skipped, and past
    #: this many (all of them old requests still in progress), the new connection is refused.
    SCAN_LIMIT = 1024

    def __init__(self) -> None:
        self._all: OrderedDict[Tracked, None] = OrderedDict()
        self._by_host: dict[str, OrderedDict[Tracked, None]] = {}

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, connection: object) -> bool:
        return connection in self._all

    def __iter__(self) -> Iterator[Tracked]:
        return iter(self._all)

    def count(self, host: str) -> int:
        """The open connections from C{host}."""
        connections = self._by_host.get(host)
        return len(connections) if connections is not None else 0

    def add(self, connection: Tracked, now: float) -> None:
        connection.last_active = now
        self._all[connection] = None
        self._by_host.setdefault(connection.host, OrderedDict())[connection] = None

    def remove(self, connection: Tracked) -> bool:
        """Forget C{connection}; whether it was there."""
        if self._all.pop(connection, False) is False:
            return False
        host = self._by_host[connection.host]
        del host[connection]
        if not host:
            del self._by_host[connection.host]
        return True

    def touch(self, connection: Tracked, now: float) -> None:
        """C{connection} was active at C{now}: it is now the most recently active."""
        connection.last_active = now
        if connection in self._all:
            self._all.move_to_end(connection)
            self._by_host[connection.host].move_to_end(connection)

    def oldest(self) -> Tracked | None:
        """The connection active longest ago, if any."""
        return next(iter(self._all), None)

    def idle_since(self, before: float, host: str | None = None) -> Tracked | None:
        """The longest-idle connection (of C{host}, or of all) last active at C{before} or earlier and with
        nothing in progress, if any."""
        order = self._all if host is None else self._by_host.get(host, ())
        for looked, connection in enumerate(order):
            if connection.last_active > before or looked >= self.SCAN_LIMIT:
                return None
            if not connection.in_progress:
                return connection
        return None

    def expired(self, before: float) -> list[Tracked]:
        """Every connection last active at C{before} or earlier."""
        out = []
        for connection in self._all:
            if connection.last_active > before:
                break
            out.append(connection)
        return out


class EventLog:
    """One kind of event, counted; logged at once, then at most once per L{interval_s} with the count since.

    Events that come within the interval are reported at its end, so the last
    burst's count is not lost.  L{total} counts them all (for the metrics).
    """

    def __init__(self, clock: IReactorTime, log: Logger, message: str, interval_s: float = 60.0) -> None:
        """@param message: a L{Logger} format with C{{count}} and the fields passed to L{record}."""
        self._clock = clock
        self._log = log
        self._message = message
        self.interval_s = interval_s
        self.total = 0
        self._unlogged = 0
        self._fields: dict[str, object] = {}
        self._logged_at: float | None = None
        self._timer: IDelayedCall | None = None
        self._stopped = False

    def record(self, **fields: object) -> None:
        """One more event; C{fields} describe it (the last one's are logged, with the count).  After L{stop} (a
        connection closed as the broker stops), nothing is scheduled: an event within the interval is counted,
        and logged with the next line (or by L{stop} again)."""
        self.total += 1
        self._unlogged += 1
        self._fields = fields
        now = self._clock.seconds()
        if self._logged_at is None or now - self._logged_at >= self.interval_s:
            self._emit(now)
        elif self._timer is None and not self._stopped:
            self._timer = self._clock.callLater(self._logged_at + self.interval_s - now, self._flush)

    def _flush(self) -> None:
        self._timer = None
        if self._unlogged:
            self._emit(self._clock.seconds())

    def _emit(self, now: float) -> None:
        self._log.warn(self._message, count=self._unlogged, **self._fields)
        self._unlogged = 0
        self._logged_at = now

    def stop(self) -> None:
        """Log what is not logged yet, and schedule nothing more."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._unlogged:
            self._emit(self._clock.seconds())


def refusal_answer(frame_start: bytes, code: int) -> bytes | None:
    """What a refused connection whose first frame starts with C{frame_start} (at least 6 bytes: the size
    and the request type) is sent before it is closed: one response frame carrying C{code} for a twlog
    request type, nothing (None) for a Kafka 0.7 type, whose clients know no such code."""
    kind = int.from_bytes(frame_start[4:6], "big", signed=True)
    if codec.PRODUCE <= kind <= codec.OFFSETS:
        return None
    body = codec.encode_error_response(code)
    return len(body).to_bytes(4, "big") + body


class Refusal(Protocol):
    """A connection refused at a cap: answer its first request with C{code}, then close.

    It reads the first request's size and type (6 bytes), then writes one
    response frame with C{code} if the type is twlog's (L{refusal_answer};
    a Kafka 0.7 type gets none), shuts its side down and discards whatever
    else arrives until the client closes: closing with unread bytes would
    send a reset, which can destroy the answer before the client reads it.
    After L{LINGER_S} it closes in any case, answered or not.
    """

    #: The longest a refused connection is kept, waiting for its first request or for the client to close.
    LINGER_S = 2.0

    def __init__(self, code: int, clock: IReactorTime, done) -> None:
        """@param done: called with this protocol once its connection is gone."""
        self.code = code
        self._clock = clock
        self._done = done
        self._head = b""
        self._answered = False
        self._timer: IDelayedCall | None = None

    @override
    def connectionMade(self) -> None:
        self._timer = self._clock.callLater(self.LINGER_S, self._give_up)

    @override
    def dataReceived(self, data: bytes) -> None:
        if self._answered:
            return  # discarded: see the class docstring
        self._head += data[: 6 - len(self._head)]
        if len(self._head) < 6:
            return
        self._answered = True
        answer = refusal_answer(self._head, self.code)
        if answer is not None:
            self.transport.write(answer)
        half_close = getattr(self.transport, "loseWriteConnection", None)
        if half_close is not None:
            half_close()
        else:  # a transport that cannot half-close (a test's)
            self.transport.loseConnection()

    def stop(self) -> None:
        """Drop the connection now (the broker is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport.abortConnection()

    def _give_up(self) -> None:
        self._timer = None
        self.transport.loseConnection()

    @override
    def connectionLost(self, reason=None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._done(self)
