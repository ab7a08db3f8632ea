"""The registry's HTTP face: Confluent's paths, JSON shapes, status codes, error codes and content type."""

from __future__ import annotations

import json
from io import BytesIO
from types import SimpleNamespace

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from tests.schema_registry.support import FakeJournal, RestCalls, Topic
from twlog.schema_registry.core import SchemaRegistry
from twlog.schema_registry.web import LimitedRequest, RegistryResource

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"},
                                                   {"name": "age", "type": "int", "default": 0}]}
BAD = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"},
                                                    {"name": "email", "type": "string"}]}


def body(schema: dict) -> bytes:
    return json.dumps({"schema": json.dumps(schema)}).encode()


class WebTests(RestCalls, SynchronousTestCase):
    def test_register_and_read(self) -> None:
        self.assertEqual(self.call("POST", "/subjects/u-value/versions", body(V1)), (200, {"id": 1}))
        self.assertEqual(self.call("POST", "/subjects/u-value/versions", body(V1)), (200, {"id": 1}))
        self.assertEqual(self.call("POST", "/subjects/u-value/versions", body(V2)), (200, {"id": 2}))
        self.assertEqual(self.call("POST", "/subjects/other/versions", body(V1)), (200, {"id": 1}))
        self.assertEqual(len(self.topic.records), 3)  # the repeat wrote nothing
        self.assertEqual(self.call("GET", "/subjects"), (200, ["other", "u-value"]))
        self.assertEqual(self.call("GET", "/subjects/u-value/versions"), (200, [1, 2]))
        status, latest = self.call("GET", "/subjects/u-value/versions/latest")
        self.assertEqual((latest["subject"], latest["version"], latest["id"]), ("u-value", 2, 2))
        self.assertEqual(json.loads(latest["schema"]), V2)
        self.assertEqual(self.call("GET", "/subjects/u-value/versions/1/schema"), (200, V1))
        self.assertEqual(json.loads(self.call("GET", "/schemas/ids/2")[1]["schema"]), V2)
        self.assertEqual(self.call("GET", "/schemas/ids/1/versions"),
                         (200, [{"subject": "other", "version": 1}, {"subject": "u-value", "version": 1}]))
        self.assertEqual(self.call("GET", "/schemas/ids/1/subjects"), (200, ["other", "u-value"]))
        self.assertEqual(self.call("GET", "/schemas/types"), (200, ["AVRO"]))
        found = self.call("POST", "/subjects/u-value", body(V1))[1]
        self.assertEqual((found["version"], found["id"]), (1, 1))

    def test_compatibility(self) -> None:
        self.call("POST", "/subjects/u/versions", body(V1))
        status, error = self.call("POST", "/subjects/u/versions", body(BAD))
        self.assertEqual((status, error["error_code"]), (409, 409))  # Confluent up to 8.1.1 (docs/registry.md)
        self.assertRegex(error["message"], r'^Schema being registered is incompatible with an earlier schema for '
                                           r'subject "u", details: \[.*email.*\]$')
        self.assertEqual(self.call("POST", "/compatibility/subjects/u/versions/latest", body(V2)),
                         (200, {"is_compatible": True}))
        status, answer = self.call("POST", "/compatibility/subjects/u/versions/1?verbose=true", body(BAD))
        self.assertFalse(answer["is_compatible"])
        self.assertIn("email", answer["messages"][0])
        self.assertEqual(self.call("POST", "/compatibility/subjects/u/versions", body(V2)),
                         (200, {"is_compatible": True}))

    def test_config(self) -> None:
        self.assertEqual(self.call("GET", "/config"), (200, {"compatibilityLevel": "BACKWARD"}))
        self.assertEqual(self.call("PUT", "/config/u", b'{"compatibility": "NONE"}'), (200, {"compatibility": "NONE"}))
        self.assertEqual(self.call("GET", "/config/u"), (200, {"compatibilityLevel": "NONE"}))
        self.assertEqual(self.call("GET", "/config/v")[1]["error_code"], 40408)
        self.assertEqual(self.call("GET", "/config/v?defaultToGlobal=true"), (200, {"compatibilityLevel": "BACKWARD"}))
        self.call("POST", "/subjects/u/versions", body(V1))
        self.assertEqual(self.call("POST", "/subjects/u/versions", body(BAD))[0], 200)  # NONE: anything goes
        self.assertEqual(self.call("DELETE", "/config/u"), (200, {"compatibilityLevel": "NONE"}))
        self.assertEqual(self.call("PUT", "/config", b'{"compatibility": "full"}')[1],
                         {"error_code": 42203, "message": "Invalid compatibility level. Valid values are none, "
                          "backward, forward, full, backward_transitive, forward_transitive, and full_transitive"})

    def test_delete(self) -> None:
        self.call("POST", "/subjects/u/versions", body(V1))
        self.call("POST", "/subjects/u/versions", body(V2))
        self.assertEqual(self.call("DELETE", "/subjects/u/versions/1?permanent=true"), (404, {
            "error_code": 40407, "message": "Subject 'u' Version 1 was not deleted first before being permanently "
                                            "deleted"}))
        self.assertEqual(self.call("DELETE", "/subjects/u/versions/1"), (200, 1))
        self.assertEqual(self.call("DELETE", "/subjects/u/versions/1"), (404, {
            "error_code": 40406, "message": "Subject 'u' Version 1 was soft deleted.Set permanent=true to delete "
                                            "permanently"}))
        self.assertEqual(self.call("GET", "/subjects/u/versions"), (200, [2]))
        self.assertEqual(self.call("DELETE", "/subjects/u?permanent=true"), (404, {
            "error_code": 40405, "message": "Subject 'u' was not deleted first before being permanently deleted"}))
        self.assertEqual(self.call("DELETE", "/subjects/u"), (200, [1, 2]))
        self.assertEqual(self.call("DELETE", "/subjects/u"), (404, {
            "error_code": 40404, "message": "Subject 'u' was soft deleted.Set permanent=true to delete permanently"}))
        self.assertEqual(self.call("GET", "/subjects/u/versions")[1]["error_code"], 40401)
        self.assertEqual(self.call("GET", "/subjects?deleted=true"), (200, ["u"]))
        self.assertEqual(self.call("DELETE", "/subjects/u?permanent=true"), (200, [1, 2]))
        self.assertEqual(self.call("GET", "/subjects?deleted=true"), (200, []))
        self.assertEqual(self.call("GET", "/schemas/ids/1"), (404, {"error_code": 40403,  # no version holds it
                                                                   "message": "Schema 1 not found"}))

    def test_errors(self) -> None:
        """Each bad request: Confluent's status and error code, and a message."""
        self.call("POST", "/subjects/u/versions", body(V1))
        for method, path, data, expected in [
            ("POST", "/subjects/u/versions", b"{", (400, 400)),
            ("POST", "/subjects/u/versions", b'{"schema": 5}', (422, 422)),
            ("POST", "/subjects/u/versions", b'{"schema": "{\\"type\\": \\"nope\\"}"}', (422, 42201)),
            ("POST", "/subjects/u/versions", b'{"schema": "{}", "schemaType": "PROTOBUF"}', (422, 42201)),
            ("GET", "/subjects/x/versions", b"", (404, 40401)),
            ("GET", "/subjects/u/versions/2", b"", (404, 40402)),
            ("GET", "/subjects/u/versions/0", b"", (422, 42202)),
            ("GET", "/subjects/u/versions/latest!", b"", (422, 42202)),
            ("GET", "/schemas/ids/5", b"", (404, 40403)),
            ("GET", "/schemas/ids/five", b"", (404, 40403)),
            ("POST", "/subjects/u", body(V2), (404, 40403)),
            ("POST", "/subjects/x", body(V1), (404, 40401)),
            ("GET", "/nowhere", b"", (404, 404)),
            ("PATCH", "/subjects", b"", (405, 405)),
        ]:
            status, error = self.call(method, path, data)
            self.assertEqual((status, error["error_code"]), expected, (method, path))
            self.assertIsInstance(error["message"], str)

    def test_store_down(self) -> None:
        """A twlog cluster that refuses connections: reads are answered from memory, writes 500 (50001) naming why."""
        self.call("POST", "/subjects/u/versions", body(V1))
        self.topic.down = True
        status, error = self.call("POST", "/subjects/u/versions", body(V2))
        self.assertEqual((status, error["error_code"]), (500, 50001))
        self.assertEqual(error["message"], "Error in the backend data store (twlog topic twlog-schemas): cannot "
                                           "connect to 127.0.0.1:9092: Connection refused")
        self.assertEqual(self.call("GET", "/subjects"), (200, ["u"]))  # answered at once: DummyRequest has no clock
        self.assertEqual(self.call("GET", "/schemas/ids/1/schema"), (200, V1))
        self.assertEqual(self.call("GET", "/subjects/v/versions")[1]["error_code"], 40401)

    def test_store_timeout(self) -> None:
        """A write the cluster never acknowledges is answered 50002 after the registry's timeout."""
        journal = FakeJournal(self.topic)
        journal.hold = True
        registry = SchemaRegistry(journal, reactor=self.clock, timeout_s=5)
        request = DummyRequest([])
        request.method, request.path, request.content = b"POST", b"/subjects/u/versions", BytesIO(body(V1))
        request.channel = SimpleNamespace(site=SimpleNamespace(max_body_bytes=1024))
        self.assertIs(RegistryResource(registry).render(request), NOT_DONE_YET)
        self.clock.advance(4.9)
        self.assertFalse(request.finished)
        self.clock.advance(0.1)
        self.assertEqual((request.responseCode, json.loads(b"".join(request.written))),
                         (500, {"error_code": 50002, "message": "Operation timed out: the twlog cluster did not "
                                "answer within 5 s (--request-timeout)"}))


class LimitTests(SynchronousTestCase):
    def test_body_beyond_the_limit_is_dropped(self) -> None:
        """The body is kept up to the limit only; past it the request is marked, and answered 413."""
        request = LimitedRequest.__new__(LimitedRequest)
        request.channel = SimpleNamespace(site=SimpleNamespace(max_body_bytes=10))
        request.content = BytesIO()
        request.handleContentChunk(b"x" * 8)
        self.assertFalse(request.too_large)
        request.handleContentChunk(b"x" * 8)
        self.assertTrue(request.too_large)
        self.assertEqual(request.content.getvalue(), b"x" * 8)
        request.too_large = True
        request.method, request.path = b"POST", b"/subjects/u/versions"
        resource = RegistryResource(SchemaRegistry(FakeJournal(Topic()), reactor=Clock()))
        request.responseHeaders = DummyRequest([]).responseHeaders
        codes = []
        request.setResponseCode = codes.append
        answer = json.loads(resource.render(request))
        self.assertEqual((codes, answer["error_code"]), ([413], 413))
