"""Parsing schemas, and Confluent's compatibility levels over Avro's resolution rules."""

from twisted.trial.unittest import SynchronousTestCase

from twlog.avro.schema import COMPATIBILITY_LEVELS, AvroSchema, InvalidSchema, incompatibilities


def record(*fields: dict) -> AvroSchema:
    return AvroSchema.parse({"type": "record", "name": "R", "fields": list(fields)})


NAME = {"name": "name", "type": "string"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
AGE = {"name": "age", "type": "int"}
EMAIL = {"name": "email", "type": "string"}


class ParseTests(SynchronousTestCase):
    def test_text_ignores_whitespace(self) -> None:
        """One schema, one text: whitespace does not make another schema (the registry's identity)."""
        spaced = AvroSchema.parse('{ "type" : "record", "name": "R",\n "fields": [] }')
        self.assertEqual(spaced.text, '{"fields":[],"name":"R","type":"record"}')
        self.assertEqual(spaced, AvroSchema.parse({"type": "record", "name": "R", "fields": []}))

    def test_one_text_per_schema(self) -> None:
        """Avro's rules for equal schemas (those of its Parsing Canonical Form): a primitive's long form is its
        short form, key order and whitespace do not count, in nested types as at the top."""
        for forms in [['"string"', '{"type":"string"}', ' { "type" : "string" } '],
                      ['{"type":"array","items":"long"}', '{"items":{"type":"long"},"type":"array"}'],
                      ['{"type":"record","name":"R","namespace":"n","fields":[{"name":"a","type":"int","default":1}]}',
                       '{"fields":[{"default":1,"type":{"type":"int"},"name":"a"}],"namespace":"n","name":"R",'
                       '"type":"record"}']]:
            self.assertEqual(len({AvroSchema.parse(text).text for text in forms}), 1, forms)
        self.assertEqual(AvroSchema.parse('{"type":"string"}').text, '"string"')

    def test_what_parsing_canonical_form_drops_still_counts(self) -> None:
        """A default, a doc, a logical type are part of the schema (as in Confluent's registry, whose canonical
        string is Java's Schema.toString()): schemas differing in one are two texts, and the text keeps it."""
        plain = record(AGE)
        for other in [record(AGE_DEFAULT), record({**AGE, "doc": "years"}),
                      AvroSchema.parse({"type": "long", "logicalType": "timestamp-millis"})]:
            self.assertNotEqual(other.text, plain.text)
        self.assertIn('"default":0', record(AGE_DEFAULT).text)
        self.assertEqual(AvroSchema.parse(record(AGE_DEFAULT).text), record(AGE_DEFAULT))

    def test_invalid(self) -> None:
        for text, why in [("{nope", "not JSON"), ('{"type": "record"}', "invalid Avro schema"),
                          ('"unknown_type"', "invalid Avro schema"),
                          ('{"type": "enum", "name": "E", "symbols": [1]}', "invalid Avro schema"),
                          ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}',
                           "invalid Avro schema")]:
            with self.assertRaises(InvalidSchema) as raised:
                AvroSchema.parse(text)
            self.assertIn(why, str(raised.exception), text)


class CompatibilityTests(SynchronousTestCase):
    def test_levels_are_confluents(self) -> None:
        self.assertEqual(set(COMPATIBILITY_LEVELS), {"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD",
                                                     "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"})

    def test_backward(self) -> None:
        """BACKWARD: the new schema reads the latest's data; a field added needs a default, one removed is fine."""
        v1 = record(NAME)
        self.assertEqual(incompatibilities("BACKWARD", record(NAME, AGE_DEFAULT), [v1]), [])
        self.assertEqual(incompatibilities("BACKWARD", record(), [v1]), [])
        problems = incompatibilities("BACKWARD", record(NAME, AGE), [v1])
        self.assertEqual(len(problems), 1)
        self.assertIn("reader_field_missing_default_value", problems[0])

    def test_forward(self) -> None:
        """FORWARD: the latest reads the new schema's data; removing a field without a default is refused."""
        v1 = record(NAME, AGE)
        self.assertEqual(incompatibilities("FORWARD", record(NAME, AGE, EMAIL), [v1]), [])
        self.assertNotEqual(incompatibilities("FORWARD", record(NAME), [v1]), [])

    def test_full(self) -> None:
        v1 = record(NAME)
        self.assertEqual(incompatibilities("FULL", record(NAME, AGE_DEFAULT), [v1]), [])
        self.assertNotEqual(incompatibilities("FULL", record(NAME, AGE), [v1]), [])  # not backward
        self.assertNotEqual(incompatibilities("FULL", record(), [record(NAME, AGE)]), [])  # not forward

    def test_promotion(self) -> None:
        """Avro's promotions: an int written is read as a long, not the other way."""
        ints, longs = record({"name": "n", "type": "int"}), record({"name": "n", "type": "long"})
        self.assertEqual(incompatibilities("BACKWARD", longs, [ints]), [])
        self.assertNotEqual(incompatibilities("BACKWARD", ints, [longs]), [])

    def test_transitive(self) -> None:
        """Non-transitive levels check the latest version only; _TRANSITIVE ones every earlier version."""
        v1 = record(NAME, AGE)
        v2 = record(NAME)  # drops age: backward compatible with v1
        v3 = record(NAME, {"name": "age", "type": "string", "default": ""})  # reads v2, not v1 (int is not string)
        self.assertEqual(incompatibilities("BACKWARD", v3, [v1, v2]), [])
        problems = incompatibilities("BACKWARD_TRANSITIVE", v3, [v1, v2])
        self.assertEqual(len(problems), 1)
        self.assertIn("version 1", problems[0])

    def test_none_and_first(self) -> None:
        self.assertEqual(incompatibilities("NONE", record(NAME, AGE), [record(EMAIL)]), [])
        self.assertEqual(incompatibilities("FULL", record(NAME, AGE), []), [])

    def test_unknown_level(self) -> None:
        self.assertRaises(ValueError, incompatibilities, "SIDEWAYS", record(NAME), [record(NAME)])
