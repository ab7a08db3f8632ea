"""discover_async, deterministic: a fake connection, the fake ZooKeeper and task.Clock; the same answers as discover."""

from __future__ import annotations

from twisted.internet.defer import fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.client.test_discovery import layout, replicated_answer
from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.client import discovery
from twlog.client.async_discovery import all_partitions_async, discover_async
from twlog.coord import paths
from twlog.errors import ConnectionFailed, ConnectionLost, InvalidRequest, InvalidTopic, UnknownTopic
from twlog.protocol.codec import ClusterMetadataRequest, MetadataResponse
from twlog.protocol.replication_codec import ClusterMetadataV2Request
from twlog.protocol.responses import VIEW_CURRENT, VIEW_STARTING


class FakeConnection:
    """A BrokerConnection to a table of brokers by (host, port): answers as given, or down (None)."""

    def __init__(self, brokers: dict, host: str, port: int, **_) -> None:
        self.broker = brokers[host, port]
        self.address = f"{host}:{port}"
        self.closed = False

    def request(self, request):
        if self.broker is None:
            return fail(ConnectionFailed(f"cannot connect to broker {self.address}: refused"))
        if isinstance(request, ClusterMetadataV2Request):  # an older broker unless "cluster_v2" is given
            self.broker["asked_v2"] = self.broker.get("asked_v2", 0) + 1
            if "cluster_v2" not in self.broker:
                return fail(self.broker.get("v2_refusal", InvalidRequest("unknown request type 14")))
            return succeed(self.broker["cluster_v2"])
        if isinstance(request, ClusterMetadataRequest):
            answers = self.broker["cluster"]
            return succeed(answers.pop(0) if isinstance(answers, list) else answers)
        return succeed(MetadataResponse(self.broker["id"], "h", 1, ()))

    def close(self):
        self.closed = True
        return succeed(None)


class BrokersTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.brokers: dict = {}
        self.clock = Clock()

    def connect(self, host, port, **options):
        return FakeConnection(self.brokers, host, port, **options)

    def discover(self, topics, **options):
        return discover_async(topics, reactor=self.clock, connect=self.connect, **options)

    def test_one_address_finds_every_partition(self) -> None:
        """As discover: one current answer describes the cluster; holders not asked yet are checked."""
        self.brokers["h", 1] = {"id": 0, "cluster": layout(VIEW_CURRENT, 0, {0: 1, 1: 2}, {0: 2, 1: 1})}
        self.brokers["h", 2] = {"id": 1}
        found = self.successResultOf(self.discover(["t"], brokers="h:1"))
        self.assertEqual([(str(p.tp), p.port) for p in found], [("t:0-0", 1), ("t:0-1", 1), ("t:1-0", 2)])

    def test_unreachable_holder_is_named(self) -> None:
        self.brokers["h", 1] = {"id": 0, "cluster": layout(VIEW_CURRENT, 0, {0: 1, 1: 2}, {1: 2})}
        self.brokers["h", 2] = None
        failure = self.failureResultOf(self.discover(["t"], brokers="h:1"), ConnectionFailed)
        self.assertIn("broker 1 at h:2 holds t:1-0, t:1-1 but cannot be reached", str(failure.value))

    def test_starting_broker_is_asked_again_on_the_clock(self) -> None:
        """The wait before asking a starting broker again is the reactor's (no sleep, no thread)."""
        self.brokers["h", 1] = {"id": 0, "cluster": [layout(VIEW_STARTING, 0, {0: 1}, {}),
                                                     layout(VIEW_CURRENT, 0, {0: 1}, {0: 1})]}
        d = self.discover(["t"], brokers="h:1")
        self.assertNoResult(d)
        self.clock.advance(discovery.STARTING_WAIT_S)
        self.assertEqual([p.name for p in self.successResultOf(d)], ["0-0"])

    def test_unknown_and_invalid_topics(self) -> None:
        self.brokers["h", 1] = {"id": 0, "cluster": layout(VIEW_CURRENT, 0, {0: 1}, {})}
        self.failureResultOf(self.discover(["t"], brokers="h:1"), UnknownTopic)
        self.failureResultOf(self.discover(["a b"], brokers="h:1"), InvalidTopic)

    def test_all_partitions(self) -> None:
        self.brokers["h", 1] = {"id": 0, "cluster": layout(VIEW_CURRENT, 0, {0: 1}, {0: 2})}
        found = self.successResultOf(all_partitions_async(brokers="h:1", reactor=self.clock, connect=self.connect))
        self.assertEqual([str(p.tp) for p in found], ["t:0-0", "t:0-1"])


class ZooKeeperTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper(FakeZooKeeperServer())
        self.zk.start()
        for path, value in [(paths.broker_id_path(1), b"b1:9093"), (paths.broker_topic_path("t", 1), b"2"),
                            (paths.broker_topic_path("t", 7), b"1"), (f"{paths.BROKER_IDS}/x", b"h:1")]:
            self.successResultOf(self.zk.create(path, value, makepath=True))

    def test_registrations_through_the_layout(self) -> None:
        """Good registrations located; each bad one skipped with one warning, as discover does."""
        with self.assertLogs(discovery.__name__, "WARNING") as logged:
            d = discover_async(["t"], zookeeper=self.zk, reactor=Clock(), check_reachable=False)
            found = self.successResultOf(d)
        self.assertEqual([(str(p.tp), p.address) for p in found], [("t:1-0", "b1:9093"), ("t:1-1", "b1:9093")])
        self.assertEqual(len(logged.records), 2)

    def test_unknown_topic(self) -> None:
        self.failureResultOf(discover_async(["u"], zookeeper=self.zk, reactor=Clock()), UnknownTopic)

    def test_replicated_topic_at_its_leaders(self) -> None:
        """As the blocking discovery: a replicated topic's partitions located at their states' leaders."""
        from twlog.coord.replication import store
        from twlog.coord.replication.values import PartitionState
        self.successResultOf(self.zk.create(paths.broker_id_path(2), b"b2:9093", makepath=True))
        self.successResultOf(store.create_replicated_topic(self.zk, "r", {0: (1, 2), 1: (2, 1)}))
        for p, leader in ((0, 2), (1, 1)):
            self.successResultOf(store.create_state(self.zk, "r", p, PartitionState(leader, 1, 1, (1, 2))))
        with self.assertLogs(discovery.__name__, "WARNING"):  # (the bad registration of setUp)
            found = self.successResultOf(discover_async(["r"], zookeeper=self.zk, reactor=Clock(),
                                                        check_reachable=False))
        self.assertEqual([(p.name, p.leader, p.address) for p in found], [("0", 2, "b2:9093"), ("1", 1, "b1:9093")])

    def test_all_partitions(self) -> None:
        with self.assertLogs(discovery.__name__, "WARNING"):
            found = self.successResultOf(all_partitions_async(zookeeper=self.zk, reactor=Clock()))
        self.assertEqual([str(p.tp) for p in found], ["t:1-0", "t:1-1"])


class ClusterMetadataV2Tests(SynchronousTestCase):
    """As discover: type 14 first, replicated topics at their leaders; type 8 from an older broker."""

    def setUp(self) -> None:
        self.brokers: dict = {}
        self.clock = Clock()

    def connect(self, host, port, **options):
        return FakeConnection(self.brokers, host, port, **options)

    def discover(self, topics, **options):
        return discover_async(topics, reactor=self.clock, connect=self.connect, **options)

    def test_replicated_topic_located_at_its_leaders(self) -> None:
        self.brokers["h", 1] = {"id": 0, "cluster_v2": replicated_answer()}
        self.brokers["h", 2] = {"id": 1}
        found = self.successResultOf(self.discover(["r"], brokers="h:1", allow_partial=True))
        self.assertEqual([(str(p.tp), p.leader, p.port) for p in found], [("r:0", 1, 2)])

    def test_broker_closing_on_type_14_is_asked_type_8(self) -> None:
        """A broker that closes the connection on type 14 (no answer at all) is asked type 8 on a new one."""
        self.brokers["h", 1] = {"id": 0, "cluster": layout(VIEW_CURRENT, 0, {0: 1}, {0: 1}),
                                "v2_refusal": ConnectionLost("broker h:1 closed the connection before answering")}
        self.assertEqual([p.name for p in self.successResultOf(self.discover(["t"], brokers="h:1"))], ["0-0"])
        self.assertEqual(self.brokers["h", 1]["asked_v2"], 1)
