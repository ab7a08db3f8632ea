# -*- test-case-name: tests.protocol.test_slicing -*-
"""Checking a large produce request's message sets a slice at a time, so that the reactor runs in between.

Every append is validated (L{twlog.storage.validation.validate_message_set}:
whole entries, sizes, CRCs, and what each compressed wrapper holds).  For a
49.5 MB set of 1 KB messages that is about 70 ms of CPU in one go, during which
no other connection was served.  L{check_produce} does the same checks
(L{scan} on slices of L{SLICE_BYTES}, then each compressed wrapper), yielding
after each slice or wrapper; the broker resumes it with C{callLater(0)} and
hands the handler sets marked as checked (L{ProduceRequest.checked}), which
are then appended without a second pass.  Errors are the ones
C{validate_message_set} raises, naming the same byte positions.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import attrs
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from twlog.errors import BrokerError, InvalidMessage, MessageSizeTooLarge
from twlog.protocol.codec import AckProduceRequest, MultiProduceRequest, ProduceRequest
from twlog.storage.entry import LENGTH
from twlog.storage.validation import check_wrapper_at, scan

__all__ = ["PRODUCES", "SLICED_FRAME_BYTES", "SLICE_BYTES", "SlicedCheck", "check_message_set", "check_produce"]

#: Bytes of a message set checked between two yields.
SLICE_BYTES = 1024 * 1024
#: Produce frames at least this large are checked in slices before they are handled; smaller ones by the handler.
SLICED_FRAME_BYTES = 2 * SLICE_BYTES
#: The requests whose sets are checked ahead.
PRODUCES = (ProduceRequest, MultiProduceRequest, AckProduceRequest)

Steps = Generator[None, None, int]


def check_message_set(
    messages: bytes | memoryview, max_message_bytes: int, max_decompressed_bytes: int, slice_bytes: int = SLICE_BYTES
) -> Steps:
    """C{validate_message_set(messages, ...)}, yielding after each slice and each compressed wrapper.

    @return: (as the generator's value) the message count.
    @raise InvalidMessage, MessageSizeTooLarge: as C{validate_message_set}.
    """
    view = memoryview(messages)
    n = len(view)
    pos = count = 0
    want = slice_bytes
    wrappers: list[int] = []
    while pos < n:
        end = min(n, pos + want)
        found: list[int] = []
        result = scan(view[pos:end], max_message_bytes, origin=pos, wrappers=found)
        wrappers.extend(pos + w for w in found)
        count += result.count
        if result.problem is None:
            pos, want = end, slice_bytes
        elif result.needed and end < n:  # an entry runs past the slice, not past the set: start the next one with it
            pos += result.valid_bytes
            want = max(slice_bytes, result.needed)
        elif result.oversize:
            error = MessageSizeTooLarge(result.problem)
            error.message_size, error.limit = result.oversize, max_message_bytes
            raise error
        else:
            raise InvalidMessage(result.problem)
        yield
    for at in wrappers:
        check_wrapper_at(view, at, LENGTH.unpack_from(view, at)[0], max_decompressed_bytes)
        yield
    return count


def check_produce(request, max_message_bytes: int, max_decompressed_bytes: int, slice_bytes: int = SLICE_BYTES):
    """Check every set of a produce request (L{PRODUCES}) in slices; return the request with each set's
    L{ProduceRequest.checked} set to its count or to the error its check raised."""
    produces = request.produces if isinstance(request, (MultiProduceRequest, AckProduceRequest)) else (request,)
    done = []
    for produce in produces:
        try:
            checked: int | Exception = yield from check_message_set(
                produce.messages, max_message_bytes, max_decompressed_bytes, slice_bytes)
        except BrokerError as e:
            checked = e
        done.append(attrs.evolve(produce, checked=checked))
    if isinstance(request, ProduceRequest):
        return done[0]
    return attrs.evolve(request, produces=tuple(done))


class SlicedCheck:
    """Runs a check's steps (L{check_produce}), the first now and each next one in the next reactor iteration
    (C{callLater(0)}); then calls C{done(value)}, or C{failed(failure)} if a step raised."""

    def __init__(
        self, clock: IReactorTime, steps: Generator, done: Callable[[object], object],
        failed: Callable[[Failure], object],
    ) -> None:
        self._clock = clock
        self._steps = steps
        self._done = done
        self._failed = failed
        self._call: IDelayedCall | None = None
        #: Steps run so far.
        self.steps = 0

    def start(self) -> None:
        self._step()

    def cancel(self) -> None:
        """Run no more steps (the connection is gone)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None

    def _step(self) -> None:
        self._call = None
        self.steps += 1
        try:
            next(self._steps)
        except StopIteration as finished:
            self._done(finished.value)
            return
        except Exception:
            self._failed(Failure())
            return
        self._call = self._clock.callLater(0, self._step)
