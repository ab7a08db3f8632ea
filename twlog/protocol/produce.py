# -*- test-case-name: tests.protocol.test_produce -*-
"""The broker's produce handlers: PRODUCE, MULTIPRODUCE and ACK_PRODUCE (L{ProduceHandlers}).

PRODUCE and MULTIPRODUCE are fire-and-forget, as in Kafka 0.7: a refused
set is logged and counted, never answered.  ACK_PRODUCE answers with the
offsets each set got, once the set is in the file (C{ack=appended}) or, when
asked, once it is fsynced (C{ack=flushed}, bounded by the request's timeout).
C{ack=all} is answered as C{ack=flushed} for a partition without followers (a 0.7
topic's: its broker is its ISR).  A replicated partition is the C{replication} gate's
(L{ReplicationGate}, the broker's replica side, L{twlog.replica}): it refuses a set to
a partition this broker does not lead (L{NotLeader}), and an C{ack=all} set, before
anything is appended, when the ISR is smaller than min.insync.replicas
(L{NotEnoughReplicas}); an C{ack=all} set is answered once the high watermark covers
it and the leader flushed it, with L{NotEnoughReplicasAfterAppend} when the ISR fell
below min.insync.replicas first, and L{RequestTimedOut} at the request's timeout.

A set of at least L{PIECED_SET_BYTES} (checked ahead, L{twlog.protocol.slicing}) is written a piece at a
time with the reactor running in between (L{twlog.storage.pieces}); sets for its partition wait their turn,
in order, and its request is answered once all of it is in.

Each set of a request is answered on its own, and every answer is true: a set
refused or not written (L{StorageFailed}: a full disk, a failed roll) has no
byte stored, whatever happened to the other sets of the request; a set that
was appended but whose flush failed is L{OutcomeUnknown}, and one whose flush
did not end in time L{RequestTimedOut}.
"""

from __future__ import annotations

from array import array
from typing import Protocol

import attrs
from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from twlog.errors import NO_ERROR, BrokerError, LeaderNotAvailable, OutcomeUnknown, RequestTimedOut, StorageFailed
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_ALL,
    ACK_FLUSHED,
    AckProduceRequest,
    MultiProduceRequest,
    ProduceRequest,
    ProduceResult,
)
from twlog.protocol.handling import ErrorCounts, Response
from twlog.storage.kernel import FRAME_FIELDS, join_sets
from twlog.storage.log import AppendResult
from twlog.storage.manager import LogManager
from twlog.storage.pieces import PIECED_SET_BYTES

__all__ = ["ProduceHandlers", "ReplicationGate"]

#: An appended set: where it landed, and whether its partition is replicated here.
Appended = tuple[AppendResult, bool]
#: A set's outcome: appended, or refused (its answer).
Part = Appended | ProduceResult


class ReplicationGate(Protocol):
    """What produce asks of the broker's replica side about replicated partitions (L{twlog.replica})."""

    def check_produce(self, topic: str, partition: int, ack: int) -> bool:
        """Whether C{topic}-C{partition} is a replicated partition this broker leads (False: not replicated
        here, a 0.7 partition).

        @raise NotLeader: it is replicated and this broker does not lead it (a follower, or fenced out).
        @raise NotEnoughReplicas: C{ack} is C{ACK_ALL} and the ISR is smaller than min.insync.replicas, or the
            leader is fenced: nothing may be appended.
        """

    def appended(self, topic: str, partition: int) -> None:
        """A set was appended to the led partition (its followers may fetch it; a lone leader's high watermark
        moves)."""

    def wait_all(self, topic: str, partition: int, next_offset: int) -> Deferred[int]:
        """Fire once every ISR member holds the partition up to C{next_offset} and the leader flushed it;
        fail with L{NotEnoughReplicasAfterAppend} (or L{NotLeader}) otherwise.  Cancelling it stops the wait."""


class ProduceHandlers:
    """Appends produced sets to the logs of one L{LogManager} and answers ACK_PRODUCE."""

    _log = Logger()

    def __init__(self, logs: LogManager, clock: IReactorTime, errors: ErrorCounts) -> None:
        self._logs = logs
        self._clock = clock
        self._errors = errors
        #: The replica side, for replicated partitions; None: every partition is its own ISR.
        self.replication: ReplicationGate | None = None
        #: Messages and bytes appended by producers, by topic (a compressed set counts as one message): for
        #: metrics (C{twlog_messages_in_total}, C{twlog_bytes_in_total}).
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}

    def _append(self, request: ProduceRequest, ack: int = 0) -> Appended | Deferred[Appended]:
        """Append C{request}'s set; return where it landed and whether the partition is replicated here.

        Once its turn comes: a set written in pieces to the partition (L{twlog.storage.pieces}) is waited for;
        a large checked set is itself written in pieces (a Deferred then).
        """
        waiting = self._logs.get_log(request.topic, request.partition)
        if waiting is not None and waiting.pieces.busy:
            return waiting.pieces.turn().addCallback(lambda _: self._append(request, ack))
        replicated = self.replication is not None and self.replication.check_produce(
            request.topic, request.partition, ack)
        log = self._logs.get_or_create_log(request.topic, request.partition)
        if not replicated and log.epochs.latest_epoch >= 0:  # a replica's log (it has leader epochs), with no role yet
            raise LeaderNotAvailable(f"{request.topic}-{request.partition} is a replica whose leader this broker "
                                     "does not know yet (starting, or away from ZooKeeper): retry")
        checked = request.checked  # validated ahead, a slice at a time (twlog.protocol.slicing): not again
        if isinstance(checked, Exception):
            raise checked
        if checked is not None and len(request.messages) >= PIECED_SET_BYTES:
            return log.append_in_pieces(request.messages, checked).addCallback(self._appended, request, replicated)
        return self._appended(log.append(request.messages, checked), request, replicated)

    def _appended(self, appended: AppendResult, request: ProduceRequest, replicated: bool) -> Appended:
        topic = request.topic
        self.messages_in[topic] = self.messages_in.get(topic, 0) + appended.count
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + appended.next_offset - appended.offset
        if replicated:
            self.replication.appended(request.topic, request.partition)
        return appended, replicated

    def _refused(self, kind: int, peer: str, request: ProduceRequest, error: BrokerError) -> None:
        self._errors.count(kind, error.code)
        if isinstance(error, StorageFailed):  # the storage logged its cause once; a full disk is not a line a request
            return
        self._log.warn(
            "rejected a produce from {peer} to {topic}-{partition}: {error}",
            peer=peer, topic=request.topic, partition=request.partition, error=error,
        )

    @staticmethod
    def _wait_all(flushed: int, gate: ReplicationGate, produce: ProduceRequest, next_offset: int) -> Deferred[int]:
        return gate.wait_all(produce.topic, produce.partition, next_offset)

    def produce(self, request: ProduceRequest, peer: str = "?", kind: int = codec.PRODUCE) -> None:
        """PRODUCE: append, answer nothing; a rejected set is logged (the producer does not wait)."""
        outcome = self._try_append(request, 0, peer, kind)
        if type(outcome) is not tuple and isinstance(outcome, Deferred):  # (Deferred's isinstance is an ABC's: slow)
            outcome.addErrback(lambda failure: self._log.failure("produce to {topic}-{partition} failed", failure,
                                                                 topic=request.topic, partition=request.partition))

    def produce_run(self, topic: str, partition: int, chunk: bytes, fields: array, first: int, count: int,
                    messages: int, set_bytes: int) -> int:
        """Append the checked sets of C{count} PRODUCE frames from C{first} of C{fields} (L{produce_frames}, over
        C{chunk}) to C{topic}-C{partition} as one set, or as few as the active segment's rolls allow: the bulk
        path (L{twlog.protocol.runs}).  Return how many of the frames were appended: those after are for the
        per-frame path, which appends or refuses each as L{produce} does (anything but a plain append of a log
        that exists, this broker leads or does not replicate, and takes the append, is left to it).
        """
        waiting = self._logs.get_log(topic, partition)
        if waiting is not None and waiting.pieces.busy:
            return 0
        try:
            replicated = self.replication is not None and self.replication.check_produce(topic, partition, 0)
            log = self._logs.get_or_create_log(topic, partition)
        except Exception:  # (not led here, a wrong partition, ...: the per-frame path refuses each set)
            return 0
        if not replicated and log.epochs.latest_epoch >= 0:
            return 0
        done, end = 0, first + count
        while first < end:
            room = log.room
            if set_bytes <= room:
                last, size, taken = end, set_bytes, messages
            else:  # the sets that fit before the roll (at least one: its append rolls the segment)
                last, size, taken = first, 0, 0
                while last < end:
                    at = last * FRAME_FIELDS
                    grown = size + fields[at + 6] - fields[at + 5]
                    if grown > room and last > first:
                        break
                    last, size, taken = last + 1, grown, taken + fields[at + 7]
            try:
                appended = log.append(join_sets(chunk, fields, first, last), taken)
            except Exception:  # the per-frame path meets it again, and says it as it always has
                return done
            self.messages_in[topic] = self.messages_in.get(topic, 0) + appended.count
            self.bytes_in[topic] = self.bytes_in.get(topic, 0) + appended.next_offset - appended.offset
            if replicated:
                self.replication.appended(topic, partition)
            done += last - first
            set_bytes -= size
            messages -= taken
            first = last
        return done

    def multiproduce(self, request: MultiProduceRequest, peer: str = "?") -> None:
        """MULTIPRODUCE: each set as a PRODUCE."""
        for produce in request.produces:
            self.produce(produce, peer, codec.MULTIPRODUCE)

    def _try_append(self, produce: ProduceRequest, ack: int, peer: str, kind: int) -> Part | Deferred[Part]:
        """L{_append}, or the set's refusal (logged and counted) if it is refused."""
        try:
            outcome = self._append(produce, ack)
        except BrokerError as e:
            return self._refusal(kind, peer, produce, e)
        if type(outcome) is not tuple and isinstance(outcome, Deferred):
            return outcome.addErrback(lambda failure: self._refusal(kind, peer, produce,
                                                                    failure.trap(BrokerError) and failure.value))
        return outcome

    def _refusal(self, kind: int, peer: str, produce: ProduceRequest, error: BrokerError) -> ProduceResult:
        self._refused(kind, peer, produce, error)
        return ProduceResult.refused(produce.topic, produce.partition, error)

    def ack_produce(self, request: AckProduceRequest, peer: str = "?") -> Response | Deferred[Response] | None:
        """ACK_PRODUCE: append every set, then answer with the offsets (after the fsync when asked)."""
        parts = [self._try_append(produce, request.ack, peer, codec.ACK_PRODUCE) for produce in request.produces]
        if any(isinstance(part, Deferred) for part in parts):  # a set written in pieces, or waiting for one
            return Deferred.fromCoroutine(self._await_parts(request, parts))
        return self._answer(request, parts)

    async def _await_parts(self, request: AckProduceRequest, parts: list[Part | Deferred[Part]]) -> bytes:
        done = [await part if isinstance(part, Deferred) else part for part in parts]
        answer = self._answer(request, done)
        return await answer if isinstance(answer, Deferred) else answer

    def _answer(self, request: AckProduceRequest, parts: list[Part]) -> Response | Deferred[Response]:
        """The answer once every set is appended or refused: at once, or after the flushes asked for."""
        results: list[ProduceResult] = []
        flushes: list[tuple[int, Deferred[int]]] = []
        for produce, part in zip(request.produces, parts):
            if isinstance(part, ProduceResult):  # refused
                results.append(part)
                continue
            appended, replicated = part
            results.append(ProduceResult(produce.topic, produce.partition, NO_ERROR, *appended[:2]))
            log = self._logs.get_log(produce.topic, produce.partition)
            if request.ack >= ACK_ALL and replicated:
                flushes.append((len(results) - 1, log.flush().addCallback(
                    self._wait_all, self.replication, produce, appended.next_offset)))
            elif request.ack >= ACK_FLUSHED:  # ACK_ALL too: a partition with no followers is its own ISR
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
            except Exception as e:  # a timeout, a failed write or fsync, a deleted topic, the ISR shrank
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
