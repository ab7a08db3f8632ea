"""RegistryState: records applied deterministically; conflicting records refused in every process alike."""

from twisted.trial.unittest import SynchronousTestCase

from twlog.avro.schema import AvroSchema
from twlog.schema_registry.errors import RestError
from twlog.schema_registry.listing import Listing, holders
from twlog.schema_registry.state import RegistryState

A = AvroSchema.parse('{"type":"enum","name":"A","symbols":["X"]}').confluent
B = AvroSchema.parse('{"type":"enum","name":"B","symbols":["X"]}').confluent


def register(subject: str, version: int, schema_id: int, schema: str) -> dict:
    return {"op": "register", "subject": subject, "version": version, "id": schema_id, "schema": schema}


class ApplyTests(SynchronousTestCase):
    def test_first_record_wins(self) -> None:
        """Two writers gave id 1 (or version 1) to different schemas: the one first in the topic keeps it."""
        state = RegistryState()
        self.assertTrue(state.apply(register("a", 1, 1, A)))
        self.assertFalse(state.apply(register("b", 1, 1, B)))  # id 1 is A's
        self.assertFalse(state.apply(register("a", 1, 2, B)))  # a's version 1 is taken
        self.assertTrue(state.apply(register("c", 1, 1, A)))  # the same schema under another subject: same id
        self.assertEqual((state.schemas, state.subject_names()), ({1: A}, ["a", "c"]))

    def test_malformed_records_are_ignored(self) -> None:
        state = RegistryState()
        for record in [None, [], {"op": "?"}, {"op": "register"}, register("a", 1, 0, A), register("a", "1", 1, A),
                       {"op": "config", "subject": None, "compatibility": "SIDEWAYS"}, {"op": "delete", "subject": "x"},
                       register("a", 1, 1, '{"type": "nothing"}')]:
            self.assertFalse(state.apply(record), record)
        self.assertEqual((state.schemas, state.subjects, state.global_level), ({}, {}, "BACKWARD"))

    def test_deletes(self) -> None:
        """A soft delete hides versions (their ids stay resolvable); a permanent one removes them."""
        state = RegistryState()
        state.apply(register("a", 1, 1, A))
        state.apply(register("a", 2, 2, B))
        state.apply({"op": "delete", "subject": "a", "version": 1, "permanent": False})
        self.assertEqual([v.version for v in state.versions("a")], [2])
        self.assertEqual([v.version for v in state.versions("a", deleted=True)], [1, 2])
        state.apply({"op": "delete", "subject": "a", "version": None, "permanent": False})
        self.assertEqual(state.subject_names(), [])
        self.assertEqual(state.subject_names(deleted=True), ["a"])
        self.assertEqual(state.schema(1), A)  # (soft-deleted: still served)
        state.apply({"op": "delete", "subject": "a", "version": None, "permanent": True})
        self.assertEqual(state.subject_names(deleted=True), [])
        with self.assertRaises(RestError) as raised:
            state.versions("a")
        self.assertEqual(raised.exception.code, 40401)

    def test_versions_go_on_after_a_soft_delete(self) -> None:
        state = RegistryState()
        state.apply(register("a", 1, 1, A))
        state.apply({"op": "delete", "subject": "a", "version": 1, "permanent": False})
        self.assertEqual(state.next_version("a"), 2)

    def test_config(self) -> None:
        state = RegistryState()
        state.apply({"op": "config", "subject": None, "compatibility": "FULL"})
        state.apply({"op": "config", "subject": "a", "compatibility": "NONE"})
        self.assertEqual((state.level("a"), state.level("b"), state.level(None)), ("NONE", "FULL", "FULL"))
        state.apply({"op": "config", "subject": "a", "compatibility": None})
        self.assertEqual(state.level("a"), "FULL")


class PlanTests(SynchronousTestCase):
    def test_register(self) -> None:
        """New: the next id and version; already under the subject: its id and nothing to write."""
        state = RegistryState()
        schema = AvroSchema.parse(A)
        schema_id, record = state.plan_register("a", schema)
        self.assertEqual((schema_id, record), (1, register("a", 1, 1, A)))
        state.apply(record)
        self.assertEqual(state.plan_register("a", schema), (1, None))
        self.assertEqual(state.plan_register("b", schema), (1, register("b", 1, 1, A)))

    def test_incompatible(self) -> None:
        state = RegistryState()
        state.apply(register("a", 1, 1, '{"type":"record","name":"R","fields":[{"name":"x","type":"int"}]}'))
        with self.assertRaises(RestError) as raised:
            state.plan_register("a", AvroSchema.parse(
                '{"type":"record","name":"R","fields":[{"name":"x","type":"int"},{"name":"y","type":"int"}]}'))
        self.assertEqual((raised.exception.status, raised.exception.code), (409, 409))
        self.assertIn("reader_field_missing_default_value", raised.exception.message)

    def test_lookup(self) -> None:
        state = RegistryState()
        state.apply(register("a", 1, 1, A))
        self.assertEqual(state.describe("a", state.lookup("a", AvroSchema.parse(A))),
                         {"subject": "a", "version": 1, "id": 1, "schema": A})
        spaced = AvroSchema.parse('{ "symbols" : ["X"], "name": "A", "type": "enum" }')
        self.assertEqual(state.lookup("a", spaced).schema_id, 1)
        with self.assertRaises(RestError) as raised:
            state.lookup("a", AvroSchema.parse(B))
        self.assertEqual(raised.exception.code, 40403)


STRING, LONG = '"string"', '{"type": "long"}'
RULES = {"domainRules": [{"name": "encrypt", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD",
                          "tags": ["PII"]}]}
META = {"properties": {"owner": "team-a"}}


class IdentityTests(SynchronousTestCase):
    """One schema, one id: its canonical text with its metadata and rules."""

    def test_every_form_of_a_schema_gets_one_id(self) -> None:
        state = RegistryState()
        for subject, text in [("a", STRING), ("b", '{"type":"string"}'), ("c", ' { "type" : "string" } ')]:
            schema_id, record = state.plan_register(subject, AvroSchema.parse(text))
            self.assertEqual(schema_id, 1)
            self.assertTrue(state.apply(record))
        self.assertEqual(state.schemas, {1: '"string"'})

    def test_records_written_before_map_onto_the_first_id(self) -> None:
        """A topic written before identity was canonical: {"type":"string"} as 1, "string" as 4.  The replay
        gives both subjects id 1, id 4 still answers (the same schema), and the pair is reported once."""
        state = RegistryState()
        for record in [register("a", 1, 1, '{"type":"string"}'), register("x", 1, 2, LONG),
                       register("x", 2, 3, '{"type":"int"}'), register("b", 1, 4, STRING),
                       register("c", 1, 4, STRING)]:
            self.assertTrue(state.apply(record), record)
        self.assertEqual(state.merged, [(4, 1)])
        self.assertEqual([state.version(s, None).schema_id for s in "abc"], [1, 1, 1])
        self.assertEqual((state.schema(4), state.schema(1)), ('"string"', '"string"'))
        self.assertEqual(holders(state, 4, Listing(), subjects=True), ["a", "b", "c"])
        self.assertEqual(state.plan_register("d", AvroSchema.parse(STRING))[0], 1)
        self.assertEqual(state.next_id(), 5)  # (4 keeps its meaning: never given to another schema)
        self.assertFalse(state.apply(register("e", 1, 4, LONG)))

    def test_permanent_delete_removes_the_id(self) -> None:
        """Once no version holds an id, soft-deleted or not, no lookup answers it; registered again, the schema
        gets its id back, and no other schema ever gets it."""
        state = RegistryState()
        for record in [register("a", 1, 1, STRING), register("b", 1, 1, STRING), register("b", 2, 2, LONG)]:
            state.apply(record)
        for subject in "ab":
            state.apply({"op": "delete", "subject": subject, "version": 1, "permanent": False})
        state.apply({"op": "delete", "subject": "a", "version": 1, "permanent": True})
        self.assertEqual(state.schema(1), STRING)  # (b's soft-deleted version still holds it)
        state.apply({"op": "delete", "subject": "b", "version": 1, "permanent": True})
        for lookup in (state.schema, state.schema_body, state.parsed, lambda n: holders(state, n, Listing())):
            with self.assertRaises(RestError) as raised:
                lookup(1)
            self.assertEqual((raised.exception.code, raised.exception.message), (40403, "Schema 1 not found"))
        self.assertEqual(state.plan_register("c", AvroSchema.parse(STRING))[0], 1)
        self.assertEqual(state.plan_register("c", AvroSchema.parse('"int"'))[0], 3)

    def test_metadata_and_rules_are_stored_and_part_of_identity(self) -> None:
        state = RegistryState()
        schema = AvroSchema.parse(STRING)
        schema_id, record = state.plan_register("a", schema, {"ruleSet": RULES, "metadata": META})
        self.assertEqual((schema_id, record["ruleSet"], record["metadata"]), (1, RULES, META))
        state.apply(record)
        self.assertEqual(state.describe("a", state.version("a", None)),
                         {"subject": "a", "version": 1, "id": 1, "schema": STRING, "ruleSet": RULES, "metadata": META})
        self.assertEqual(state.schema_body(1), {"schema": STRING, "ruleSet": RULES, "metadata": META})
        self.assertEqual(state.plan_register("a", schema), (1, None))  # (without them: the version that has them)
        self.assertEqual(state.plan_register("a", schema, {"ruleSet": RULES, "metadata": META}), (1, None))
        other_id, other = state.plan_register("b", schema, {"metadata": {"properties": {"owner": "team-b"}}})
        self.assertEqual(other_id, 2)  # (other metadata: another schema, as in Confluent)
        state.apply(other)
        with self.assertRaises(RestError):
            state.lookup("b", schema, {"metadata": META})
        self.assertEqual(state.lookup("b", schema).schema_id, 2)

    def test_a_new_version_inherits_metadata_and_rules(self) -> None:
        """As in Confluent: a version registered without metadata or ruleSet takes the latest version's."""
        state = RegistryState()
        state.apply(state.plan_register("a", AvroSchema.parse(STRING), {"ruleSet": RULES})[1])
        state.apply({"op": "config", "subject": "a", "compatibility": "NONE"})
        _, record = state.plan_register("a", AvroSchema.parse(LONG))
        self.assertEqual(record["ruleSet"], RULES)

    def test_malformed_metadata_is_refused(self) -> None:
        self.assertFalse(RegistryState().apply({**register("a", 1, 1, STRING), "ruleSet": ["no"]}))
