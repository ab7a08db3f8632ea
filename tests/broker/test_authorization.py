"""A broker's --acls: its options, the guard fed by the ACLs in (fake) ZooKeeper, and the refusals' metrics."""

from __future__ import annotations

import struct

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python import usage
from twisted.trial.unittest import TestCase

from tests.fakezk import FakeZooKeeper
from twlog.broker.authorization import follow_acls
from twlog.broker.metrics import BrokerMetrics
from twlog.broker.tap import Options
from twlog.config import BrokerConfig, LogConfig
from twlog.coord.acls import change_acls
from twlog.errors import NO_ERROR, TopicAuthorizationFailed
from twlog.protocol import codec
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.server import Broker
from twlog.security.acls import AccessControlEntry, Operation, Permission, ResourcePattern, ResourceType
from twlog.storage.manager import LogManager

from ..fakes import run_now


def parse(*argv: str) -> Options:
    options = Options()
    options.parseOptions(list(argv))
    return options


class OptionsTests(TestCase):
    def test_acls_and_super_users_reach_the_config(self) -> None:
        config = parse("--zookeeper", "zk:2181", "--acls", "--super-users", "User:admin;User:CN=broker,O=x").config
        self.assertEqual((config.acls, config.super_users), (True, ("User:CN=broker,O=x", "User:admin")))
        self.assertEqual((parse().config.acls, parse().config.super_users), (False, ()))

    def test_refused_in_one_line(self) -> None:
        for argv, message in ((["--acls"], "--acls needs --zookeeper (the ACLs are kept there)"),
                              (["--super-users", "User:a"], "--super-users needs --acls"),
                              (["--zookeeper", "zk:2181", "--acls", "--super-users", "admin"],
                               "principal 'admin' is not TYPE:NAME")):
            with self.assertRaises(usage.UsageError) as caught:
                parse(*argv)
            self.assertIn(message, str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))


class GuardedBrokerTests(TestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        config = BrokerConfig(log=LogConfig(self.mktemp(), num_partitions=1), port=0, zookeeper="zk:2181", acls=True,
                              super_users=("User:admin",))
        self.logs = LogManager(config.log, self.clock, run_now)
        self.logs.start()
        self.addCleanup(self.logs.close)
        self.broker = Broker(self.logs, config, self.clock)
        self.factory = BrokerFactory(self.broker)
        self.zk = FakeZooKeeper()
        self.zk.start()

    def ask(self, request, principal: str = "User:ANONYMOUS") -> int:
        protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.principal = principal
        data = codec.encode_request(request)
        protocol.dataReceived(struct.pack(">i", len(data)) + data)
        return int.from_bytes(transport.value()[4:6], "big", signed=True)

    async def test_closed_until_the_acls_are_read_then_following_them(self) -> None:
        request = codec.CreateTopicRequest("clicks", 1)
        self.assertEqual(self.ask(request), TopicAuthorizationFailed.code)  # no ACLs yet: only super users
        self.assertEqual(self.ask(request, "User:admin"), NO_ERROR)
        pattern = ResourcePattern(ResourceType.TOPIC, "clicks")
        await change_acls(self.zk, pattern, add={AccessControlEntry("User:ANONYMOUS", Permission.ALLOW,
                                                                    Operation.CREATE)})
        cache = follow_acls(self.zk, self.broker, self.broker.guard._log)
        self.assertTrue(cache.ready)
        self.assertIs(self.broker.guard.acls, cache)
        self.assertEqual(self.ask(request), NO_ERROR)
        await change_acls(self.zk, pattern, add={AccessControlEntry("User:ANONYMOUS", Permission.DENY, Operation.ALL,
                                                                    "127.0.0.1")})
        self.assertEqual(self.ask(request), TopicAuthorizationFailed.code)

    def test_refusals_in_the_metrics(self) -> None:
        metrics = BrokerMetrics(self.broker, self.factory, self.logs)
        self.ask(codec.CreateTopicRequest("clicks", 1))
        self.ask(codec.CreateTopicRequest("views", 1))
        families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
        (sample,) = families["twlog_authorization_refusals"].samples
        self.assertEqual((sample.labels, sample.value), ({"operation": "Create", "resource_type": "Topic"}, 2.0))
        errors = {(s.labels["type"], s.labels["error"]): s.value for s in families["twlog_request_errors"].samples}
        self.assertEqual(errors[("CREATE_TOPIC", "TopicAuthorizationFailed")], 2.0)

    def test_no_guard_without_acls(self) -> None:
        broker = Broker(self.logs, BrokerConfig(log=LogConfig(self.mktemp())), self.clock)
        self.assertIsNone(broker.guard)
        self.assertIsNone(follow_acls(self.zk, broker, broker.guard))
