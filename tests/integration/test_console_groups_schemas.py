"""The console's schemas API against a real `twlog registry` (a subprocess on a real broker and ZooKeeper), and
its banner when the registry is gone."""

from __future__ import annotations

import json

from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, readBody

from tests.integration.groups import start_brokers
from tests.integration.test_schema_registry import USER_V1, USER_V2, http, schema_body, start_registry
from tests.integration.zookeeper import connect
from twlog.console.app import make_site
from twlog.console.context import ConsoleContext


class ConsoleSchemasTests(TestCase):
    timeout = 120

    async def get(self, path: str) -> tuple[int, dict]:
        response = await Agent(reactor).request(b"GET", f"http://127.0.0.1:{self.port}{path}".encode())
        return response.code, json.loads(await readBody(response))

    async def test_subjects_versions_diff_and_a_registry_gone(self) -> None:
        zk = await connect(self)
        await start_brokers(self, zk.hosts, 1, partitions=1)
        process, transport, url = await start_registry(self, "--zookeeper", zk.hosts)
        for schema in (USER_V1, USER_V2):
            status, _, answer = await deferToThread(http, "POST", f"{url}/subjects/users-value/versions",
                                                    schema_body(schema))
            self.assertEqual(status, 200, answer)
        await deferToThread(http, "PUT", f"{url}/config/users-value", b'{"compatibility": "FULL"}')
        await deferToThread(http, "POST", f"{url}/subjects/clicks-value/versions", schema_body(USER_V1))
        context = ConsoleContext(zk=zk, zookeeper=zk.hosts, reactor=reactor, registry_url=url)
        port = reactor.listenTCP(0, make_site(context), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.port = port.getHost().port

        status, listed = await self.get("/api/schemas")
        self.assertEqual(status, 200, listed)
        self.assertEqual([(s["subject"], s["versions"], s["latest_id"], s["compatibility"])
                          for s in listed["subjects"]],
                         [("clicks-value", [1], 1, "BACKWARD"), ("users-value", [1, 2], 2, "FULL")])
        status, subject = await self.get("/api/schemas/users-value")
        self.assertEqual([(v["version"], json.loads(v["schema"])) for v in subject["versions"]],
                         [(1, USER_V1), (2, USER_V2)])
        status, diff = await self.get("/api/schemas/users-value/diff?from=1&to=2")
        self.assertEqual(status, 200, diff)
        self.assertIn('"name": "age",', [line["text"].strip() for line in diff["lines"] if line["op"] == "+"])
        status, missing = await self.get("/api/schemas/nosuch")
        self.assertEqual((status, missing["error"]), (404, "subject 'nosuch' does not exist in the schema registry"))

        transport.signalProcess("TERM")
        await process.ended
        status, gone = await self.get("/api/schemas")
        self.assertEqual((status, gone["unreachable"]), (503, [f"schema registry {url}"]))
        self.assertIn(f"cannot reach the schema registry at {url}", gone["error"])
