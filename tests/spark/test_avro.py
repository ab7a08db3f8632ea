"""Avro values as Spark columns: the type mapping, and one fetch's batch decoded into the latest schema."""

from __future__ import annotations

import json
import pickle

from twisted.trial.unittest import SkipTest, SynchronousTestCase

try:
    import pyarrow as pa

    from twlog.spark import avro as spark_avro
except ImportError:  # pragma: no cover - the spark extra
    raise SkipTest("pyarrow is not installed") from None

from twlog.avro.schema import AvroSchema
from twlog.avro.serde import encode
from twlog.avro.wire import frame
from twlog.errors import InvalidMessage
from twlog.spark.avro import AvroValues, UnsupportedSchema, spark_type

V1 = {"type": "record", "name": "P", "fields": [{"name": "name", "type": "string"}]}
V2 = {"type": "record", "name": "P", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}


class FakeClient:
    def __init__(self, schemas: dict[int, dict]) -> None:
        self.schemas = schemas
        self.asked: list[int] = []

    def schema(self, schema_id: int) -> str:
        self.asked.append(schema_id)
        return json.dumps(self.schemas[schema_id])


def batch(offsets: list[int], values: list[bytes]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({"topic": ["t"] * n, "partition": ["0-0"] * n, "offset": offsets,
                                       "value": values, "broker": [0] * n})


class TypeTests(SynchronousTestCase):
    def test_mapping(self) -> None:
        """Avro types to Spark's: primitives, nullable unions, records, arrays, maps, enums, logical types."""
        schema = AvroSchema.parse({"type": "record", "name": "R", "fields": [
            {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
            {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "s", "type": "string"},
            {"name": "y", "type": "bytes"}, {"name": "n", "type": ["null", "long"]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
            {"name": "a", "type": {"type": "array", "items": "int"}},
            {"name": "m", "type": {"type": "map", "values": "double"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
            {"name": "inner", "type": {"type": "record", "name": "I", "fields": [{"name": "x", "type": "int"}]}},
        ]})
        _, ddl, _ = spark_type(schema.fast)
        self.assertEqual(ddl, "struct<`b`: boolean, `i`: int, `l`: long, `f`: float, `d`: double, `s`: string, "
                              "`y`: binary, `n`: long, `e`: string, `a`: array<int>, `m`: map<string,double>, "
                              "`day`: date, `at`: timestamp, `dec`: decimal(9,2), `inner`: struct<`x`: int>>")

    def test_unsupported(self) -> None:
        self.assertRaises(UnsupportedSchema, spark_type, ["int", "string"])
        recursive = AvroSchema.parse({"type": "record", "name": "N", "fields": [
            {"name": "next", "type": ["null", "N"]}]})
        self.assertRaises(UnsupportedSchema, spark_type, recursive.fast)

    def test_columns(self) -> None:
        values = AvroValues("http://r", "t-value", json.dumps(V2), 2, 2)
        self.assertEqual(values.ddl, "topic string, partition string, offset long, broker int, `name` string, "
                                     "`age` int, `tags` array<string>")
        with self.assertRaises(UnsupportedSchema):
            AvroValues("http://r", "t-value", json.dumps({"type": "record", "name": "X", "fields": [
                {"name": "offset", "type": "int"}]}), 1, 1)
        with self.assertRaises(UnsupportedSchema):
            AvroValues("http://r", "t-value", '"string"', 1, 1)


class DecodeTests(SynchronousTestCase):
    def values(self, fail: bool = True) -> tuple[AvroValues, FakeClient]:
        values = pickle.loads(pickle.dumps(AvroValues("http://r", "t-value", json.dumps(V2), 2, 2, fail)))
        client = FakeClient({1: V1, 2: V2})
        values.use_client(client)
        return values, client

    def test_older_schema_resolved_into_latest(self) -> None:
        values, client = self.values()
        old = frame(1, encode(AvroSchema.parse(V1), {"name": "ann"}))
        new = frame(2, encode(AvroSchema.parse(V2), {"name": "bob", "age": 4, "tags": ["x"]}))
        decoded = values.decode(batch([0, 20, 40], [old, new, old]), "t partition 0-0")
        self.assertEqual(decoded.to_pylist(), [
            {"topic": "t", "partition": "0-0", "offset": 0, "broker": 0, "name": "ann", "age": None, "tags": []},
            {"topic": "t", "partition": "0-0", "offset": 20, "broker": 0, "name": "bob", "age": 4, "tags": ["x"]},
            {"topic": "t", "partition": "0-0", "offset": 40, "broker": 0, "name": "ann", "age": None, "tags": []},
        ])
        self.assertEqual(client.asked, [1, 2])  # once per id

    def test_undecodable_fails_with_its_offset(self) -> None:
        values, _ = self.values(fail=True)
        with self.assertRaises(InvalidMessage) as raised:
            values.decode(batch([0, 9], [frame(1, encode(AvroSchema.parse(V1), {"name": "a"})), b"text"]), "t p")
        self.assertIn("offset 9", str(raised.exception))
        self.assertIn("failOnDataLoss=false", str(raised.exception))

    def test_undecodable_skipped(self) -> None:
        values, _ = self.values(fail=False)
        good = frame(1, encode(AvroSchema.parse(V1), {"name": "a"}))
        with self.assertLogs(spark_avro.__name__, "WARNING") as logged:
            decoded = values.decode(batch([0, 9, 12], [good, b"text", frame(1, b"\x09")]), "t p")
        self.assertEqual(decoded.column("offset").to_pylist(), [0])
        self.assertIn("skipped 2 message(s)", logged.output[0])
