# -*- test-case-name: tests.spark.test_avro,tests.integration.test_schema_registry -*-
"""Avro values as columns: C{.option("valueFormat", "avro").option("schemaRegistryUrl", URL)}.

On the driver, L{AvroValues.for_source} asks the registry for the latest schema of the subject
C{<topic>-value} (Confluent's TopicNameStrategy; C{valueSchemaSubject} overrides it) and turns its
record fields into Spark columns (L{spark_type}), after C{topic}, C{partition}, C{offset} and
C{broker}.  On the executors, L{AvroValues.decode} turns each fetch's record batch into rows of that
schema: each message's schema id (Confluent's wire format) names its writer schema, fetched once per
id and executor process, and fastavro resolves it into the latest schema (Avro's resolution rules:
fields added with a default get the default, removed ones are dropped).  A message that does not
decode fails the task naming its offset, or with C{failOnDataLoss} false is skipped and counted
(one warning per fetch with the count and the first offset).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa

from twlog.avro.client import RegistryError, SyncRegistryClient
from twlog.avro.schema import AvroSchema
from twlog.avro.serde import AvroDecodeError, decode, topic_subject
from twlog.avro.wire import WireFormatError, unframe
from twlog.client.tls import TLSSettings
from twlog.errors import InvalidMessage
from twlog.spark.options import check_options

_logger = logging.getLogger(__name__)

VALUE_FORMATS = ("binary", "avro")
#: The columns every row has, before the record's fields.
META_COLUMNS = ("topic", "partition", "offset", "broker")
_META_DDL = "topic string, partition string, offset long, broker int"

_PRIMITIVES = {
    "boolean": (pa.bool_(), "boolean"), "int": (pa.int32(), "int"), "long": (pa.int64(), "long"),
    "float": (pa.float32(), "float"), "double": (pa.float64(), "double"), "bytes": (pa.binary(), "binary"),
    "string": (pa.string(), "string"),
}
_LOGICAL = {
    ("int", "date"): (pa.date32(), "date"),
    ("long", "timestamp-millis"): (pa.timestamp("us", tz="UTC"), "timestamp"),
    ("long", "timestamp-micros"): (pa.timestamp("us", tz="UTC"), "timestamp"),
}


class UnsupportedSchema(ValueError):
    """An Avro schema with no Spark column type (a union of several non-null types, a recursive record)."""


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_type(schema: Any, seen: frozenset = frozenset()) -> tuple[pa.DataType, str, bool]:
    """The Arrow type, Spark DDL type and nullability of an Avro schema (fastavro's parsed form).

    @raise UnsupportedSchema: naming the part with no Spark type.
    """
    if isinstance(schema, list):  # a union: only [null, T] (either order) maps to a nullable T
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise UnsupportedSchema(f"the union {schema} has more than one non-null branch: no single Spark type")
        arrow, ddl, _ = spark_type(branches[0], seen)
        return arrow, ddl, len(branches) < len(schema)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return (*_PRIMITIVES[schema], False)
        if schema == "null":
            return pa.null(), "void", True
        raise UnsupportedSchema(f"the named type {schema!r} refers to itself: recursive records have no Spark type")
    kind = schema["type"]
    logical = schema.get("logicalType")
    if (kind, logical) in _LOGICAL:
        return (*_LOGICAL[kind, logical], False)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = schema["precision"], schema.get("scale", 0)
        return pa.decimal128(precision, scale), f"decimal({precision},{scale})", False
    if kind in _PRIMITIVES or kind == "null":
        return spark_type(kind, seen)
    if kind == "enum":
        return pa.string(), "string", False
    if kind == "fixed":
        return pa.binary(), "binary", False
    if kind == "array":
        arrow, ddl, _ = spark_type(schema["items"], seen)
        return pa.list_(pa.field("element", arrow)), f"array<{ddl}>", False
    if kind == "map":
        arrow, ddl, _ = spark_type(schema["values"], seen)
        return pa.map_(pa.string(), arrow), f"map<string,{ddl}>", False
    if kind == "record":
        name = schema["name"]
        if name in seen:
            raise UnsupportedSchema(f"the record {name!r} contains itself: recursive records have no Spark type")
        fields, ddls = [], []
        for field in schema["fields"]:
            arrow, ddl, nullable = spark_type(field["type"], seen | {name})
            fields.append(pa.field(field["name"], arrow))  # (Spark's columns from a data source are nullable)
            ddls.append(f"{_quote(field['name'])}: {ddl}")
        return pa.struct(fields), f"struct<{', '.join(ddls)}>", False
    raise UnsupportedSchema(f"the Avro type {kind!r} has no Spark column type")


def _client(url: str, ca: str | None, user_info: str | None) -> SyncRegistryClient:
    """The blocking client of the registry at C{url}, trusting C{ca} (None: the system's CAs), as C{user_info}.

    @raise ValueError: a bad URL or user info, or a CA for an http:// URL.
    """
    try:
        return SyncRegistryClient(url, tls=TLSSettings(ca_file=ca) if ca else None, user_info=user_info)
    except ValueError as e:
        raise ValueError(f"valueFormat avro: {e}") from None


class AvroValues:
    """How a query decodes values: the registry, the reader (latest) schema, and its columns.  Picklable."""

    def __init__(self, url: str, subject: str, reader: str, schema_id: int, version: int,
                 fail_on_data_loss: bool = True, registry_ca: str | None = None,
                 registry_user_info: str | None = None) -> None:
        self.url = url
        #: The registry's CA file (C{schema.registry.ssl.ca.location}) and C{user:password}
        #: (C{schema.registry.basic.auth.user.info}), for the executors' clients too.
        self.registry_ca, self.registry_user_info = registry_ca, registry_user_info
        self.subject = subject
        self.reader_text = reader
        self.schema_id = schema_id
        self.version = version
        self.fail_on_data_loss = fail_on_data_loss
        reader_schema = AvroSchema.parse(reader)
        if not (isinstance(reader_schema.fast, dict) and reader_schema.fast.get("type") == "record"):
            raise UnsupportedSchema(f"the latest schema of subject {subject!r} is not a record: its fields are the "
                                    "columns, so valueFormat avro needs a record schema")
        struct, _, _ = spark_type(reader_schema.fast)
        clash = sorted(set(META_COLUMNS) & {f.name for f in struct})
        if clash:
            raise UnsupportedSchema(f"the fields {', '.join(clash)} of subject {subject!r} clash with the columns "
                                    f"{', '.join(META_COLUMNS)}")
        self.fields = list(struct)
        self.arrow_schema = pa.schema([pa.field("topic", pa.string()), pa.field("partition", pa.string()),
                                       pa.field("offset", pa.int64()), pa.field("broker", pa.int32()),
                                       *self.fields])
        columns = [f"{_quote(f.name)} {spark_type(ft['type'])[1]}" for f, ft in
                   zip(self.fields, reader_schema.fast["fields"])]
        self.ddl = ", ".join([_META_DDL, *columns])
        self._state: dict | None = None

    @classmethod
    def for_options(cls, options: dict[str, str], topics: list[str], fail_on_data_loss: bool) -> AvroValues | None:
        """From the source's options (lower-cased keys): None for binary values, else the latest schema's decoder.

        @raise ValueError: a bad option, a subject the registry does not have, a registry that does not answer.
        """
        value_format = (options.get("valueformat") or "binary").strip().lower()
        if value_format not in VALUE_FORMATS:
            raise ValueError(f"valueFormat must be one of {', '.join(VALUE_FORMATS)}, not {value_format!r}")
        url, subject = options.get("schemaregistryurl"), options.get("valueschemasubject")
        ca = options.get("schema.registry.ssl.ca.location")
        user_info = options.get("schema.registry.basic.auth.user.info")
        if value_format == "binary":
            if any(value is not None for value in (url, subject, ca, user_info)):
                raise ValueError('schemaRegistryUrl, valueSchemaSubject and the schema.registry.* options are for '
                                 '.option("valueFormat", "avro")')
            return None
        if not url:
            raise ValueError('valueFormat avro needs .option("schemaRegistryUrl", "http://host:port")')
        if subject is None:
            if len(topics) != 1:
                raise ValueError("valueFormat avro with several topics needs valueSchemaSubject (one schema: "
                                 "the columns)")
            subject = topic_subject(topics[0])
        try:
            latest = _client(url, ca, user_info).latest(subject)
        except RegistryError as e:
            raise ValueError(f"valueFormat avro: no latest schema of subject {subject!r}: {e}") from None
        return cls(url, subject, latest["schema"], int(latest["id"]), int(latest["version"]), fail_on_data_loss,
                   ca, user_info)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_state"] = None
        state.pop("arrow_schema")
        state.pop("fields")
        return state

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["url"], state["subject"], state["reader_text"], state["schema_id"], state["version"],
                      state["fail_on_data_loss"], state["registry_ca"], state["registry_user_info"])

    # -- on executors -------------------------------------------------------------------

    def use_client(self, client) -> None:
        """Ask C{client} (a L{SyncRegistryClient} by default, made on first use) for writer schemas."""
        self._state = {"client": client, "schemas": {}, "reader": AvroSchema.parse(self.reader_text)}

    def _writer(self, schema_id: int) -> AvroSchema:
        if self._state is None:
            self.use_client(_client(self.url, self.registry_ca, self.registry_user_info))
        schemas = self._state["schemas"]
        if schema_id not in schemas:
            try:
                schemas[schema_id] = AvroSchema.parse(self._state["client"].schema(schema_id))
            except RegistryError as e:
                raise AvroDecodeError(f"schema id {schema_id}: {e}") from None
        return schemas[schema_id]

    def decode(self, batch: pa.RecordBatch, where: str) -> pa.RecordBatch:
        """One fetch's batch (topic, partition, offset, value, broker) as rows of L{arrow_schema}.

        @raise InvalidMessage: a message that does not decode, with C{failOnDataLoss} (naming its offset).
        """
        values = batch.column("value").to_pylist()
        offsets = batch.column("offset").to_pylist()
        records, keep = [], []
        skipped, first = 0, None
        for index, (offset, payload) in enumerate(zip(offsets, values)):
            try:
                schema_id, body = unframe(payload)
                writer = self._writer(schema_id)
                reader = self._state["reader"]
                records.append(decode(body, writer, reader))
                keep.append(index)
            except (AvroDecodeError, WireFormatError) as e:
                if self.fail_on_data_loss:
                    raise InvalidMessage(f"the message at offset {offset} of {where} does not decode as Avro "
                                         f"(subject {self.subject!r}): {e}; set failOnDataLoss=false to skip "
                                         "undecodable messages") from None
                skipped += 1
                first = offset if first is None else first
        if skipped:
            _logger.warning("skipped %d message(s) of %s that do not decode as Avro (subject %r), the first at "
                            "offset %d", skipped, where, self.subject, first)
        meta = batch.select(["topic", "partition", "offset", "broker"])
        if skipped:
            meta = meta.take(pa.array(keep, pa.int64()))
        decoded = pa.RecordBatch.from_pylist(records, schema=pa.schema(self.fields))
        return pa.RecordBatch.from_arrays([*meta.columns, *decoded.columns], schema=self.arrow_schema)


def values_of(source) -> AvroValues | None:
    """The L{AvroValues} of a data source instance (asked of the registry once per instance: the schema and the
    readers agree on one version)."""
    if not hasattr(source, "_twlog_avro_values"):
        options = check_options(source.options)
        subscribe, assign = options.get("subscribe"), options.get("assign")
        topics = [t.strip() for t in (subscribe or "").split(",") if t.strip()]
        if assign is not None:
            try:
                topics = list(json.loads(assign))
            except (ValueError, TypeError):
                topics = []
        fail = str(options.get("failondataloss", "true")).strip().lower() in ("true", "1", "yes")
        source._twlog_avro_values = AvroValues.for_options(options, topics, fail)
    return source._twlog_avro_values


def avro_schema(source, default: str) -> str:
    """The source's Spark schema: the record's columns with valueFormat avro, else C{default}."""
    values = values_of(source)
    return values.ddl if values is not None else default


def with_values(options, source):
    """C{options} (a L{twlog.spark.options.SourceOptions}) carrying the source's L{AvroValues} to the executors."""
    options.values = values_of(source)
    return options


def avro_batches(options, part, batches):
    """The record batches of one input partition, decoded when the values are Avro."""
    values = getattr(options, "values", None)
    if values is None:
        yield from batches
        return
    tp = getattr(part, "tp", None)
    where = f"{tp.topic} partition {tp.name}" if tp is not None else "the partition"
    for batch in batches:
        yield values.decode(batch, where)
