# -*- test-case-name: tests.protocol.test_fetch -*-
"""The broker's fetch handlers: FETCH, MULTIFETCH and WAIT_FETCH (L{FetchHandlers}).

A fetch answers with a header and a L{FileRegion} of the log, sent
zero-copy.  FETCH and MULTIFETCH behave as Kafka 0.7's: a first message
larger than the fetch size is sent partial, and errors are 0.7 codes.
WAIT_FETCH is held (L{FetchHandlers.waiting_fetches}) until C{min_bytes}
are readable over all its fetches, woken by the logs' flushes, or until its
wait ends.

A partition this broker follows (the C{replication} gate, L{twlog.replica}) is not read for clients: a
fetch of it is answered L{twlog.errors.NotLeader} naming the leader (FETCH and MULTIFETCH with its 0.7
code), and a held WAIT_FETCH on it is answered at once when the broker stops leading it
(L{FetchHandlers.roles_changed}).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from twlog.config import BrokerConfig
from twlog.errors import NO_ERROR, BrokerError, InvalidFetchSize, OffsetOutOfRange, TopicDeleted, kafka07_code
from twlog.protocol import codec
from twlog.protocol.codec import FetchRequest, MultiFetchRequest, WaitFetchRequest
from twlog.protocol.handling import ErrorCounts, Response, check_partition
from twlog.storage.manager import LogManager
from twlog.storage.segment import FileRegion

__all__ = ["FetchHandlers"]


class ReadGate(Protocol):
    """What fetches ask of the broker's replica side (L{twlog.replica.manager.ReplicaManager})."""

    def check_read(self, topic: str, partition: int) -> None:
        """@raise NotLeader: C{topic}-C{partition} is replicated and this broker follows it (naming its leader)."""


@attrs.define(eq=False)
class _WaitingFetch:
    request: WaitFetchRequest
    deferred: Deferred
    keys: set[tuple[str, int]]
    timer: Any = None


class FetchHandlers:
    """Reads the logs of one L{LogManager} for fetches, and holds the WAIT_FETCHes that wait for data.

    Call L{flushed} whenever a log's flushed offset moves (a L{LogManager} flush listener).
    """

    def __init__(self, logs: LogManager, config: BrokerConfig, clock: IReactorTime, errors: ErrorCounts) -> None:
        self._logs = logs
        self._config = config
        self._clock = clock
        self._errors = errors
        self._waiting: dict[tuple[str, int], set[_WaitingFetch]] = {}
        #: The replica side, for replicated partitions; None: every partition here is read.
        self.replication: ReadGate | None = None

    def _read(self, fetch: FetchRequest, kafka07: bool = False) -> tuple[int, FileRegion | None]:
        """One fetch: its error code and region.

        With C{kafka07} (FETCH, MULTIFETCH), as a 0.7 broker: a first message
        larger than the max size is sent partial with error 0, and a twlog-only
        error becomes the nearest 0.7 code; otherwise (WAIT_FETCH) the precise
        code.
        """
        try:
            if self.replication is not None:
                self.replication.check_read(fetch.topic, fetch.partition)
            check_partition(self._logs, fetch.topic, fetch.partition)
            log = self._logs.get_log(fetch.topic, fetch.partition)
            if log is None and fetch.topic in self._logs.deleted:
                raise TopicDeleted(f"topic {fetch.topic!r} was deleted on this broker")
            if log is None:  # nothing written yet: an empty log at offset 0
                if fetch.max_bytes <= 0:
                    raise InvalidFetchSize(f"fetch size {fetch.max_bytes} must be positive")
                if fetch.offset != 0:
                    raise OffsetOutOfRange(f"offset {fetch.offset} is outside the empty log [0, 0]")
                return NO_ERROR, None
            return NO_ERROR, log.read(fetch.offset, fetch.max_bytes, partial_ok=kafka07)
        except BrokerError as e:
            return (kafka07_code(e.code) if kafka07 else e.code), None

    def fetch(self, request: FetchRequest, peer: str = "?") -> Response:
        """FETCH: a header and the log bytes, zero-copy (as Kafka 0.7: partial first message, 0.7 codes)."""
        error, region = self._read(request, kafka07=True)
        if error:
            self._errors.count(codec.FETCH, error)
        length = region.length if region is not None else 0
        return [codec.fetch_response_header(error, length), *([region] if length else [])]

    def _multifetch_parts(self, fetches: tuple[FetchRequest, ...], kafka07: bool = False) -> list[bytes | FileRegion]:
        reads = [self._read(f, kafka07) for f in fetches]
        lengths = [r.length if r is not None else 0 for _, r in reads]
        parts: list[bytes | FileRegion] = [codec.multifetch_response_header(NO_ERROR, lengths)]
        kind = codec.MULTIFETCH if kafka07 else codec.WAIT_FETCH
        for (error, region), length in zip(reads, lengths):
            if error:
                self._errors.count(kind, error)
            parts.append(codec.multifetch_part_header(error, length))
            if length:
                parts.append(region)
        return parts

    def multifetch(self, request: MultiFetchRequest, peer: str = "?") -> Response:
        """MULTIFETCH: one part per fetch, in order (each as a FETCH)."""
        return self._multifetch_parts(request.fetches, kafka07=True)

    def wait_fetch(self, request: WaitFetchRequest, peer: str = "?") -> Response | Deferred[Response]:
        """WAIT_FETCH: answer once min_bytes are readable over all fetches, or when max_wait_ms has passed."""
        if self._ready(request):
            return self._multifetch_parts(request.fetches)
        waiter = _WaitingFetch(request, Deferred(canceller=lambda d: self._forget(waiter)),
                               {(f.topic, f.partition) for f in request.fetches})
        wait_s = min(request.max_wait_ms, self._config.max_fetch_wait_ms) / 1000
        waiter.timer = self._clock.callLater(wait_s, self._wake, waiter)
        for key in waiter.keys:
            self._waiting.setdefault(key, set()).add(waiter)
        return waiter.deferred

    def _ready(self, request: WaitFetchRequest) -> bool:
        if request.max_wait_ms <= 0:
            return True
        available = 0
        for fetch in request.fetches:
            error, region = self._read(fetch)
            if error != NO_ERROR:
                return True  # errors are answered at once
            available += region.length if region is not None else 0
        return available >= request.min_bytes

    def flushed(self, topic: str, partition: int, log: object) -> None:
        """A partition's flushed offset moved: answer the WAIT_FETCHes on it that now have enough data."""
        for waiter in list(self._waiting.get((topic, partition), ())):
            if self._ready(waiter.request):
                self._wake(waiter)

    def roles_changed(self, topic: str, partition: int) -> None:
        """This broker's role in C{topic}-C{partition} changed: answer the WAIT_FETCHes on it that now have an
        answer (NotLeader, once it follows the partition)."""
        self.flushed(topic, partition, None)

    def topic_deleted(self, topic: str) -> None:
        """C{topic} was deleted here: answer the WAIT_FETCHes on it now (their parts on it get TopicDeleted)."""
        for key in [key for key in self._waiting if key[0] == topic]:
            for waiter in list(self._waiting.get(key, ())):
                self._wake(waiter)

    def _wake(self, waiter: _WaitingFetch) -> None:
        self._forget(waiter)
        waiter.deferred.callback(self._multifetch_parts(waiter.request.fetches))

    def _forget(self, waiter: _WaitingFetch) -> None:
        if waiter.timer is not None and waiter.timer.active():
            waiter.timer.cancel()
        for key in waiter.keys:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[key]

    def waiting_fetches(self) -> int:
        """How many waiting fetches are held (for tests and stats)."""
        return len({id(w) for ws in self._waiting.values() for w in ws})
