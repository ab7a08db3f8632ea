"""The console's groups API on a real port, against real brokers in a real ZooKeeper, compared with `twlog groups`:
the same lag, and a reset (preview, then apply) that commits what `twlog groups reset` would."""

from __future__ import annotations

import json

from twisted.internet import reactor
from twisted.internet.defer import succeed
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, readBody
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from tests.integration.broker import wait_until
from tests.integration.groups import produce_all, registered, run_twlog, start_brokers
from tests.integration.zookeeper import connect
from twlog.console.api_groups import start_sampling
from twlog.console.app import make_site
from twlog.console.context import ConsoleContext
from twlog.coord import paths


@implementer(IBodyProducer)
class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.length = len(data)

    def startProducing(self, consumer):
        consumer.write(self.data)
        return succeed(None)

    def stopProducing(self) -> None:
        pass

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass


def _table(out: str) -> dict[str, tuple[int, int]]:
    """`groups reset`'s table: partition -> (offset, new offset)."""
    rows = {}
    for line in out.splitlines()[1:]:
        topic, partition, offset, new = line.split()
        rows[partition] = (int(offset), int(new))
    return rows


class ConsoleGroupsTests(TestCase):
    timeout = 120

    async def api(self, method: str, path: str, body=None) -> tuple[int, dict]:
        headers = Headers({b"X-Twlog-Console": [b"1"]} if method != "GET" else {})
        producer = _Body(json.dumps(body).encode()) if body is not None else None
        response = await Agent(reactor).request(method.encode(), f"http://127.0.0.1:{self.port}{path}".encode(),
                                                headers, producer)
        return response.code, json.loads(await readBody(response))

    async def committed(self, zk, name: str) -> int:
        return int((await zk.get(paths.offset_path("g", "clicks", name)))[0])

    async def test_lag_and_reset_as_twlog_groups(self) -> None:
        zk = await connect(self)
        cluster = await start_brokers(self, zk.hosts, 2, partitions=2)
        await produce_all(cluster, "clicks", 10)
        await registered(zk, "clicks", cluster)
        status, _, err = await run_twlog("consume", "-z", zk.hosts, "-g", "g", "-t", "clicks", "-n", "25",
                                         "-o", "earliest")
        self.assertEqual(status, 0, err)
        await cluster[0].produce("clicks", 0, [b"x" * 50] * 3)
        context = ConsoleContext(zk=zk, zookeeper=zk.hosts, reactor=reactor)
        port = reactor.listenTCP(0, make_site(context), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.port = port.getHost().port

        status, out, err = await run_twlog("groups", "-z", zk.hosts, "-g", "g", "--json")
        self.assertEqual(status, 0, err)
        [expected] = json.loads(out)
        code, answer = await self.api("GET", "/api/groups/g")
        self.assertEqual(code, 200, answer)
        counted = [p.pop("lag_messages") for p in answer["partitions"]]
        self.assertEqual((answer.pop("live"), answer.pop("problems")), (False, []))
        self.assertEqual(answer, expected)
        self.assertEqual(sum(counted), 43 - 25)  # every message not consumed yet, counted on the brokers
        self.assertGreater(expected["lag_bytes"], 0)

        sampler = start_sampling(context)
        self.addCleanup(sampler.stop)
        await wait_until(lambda: "g" in sampler.latest, timeout_s=10)
        code, listed = await self.api("GET", "/api/groups")
        self.assertEqual((code, [(r["group"], r["lag_bytes"]) for r in listed["groups"]]),
                         (200, [("g", expected["lag_bytes"])]))

        for cli_target, api_target in ((["--shift", "-2"], {"shift": -2}), (["--to", "earliest"], "earliest"),
                                       (["--shift", "4"], {"shift": 4})):
            status, out, err = await run_twlog("groups", "reset", "-z", zk.hosts, "-g", "g", "-t", "clicks",
                                               *cli_target, "--dry-run")
            self.assertEqual(status, 0, err)
            would = _table(out)
            code, preview = await self.api("POST", "/api/groups/g/reset",
                                           {"topic": "clicks", "to": api_target, "dry_run": True})
            self.assertEqual(code, 200, preview)
            self.assertEqual({r["partition"]: (r["offset"], r["new_offset"]) for r in preview["rows"]}, would)
            code, applied = await self.api("POST", "/api/groups/g/reset",
                                           {"topic": "clicks", "to": api_target, "dry_run": False})
            self.assertEqual((code, applied["applied"]), (200, True), applied)
            self.assertEqual({name: await self.committed(zk, name) for name in would},
                             {name: new for name, (_, new) in would.items()})
