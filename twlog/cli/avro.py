# -*- test-case-name: tests.cli.test_avro,tests.integration.test_schema_registry -*-
"""C{--registry} and C{--avro-schema} of C{twlog produce} and C{twlog consume}: JSON lines to Avro and back.

C{twlog produce --avro-schema FILE --registry URL} reads each line as a JSON value, writes it in Avro
under the schema of FILE (registered under C{<topic>-value}) in Confluent's wire format;
C{twlog consume --registry URL} prints each message decoded as one line of JSON (with the schema of its
id, fetched once).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from twisted.internet.defer import Deferred

from twlog.avro import AvroDeserializer, AvroSchema, AvroSerializer, InvalidSchema, RegistryClient, RegistryError
from twlog.avro.serde import AvroDecodeError
from twlog.cli.common import UsageError
from twlog.cli.registry_settings import registry_settings
from twlog.errors import TwlogError


def registry_client(args, reactor) -> RegistryClient | None:
    """The client of C{--registry}, or None without it.

    @raise UsageError: a URL that is not http(s).
    @raise TwlogError: bad HTTPS or basic auth settings (L{registry_settings}).
    """
    settings = registry_settings(args)
    if settings is None:
        return None
    try:
        return RegistryClient(settings.url, reactor=reactor, tls=settings.tls, user_info=settings.user_info)
    except ValueError as e:
        raise UsageError(f"--registry: {e}") from None


def serializer(args, reactor) -> Any:
    """The serializer C{--avro-schema} and C{--registry} ask for, or None (lines sent as they are)."""
    path = getattr(args, "avro_schema", None)
    if path is None:
        if getattr(args, "registry", None):
            raise UsageError("--registry with twlog produce needs --avro-schema FILE (the schema to write with)")
        return None
    client = registry_client(args, reactor)
    if client is None:
        raise UsageError("--avro-schema needs --registry URL (the schema registry that gives the schema its id)")
    try:
        with open(path, encoding="utf-8") as f:
            schema = AvroSchema.parse(f.read())
    except OSError as e:
        raise UsageError(f"--avro-schema {path}: {e.strerror or e}") from None
    except InvalidSchema as e:
        raise TwlogError(f"--avro-schema {path}: {e}") from None
    avro = AvroSerializer(client, schema)

    def serialize(topic: str, line: bytes) -> bytes | Deferred[bytes]:
        try:
            value = json.loads(line)
        except ValueError as e:
            raise TwlogError(f"a line is not JSON ({e}): {line[:80]!r}") from None
        try:
            result = avro(topic, value)
        except ValueError as e:
            raise TwlogError(f"{e}: {line[:80]!r}") from None
        if isinstance(result, Deferred):
            result.addErrback(_explain_registry)
        return result

    return serialize


def deserializer(args, reactor) -> Any:
    """The deserializer C{--registry} asks for (each message as one line of JSON), or None."""
    client = registry_client(args, reactor)
    if client is None:
        return None
    return json_lines(AvroDeserializer(client))


def json_lines(avro: AvroDeserializer) -> Any:
    """C{(topic, payload) -> bytes}: the record C{avro} decodes, as one line of JSON (bytes in base64)."""

    def deserialize(topic: str, payload: bytes) -> bytes | Deferred[bytes]:
        try:
            result = avro(topic, payload)
        except AvroDecodeError as e:
            raise TwlogError(str(e)) from None
        if isinstance(result, Deferred):
            return result.addCallbacks(_json_line, _explain_registry)
        return _json_line(result)

    return deserialize


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)  # decimals, dates, UUIDs


def _json_line(value: Any) -> bytes:
    return json.dumps(value, default=_json_default, ensure_ascii=False).encode("utf-8")


def _explain_registry(failure):
    if failure.check(RegistryError, AvroDecodeError):
        raise TwlogError(failure.getErrorMessage())
    return failure
