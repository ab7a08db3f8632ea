"""twlog produce --avro-schema/--registry and twlog consume --registry: usage errors, and JSON lines out."""

import json
from argparse import Namespace

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.avro.schema import AvroSchema
from twlog.avro.serde import AvroDeserializer, encode
from twlog.avro.wire import frame
from twlog.cli import avro
from twlog.cli.common import UsageError
from twlog.cli.formats import message_formatter
from twlog.errors import TwlogError

SCHEMA = {"type": "record", "name": "U", "fields": [{"name": "name", "type": "string"},
                                                   {"name": "raw", "type": "bytes", "default": ""}]}


class UsageTests(SynchronousTestCase):
    def test_pairs(self) -> None:
        """--avro-schema needs --registry and, on produce, --registry needs --avro-schema; neither: no serializer."""
        self.assertIsNone(avro.serializer(Namespace(avro_schema=None, registry=None), Clock()))
        with self.assertRaises(UsageError) as raised:
            avro.serializer(Namespace(avro_schema="u.avsc", registry=None), Clock())
        self.assertIn("--avro-schema needs --registry URL", str(raised.exception))
        with self.assertRaises(UsageError) as raised:
            avro.serializer(Namespace(avro_schema=None, registry="http://r:8081"), Clock())
        self.assertIn("needs --avro-schema FILE", str(raised.exception))

    def test_bad_values(self) -> None:
        with self.assertRaises(UsageError) as raised:
            avro.deserializer(Namespace(registry="r:8081"), Clock())
        self.assertIn("http://", str(raised.exception))
        with self.assertRaises(UsageError) as raised:
            avro.serializer(Namespace(avro_schema=self.mktemp(), registry="http://r:8081"), Clock())
        self.assertIn("No such file", str(raised.exception))
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('{"type": "record"}')
        with self.assertRaises(TwlogError) as raised:
            avro.serializer(Namespace(avro_schema=path, registry="http://r:8081"), Clock())
        self.assertIn("invalid Avro schema", str(raised.exception))


class LineTests(SynchronousTestCase):
    def test_json_with_registry_nests_the_record(self) -> None:
        """consume --registry --json puts the decoded record in "value" as a JSON object, not an escaped string."""
        decode = avro.json_lines(AvroDeserializer(Namespace(schema=lambda schema_id: json.dumps(SCHEMA))))
        payload = frame(3, encode(AvroSchema.parse(SCHEMA), {"name": "ann", "raw": b"\x00\xff"}))
        line = message_formatter(Namespace(json=True, registry="http://r:8081"))("t", "0-1", 96, decode("t", payload))
        self.assertEqual(json.loads(line), {"topic": "t", "partition": "0-1", "offset": 96,
                                            "value": {"name": "ann", "raw": "AP8="}})
        plain = message_formatter(Namespace(json=True, registry=None))("t", "0-1", 96, b"text")
        self.assertEqual(json.loads(plain)["value"], "text")

    def test_json_lines(self) -> None:
        """Each decoded record is one line of JSON; bytes in base64."""
        self.assertIsNone(avro.deserializer(Namespace(registry=None), Clock()))
        decode = avro.json_lines(AvroDeserializer(Namespace(schema=lambda schema_id: json.dumps(SCHEMA))))
        payload = frame(3, encode(AvroSchema.parse(SCHEMA), {"name": "ann", "raw": b"\x00\xff"}))
        self.assertEqual(json.loads(decode("t", payload)), {"name": "ann", "raw": "AP8="})
        with self.assertRaises(TwlogError) as raised:
            decode("t", b"plain")
        self.assertIn("not Avro in Confluent's wire format", str(raised.exception))

    def test_line_errors(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            json.dump(SCHEMA, f)
        serialize = avro.serializer(Namespace(avro_schema=path, registry="http://r:8081"), Clock())
        with self.assertRaises(TwlogError) as raised:
            serialize("t", b"not json")
        self.assertIn("a line is not JSON", str(raised.exception))
        with self.assertRaises(TwlogError) as raised:
            serialize("t", b'{"name": 5}')
        self.assertIn("does not fit the Avro schema", str(raised.exception))
