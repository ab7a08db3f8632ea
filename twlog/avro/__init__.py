"""Avro payloads in Confluent's wire format, and a client of a Confluent-style schema registry.

A message is the magic byte 0, the schema's id as a 4-byte big-endian int, then the Avro binary
body (L{twlog.avro.wire}).  L{AvroSerializer} and L{AvroDeserializer} (L{twlog.avro.serde}) are
the C{serializer=}/C{deserializer=} of the producer, the consumers and the blocking facade; they
ask a registry (L{RegistryClient} on Twisted, L{SyncRegistryClient} without a reactor) once per
schema and cache the answer.  L{twlog.avro.schema} parses schemas and checks compatibility with the
avro package's own resolution rules; encoding and decoding use fastavro.
"""

from twlog.avro.client import RegistryClient, RegistryError, SyncRegistryClient
from twlog.avro.schema import COMPATIBILITY_LEVELS, AvroSchema, InvalidSchema, incompatibilities
from twlog.avro.serde import AvroDeserializer, AvroSerializer, topic_subject
from twlog.avro.wire import MAGIC, WireFormatError, frame, unframe

__all__ = [
    "COMPATIBILITY_LEVELS",
    "MAGIC",
    "AvroDeserializer",
    "AvroSchema",
    "AvroSerializer",
    "InvalidSchema",
    "RegistryClient",
    "RegistryError",
    "SyncRegistryClient",
    "WireFormatError",
    "frame",
    "incompatibilities",
    "topic_subject",
    "unframe",
]
