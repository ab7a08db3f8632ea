"""Schema references, rule set checks and the returned text, as Confluent's REST reference documents them (its
OpenAPI spec, core/generated/swagger-ui/schema-registry-api-spec.yaml: C{references} of
C{RegisterSchemaRequest}, C{GET /subjects/{s}/versions/{v}/referencedby}, errors 42206 and 42210 of Errors.java)."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from tests.schema_registry.support import RestCalls
from twlog.schema_registry.core import SchemaRegistry
from twlog.schema_registry.state import RegistryState
from twlog.schema_registry.web import RegistryResource

ADDRESS = {"namespace": "acme", "fields": [{"type": "string", "name": "street"}], "name": "Address", "type": "record"}
PERSON = {"type": "record", "name": "Person", "namespace": "acme",
          "fields": [{"name": "home", "type": "acme.Address"}, {"name": "work", "type": ["null", "Address"],
                                                                 "default": None}]}
REF = [{"name": "acme.Address", "subject": "address", "version": 1}]


def body(schema: object, **extras: object) -> bytes:
    return json.dumps({"schema": json.dumps(schema), **extras}).encode()


class TextTests(RestCalls, SynchronousTestCase):
    def test_as_confluent_returns_it(self) -> None:
        """Keys in Java Avro's order (type, name, namespace, doc, fields; a field's name, type, doc, default)."""
        schema = {"fields": [{"default": "x", "type": "string", "doc": "d", "name": "f1"}], "doc": "a record",
                  "namespace": "n", "name": "test", "type": "record"}
        self.assertEqual(self.call("POST", "/subjects/t/versions", body(schema)), (200, {"id": 1}))
        text = ('{"type":"record","name":"test","namespace":"n","doc":"a record","fields":[{"name":"f1",'
                '"type":"string","doc":"d","default":"x"}]}')
        self.assertEqual(self.call("GET", "/schemas/ids/1"), (200, {"schema": text}))
        self.assertEqual(self.call("GET", "/subjects/t/versions/1")[1]["schema"], text)
        self.assertEqual(self.call("POST", "/subjects/t", body(json.loads(text)))[1]["id"], 1)

    def test_ids_kept_for_older_records(self) -> None:
        """A record written with the keys sorted (before this text) keeps its id and is answered in Java's order."""
        self.topic.records.append({"op": "register", "subject": "t", "version": 1, "id": 7,
                                   "schema": '{"fields":[],"name":"R","type":"record"}'})
        self.assertEqual(self.call("GET", "/schemas/ids/7"),
                         (200, {"schema": '{"type":"record","name":"R","fields":[]}'}))
        self.assertEqual(self.call("POST", "/subjects/t/versions", body({"type": "record", "name": "R", "fields": []})),
                         (200, {"id": 7}))


class ReferenceTests(RestCalls, SynchronousTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.assertEqual(self.call("POST", "/subjects/address/versions", body(ADDRESS)), (200, {"id": 1}))

    def test_register_and_read(self) -> None:
        self.assertEqual(self.call("POST", "/subjects/person/versions", body(PERSON, references=REF)), (200, {"id": 2}))
        text = ('{"type":"record","name":"Person","namespace":"acme","fields":[{"name":"home","type":"Address"},'
                '{"name":"work","type":["null","Address"],"default":null}]}')
        self.assertEqual(self.call("GET", "/schemas/ids/2"), (200, {"schema": text, "references": REF}))
        self.assertEqual(self.call("GET", "/subjects/person/versions/latest"),
                         (200, {"subject": "person", "version": 1, "id": 2, "schema": text, "references": REF}))
        self.assertEqual(self.call("POST", "/subjects/person", body(PERSON, references=REF))[1]["id"], 2)
        self.assertEqual(self.call("POST", "/subjects/person/versions", body(PERSON, references=REF)), (200, {"id": 2}))
        self.assertEqual(self.call("GET", "/subjects/address/versions/1/referencedby"), (200, [2]))
        self.assertEqual(self.call("GET", "/subjects/person/versions/1/referencedby"), (200, []))
        self.assertEqual(self.call("POST", "/compatibility/subjects/person/versions/latest",
                                   body(PERSON, references=REF)), (200, {"is_compatible": True}))
        # a replay (another registry process) resolves them the same
        other = RegistryResource(SchemaRegistry(type(self.resource.registry.journal)(self.topic), reactor=self.clock))
        self.assertEqual(self.call("GET", "/schemas/ids/2", resource=other), (200, {"schema": text, "references": REF}))

    def test_latest_version_recorded(self) -> None:
        """A reference to version -1 is recorded as the subject's latest version, as Confluent records it."""
        latest = [{"name": "acme.Address", "subject": "address", "version": -1}]
        self.assertEqual(self.call("POST", "/subjects/person/versions", body(PERSON, references=latest)),
                         (200, {"id": 2}))
        self.assertEqual(self.call("GET", "/schemas/ids/2")[1]["references"], REF)

    def test_unresolved(self) -> None:
        """Without its reference the schema does not parse; a reference to no version: 42201 naming it."""
        status, answer = self.call("POST", "/subjects/person/versions", body(PERSON))
        self.assertEqual((status, answer["error_code"]), (422, 42201))
        self.assertIn("acme.Address", answer["message"])
        missing = [{"name": "acme.Address", "subject": "address", "version": 9}]
        self.assertEqual(self.call("POST", "/subjects/person/versions", body(PERSON, references=missing)),
                         (422, {"error_code": 42201, "message": 'Invalid schema of type AVRO, details: No schema '
                                                                'reference found for subject "address" and version 9'}))
        self.assertEqual(self.call("POST", "/subjects/person/versions", body(PERSON, references=[{"name": "x"}]))[1]
                         ["error_code"], 42201)
        self.assertEqual(self.call("POST", "/subjects/p/versions", body("string", schemaType="PROTOBUF")),
                         (422, {"error_code": 42201, "message": "Invalid schema type PROTOBUF"}))

    def test_delete_referenced(self) -> None:
        """A referenced version is not deleted: 42206 (soft or permanent, the subject or the version)."""
        self.call("POST", "/subjects/person/versions", body(PERSON, references=REF))
        refused = (422, {"error_code": 42206, "message": "One or more references exist to the schema "
                                                         "{magic=1,keytype=SCHEMA,subject=address,version=1}."})
        self.assertEqual(self.call("DELETE", "/subjects/address/versions/1"), refused)
        self.assertEqual(self.call("DELETE", "/subjects/address"), refused)
        self.assertEqual(self.call("DELETE", "/subjects/person"), (200, [1]))
        self.assertEqual(self.call("GET", "/subjects/address/versions/1/referencedby"), (200, []))
        self.assertEqual(self.call("GET", "/subjects/address/versions/1/referencedby?deleted=true"), (200, [2]))
        self.assertEqual(self.call("DELETE", "/subjects/address"), (200, [1]))
        self.assertEqual(self.call("DELETE", "/subjects/address?permanent=true"), refused)
        self.assertEqual(self.call("DELETE", "/subjects/person?permanent=true"), (200, [1]))
        self.assertEqual(self.call("DELETE", "/subjects/address?permanent=true"), (200, [1]))


class RuleSetTests(RestCalls, SynchronousTestCase):
    def test_invalid_rule_sets(self) -> None:
        """42210 with Confluent's RuleSet.validate() messages."""
        def rule(**fields: object) -> dict:
            return {"name": "checkSsn", "kind": "CONDITION", "type": "CEL", "mode": "WRITE", **fields}

        for rule_set, message in [
            ({"domainRules": [rule(name=None)]}, "Missing rule name"),
            ({"domainRules": [rule(name="9lives")]}, "Illegal initial character in rule name: 9lives"),
            ({"domainRules": [rule(name="a b")]}, "Illegal character in rule name: a b"),
            ({"domainRules": [rule(type=None)]}, "Missing rule type"),
            ({"domainRules": [rule(), rule()]}, "Found rule with duplicate name 'checkSsn'"),
            ({"domainRules": [rule(mode="UPGRADE")]}, "Domain rules can only be WRITE, READ, WRITEREAD"),
            ({"migrationRules": [rule()]}, "Migration rules can only be UPGRADE, DOWNGRADE, UPDOWN"),
            ({"domainRules": [rule(onFailure="ERROR,NONE")]}, "Multiple actions only valid with WRITEREAD and UPDOWN"),
        ]:
            self.assertEqual(self.call("POST", "/subjects/s/versions", body("string", ruleSet=rule_set)),
                             (422, {"error_code": 42210, "message": message}), rule_set)
        status, answer = self.call("POST", "/subjects/s/versions", body("string", ruleSet={"domainRules": [
            rule(kind="CHECK")]}))
        self.assertEqual((status, answer["error_code"]), (422, 42210))
        self.assertEqual(self.topic.records, [])

    def test_valid_rule_set(self) -> None:
        """Defaults as Confluent's Rule: kind TRANSFORM, mode WRITEREAD (a domain rule), several actions with it."""
        rule_set = {"domainRules": [{"name": "encryptPII", "type": "ENCRYPT", "onFailure": "ERROR,NONE"}],
                    "migrationRules": [{"name": "up", "kind": "TRANSFORM", "type": "JSONATA", "mode": "UPGRADE"}]}
        self.assertEqual(self.call("POST", "/subjects/s/versions", body("string", ruleSet=rule_set)), (200, {"id": 1}))
        self.assertEqual(self.call("GET", "/schemas/ids/1"), (200, {"schema": '"string"', "ruleSet": rule_set}))


class ReplayTests(SynchronousTestCase):
    def test_delete_of_a_version_referenced_meanwhile(self) -> None:
        """Two registry processes: a delete record that lands after a registration referencing the version is
        refused in every process (its writer plans again, and answers 42206)."""
        state = RegistryState()
        register = {"op": "register", "subject": "address", "version": 1, "id": 1, "schema": json.dumps(ADDRESS)}
        person = {"op": "register", "subject": "person", "version": 1, "id": 2, "schema": json.dumps(PERSON),
                  "references": REF}
        delete = {"op": "delete", "subject": "address", "version": 1, "permanent": False}
        self.assertEqual([state.apply(r) for r in (register, person, delete)], [True, True, False])
        self.assertFalse(state.subjects["address"][1].deleted)

