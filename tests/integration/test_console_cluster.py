"""`twlog console`'s cluster API against a real ZooKeeper and brokers: the brokers publish their metrics URL, the
console reads topics, brokers and their metrics, and the message browser lands on the right message for an offset
and for a time."""

from __future__ import annotations

import json
import time

from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, readBody

from tests.integration.broker import start_broker, wait_until
from tests.integration.shared_local import shared_local
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.console.service import ConsoleService
from twlog.coord import paths
from twlog.coord.endpoints import metrics_url_of
from twlog.coord.zkserver import free_port
from twlog.producer import Producer

PAD = b"." * 284


class ConsoleClusterTests(TestCase):
    timeout = 120

    async def get(self, path: str) -> tuple[int, dict]:
        response = await Agent(reactor).request(b"GET", f"{self.url}api/{path}".encode())
        return response.code, json.loads(await readBody(response))

    async def start(self, hosts: str, **options) -> ConsoleService:
        service = ConsoleService(zookeeper=hosts, port=0, reactor=reactor, **options)
        service.startService()
        await service.listening
        self.addCleanup(service.stopService)
        self.url = service.url
        return service

    async def test_browse_a_real_cluster(self) -> None:
        hosts = fresh_connect_string()
        zk = await connect(self, hosts)
        # segment_bytes 1024: each batch below (3 messages of 310 bytes) fills one segment, and the next one rolls.
        broker = await start_broker(self, zookeeper=hosts, broker_id=3, metrics_port=0, segment_bytes=1024,
                                    flush_interval_ms=10, num_partitions=1)
        value, _ = await zk.get(paths.broker_endpoints_path(3))
        self.assertEqual(metrics_url_of(value), broker.metrics_url)
        producer = Producer(f"127.0.0.1:{broker.broker.port}", ack="flushed")
        self.addCleanup(producer.close)
        await producer.send("clicks", [b"first-%010d" % i + PAD for i in range(3)], partition_index=0)
        await deferLater(reactor, 0.05, lambda: None)
        between_ms = int(time.time() * 1000)
        await deferLater(reactor, 0.05, lambda: None)
        await producer.send("clicks", [b"later-%010d" % i + PAD for i in range(3)], partition_index=0)

        console = await self.start(hosts, sample_interval_s=1.0)
        await wait_until(lambda: console.reader.view is not None and console.reader.view.ready
                         and console.reader.view.layout().partitions.get("clicks"), timeout_s=20)
        status, topics = await self.get("topics")
        self.assertEqual((status, [t["name"] for t in topics["topics"]]), (200, ["clicks"]))
        status, topic = await self.get("topics/clicks")
        (partition,) = topic["partitions"]
        self.assertEqual((partition["partition"], partition["first_offset"], partition["leader"]), ("3-0", 0, 3))
        end = partition["last_offset"]

        status, page = await self.get("topics/clicks/messages?partition=3-0&limit=2")
        self.assertEqual([m["value"][:16] for m in page["messages"]], ["first-0000000000", "first-0000000001"])
        second = page["messages"][1]["offset"]
        status, page = await self.get(f"topics/clicks/messages?partition=3-0&offset={second}&limit=1")
        self.assertEqual((status, page["messages"][0]["value"][:16]), (200, "first-0000000001"))
        status, refused = await self.get(f"topics/clicks/messages?partition=3-0&offset={second + 1}")
        self.assertEqual(status, 400)
        self.assertIn(f"the nearest message boundaries are {second} and", refused["error"])
        status, page = await self.get(f"topics/clicks/messages?partition=3-0&time={between_ms}&limit=1")
        self.assertEqual((status, page["messages"][0]["value"][:16]), (200, "later-0000000000"))
        status, page = await self.get("topics/clicks/messages?partition=3-0&newest=1")
        self.assertEqual([m["value"][:16] for m in page["messages"]], ["later-0000000002"])
        self.assertEqual(page["next_cursor"], f"3-0:{end}")

        async def sampled_twice() -> bool:
            return console.context.history.latest("broker.3.bytes_in") is not None

        deadline = reactor.seconds() + 20
        while not await sampled_twice() and reactor.seconds() < deadline:
            await deferLater(reactor, 0.2, lambda: None)
        status, brokers = await self.get("brokers")
        (row,) = brokers["brokers"]
        self.assertEqual((row["id"], row["alive"], row["metrics_url"]), (3, True, broker.metrics_url))
        self.assertIsNotNone(row["bytes_in_per_s"])
        self.assertGreaterEqual(row["connections"], 1)
        self.assertIsNotNone(row["request_latency_ms"]["p50"])
        self.assertEqual(console.context.history.latest("topic.clicks.size")[1], end)

    async def test_zookeeper_down(self) -> None:
        """Nothing listens at --zookeeper: the console serves at once, its API 503 naming ZooKeeper."""
        console = await self.start(f"127.0.0.1:{free_port()}", timeout_s=1.0)
        started = time.monotonic()
        status, answer = await self.get("overview")
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertEqual(status, 503)
        self.assertEqual(answer["unreachable"], [f"zookeeper {console.context.zookeeper}"])


class LocalConsoleTests(TestCase):
    timeout = 180

    async def test_twlog_local_console(self) -> None:
        """twlog local --console serves the console of its cluster, named in the banner."""
        port = free_port()
        banner = await shared_local("console", 1, "--console", "--console-port", str(port))
        self.assertIn(f"console:  http://127.0.0.1:{port}/", banner)
        deadline = reactor.seconds() + 30
        while True:
            response = await Agent(reactor).request(b"GET", f"http://127.0.0.1:{port}/api/overview".encode())
            answer = json.loads(await readBody(response))
            if response.code == 200 or reactor.seconds() > deadline:
                break
            await deferLater(reactor, 0.2, lambda: None)
        self.assertEqual(response.code, 200, answer)
        self.assertEqual([(b["id"], b["alive"]) for b in answer["brokers"]], [(0, True)])
