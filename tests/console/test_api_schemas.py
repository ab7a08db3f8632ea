"""The schemas' routes over HTTP, against a real registry resource over an in-memory journal (its answers as
the client gets them, without sockets)."""

from __future__ import annotations

import json
from io import BytesIO
from types import SimpleNamespace

from twisted.internet.defer import fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from tests.console.web import call
from tests.fakezk import FakeZooKeeper
from tests.schema_registry.support import FakeJournal, Topic
from twlog.avro.client import RegistryError
from twlog.console.api_schemas import REGISTRY, diff_lines
from twlog.console.app import make_site
from twlog.console.context import ConsoleContext
from twlog.schema_registry.core import SchemaRegistry
from twlog.schema_registry.web import RegistryResource

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"},
                                                   {"name": "age", "type": "int", "default": 0}]}


class InMemoryRegistry:
    """C{get(path)} as L{twlog.avro.client.RegistryClient.get} answers it, from a L{RegistryResource}."""

    def __init__(self) -> None:
        self.resource = RegistryResource(SchemaRegistry(FakeJournal(Topic()), reactor=Clock()))
        self.down = False
        self.url = "http://registry.test:8081"

    def request(self, method: str, path: str, body: bytes = b""):
        path, _, query = path.partition("?")
        request = DummyRequest([])
        request.method, request.path = method.encode(), path.encode()
        request.args = {}
        for key, value in (p.split("=") for p in query.split("&") if p):
            request.args.setdefault(key.encode(), []).append(value.encode())
        request.content = BytesIO(body)
        request.channel = SimpleNamespace(site=SimpleNamespace(max_body_bytes=1 << 20))
        result = self.resource.render(request)
        if result is NOT_DONE_YET:
            result = b"".join(request.written)
        return request.responseCode or 200, json.loads(result)

    def register(self, subject: str, schema: dict) -> None:
        status, _ = self.request("POST", f"/subjects/{subject}/versions", json.dumps({"schema": json.dumps(schema)})
                                 .encode())
        assert status == 200

    def get(self, path: str):
        if self.down:
            return fail(RegistryError(f"cannot reach the schema registry at {self.url}: Connection refused"))
        status, answer = self.request("GET", path)
        if status >= 300:
            return fail(RegistryError(f"schema registry at {self.url}: {answer['message']}", status,
                                      answer["error_code"]))
        return succeed(answer)


class SchemasApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        zk = FakeZooKeeper()
        zk.start()
        self.registry = InMemoryRegistry()
        self.context = ConsoleContext(zk=zk, zookeeper="fake:2181", reactor=Clock(), registry_url=self.registry.url)
        self.context.parts[REGISTRY] = self.registry
        self.site = make_site(self.context)
        for n in range(12):
            self.registry.register(f"s{n:02}-value", V1)
        self.registry.register("users-value", V1)
        self.registry.register("users-value", V2)
        self.registry.request("PUT", "/config/users-value", b'{"compatibility": "FULL"}')

    def get(self, path: str, status: int = 200):
        answer = call(self.site, "GET", path)
        self.assertEqual(answer.status, status, answer.body)
        return answer.json

    def test_list(self) -> None:
        listed = self.get("/api/schemas?filter=USERS")
        self.assertEqual(listed, {"total": 1, "offset": 0, "limit": 50, "problems": [], "subjects": [
            {"subject": "users-value", "versions": [1, 2], "latest_version": 2, "latest_id": 2,
             "compatibility": "FULL"}]})
        page = self.get("/api/schemas?limit=5&offset=10")
        self.assertEqual((page["total"], [s["subject"] for s in page["subjects"]]),
                         (13, ["s10-value", "s11-value", "users-value"]))
        self.assertEqual(page["subjects"][0]["compatibility"], "BACKWARD")  # (the global level)
        self.assertEqual(self.get("/api/schemas?order=desc&limit=1")["subjects"][0]["subject"], "users-value")

    def test_subject(self) -> None:
        answer = self.get("/api/schemas/users-value")
        self.assertEqual((answer["subject"], answer["compatibility"], answer["versions_left_out"]),
                         ("users-value", "FULL", 0))
        self.assertEqual([(v["version"], v["id"], json.loads(v["schema"])) for v in answer["versions"]],
                         [(1, 1, V1), (2, 2, V2)])

    def test_diff(self) -> None:
        answer = self.get("/api/schemas/users-value/diff?from=1&to=latest")
        self.assertEqual((answer["from"], answer["to"]), (1, 2))
        old = "\n".join(line["text"] for line in answer["lines"] if line["op"] != "+")
        new = "\n".join(line["text"] for line in answer["lines"] if line["op"] != "-")
        self.assertEqual((json.loads(old), json.loads(new)), (V1, V2))  # (the registry's form of the schemas)
        added = " ".join(line["text"].strip() for line in answer["lines"] if line["op"] == "+")
        self.assertIn('"name": "age"', added)
        self.assertNotIn('"name"', " ".join(line["text"] for line in answer["lines"] if line["op"] == "-"))
        unchanged = self.get("/api/schemas/users-value/diff?from=2&to=2")["lines"]
        self.assertEqual({line["op"] for line in unchanged}, {" "})

    def test_diff_lines(self) -> None:
        self.assertEqual(diff_lines(["a", "b", "c"], ["a", "x", "c", "d"]),
                         [{"op": " ", "text": "a"}, {"op": "-", "text": "b"}, {"op": "+", "text": "x"},
                          {"op": " ", "text": "c"}, {"op": "+", "text": "d"}])

    def test_bad_parameters_and_unknown_resources(self) -> None:
        for query, name in (("from=0&to=1", "from"), ("from=1", "to"), ("from=x&to=1", "from"),
                            ("from=1&to=-2", "to")):
            error = self.get(f"/api/schemas/users-value/diff?{query}", 400)["error"]
            self.assertTrue(error.startswith(f"parameter {name}: "), error)
        self.assertTrue(self.get("/api/schemas?limit=201", 400)["error"].startswith("parameter limit: "))
        self.assertEqual(self.get("/api/schemas/nosuch", 404)["error"],
                         "subject 'nosuch' does not exist in the schema registry")
        self.assertEqual(self.get("/api/schemas/users-value/diff?from=1&to=9", 404)["error"],
                         "version 9 of subject 'users-value' does not exist in the schema registry")

    def test_registry_unreachable_or_missing(self) -> None:
        self.registry.down = True
        answer = self.get("/api/schemas", 503)
        self.assertEqual(answer["unreachable"], ["schema registry http://registry.test:8081"])
        self.context.registry_url = None
        answer = self.get("/api/schemas", 503)
        self.assertEqual(answer, {"error": "no schema registry: start the console with --registry URL",
                                  "unreachable": ["schema registry (--registry URL)"]})
