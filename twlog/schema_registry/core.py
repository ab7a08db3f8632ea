# -*- test-case-name: tests.schema_registry.test_core,tests.integration.test_schema_registry -*-
"""L{SchemaRegistry}: requests turned into records of the journal, answered once the records are durable.

Every request first reads the journal to its end (L{SchemaRegistry.sync}), so a registry process
sees what other processes wrote.  A change is planned against that state, appended (flushed),
then read back: if a record of another process came first and conflicts with it (the same id or
version for something else), L{RegistryState.apply} refuses it in every process, and this one
plans again (at most L{ATTEMPTS} times).  Only an accepted record is answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, Deferred, DeferredLock, TimeoutError
from twisted.internet.task import deferLater
from twisted.logger import Logger

from twlog.errors import TwlogError
from twlog.schema_registry import errors
from twlog.schema_registry.state import RegistryState

#: How many times a change is planned again after losing to another process's record.
ATTEMPTS = 5
#: How long a request may wait on the twlog cluster before it is answered 50002.
STORE_TIMEOUT_S = 15.0
#: After an append: how often, and how long apart, the journal is read again for the record's partition to show.
READ_BACK_TRIES = 25
READ_BACK_WAIT_S = 0.2


class IJournal(Protocol):
    position: int

    async def append(self, record: dict) -> int: ...

    async def read_new(self) -> list[tuple[int, Any]]: ...


class SchemaRegistry:
    """The registry's state, kept current from the journal, and its changes written through it."""

    _log = Logger()

    def __init__(self, journal: IJournal, *, reactor=None, timeout_s: float = STORE_TIMEOUT_S) -> None:
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

    def read(self, answer: Callable[[RegistryState], Any]) -> Deferred:
        """C{answer(state)} once the state is current."""
        return self._bounded(self._read(answer))

    def write(self, plan: Callable[[RegistryState], tuple[Any, dict | None]]) -> Deferred:
        """Run C{plan(state)} -> C{(answer, record or None)} on the current state; append the record; the answer.

        The answer is given once the record is flushed and read back accepted.
        """
        return self._bounded(self._write(plan))

    def sync(self) -> Deferred[None]:
        """Read the journal to its end."""
        return Deferred.fromCoroutine(self._sync())

    # -- internals -----------------------------------------------------------------

    def _bounded(self, coroutine) -> Deferred:
        d = Deferred.fromCoroutine(coroutine)
        d.addTimeout(self.timeout_s, self._reactor)
        return d.addErrback(self._store_failure)

    def _store_failure(self, failure):
        if failure.check(errors.RestError):
            return failure
        if failure.check(CancelledError, TimeoutError):
            raise errors.timeout(f"the twlog cluster did not answer within {self.timeout_s:g} s")
        if failure.check(TwlogError):
            raise errors.store_error(failure.getErrorMessage())
        self._log.failure("registry request failed", failure)
        raise errors.store_error(f"{failure.type.__name__}: {failure.getErrorMessage()}")

    async def _sync(self) -> None:
        await self._read_lock.acquire()
        try:
            for offset, record in await self.journal.read_new():
                accepted = self.state.apply(record)
                self._outcomes[offset] = accepted
                if not accepted:
                    self._log.info("record at {offset} conflicts with an earlier one: not applied", offset=offset)
        finally:
            self._read_lock.release()

    async def _read(self, answer: Callable[[RegistryState], Any]) -> Any:
        await self._sync()
        return answer(self.state)

    async def _write(self, plan) -> Any:
        await self._write_lock.acquire()
        try:
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
