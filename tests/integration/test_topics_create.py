"""`twlog topics create` against two real brokers registered in a real ZooKeeper."""

from __future__ import annotations

import json
import socket

from twisted.trial.unittest import TestCase

from tests.integration.groups import start_brokers
from tests.integration.test_cli import one_line, twlog
from tests.integration.zookeeper import connect
from twlog.coord import paths
from twlog.coord.zk import NoNodeError


class TopicsCreateTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.zk = await connect(self)
        # num_partitions 4: a topic created with 2 must keep 2, not what a first write would give.
        self.brokers = await start_brokers(self, self.zk.hosts, 2, partitions=4)
        self.addresses = [f"127.0.0.1:{b.port}" for b in self.brokers]

    async def registered_counts(self, topic: str) -> dict[str, bytes]:
        try:
            children = await self.zk.children(paths.broker_topic_path(topic))
        except NoNodeError:
            return {}
        return {c: (await self.zk.get(paths.broker_topic_path(topic, int(c))))[0] for c in children}

    async def test_create_through_one_broker(self) -> None:
        """Through one address: every broker gets N partitions, registered in ZooKeeper, and a producer given that
        one address spreads its messages over all 2N."""
        status, out, err = await twlog("topics", "create", "-b", self.addresses[0], "--topic", "clicks",
                                       "--partitions", "2")
        self.assertEqual((status, err), (0, b""), err)
        self.assertEqual(out, b"created clicks: 2 partitions on each of 2 brokers (4 in all)\n")
        self.assertEqual(await self.registered_counts("clicks"), {"0": b"2", "1": b"2"})
        lines = b"".join(b"m%d\n" % i for i in range(200))
        status, _, err = await twlog("produce", "-b", self.addresses[0], "-t", "clicks", "--batch-size", "1",
                                     stdin=lines)
        self.assertEqual(status, 0, err)
        for broker in self.brokers:
            ends = [await broker.offsets("clicks", p) for p in range(2)]
            self.assertTrue(all(end > 0 for end in ends), (broker.broker_id, ends))
        status, out, _ = await twlog("topics", "-b", self.addresses[1], "--json")
        (listed,) = [t for t in json.loads(out) if t["topic"] == "clicks"]
        self.assertEqual(sorted(p["partition"] for p in listed["partitions"]), ["0-0", "0-1", "1-0", "1-1"])

    async def test_create_through_zookeeper_and_again(self) -> None:
        """Through ZooKeeper, with --json; the same count again changes nothing; another count is one line, exit 1."""
        status, out, err = await twlog("topics", "create", "-z", self.zk.hosts, "-t", "views", "-n", "1", "--json")
        self.assertEqual(status, 0, err)
        answer = json.loads(out)
        self.assertEqual((answer["partitions_per_broker"], answer["partitions"]), (1, 2))
        self.assertEqual([b["broker"] for b in answer["brokers"]], [0, 1])
        self.assertEqual(await self.registered_counts("views"), {"0": b"1", "1": b"1"})
        status, out, err = await twlog("topics", "create", "-z", self.zk.hosts, "-t", "views", "-n", "1")
        self.assertEqual(status, 0, err)
        self.assertIn(b"already exists", out)
        status, out, err = await twlog("topics", "create", "-b", self.addresses[1], "-t", "views", "-n", "3")
        self.assertEqual((status, out), (1, b""))
        one_line(self, err)
        self.assertIn(b"already exists with 1 partitions on broker 0", err)

    async def test_usage_errors_are_one_line(self) -> None:
        """A bad name or count is one line and exit 2; nothing is created."""
        for args in (["-t", "a b", "-n", "2"], ["-t", "ok", "-n", "0"], ["-t", "ok", "-n", "5000"], ["-t", "ok"]):
            status, out, err = await twlog("topics", "create", "-b", self.addresses[0], *args)
            self.assertEqual(status, 2, (args, err))
            one_line(self, err)
        self.assertEqual(await self.zk.children(paths.BROKER_TOPICS), [])

    async def test_unreachable_broker_is_named(self) -> None:
        """A registered broker that does not answer is named in one line, exit 1, and nothing is created."""
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            dead = probe.getsockname()[1]
        await self.zk.create(paths.broker_id_path(7), f"127.0.0.1-1:127.0.0.1:{dead}".encode(), makepath=True)
        status, out, err = await twlog("topics", "create", "-z", self.zk.hosts, "-t", "clicks", "-n", "2")
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(f"broker 7 at 127.0.0.1:{dead}".encode(), err)
        self.assertIn(b"nothing was created", err)
        self.assertEqual(await self.registered_counts("clicks"), {})
        status, _, err = await twlog("topics", "create", "-b", f"127.0.0.1:{dead}", "-t", "clicks", "-n", "2")
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(f"127.0.0.1:{dead}".encode(), err)
