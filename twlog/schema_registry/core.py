# -*- test-case-name: tests.schema_registry.test_core,tests.integration.test_schema_registry -*-
"""L{SchemaRegistry}: requests turned into records of the journal, answered once the records are durable.

While the twlog cluster answers, every request first reads the journal to its end (L{SchemaRegistry.sync}),
so a registry process sees what other processes wrote.  A change is planned against that state, appended
(flushed), then read back: if a record of another process came first and conflicts with it (the same id
or version for something else), L{RegistryState.apply} refuses it in every process, and this one plans
again (at most L{ATTEMPTS} times).  Only an accepted record is answered.

When the cluster is lost (the journal's connection drops and its broker refuses a new one, or a request
gets no answer within the request timeout), the registry says so in one log line, answers reads from
the state it holds in memory at once (as Confluent's registry answers from its local store), fails
writes within the request timeout, and tries the cluster again quietly with backoff; one more line
says when it is back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, Deferred, DeferredLock, TimeoutError, fail, maybeDeferred
from twisted.internet.task import deferLater
from twisted.logger import Logger

from twlog.errors import TwlogError
from twlog.schema_registry import errors
from twlog.schema_registry.state import RegistryState

#: How many times a change is planned again after losing to another process's record.
ATTEMPTS = 5
#: How long a request may wait on the twlog cluster (C{--request-timeout}): then a write is answered 50002.
DEFAULT_REQUEST_TIMEOUT_S = 5.0
#: After an append: how often, and how long apart, the journal is read again for the record's partition to show.
READ_BACK_TRIES = 25
READ_BACK_WAIT_S = 0.2
#: While the cluster is lost: the first wait before trying it again, doubled after each failure up to the last.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10.0


class IJournal(Protocol):
    position: int
    #: Called with a reason when the journal's connection to its broker drops on its own.
    on_lost: Callable[[str], object] | None

    async def append(self, record: dict) -> int: ...

    async def read_new(self) -> list[tuple[int, Any]]: ...

    #: Which twlog cluster holds the records (C{GET /v1/metadata/id} answers it as the Kafka cluster's id).
    cluster: str

    async def probe(self) -> None:
        """Return once the cluster accepts a connection; raise L{TwlogError} (quickly, when refused) if not."""

    def disconnect(self) -> Deferred[None]:
        """Close the journal's connections (and so stop their reconnection attempts); they are remade on use."""


class SchemaRegistry:
    """The registry's state, kept current from the journal, and its changes written through it."""

    _log = Logger()

    def __init__(self, journal: IJournal, *, reactor=None, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.journal = journal
        self.state = RegistryState()
        self.timeout_s = timeout_s
        self._reactor = reactor
        self._read_lock = DeferredLock()
        self._write_lock = DeferredLock()
        #: Whether each record read was accepted, by offset (the records this process wrote, until read back).
        self._outcomes: dict[int, bool] = {}
        #: Whether the journal was read to its end at least once (what memory holds is then worth answering).
        self.replayed = False
        #: Why the cluster is lost, while it is (None: it answers, as far as the registry knows).
        self.lost: str | None = None
        self._lost_since = 0.0
        self._retry_s = RETRY_FIRST_S
        self._retry_call = None
        self._stopped = False
        journal.on_lost = self._connection_dropped

    @property
    def cluster(self) -> str:
        return self.journal.cluster

    def start(self) -> Deferred[bool]:
        """Replay the journal; whether it could be read (if not, the cluster is lost and tried again)."""
        def unreachable(failure) -> bool:
            self._lose(self._why(failure))
            return False

        return self._bounded(self._sync()).addCallbacks(lambda _: True, unreachable)

    def stop(self) -> None:
        """Stop trying the cluster again."""
        self._stopped = True
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None

    def read(self, answer: Callable[[RegistryState], Any]) -> Deferred:
        """C{answer(state)} once the state is current; from memory, at once, while the cluster is lost."""
        if self.lost is not None:
            return self._from_memory(answer)

        def unreachable(failure):
            self._lose(self._why(failure))
            return self._from_memory(answer)

        return self._bounded(self._sync()).addCallbacks(lambda _: answer(self.state), unreachable)

    def write(self, plan: Callable[[RegistryState], tuple[Any, dict | None]]) -> Deferred:
        """Run C{plan(state)} -> C{(answer, record or None)} on the current state; append the record; the answer.

        The answer is given once the record is flushed and read back accepted; within the request timeout,
        or a 500 (50001 the cluster refused or cannot be reached, 50002 it did not answer in time).
        """
        return self._bounded(self._write(plan)).addErrback(self._write_failed)

    def sync(self) -> Deferred[None]:
        """Read the journal to its end."""
        return Deferred.fromCoroutine(self._sync())

    # -- internals -----------------------------------------------------------------

    def _bounded(self, coroutine) -> Deferred:
        d = Deferred.fromCoroutine(coroutine)
        return d.addTimeout(self.timeout_s, self._reactor)

    def _why(self, failure) -> str:
        """A failure to reach the cluster, as one line."""
        if failure.check(CancelledError, TimeoutError):
            return f"the twlog cluster did not answer within {self.timeout_s:g} s (--request-timeout)"
        if failure.check(TwlogError):
            return failure.getErrorMessage()
        self._log.failure("registry request failed", failure)
        return f"{failure.type.__name__}: {failure.getErrorMessage()}"

    def _from_memory(self, answer: Callable[[RegistryState], Any]) -> Deferred:
        if not self.replayed:
            return fail(errors.store_error(f"twlog-schemas could not be read yet: {self.lost}"))
        return maybeDeferred(answer, self.state)

    def _write_failed(self, failure):
        if failure.check(errors.RestError):
            return failure
        why = self._why(failure)
        self._lose(why)
        if failure.check(CancelledError, TimeoutError):
            raise errors.timeout(why)
        raise errors.store_error(why)

    # -- losing the cluster, and finding it again --------------------------------------

    def _connection_dropped(self, why: str) -> None:
        """The journal's connection dropped: lost, unless its broker takes a new connection at once."""
        if self.lost is not None or self._stopped:
            return
        self.journal.disconnect()  # (its reconnection attempts would each log a line)

        def refused(failure) -> None:
            self._lose(f"{why}, and {self._why(failure)}")

        self._bounded(self.journal.probe()).addErrback(refused)

    def _lose(self, why: str) -> None:
        """The cluster cannot be reached: say so once, drop the connections, try again later."""
        if self.lost is None:
            self._lost_since = self._reactor.seconds()
            if self.replayed:
                then = (f"reads are answered from memory ({len(self.state.schemas)} schema(s), "
                        f"{len(self.state.subjects)} subject(s)) and writes fail with 500")
            else:
                then = "requests are answered 500"
            self._log.warn("lost the twlog cluster holding {topic}: {why}; {then} until it is back "
                           "(trying again quietly)", topic="twlog-schemas", why=why, then=then)
            self._retry_s = RETRY_FIRST_S
        self.lost = why
        self.journal.disconnect()
        self._schedule_retry()

    def _back(self) -> None:
        lost_s = self._reactor.seconds() - self._lost_since
        self.lost = None
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        self._retry_call = None
        self._log.info("the twlog cluster is back after {lost_s:.0f} s: {topic} read to offset {position} "
                       "({schemas} schema(s), {subjects} subject(s)); writes are taken again", lost_s=lost_s,
                       topic="twlog-schemas", position=self.journal.position, schemas=len(self.state.schemas),
                       subjects=len(self.state.subjects))

    def _schedule_retry(self) -> None:
        if self._stopped or (self._retry_call is not None and self._retry_call.active()):
            return
        self._retry_call = self._reactor.callLater(self._retry_s, self._retry)

    def _retry(self) -> None:
        self._retry_call = None
        if self.lost is None or self._stopped:
            return

        def still_lost(failure) -> None:
            if self.lost is not None:
                self.lost = self._why(failure)
                self.journal.disconnect()
                self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
                self._schedule_retry()

        self._bounded(self._probe_and_sync()).addErrback(still_lost)

    async def _probe_and_sync(self) -> None:
        await self.journal.probe()
        await self._sync()

    async def _sync(self) -> None:
        await self._read_lock.acquire()
        try:
            for offset, record in await self.journal.read_new():
                accepted = self.state.apply(record)
                self._outcomes[offset] = accepted
                if not accepted:
                    self._log.info("record at {offset} conflicts with an earlier one: not applied", offset=offset)
            self._report_merged()
        finally:
            self._read_lock.release()
        self.replayed = True
        if self.lost is not None:
            self._back()

    def _report_merged(self) -> None:
        """One line for the ids that records written before identity was canonical gave to a schema known already."""
        merged, self.state.merged = self.state.merged, []
        if merged:
            pairs = ", ".join(f"{later}->{first}" for later, first in merged)
            self._log.info("{topic}: {count} id(s) written before schema identity was canonical name a schema "
                           "registered earlier with another id: each still answers, as the first id ({pairs})",
                           topic="twlog-schemas", count=len(merged), pairs=pairs)

    async def _write(self, plan) -> Any:
        await self._write_lock.acquire()
        try:
            if self.lost is not None:
                await self.journal.probe()  # (refused at once while the cluster is down)
            for _ in range(ATTEMPTS):
                await self._sync()
                answer, record = plan(self.state)
                if record is None:
                    return answer
                offset = await self.journal.append(record)
                if await self._read_back(offset):
                    return answer
                self._log.info("another registry's record came first at {offset}: planning again", offset=offset)
            raise errors.store_error(f"{ATTEMPTS} attempts lost to other registry processes' records")
        finally:
            self._write_lock.release()

    async def _read_back(self, offset: int) -> bool:
        """Whether the record appended at C{offset} was accepted (read it back: the journal may need a moment
        to find the partition of a topic its first record created)."""
        for attempt in range(READ_BACK_TRIES):
            await self._sync()
            if offset in self._outcomes:
                accepted = self._outcomes.pop(offset)
                self._outcomes = {k: v for k, v in self._outcomes.items() if k > offset}
                return accepted
            if self.journal.position > offset:
                return False  # (read past it, by another request: never the case under the write lock)
            await deferLater(self._reactor, READ_BACK_WAIT_S)
        raise TwlogError(f"the record appended at offset {offset} of twlog-schemas could not be read back")
