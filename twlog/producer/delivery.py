# -*- test-case-name: tests.producer.test_producer -*-
"""Delivering one batch to its partition's leader, with the producer's retry rules (L{deliver}).

A batch that may have been stored (its connection broke after the write, or the broker answered
L{OutcomeUnknown}) is resent up to the producer's C{retries}: at-least-once, so a resend can store it
twice.  A resend refused afterwards still raises L{OutcomeUnknown} ("not written" is only true of the
resend), and a resend that cannot connect raises L{ConnectionLost} ("it may be stored").
"""

from __future__ import annotations

from twlog.errors import (
    ClientClosed,
    ConnectionFailed,
    ConnectionLost,
    MessageSizeTooLarge,
    OutcomeUnknown,
    ProtocolViolation,
    error_for,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import ACK_NONE, AckProduceRequest, AckProduceResponse, ProduceRequest, ProduceResult
from twlog.storage.kernel import encode_set
from twlog.storage.message import CODEC_NONE, encode_message_set

__all__ = ["deliver", "deliver_sets"]


def _raise_unknown(response: AckProduceResponse, context: str) -> AckProduceResponse:
    """C{response}, unless it answers its first set with L{OutcomeUnknown} (the batch may be stored): raised, so
    that the whole request is resent."""
    if response.results and response.results[0].error == OutcomeUnknown.code:
        raise error_for(OutcomeUnknown.code, f"{context} may or may not be stored")
    return response


def _outcome(result: ProduceResult, uncertain: Exception | None, context: str) -> ProduceResult | Exception:
    """One set's result, or the exception its refusal means.  After an unknown outcome, a resend refused ("not
    written": true of the resend only) is still unknown."""
    if result.error == 0:
        return result
    if uncertain is not None:
        return OutcomeUnknown(f"{uncertain}; the resend was refused: {error_for(result.error, context)}")
    if result.error == MessageSizeTooLarge.code:  # it carries the size and the broker's limit
        return result.size_error(context)
    return error_for(result.error, context)


async def deliver(producer, target: TopicPartition, payloads: list[bytes]) -> ProduceResult | None:
    """Send C{payloads} to C{target}'s leader over C{producer}'s connections, with its settings and retries; the
    broker's result (None without acknowledgements).  (C{producer} is the L{twlog.producer.producer.Producer}
    sending: not imported here, which would make a cycle.)

    @raise ConnectionFailed: the leader cannot be reached (L{ConnectionLost}: the batch may be stored).
    @raise OutcomeUnknown: the batch may or may not be stored, and the retries are spent.
    @raise BrokerError: the broker refused it (nothing was stored).
    """
    outcome = (await deliver_sets(producer, target, [payloads]))[0]
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


async def deliver_sets(producer, target: TopicPartition, sets: list[list[bytes]]
                       ) -> list[ProduceResult | None | Exception]:
    """Send C{sets} (batches, in order) to C{target}'s leader in one request, a message set each, with C{producer}'s
    settings and retries; each set's outcome, in order: its result (None without acknowledgements), or the
    L{BrokerError} that refused it (nothing of it stored).  A refusal of the first set is raised (the broker
    refuses every set of a partition alike for the reasons a resend can mend: L{NotLeader} and the like), as is
    anything that befell the whole request.

    @raise ConnectionFailed: the leader cannot be reached (L{ConnectionLost}: the sets may be stored).
    @raise OutcomeUnknown: the sets may or may not be stored, and the retries are spent.
    @raise BrokerError: the broker refused the first set (nothing of it was stored).
    """
    topic = target.topic
    connection = producer._pool.get(producer._router.leader(target))
    if connection is None:
        producer._router.forget(topic)
        raise ConnectionFailed(f"broker {producer._router.leader(target)} left the cluster: cannot write {target}")
    codec = producer.codec
    produces = tuple(ProduceRequest(topic, target.number, encode_set(payloads) if codec == CODEC_NONE
                                    else encode_message_set(payloads, codec)) for payloads in sets)
    attempt, uncertain = 0, None  # uncertain: why an earlier attempt may have stored the batch
    while True:
        try:
            if producer._ack == ACK_NONE:
                for produce in produces:
                    await connection.send(produce)
                return [None] * len(produces)
            request = AckProduceRequest(producer._ack, producer.ack_timeout_ms, produces)
            timeout_s = producer.options.timeout_s + producer.ack_timeout_ms / 1000
            response = _raise_unknown(await connection.request(request, timeout_s=timeout_s),
                                      f"broker {connection.address}, the batch for {target}")
            break
        except (ConnectionLost, OutcomeUnknown) as e:
            if attempt >= producer.retries:
                producer._router.forget(topic)
                raise
            attempt, uncertain = attempt + 1, e
            producer._log.info("resending a batch to {p} (may store it twice): {error}", p=str(target), error=e)
        except ConnectionFailed as e:
            producer._router.forget(topic)  # ask the brokers again next time: one may be gone, or back
            if uncertain is not None:  # then the batch may be stored: say so (not "could not connect" alone)
                why = ("the connection broke once the batch was written" if isinstance(uncertain, ConnectionLost)
                       else "the outcome of an earlier attempt was unknown")
                raise ConnectionLost(f"{e}, after {why} ({uncertain}): it may be stored") from None
            raise
        except ClientClosed as e:
            if not producer._router.broker_left(producer._router.leader(target)):
                raise
            if not e.written and uncertain is None:  # closed before the batch was written: nothing stored
                raise ConnectionFailed(f"broker {producer._router.leader(target)} left the cluster before the batch "
                                       f"for {target} was sent") from None
            # (It was written before the connection was retired: it may be stored.)
            raise ConnectionLost(
                f"broker {producer._router.leader(target)} left the cluster before the batch for {target} was sent "
                "or answered"
            ) from None
    results = response.results
    if len(results) != len(produces):
        raise ProtocolViolation(f"broker {connection.address} answered {len(produces)} produces with "
                                f"{len(results)} results")
    context = f"broker {connection.address} did not take the batch for {target}"
    outcomes = [_outcome(result, uncertain, context) for result in results]
    if isinstance(outcomes[0], Exception):
        raise outcomes[0]
    return outcomes
