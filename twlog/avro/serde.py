# -*- test-case-name: tests.avro.test_serde -*-
"""L{AvroSerializer} and L{AvroDeserializer}: records to and from Confluent's wire format.

Both are callables C{(topic, value)}, the C{serializer=} of L{twlog.producer.Producer} and the
C{deserializer=} of the consumers (and of the blocking facade over them).  They ask the registry
once (per subject for the serializer, per schema id for the deserializer) and cache the answer;
with a L{twlog.avro.client.RegistryClient} that first call answers with a Deferred (the producer and
consumers wait for it), with a L{twlog.avro.client.SyncRegistryClient} it blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from twisted.internet.defer import Deferred

from twlog.avro.schema import AvroSchema
from twlog.avro.wire import WireFormatError, frame, unframe

#: A subject name strategy: the topic to the subject its values' schemas are registered under.
SubjectStrategy = Callable[[str], str]


class AvroDecodeError(ValueError):
    """A payload that does not decode: not the wire format, an unknown id, or bytes the schema does not fit."""


def topic_subject(topic: str) -> str:
    """Confluent's TopicNameStrategy for values: C{<topic>-value}."""
    return f"{topic}-value"


def _then(result: Any, step: Callable[[Any], Any]) -> Any:
    """C{step(result)}, after C{result} fires if it is a Deferred."""
    if isinstance(result, Deferred):
        return result.addCallback(step)
    return step(result)


def encode(schema: AvroSchema, value: Any) -> bytes:
    """The Avro binary encoding of C{value} (no framing).

    @raise ValueError: C{value} does not fit the schema.
    """
    out = BytesIO()
    try:
        schemaless_writer(out, schema.fast, value, strict_allow_default=True)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"the value does not fit the Avro schema: {e}") from None
    return out.getvalue()


def decode(body: bytes | memoryview, writer: AvroSchema, reader: AvroSchema | None = None) -> Any:
    """The value in C{body} (Avro binary written with C{writer}), resolved into C{reader} if given.

    @raise AvroDecodeError: the bytes do not decode with C{writer}, or do not resolve into C{reader}.
    """
    try:
        return schemaless_reader(BytesIO(body), writer.fast, reader.fast if reader not in (None, writer) else None)
    except Exception as e:  # fastavro raises EOFError, SchemaResolutionError, UnicodeDecodeError, IndexError...
        raise AvroDecodeError(f"the Avro body does not decode: {type(e).__name__}: {e}") from None


class AvroSerializer:
    """C{(topic, record) -> bytes}: the record in Avro under C{schema}, framed with its registered id.

    @param registry: a L{RegistryClient} or L{SyncRegistryClient}.
    @param schema: the writer's schema (JSON text, or its decoded value).
    @param subject: the subject name strategy (default: C{<topic>-value}).
    @param auto_register: register the schema under the subject (C{POST /subjects/.../versions}, which
        answers the existing id for a schema already there); else look it up with C{POST /subjects/...}.
    """

    def __init__(self, registry, schema: str | dict | AvroSchema, *, subject: SubjectStrategy = topic_subject) -> None:
        self.registry = registry
        self.schema = schema if isinstance(schema, AvroSchema) else AvroSchema.parse(schema)
        self.subject = subject
        self._ids: dict[str, int] = {}
        self._waiting: dict[str, list[tuple[Deferred[bytes], bytes]]] = {}

    def __call__(self, topic: str, value: Any) -> bytes | Deferred[bytes]:
        body = encode(self.schema, value)
        subject = self.subject(topic)
        schema_id = self._ids.get(subject)
        if schema_id is not None:
            return frame(schema_id, body)

        waiting = self._waiting.get(subject)
        if waiting is not None:  # a registration is on its way: wait behind it, so sends keep their order
            d: Deferred[bytes] = Deferred()
            waiting.append((d, body))
            return d
        result = self.registry.register(subject, self.schema.text)
        if not isinstance(result, Deferred):
            self._ids[subject] = result
            return frame(result, body)
        first: Deferred[bytes] = Deferred()
        self._waiting[subject] = [(first, body)]
        result.addCallbacks(self._registered, self._not_registered, callbackArgs=(subject,), errbackArgs=(subject,))
        return first

    def _registered(self, schema_id: int, subject: str) -> None:
        self._ids[subject] = schema_id
        for d, body in self._waiting.pop(subject):
            d.callback(frame(schema_id, body))

    def _not_registered(self, failure, subject: str) -> None:
        for d, _ in self._waiting.pop(subject):
            d.errback(failure)


class AvroDeserializer:
    """C{(topic, payload) -> record}: a framed message decoded with the schema of its id.

    @param registry: a L{RegistryClient} or L{SyncRegistryClient}.
    @param reader: decode every message into this schema (Avro's resolution rules), else each into its own.
    """

    def __init__(self, registry, reader: str | dict | AvroSchema | None = None) -> None:
        self.registry = registry
        self.reader = reader if reader is None or isinstance(reader, AvroSchema) else AvroSchema.parse(reader)
        self._schemas: dict[int, AvroSchema] = {}

    def writer_schema(self, schema_id: int) -> AvroSchema | Deferred[AvroSchema]:
        """The schema registered as C{schema_id}, from the cache or the registry."""
        known = self._schemas.get(schema_id)
        if known is not None:
            return known

        def parsed(text: str) -> AvroSchema:
            schema = self._schemas[schema_id] = AvroSchema.parse(text)
            return schema

        return _then(self.registry.schema(schema_id), parsed)

    def __call__(self, topic: str, payload: bytes) -> Any:
        try:
            schema_id, body = unframe(payload)
        except WireFormatError as e:
            raise AvroDecodeError(f"a message of {topic!r} is not Avro in Confluent's wire format: {e}") from None
        return _then(self.writer_schema(schema_id), lambda writer: decode(body, writer, self.reader))
