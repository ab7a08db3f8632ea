"""Java Avro's Schema.toString(), the text Confluent's registry returns (AvroSchema.canonicalString()):
each case is a schema as written (from Confluent's repository: its .avsc files, README and REST reference
examples, and edge cases) and the text Java Avro 1.12.1 (org.apache.avro.Schema.Parser().parse(s).toString())
printed for it: tests/avro/javatext_cases.json)."""

from __future__ import annotations

import json
import pathlib

from twisted.trial.unittest import SynchronousTestCase

from twlog.avro.javatext import java_text
from twlog.avro.schema import AvroSchema

#: Each: a schema as written, and the text Java Avro printed for it.
CASES = [(case["written"], case["java"]) for case in json.loads(
    (pathlib.Path(__file__).parent / "javatext_cases.json").read_text(encoding="utf-8"))]


class JavaTextTests(SynchronousTestCase):
    def test_as_java_writes_it(self) -> None:
        for written, java in CASES:
            self.assertEqual(AvroSchema.parse(written).confluent, java, written)

    def test_a_fixpoint(self) -> None:
        """Parsed again, the text is itself (what the registry stores is what it answers after a replay)."""
        for _, java in CASES:
            self.assertEqual(AvroSchema.parse(java).confluent, java)

    def test_referenced_types_by_name(self) -> None:
        """Named types of referenced schemas are written by name, as Java's toString(referencedSchemas, false)."""
        address = AvroSchema.parse('{"type":"record","name":"Address","namespace":"x","fields":[]}')
        person = AvroSchema.parse('{"type":"record","name":"Person","namespace":"x","fields":[{"name":"home",'
                                  '"type":"x.Address"},{"name":"work","type":["null","Address"]}]}',
                                  [address.confluent])
        self.assertEqual(person.confluent, '{"type":"record","name":"Person","namespace":"x","fields":[{"name":"home",'
                         '"type":"Address"},{"name":"work","type":["null","Address"]}]}')
        self.assertEqual(java_text(person.avro, {"x.Address"}), person.confluent)
        self.assertEqual(person.defines, frozenset({"x.Person"}))
        self.assertNotIn("Address\",\"fields", person.text)
