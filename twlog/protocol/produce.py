# -*- test-case-name: tests.protocol.test_produce -*-
"""The broker's produce handlers: PRODUCE, MULTIPRODUCE and ACK_PRODUCE (L{ProduceHandlers}).

PRODUCE and MULTIPRODUCE are fire-and-forget, as in Kafka 0.7: a refused
set is logged and counted, never answered.  ACK_PRODUCE answers with the
offsets each set got, once the set is in the file (C{ack=appended}) or, when
asked, once it is fsynced (C{ack=flushed}, bounded by the request's timeout).
C{ack=all} is answered as C{ack=flushed} here: a partition without followers
(a 0.7 topic's; every partition until replication is wired) is its own ISR.

Each set of a request is answered on its own, and every answer is true: a set
refused or not written (L{StorageFailed}: a full disk, a failed roll) has no
byte stored, whatever happened to the other sets of the request; a set that
was appended but whose flush failed is L{OutcomeUnknown}, and one whose flush
did not end in time L{RequestTimedOut}.
"""

from __future__ import annotations

import attrs
from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.errors import NO_ERROR, BrokerError, OutcomeUnknown, RequestTimedOut, StorageFailed
from twlog.protocol import codec
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, MultiProduceRequest, ProduceRequest, ProduceResult
from twlog.protocol.handling import ErrorCounts, Response
from twlog.storage.log import AppendResult
from twlog.storage.manager import LogManager

__all__ = ["ProduceHandlers"]


class ProduceHandlers:
    """Appends produced sets to the logs of one L{LogManager} and answers ACK_PRODUCE."""

    _log = Logger()

    def __init__(self, logs: LogManager, clock: IReactorTime, errors: ErrorCounts) -> None:
        self._logs = logs
        self._clock = clock
        self._errors = errors

    def _append(self, request: ProduceRequest) -> AppendResult:
        log = self._logs.get_or_create_log(request.topic, request.partition)
        checked = request.checked  # validated ahead, a slice at a time (twlog.protocol.slicing): not again
        if isinstance(checked, Exception):
            raise checked
        return log.append(request.messages, checked)

    def _refused(self, kind: int, peer: str, request: ProduceRequest, error: BrokerError) -> None:
        self._errors.count(kind, error.code)
        if isinstance(error, StorageFailed):  # the storage logged its cause once; a full disk is not a line a request
            return
        self._log.warn(
            "rejected a produce from {peer} to {topic}-{partition}: {error}",
            peer=peer, topic=request.topic, partition=request.partition, error=error,
        )

    def produce(self, request: ProduceRequest, peer: str = "?", kind: int = codec.PRODUCE) -> None:
        """PRODUCE: append, answer nothing; a rejected set is logged (the producer does not wait)."""
        try:
            self._append(request)
        except BrokerError as e:
            self._refused(kind, peer, request, e)

    def multiproduce(self, request: MultiProduceRequest, peer: str = "?") -> None:
        """MULTIPRODUCE: each set as a PRODUCE."""
        for produce in request.produces:
            self.produce(produce, peer, codec.MULTIPRODUCE)

    def ack_produce(self, request: AckProduceRequest, peer: str = "?") -> Response | Deferred[Response] | None:
        """ACK_PRODUCE: append every set, then answer with the offsets (after the fsync when asked)."""
        results: list[ProduceResult] = []
        flushes: list[tuple[int, Deferred[int]]] = []
        for produce in request.produces:
            try:
                appended = self._append(produce)
            except BrokerError as e:
                self._refused(codec.ACK_PRODUCE, peer, produce, e)
                results.append(ProduceResult.refused(produce.topic, produce.partition, e))
                continue
            results.append(ProduceResult(produce.topic, produce.partition, NO_ERROR, *appended[:2]))
            log = self._logs.get_log(produce.topic, produce.partition)
            if request.ack >= ACK_FLUSHED:  # ACK_ALL too: a partition with no followers is its own ISR
                flushes.append((len(results) - 1, log.flush()))
            else:
                try:
                    log.write_out()  # "appended" means in the file: a process crash cannot lose it
                except BrokerError as e:
                    self._errors.count(codec.ACK_PRODUCE, e.code)
                    results[-1] = _failed(results[-1], e.code)
        if request.ack < ACK_FLUSHED or not flushes:
            return codec.encode_ack_produce_response(NO_ERROR, results)
        return Deferred.fromCoroutine(self._await_flushes(request, results, flushes))

    async def _await_flushes(
        self, request: AckProduceRequest, results: list[ProduceResult], flushes: list[tuple[int, Deferred[int]]]
    ) -> bytes:
        timeout_s = max(request.timeout_ms, 0) / 1000
        for index, flushed in flushes:
            flushed.addTimeout(timeout_s, self._clock)
            try:
                offset = await flushed
            except Exception as e:  # a timeout, a failed write or fsync, a deleted topic
                code = _flush_error_code(e)
                self._errors.count(codec.ACK_PRODUCE, code)
                if code != StorageFailed.code:  # (the storage logged its cause once)
                    self._log.warn("acknowledged produce to {topic}: not flushed: {error}",
                                   topic=results[index].topic, error=e)
                results[index] = _failed(results[index], code)
                continue
            if offset < results[index].next_offset:  # pragma: no cover - flush() covers all appended data
                results[index] = attrs.evolve(results[index], error=RequestTimedOut.code)
        return codec.encode_ack_produce_response(NO_ERROR, results)


def _failed(result: ProduceResult, code: int) -> ProduceResult:
    """C{result} answering C{code}: a set not written (L{StorageFailed}) has no offsets; one that may be stored
    (L{OutcomeUnknown}, L{RequestTimedOut}) keeps those it got, where it is if it is."""
    if code == StorageFailed.code:
        return attrs.evolve(result, error=code, offset=-1, next_offset=-1)
    return attrs.evolve(result, error=code)


def _flush_error_code(error: Exception) -> int:
    """What an ACK_PRODUCE set answers when the flush it waited for did not succeed: the storage's own error
    (L{StorageFailed}: not written; L{OutcomeUnknown}: in the file, not known to be on disk; L{TopicDeleted}),
    L{RequestTimedOut} when the request's timeout ended it, and L{OutcomeUnknown} for anything else (the set
    was appended: the broker cannot say that it was not stored)."""
    if isinstance(error, BrokerError):
        return error.code
    if isinstance(error, (TimeoutError, CancelledError)):
        return RequestTimedOut.code
    return OutcomeUnknown.code
