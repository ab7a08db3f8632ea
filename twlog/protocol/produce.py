# -*- test-case-name: tests.protocol.test_produce -*-
"""The broker's produce handlers: PRODUCE, MULTIPRODUCE and ACK_PRODUCE (L{ProduceHandlers}).

PRODUCE and MULTIPRODUCE are fire-and-forget, as in Kafka 0.7: a refused
set is logged and counted, never answered.  ACK_PRODUCE answers with the
offsets each set got, once the set is in the file (C{ack=appended}) or, when
asked, once it is fsynced (C{ack=flushed}, bounded by the request's timeout).
"""

from __future__ import annotations

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.errors import NO_ERROR, BrokerError, RequestTimedOut, TooManyOpenFiles, TopicDeleted
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
            if request.ack == ACK_FLUSHED:
                flushes.append((len(results) - 1, log.flush()))
            else:
                try:
                    log.write_out()  # "appended" means in the file: a process crash cannot lose it
                except BrokerError as e:
                    self._errors.count(codec.ACK_PRODUCE, e.code)
                    results[-1] = attrs.evolve(results[-1], error=e.code)
        if request.ack != ACK_FLUSHED or not flushes:
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
            except Exception as e:  # a timeout, a failed fsync, no descriptor to open a directory, a deleted topic
                code = e.code if isinstance(e, (TooManyOpenFiles, TopicDeleted)) else RequestTimedOut.code
                self._errors.count(codec.ACK_PRODUCE, code)
                self._log.warn("acknowledged produce to {topic}: not flushed: {error}",
                               topic=results[index].topic, error=e)
                results[index] = attrs.evolve(results[index], error=code)
                continue
            if offset < results[index].next_offset:  # pragma: no cover - flush() covers all appended data
                results[index] = attrs.evolve(results[index], error=RequestTimedOut.code)
        return codec.encode_ack_produce_response(NO_ERROR, results)
