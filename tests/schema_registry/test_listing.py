"""Listings, metadata and rules, configuration and hard delete, as Confluent's REST reference documents them
(its OpenAPI spec, core/generated/swagger-ui/schema-registry-api-spec.yaml, and the resources it is made from)."""

from __future__ import annotations

import json

from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from tests.schema_registry.support import FakeJournal, RestCalls
from twlog.schema_registry.core import SchemaRegistry
from twlog.schema_registry.web import RegistryResource

RULES = {"domainRules": [{"name": "encryptPII", "kind": "TRANSFORM", "type": "ENCRYPT", "mode": "WRITEREAD",
                          "tags": ["PII"], "params": {"encrypt.kek.name": "k"}}]}
META = {"properties": {"owner": "Bob Jones", "email": "bob@acme.com"}}


def body(schema: object, **extras: object) -> bytes:
    return json.dumps({"schema": json.dumps(schema), **extras}).encode()


class ListingTests(RestCalls, SynchronousTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.assertEqual(self.call("PUT", "/config", b'{"compatibility": "NONE"}')[0], 200)
        for subject, schema in [("orders-value", "string"), ("orders-value", "long"), ("orders-value", "int"),
                                ("payments-value", "string"), ("pay-key", "bytes")]:
            self.assertEqual(self.call("POST", f"/subjects/{subject}/versions", body(schema))[0], 200)
        self.assertEqual(self.call("DELETE", "/subjects/orders-value/versions/1"), (200, 1))
        self.assertEqual(self.call("DELETE", "/subjects/pay-key"), (200, [1]))

    def test_subjects(self) -> None:
        """GET /subjects: subjectPrefix, deleted, deletedOnly (which wins), offset, limit (ignored if negative)."""
        for query, expected in [
            ("", ["orders-value", "payments-value"]),
            ("?deleted=true", ["orders-value", "pay-key", "payments-value"]),
            ("?deletedOnly=true", ["orders-value", "pay-key"]),  # (each has a soft-deleted version)
            ("?deleted=true&deletedOnly=true", ["orders-value", "pay-key"]),
            ("?subjectPrefix=pay", ["payments-value"]),
            ("?subjectPrefix=pay&deleted=true", ["pay-key", "payments-value"]),
            ("?deleted=true&offset=1", ["pay-key", "payments-value"]),
            ("?deleted=true&offset=1&limit=1", ["pay-key"]),
            ("?limit=-1", ["orders-value", "payments-value"]),
            ("?limit=0", ["orders-value", "payments-value"]),
            ("?offset=5", []),
        ]:
            self.assertEqual(self.call("GET", "/subjects" + query), (200, expected), query)

    def test_versions(self) -> None:
        """GET /subjects/{s}/versions: deleted, deletedOnly, deletedAsNegative, offset, limit."""
        for query, expected in [
            ("", [2, 3]), ("?deleted=true", [1, 2, 3]), ("?deletedOnly=true", [1]),
            ("?deletedAsNegative=true", [-1, 2, 3]), ("?deleted=true&offset=1&limit=1", [2]), ("?limit=1", [2]),
        ]:
            self.assertEqual(self.call("GET", "/subjects/orders-value/versions" + query), (200, expected), query)
        self.assertEqual(self.call("GET", "/subjects/pay-key/versions"),
                         (404, {"error_code": 40401, "message": "Subject 'pay-key' not found."}))
        self.assertEqual(self.call("GET", "/subjects/pay-key/versions?deletedOnly=true"), (200, [1]))
        self.assertEqual(self.call("GET", "/subjects/orders-value/versions?limit=many"),
                         (404, {"error_code": 404, "message": "HTTP 404 Not Found"}))

    def test_schemas(self) -> None:
        """GET /schemas: every subject version as the Schema object (subject, version, id, schema), by subject and
        version; subjectPrefix, deleted, latestOnly, offset, limit."""
        status, listed = self.call("GET", "/schemas")
        self.assertEqual(status, 200)
        self.assertEqual(listed, [{"subject": "orders-value", "version": 2, "id": 2, "schema": '"long"'},
                                  {"subject": "orders-value", "version": 3, "id": 3, "schema": '"int"'},
                                  {"subject": "payments-value", "version": 1, "id": 1, "schema": '"string"'}])
        for query, expected in [
            ("?deleted=true", [("orders-value", 1), ("orders-value", 2), ("orders-value", 3), ("pay-key", 1),
                               ("payments-value", 1)]),
            ("?latestOnly=true", [("orders-value", 3), ("payments-value", 1)]),
            ("?latestOnly=true&deleted=true", [("orders-value", 3), ("pay-key", 1), ("payments-value", 1)]),
            ("?subjectPrefix=orders&offset=1", [("orders-value", 3)]),
            ("?limit=1", [("orders-value", 2)]),
            ("?limit=5000", [("orders-value", 2), ("orders-value", 3), ("payments-value", 1)]),
        ]:
            status, listed = self.call("GET", "/schemas" + query)
            self.assertEqual([(s["subject"], s["version"]) for s in listed], expected, query)

    def test_holders_of_an_id(self) -> None:
        """GET /schemas/ids/{id}/subjects and /versions: deleted, offset, limit."""
        self.assertEqual(self.call("GET", "/schemas/ids/1/subjects"), (200, ["payments-value"]))
        self.assertEqual(self.call("GET", "/schemas/ids/1/subjects?deleted=true"),
                         (200, ["orders-value", "payments-value"]))
        self.assertEqual(self.call("GET", "/schemas/ids/1/versions?deleted=true&offset=1"),
                         (200, [{"subject": "payments-value", "version": 1}]))
        self.assertEqual(self.call("GET", "/schemas/ids/1/subjects?deleted=true&limit=1"), (200, ["orders-value"]))

    def test_metadata_id(self) -> None:
        """GET /v1/metadata/id: ServerClusterId, the scope of the Kafka cluster (twlog's) and the registry's group."""
        self.assertEqual(self.call("GET", "/v1/metadata/id"), (200, {"scope": {"path": [], "clusters": {
            "kafka-cluster": "127.0.0.1:2181/twlog", "schema-registry-cluster": "schema-registry"}}}))
        self.assertEqual(self.call("GET", "/v1/metadata/other")[0], 404)


class RulesAndMetadataTests(RestCalls, SynchronousTestCase):
    def test_stored_and_returned(self) -> None:
        """A registration's metadata and ruleSet are kept, and every answer describing the schema carries them."""
        self.assertEqual(self.call("POST", "/subjects/s/versions", body("string", metadata=META, ruleSet=RULES)),
                         (200, {"id": 1}))
        expected = {"subject": "s", "version": 1, "id": 1, "schema": '"string"', "metadata": META, "ruleSet": RULES}
        self.assertEqual(self.call("GET", "/subjects/s/versions/latest"), (200, expected))
        self.assertEqual(self.call("GET", "/schemas/ids/1"), (200, {"schema": '"string"', "metadata": META,
                                                                   "ruleSet": RULES}))
        self.assertEqual(self.call("POST", "/subjects/s", body("string")), (200, expected))
        self.assertEqual(self.call("GET", "/schemas"), (200, [expected]))
        # Another registry process reading the topic sees them too.
        other = RegistryResource(SchemaRegistry(FakeJournal(self.topic), reactor=self.clock))
        self.assertEqual(self.call("GET", "/subjects/s/versions/1", resource=other), (200, expected))

    def test_latest_with_metadata(self) -> None:
        """GET /subjects/{s}/metadata?key=&value=: the latest version whose metadata properties hold the pairs."""
        self.call("PUT", "/config/s", b'{"compatibility": "NONE"}')
        self.call("POST", "/subjects/s/versions", body("string", metadata=META))
        self.call("POST", "/subjects/s/versions", body("long", metadata={"properties": {"owner": "Ann"}}))
        self.call("POST", "/subjects/s/versions", body("int"))  # (takes version 2's metadata)
        for query, version in [("key=owner&value=Bobby", None), ("key=owner&value=Bob Jones", 1),
                               ("key=owner&value=Bob Jones&key=email&value=bob@acme.com", 1),
                               ("key=owner&value=Ann", 3), ("", 3)]:
            status, found = self.call("GET", "/subjects/s/metadata?" + query)
            if version is None:
                self.assertEqual((status, found["error_code"]), (404, 40403), query)
            else:
                self.assertEqual((status, found["version"]), (200, version), query)
        self.assertEqual(self.call("GET", "/subjects/t/metadata?key=owner&value=Ann")[1]["error_code"], 40401)

    def test_not_an_object(self) -> None:
        status, error = self.call("POST", "/subjects/s/versions", body("string", ruleSet=["x"]))
        self.assertEqual((status, error["error_code"]), (422, 422))
        self.assertIn("ruleSet", error["message"])
        self.assertEqual(self.topic.records, [])


class IdentityTests(RestCalls, SynchronousTestCase):
    def test_forms_of_one_schema_get_one_id(self) -> None:
        """"string" and {"type":"string"} are one schema (Avro's canonical form), as are key order and spacing;
        the answers give it in canonical form."""
        forms = [json.dumps({"schema": '"string"'}), json.dumps({"schema": '{"type":"string"}'}),
                 json.dumps({"schema": ' { "type" :  "string" } '})]
        for subject, data in zip("abc", forms, strict=True):
            self.assertEqual(self.call("POST", f"/subjects/{subject}/versions", data.encode()), (200, {"id": 1}))
        record = {"type": "record", "name": "R", "fields": [{"name": "f", "type": "int", "default": 0}]}
        shuffled = {"fields": [{"default": 0, "type": {"type": "int"}, "name": "f"}], "name": "R", "type": "record"}
        self.assertEqual(self.call("POST", "/subjects/r/versions", body(record)), (200, {"id": 2}))
        self.assertEqual(self.call("POST", "/subjects/r2/versions", body(shuffled)), (200, {"id": 2}))
        self.assertEqual(self.call("GET", "/schemas/ids/1"), (200, {"schema": '"string"'}))
        self.assertEqual(self.call("POST", "/subjects/a", forms[2].encode())[1]["id"], 1)

    def test_replay_maps_old_ids_in_one_line(self) -> None:
        """A topic written before: {"type":"string"} got 1 and "string" got 2.  A registry reading it answers 1
        for both subjects, still serves id 2, and says so in one log line."""
        self.topic.records += [{"op": "register", "subject": "a", "version": 1, "id": 1, "schema": '{"type":"string"}'},
                               {"op": "register", "subject": "b", "version": 1, "id": 2, "schema": '"string"'}]
        with capturedLogs() as events:
            self.assertEqual(self.call("GET", "/subjects/b/versions/1")[1]["id"], 1)
        self.assertEqual(self.call("GET", "/schemas/ids/2"), (200, {"schema": '"string"'}))
        lines = [formatEvent(e) for e in events if "canonical" in formatEvent(e)]
        self.assertEqual(lines, ["twlog-schemas: 1 id(s) written before schema identity was canonical name a schema "
                                 "registered earlier with another id: each still answers, as the first id (2->1)"])
        self.assertEqual(self.call("POST", "/subjects/c/versions", body("int")), (200, {"id": 3}))


class ConfigAndDeleteTests(RestCalls, SynchronousTestCase):
    def test_put_config_without_compatibility(self) -> None:
        """Confluent's ConfigUpdateRequest has every field optional: one left out leaves that setting alone."""
        self.assertEqual(self.call("PUT", "/config/s", b"{}"), (200, {}))
        self.assertEqual(self.call("PUT", "/config/s", b'{"compatibility": "FULL"}'), (200, {"compatibility": "FULL"}))
        self.assertEqual(self.call("PUT", "/config/s", b'{"normalize": false}'), (200, {"compatibility": "FULL"}))
        self.assertEqual(self.call("PUT", "/config", b"{}"), (200, {"compatibility": "BACKWARD"}))
        status, error = self.call("PUT", "/config/s", b'{"compatibilityGroup": "app"}')
        self.assertEqual((status, error["error_code"]), (422, 422))
        self.assertIn("compatibilityGroup", error["message"])
        self.assertEqual(self.call("GET", "/config/s"), (200, {"compatibilityLevel": "FULL"}))

    def test_hard_delete_removes_the_id_from_every_lookup(self) -> None:
        self.call("POST", "/subjects/s/versions", body("string"))
        self.call("DELETE", "/subjects/s")
        self.assertEqual(self.call("GET", "/schemas/ids/1")[0], 200)  # soft: still served
        self.call("DELETE", "/subjects/s?permanent=true")
        for path in ("/schemas/ids/1", "/schemas/ids/1/schema", "/schemas/ids/1/subjects", "/schemas/ids/1/versions"):
            gone = {"error_code": 40403, "message": "Schema 1 not found"}
            self.assertEqual(self.call("GET", path), (404, gone), path)
        self.assertEqual(self.call("GET", "/schemas?deleted=true"), (200, []))
