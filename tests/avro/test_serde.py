"""AvroSerializer and AvroDeserializer: the wire format, one registry call per subject or id, resolution."""

import json

from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from twlog.avro.client import RegistryError
from twlog.avro.schema import AvroSchema
from twlog.avro.serde import AvroDecodeError, AvroDeserializer, AvroSerializer, encode
from twlog.avro.wire import frame, unframe

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"},
                                                   {"name": "age", "type": "int", "default": -1}]}


class FakeRegistry:
    """A registry in memory; with C{later}, each answer is a Deferred fired by the test."""

    def __init__(self, later: bool = False) -> None:
        self.later = later
        self.schemas: dict[int, str] = {}
        self.calls: list[tuple] = []
        self.pending: list[tuple[Deferred, object]] = []

    def _answer(self, value):
        if not self.later:
            if isinstance(value, Exception):
                raise value
            return value
        d: Deferred = Deferred()
        self.pending.append((d, value))
        return d

    def fire(self) -> None:
        for d, value in self.pending:
            d.errback(value) if isinstance(value, Exception) else d.callback(value)
        self.pending = []

    def register(self, subject: str, schema: str):
        self.calls.append(("register", subject))
        for schema_id, text in self.schemas.items():
            if text == schema:
                return self._answer(schema_id)
        schema_id = len(self.schemas) + 1
        self.schemas[schema_id] = schema
        return self._answer(schema_id)

    def schema(self, schema_id: int):
        self.calls.append(("schema", schema_id))
        if schema_id not in self.schemas:
            return self._answer(RegistryError(f"Schema {schema_id} not found", 404, 40403))
        return self._answer(self.schemas[schema_id])


class SerializerTests(SynchronousTestCase):
    def test_wire_format_and_subject(self) -> None:
        """The value in Avro after the id registered under <topic>-value; the registry asked once per subject."""
        registry = FakeRegistry()
        serialize = AvroSerializer(registry, V1)
        payload = serialize("users", {"name": "ann"})
        schema_id, body = unframe(payload)
        self.assertEqual((schema_id, bytes(body)), (1, b"\x06ann"))  # zig-zag length 3, then the bytes
        serialize("users", {"name": "bob"})
        serialize("admins", {"name": "cy"})
        self.assertEqual(registry.calls, [("register", "users-value"), ("register", "admins-value")])

    def test_waits_in_order(self) -> None:
        """While the first registration is on its way, later values wait behind it and come out in order."""
        registry = FakeRegistry(later=True)
        serialize = AvroSerializer(registry, V1)
        results: list[bytes] = []
        for name in ("a", "b", "c"):
            serialize("t", {"name": name}).addCallback(results.append)
        self.assertEqual((results, len(registry.calls)), ([], 1))
        registry.fire()
        self.assertEqual([bytes(unframe(r)[1]) for r in results], [b"\x02a", b"\x02b", b"\x02c"])
        self.assertIsInstance(serialize("t", {"name": "d"}), bytes)  # cached now

    def test_registry_error_fails_every_waiting_value(self) -> None:
        registry = FakeRegistry(later=True)
        registry.register = lambda subject, schema: registry._answer(RegistryError("down"))
        serialize = AvroSerializer(registry, V1)
        first, second = serialize("t", {"name": "a"}), serialize("t", {"name": "b"})
        registry.fire()
        self.failureResultOf(first, RegistryError)
        self.failureResultOf(second, RegistryError)

    def test_value_not_fitting(self) -> None:
        with self.assertRaises(ValueError) as raised:
            AvroSerializer(FakeRegistry(), V1)("t", {"name": 5})
        self.assertIn("does not fit the Avro schema", str(raised.exception))


class DeserializerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.registry = FakeRegistry()
        self.v1 = self.registry.register("s", json.dumps(V1, separators=(",", ":")))
        self.v2 = self.registry.register("s", json.dumps(V2, separators=(",", ":")))
        self.registry.calls.clear()

    def test_each_in_its_own_schema(self) -> None:
        """Without a reader schema each message decodes with its writer's; each id is asked once."""
        deserialize = AvroDeserializer(self.registry)
        old = frame(self.v1, encode(AvroSchema.parse(V1), {"name": "ann"}))
        new = frame(self.v2, encode(AvroSchema.parse(V2), {"name": "bob", "age": 3}))
        self.assertEqual(deserialize("t", old), {"name": "ann"})
        self.assertEqual(deserialize("t", new), {"name": "bob", "age": 3})
        self.assertEqual(deserialize("t", old), {"name": "ann"})
        self.assertEqual(self.registry.calls, [("schema", self.v1), ("schema", self.v2)])

    def test_resolved_into_reader(self) -> None:
        """With a reader schema, older data resolves into it (the added field gets its default)."""
        deserialize = AvroDeserializer(self.registry, reader=V2)
        old = frame(self.v1, encode(AvroSchema.parse(V1), {"name": "ann"}))
        self.assertEqual(deserialize("t", old), {"name": "ann", "age": -1})

    def test_later_answer(self) -> None:
        registry = FakeRegistry(later=True)
        registry.schemas[7] = json.dumps(V1)
        d = AvroDeserializer(registry)("t", frame(7, b"\x02a"))
        self.assertNoResult(d)
        registry.fire()
        self.assertEqual(self.successResultOf(d), {"name": "a"})

    def test_undecodable(self) -> None:
        deserialize = AvroDeserializer(self.registry)
        self.assertRaises(AvroDecodeError, deserialize, "t", b"plain text")
        self.assertRaises(AvroDecodeError, deserialize, "t", frame(self.v1, b"\x0a"))  # a string cut short
        self.assertRaises(RegistryError, deserialize, "t", frame(99, b""))


class SucceedTests(SynchronousTestCase):
    def test_deferred_registry_answer_already_fired(self) -> None:
        """A registry answering with an already-fired Deferred (a client's cache) gives a fired Deferred."""
        registry = FakeRegistry()
        registry.register = lambda subject, schema: succeed(4)
        d = AvroSerializer(registry, V1)("t", {"name": "a"})
        self.assertEqual(unframe(self.successResultOf(d))[0], 4)
