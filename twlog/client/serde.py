# -*- test-case-name: tests.client.test_serde -*-
"""Serializers and deserializers of message values, as the producer and the consumers apply them.

A serializer is C{(topic, value) -> bytes}; a deserializer C{(topic, payload) -> value}.  Either may
answer with a Deferred instead (an Avro serde asking its schema registry the first time: see
L{twlog.avro}); the producer and the consumers wait for it.  With a deserializer, the consumers hand
out messages whose C{payload} is the deserialized value (Kafka 0.7's C{Decoder<T>}).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from twisted.internet.defer import Deferred, FirstError, gatherResults, succeed

Serializer = Callable[[str, Any], "bytes | Deferred[bytes]"]
Deserializer = Callable[[str, bytes], Any]

M = TypeVar("M")


def serialize_batch(serializer: Serializer, topic: str, values: Any) -> Deferred[list[bytes]]:
    """The payloads of C{values}: a list is a batch of values, anything else one value.

    A serializer's error (a value that does not fit its schema...) fails the Deferred.
    """
    batch = values if isinstance(values, list) else [values]
    try:
        results = [serializer(topic, value) for value in batch]
    except Exception as e:
        return Deferred.fromCoroutine(_raise(e))
    if not any(isinstance(r, Deferred) for r in results):
        return succeed(results)
    gathered = gatherResults([r if isinstance(r, Deferred) else succeed(r) for r in results], consumeErrors=True)
    return gathered.addErrback(lambda f: f.value.subFailure if f.check(FirstError) else f)


def deserialize_one(deserializer: Deserializer | None, topic: str, message: M) -> Deferred[M]:
    """C{message} (a named tuple with a C{payload}) with its payload deserialized."""
    if deserializer is None:
        return succeed(message)
    try:
        value = deserializer(topic, message.payload)
    except Exception as e:
        return Deferred.fromCoroutine(_raise(e))
    if isinstance(value, Deferred):
        return value.addCallback(lambda v: message._replace(payload=v))
    return succeed(message._replace(payload=value))


async def deserialize_all(deserializer: Deserializer, topic: str, messages: Sequence[M]) -> tuple[M, ...]:
    """Every message with its payload deserialized, in order."""
    out = []
    for message in messages:
        value = deserializer(topic, message.payload)
        if isinstance(value, Deferred):
            value = await value
        out.append(message._replace(payload=value))
    return tuple(out)


async def _raise(error: Exception) -> Any:
    raise error
