"""RegistryState: records applied deterministically; conflicting records refused in every process alike."""

from twisted.trial.unittest import SynchronousTestCase

from twlog.avro.schema import AvroSchema
from twlog.schema_registry.errors import RestError
from twlog.schema_registry.state import RegistryState

A = '{"type":"enum","name":"A","symbols":["X"]}'
B = '{"type":"enum","name":"B","symbols":["X"]}'


def register(subject: str, version: int, schema_id: int, schema: str) -> dict:
    return {"op": "register", "subject": subject, "version": version, "id": schema_id, "schema": schema}


class ApplyTests(SynchronousTestCase):
    def test_first_record_wins(self) -> None:
        """Two writers gave id 1 (or version 1) to different schemas: the one first in the topic keeps it."""
        state = RegistryState()
        self.assertTrue(state.apply(register("a", 1, 1, A)))
        self.assertFalse(state.apply(register("b", 1, 1, B)))  # id 1 is A's
        self.assertFalse(state.apply(register("a", 1, 2, B)))  # a's version 1 is taken
        self.assertFalse(state.apply(register("c", 1, 3, A)))  # A has id 1, not 3
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
        state.apply({"op": "delete", "subject": "a", "version": None, "permanent": True})
        self.assertEqual(state.subject_names(deleted=True), [])
        self.assertEqual(state.schema(1), A)
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
        with self.assertRaises(RestError) as raised:
            state.lookup("a", AvroSchema.parse(B))
        self.assertEqual(raised.exception.code, 40403)
