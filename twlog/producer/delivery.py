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
    check,
    error_for,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import ACK_NONE, AckProduceRequest, AckProduceResponse, ProduceRequest, ProduceResult
from twlog.storage.message import encode_message_set

__all__ = ["deliver"]


def _raise_unknown(response: AckProduceResponse, context: str) -> AckProduceResponse:
    """C{response}, unless it answers its one set with L{OutcomeUnknown} (the batch may be stored): raised."""
    if len(response.results) == 1 and response.results[0].error == OutcomeUnknown.code:
        raise error_for(OutcomeUnknown.code, f"{context} may or may not be stored")
    return response


def _raise_if_resend_refused(result: ProduceResult, uncertain: Exception | None, context: str) -> None:
    """After an unknown outcome, a resend refused ("not written": true of the resend only) is still unknown."""
    if result.error != 0 and uncertain is not None:
        raise OutcomeUnknown(f"{uncertain}; the resend was refused: {error_for(result.error, context)}")


async def deliver(producer, target: TopicPartition, payloads: list[bytes]) -> ProduceResult | None:
    """Send C{payloads} to C{target}'s leader over C{producer}'s connections, with its settings and retries; the
    broker's result (None without acknowledgements).  (C{producer} is the L{twlog.producer.producer.Producer}
    sending: not imported here, which would make a cycle.)

    @raise ConnectionFailed: the leader cannot be reached (L{ConnectionLost}: the batch may be stored).
    @raise OutcomeUnknown: the batch may or may not be stored, and the retries are spent.
    @raise BrokerError: the broker refused it (nothing was stored).
    """
    topic = target.topic
    connection = producer._pool.get(producer._router.leader(target))
    if connection is None:
        producer._router.forget(topic)
        raise ConnectionFailed(f"broker {producer._router.leader(target)} left the cluster: cannot write {target}")
    produce = ProduceRequest(topic, target.number, encode_message_set(payloads, producer.codec))
    attempt, uncertain = 0, None  # uncertain: why an earlier attempt may have stored the batch
    while True:
        try:
            if producer._ack == ACK_NONE:
                await connection.send(produce)
                return None
            request = AckProduceRequest(producer._ack, producer.ack_timeout_ms, (produce,))
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
    if len(results) != 1:
        raise ProtocolViolation(f"broker {connection.address} answered one produce with {len(results)} results")
    context = f"broker {connection.address} did not take the batch for {target}"
    _raise_if_resend_refused(results[0], uncertain, context)
    if results[0].error == MessageSizeTooLarge.code:  # it carries the size and the broker's limit
        raise results[0].size_error(context)
    return check(results[0], context)
