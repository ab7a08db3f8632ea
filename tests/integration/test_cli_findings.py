"""The smaller findings of issue 20 against real brokers: each says what happened, in one line where it fails."""

from __future__ import annotations

import json
import os
import socket
import sys

from twisted.internet import reactor
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_cli import one_line, twlog
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.consumer.rebalance import encode_subscription
from twlog.coord import paths
from twlog.coord.probe import describe_answer

ETL_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "etl_parquet.py")


class OneBrokerTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.service = await start_broker(self, num_partitions=2, flush_interval_ms=20)
        self.broker = f"127.0.0.1:{self.service.broker.port}"
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "clicks", "-p", "0-0",
                                     stdin=b"a\nb\nc\n")
        self.assertEqual(status, 0, err)

    async def test_offsets_before_every_segment(self) -> None:
        """offsets --time older than every segment says so, with the earliest offset, and exits 1."""
        status, out, err = await twlog("offsets", "-b", self.broker, "-t", "clicks", "-p", "0-0",
                                       "--time", "1970-01-01T00:00")
        self.assertEqual((status, out), (1, b""))
        one_line(self, err)
        self.assertIn(b"no segment of partition 0-0 of 'clicks' was last modified before 1970-01-01T00:00:00 UTC",
                      err)
        self.assertIn(b"its earliest offset is 0 (--time earliest)", err)
        status, out, err = await twlog("offsets", "-b", self.broker, "-t", "clicks", "--time", "1970-01-01T00:00")
        self.assertEqual((status, out), (1, b""))
        self.assertIn(b"the earliest offsets are 0-0: 0, 0-1: 0", err)

    async def test_consume_from_inside_a_message(self) -> None:
        """consume -o with an offset inside a message names the nearest message boundaries (as groups reset
        does), in one line; an offset on a boundary reads from there."""
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "clicks", "-p", "0-0", "-o", "13")
        self.assertEqual((status, out), (1, b""))
        one_line(self, err)
        self.assertEqual(err, b"twlog: offset 13 does not start a message of clicks:0-0: the nearest message "
                              b"boundaries are 10 and 20\n")
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "clicks", "-p", "0-0", "-o", "10")
        self.assertEqual((status, out), (0, b"b\nc\n"), err)

    async def test_did_you_mean(self) -> None:
        """A mistyped topic name is refused naming the topic it was probably meant to be."""
        for command in (("consume",), ("offsets",), ("topics", "describe")):
            status, out, err = await twlog(*command, "-b", self.broker, "-t", "clikcs")
            self.assertEqual((status, out), (1, b""), command)
            one_line(self, err)
            self.assertIn(b"topic 'clikcs' does not exist on 127.0.0.1:", err)
            self.assertTrue(err.endswith(b"; did you mean 'clicks'?\n"), err)

    async def test_broker_port_given_as_zookeeper(self) -> None:
        """A broker's port given as ZooKeeper's is named as a twlog broker's, not just a time-out."""
        status, out, err = await twlog("consume", "-z", self.broker, "-t", "clicks")
        self.assertEqual((status, out), (1, b""))
        one_line(self, err)
        self.assertIn(f"cannot reach ZooKeeper at {self.broker} within 5 s ({self.broker} answered, but as twlog "
                      "broker 0, not as ZooKeeper (ZooKeeper's port is usually 2181))".encode(), err)

    def test_probe_of_other_servers(self) -> None:
        """A port that accepts and says nothing, and a port nobody listens on, are told apart."""
        quiet = socket.socket()
        quiet.bind(("127.0.0.1", 0))
        quiet.listen(1)
        self.addCleanup(quiet.close)
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        self.addCleanup(closed.close)  # bound, never listening: connections are refused
        quiet_port, closed_port = quiet.getsockname()[1], closed.getsockname()[1]
        self.assertEqual(describe_answer(f"127.0.0.1:{quiet_port},127.0.0.1:{closed_port}/chroot", 0.2),
                         f"127.0.0.1:{quiet_port} accepts connections, but does not answer as ZooKeeper; "
                         f"nothing listens on 127.0.0.1:{closed_port}: the connection is refused")

    async def test_describe(self) -> None:
        """topics describe (and topics -t) shows each partition's leader, earliest and latest offset and size."""
        status, out, err = await twlog("topics", "describe", "-b", self.broker, "-t", "clicks", "--json")
        self.assertEqual(status, 0, err)
        described = json.loads(out)
        self.assertEqual(described["topic"], "clicks")
        latest = 3 * (9 + 1)  # three one-byte messages of magic 0: 9 bytes of overhead each
        self.assertEqual(described["partitions"], [
            {"partition": "0-0", "leader": 0, "broker": self.broker, "earliest": 0, "latest": latest, "size": latest},
            {"partition": "0-1", "leader": 0, "broker": self.broker, "earliest": 0, "latest": 0, "size": 0},
        ])
        status, out, err = await twlog("topics", "-b", self.broker, "-t", "clicks")
        self.assertEqual(status, 0, err)
        self.assertIn(b"clicks: 2 partitions on 1 broker", out)
        self.assertRegex(out, rb"0-0 +0 \(127\.0\.0\.1:\d+\) +0 +30 +30")


class DeleteTopicTests(TestCase):
    """topics delete on two brokers registered in a real ZooKeeper."""

    timeout = 120

    async def setUp(self) -> None:
        self.zookeeper = fresh_connect_string()
        self.brokers = [await start_broker(self, zookeeper=self.zookeeper, broker_id=i, num_partitions=2,
                                           flush_interval_ms=20) for i in range(2)]
        status, _, err = await twlog("topics", "create", "-z", self.zookeeper, "-t", "clicks", "-n", "2")
        self.assertEqual(status, 0, err)
        status, _, err = await twlog("produce", "-z", self.zookeeper, "-t", "clicks",
                                     stdin=b"".join(b"m%d\n" % i for i in range(50)))
        self.assertEqual(status, 0, err)
        self.zk = await connect(self, self.zookeeper)

    async def test_refused_while_a_group_reads_it(self) -> None:
        """A live member subscribed to the topic makes delete refuse (exit 1) unless --force; without
        --zookeeper (no way to look at the groups) it is refused unless --force (exit 2)."""
        await self.zk.create(paths.consumer_ids_path("live", "c1"), encode_subscription({"clicks": 1}),
                             ephemeral=True, makepath=True)
        status, out, err = await twlog("topics", "delete", "-z", self.zookeeper, "-t", "clicks")
        self.assertEqual((status, out), (1, b""))
        one_line(self, err)
        self.assertIn(b"topic 'clicks' is being read by group live (1 live member): stop it first, or --force", err)
        status, out, err = await twlog("topics", "delete", "-b", self.address(0), "-t", "clicks")
        self.assertEqual((status, out), (2, b""))
        self.assertIn(b"give --zookeeper HOST:PORT (or --force to delete without checking)", err)
        self.assertEqual(sorted(self.brokers[0].broker.logs.topics()), ["clicks"])

    async def test_force_deletes_logs_registrations_and_offsets(self) -> None:
        """--force deletes every broker's logs and registration, and every group's committed offsets of it."""
        await self.zk.create(paths.consumer_ids_path("live", "c1"), encode_subscription({"clicks": 1}),
                             ephemeral=True, makepath=True)
        await self.zk.create(paths.offset_path("old", "clicks", "0-0"), b"10", makepath=True)
        await self.zk.create(paths.offset_path("old", "views", "0-0"), b"7", makepath=True)
        status, out, err = await twlog("topics", "delete", "-z", self.zookeeper, "-t", "clicks", "--force")
        self.assertEqual((status, err), (0, b""))
        self.assertEqual(out, b"deleted clicks on 2 brokers (0, 1); and the committed offsets of group old\n")
        for service in self.brokers:
            self.assertEqual(service.broker.logs.topics(), {})
            self.assertFalse([n for n in os.listdir(service.broker.logs.config.log_dir) if "clicks" in n])
        self.assertIsNone(await self.zk.exists(paths.broker_topic_path("clicks")))
        self.assertIsNone(await self.zk.exists(paths.offset_path("old", "clicks")))
        self.assertIsNotNone(await self.zk.exists(paths.offset_path("old", "views", "0-0")))
        status, out, err = await twlog("consume", "-z", self.zookeeper, "-t", "clicks")
        self.assertEqual(status, 1)
        self.assertIn(b"topic 'clicks' does not exist", err)
        status, out, err = await twlog("topics", "delete", "-b", self.address(1), "-t", "clicks", "--force")
        self.assertEqual((status, out), (1, b""))
        self.assertIn(b"topic 'clicks' does not exist on the brokers known to 127.0.0.1:", err)

    async def test_refused_while_a_holder_is_down(self) -> None:
        """A broker that holds the topic is down: delete is refused in one line naming it (its logs would bring
        the topic back when it starts), by ZooKeeper and by a broker address, with --force too; nothing is
        deleted; a topic created meanwhile says broker 1 will not have it. Once the broker is forgotten (retired
        for good), the live ones delete it."""
        log_dir = self.brokers[1].broker.logs.config.log_dir
        await self.brokers[1].stopService()  # leaves ZooKeeper, as a dead broker does once its session expires
        down = ("cannot delete topic 'clicks': broker 1, which holds clicks:1-0..1-1, is not registered: down?; its "
                "logs would bring the topic back when it starts, so nothing was deleted: start it and delete again "
                "(or, for a broker retired for good, twlog brokers forget --broker-id 1 first)")
        for where in (("-z", self.zookeeper), ("-z", self.zookeeper, "--force"), ("-b", self.address(0), "--force")):
            status, out, err = await twlog("topics", "delete", "-t", "clicks", *where)
            self.assertEqual((status, out), (1, b""), where)
            self.assertEqual(err.decode(), f"twlog: {down}\n", where)
        self.assertEqual(sorted(self.brokers[0].broker.logs.topics()), ["clicks"])
        self.assertTrue([n for n in os.listdir(log_dir) if n.startswith("clicks")])
        self.assertEqual(sorted(await self.zk.children(paths.held_path("clicks"))), ["0", "1"])

        # topics create meanwhile makes the topic on the live broker, and says broker 1 will not have it.
        status, out, err = await twlog("topics", "create", "-b", self.address(0), "-t", "views", "-n", "2")
        self.assertEqual((status, out), (0, b"created views: 2 partitions on 1 broker (2 in all)\n"), err)
        self.assertEqual(err, b"twlog: warning: broker 1 is down (not registered, known to hold other topics), so "
                              b"views has no partitions there: run this again once it is back to make them\n")

        status, _, err = await twlog("brokers", "forget", "-z", self.zookeeper, "--broker-id", "1")
        self.assertEqual(status, 0, err)
        status, out, err = await twlog("topics", "delete", "-z", self.zookeeper, "-t", "clicks")
        self.assertEqual((status, out, err), (0, b"deleted clicks on 1 broker (0)\n", b""))
        self.assertEqual(self.brokers[0].broker.logs.topics(), {"views": 2})

    def address(self, index: int) -> str:
        return f"127.0.0.1:{self.brokers[index].broker.port}"


class ExampleTests(TestCase):
    timeout = 120

    async def test_etl_unreachable_broker_is_one_line(self) -> None:
        """examples/etl_parquet.py with a broker nobody listens on: one line, exit 1, before Spark starts."""
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        self.addCleanup(closed.close)
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        argv = [ETL_EXAMPLE, "--brokers", address, "--topic", "clicks", "--output", self.mktemp()]
        out, err, status = await getProcessOutputAndValue(sys.executable, argv, env=os.environ.copy(),
                                                          reactor=reactor)
        self.assertEqual((status, out), (1, b""))
        one_line(self, err)
        self.assertTrue(err.startswith(b"etl_parquet: "), err)
        self.assertIn(address.encode(), err)
