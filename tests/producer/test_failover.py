"""Tests for the producer following a replicated partition's leader (twlog.producer.failover, the router's
replicated topics): static brokers through CLUSTER_METADATA_V2, and ZooKeeper through the view; on fakes and
task.Clock."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeConnection
from tests.fakezk import FakeZooKeeper
from twlog.coord import paths
from twlog.coord.replication import store
from twlog.coord.replication.values import PartitionState
from twlog.errors import ConnectionFailed, LeaderNotAvailable, MessageSizeTooLarge, NotLeader, PartitionsOffline
from twlog.partition import TopicPartition
from twlog.producer import Producer, hash_partitioner
from twlog.producer.failover import MAX_BACKOFF_S, PartitionQueue, wait_created
from twlog.protocol import codec
from twlog.protocol.codec import AckProduceRequest, ClusterMetadataRequest, ProduceResult
from twlog.protocol.replication_codec import (
    NO_BROKER,
    ClusterMetadataV2Request,
    ClusterMetadataV2Response,
    ReplicatedLayout,
)
from twlog.protocol.replication_codec import (
    PartitionState as WirePartition,
)
from twlog.protocol.responses import VIEW_CURRENT, BrokerAddress
from twlog.storage.message import iter_messages

BROKERS = {1: "b1", 2: "b2"}


def cluster(leaders: dict[int, int], broker_id: int = 1) -> ClusterMetadataV2Response:
    """Broker C{broker_id}'s CLUSTER_METADATA_V2 answer: brokers 1 and 2 live, topic r's partitions led by
    C{leaders} (partition -> leader, NO_BROKER: none), each on both brokers."""
    parts = tuple(WirePartition(p, 0 if leader != NO_BROKER else LeaderNotAvailable.code, leader, 1, (1, 2), (1, 2))
                  for p, leader in sorted(leaders.items()))
    brokers = tuple(BrokerAddress(b, host, 9092) for b, host in sorted(BROKERS.items()))
    return ClusterMetadataV2Response(broker_id, VIEW_CURRENT, 1, brokers, (ReplicatedLayout("r", 0, parts),))


def not_leader(partition: int) -> bytes:
    return codec.encode_ack_produce_response(0, [ProduceResult("r", partition, NotLeader.code, -1, -1)])


def produced(connection: FakeConnection) -> list[tuple[int, list[bytes]]]:
    """(partition, payloads) of each acknowledged produce C{connection} was asked, in order."""
    found = []
    for request in connection.requests:
        if isinstance(request, AckProduceRequest):
            for produce in request.produces:
                found.append((produce.partition, [m.payload for m in iter_messages(produce.messages, 0)]))
    return found


class StaticFailoverTests(SynchronousTestCase):
    def make(self, leaders: dict[int, int], **options):
        self.clock = Clock()
        self.connections: dict[str, FakeConnection] = {}
        self.leaders = dict(leaders)

        def factory(host: str, port: int) -> FakeConnection:
            broker_id = next(b for b, h in BROKERS.items() if h == host)
            connection = FakeConnection(host, port, broker_id, {})
            connection.cluster_v2 = cluster(self.leaders, broker_id)
            self.connections.setdefault(host, connection)
            return self.connections[host]

        options.setdefault("ack", "appended")
        return Producer([("b1", 9092)], connection_factory=factory, reactor=self.clock, **options)

    def move(self, partition: int, leader: int) -> None:
        """The controller moved C{partition}'s leadership: every broker describes it so."""
        self.leaders[partition] = leader
        for connection in self.connections.values():
            connection.cluster_v2 = cluster(self.leaders, connection.broker_id)

    def test_partitions_are_numbered_and_led_as_type_14_says(self) -> None:
        """A replicated topic's partitions are 0..P-1 (sorted as numbers), each sent to its leader."""
        producer = self.make({p: 1 + p % 2 for p in range(12)})
        partitions = self.successResultOf(producer.partitions("r"))
        self.assertEqual([tp.name for tp in partitions], [str(p) for p in range(12)])
        self.successResultOf(producer.send("r", b"m", partition_index=11))
        self.assertEqual(produced(self.connections["b2"]), [(11, [b"m"])])
        self.assertTrue(any(isinstance(r, ClusterMetadataV2Request) for r in self.connections["b1"].requests))
        self.assertFalse(any(isinstance(r, ClusterMetadataRequest) for r in self.connections["b1"].requests))

    def test_keyed_send_keeps_its_partition_across_a_failover(self) -> None:
        """NotLeader: the router asks type 14 again and the batch goes to the same partition's new leader."""
        producer = self.make({0: 1, 1: 1, 2: 2})
        key = next(k for k in (b"k%d" % i for i in range(100)) if hash_partitioner(k, 3) == 0)
        self.successResultOf(producer.send("r", b"before", key))
        self.connections["b1"].responses.append(not_leader(0))
        self.move(0, 2)
        sent = producer.send("r", b"during", key)
        self.assertNoResult(sent)  # waiting out the backoff
        self.clock.advance(MAX_BACKOFF_S)
        self.assertEqual(self.successResultOf(sent).error, 0)
        self.successResultOf(producer.send("r", b"after", key))
        self.assertEqual(produced(self.connections["b1"]), [(0, [b"before"]), (0, [b"during"])])
        self.assertEqual(produced(self.connections["b2"]), [(0, [b"during"]), (0, [b"after"])])

    def test_a_later_batch_never_overtakes_a_retried_one(self) -> None:
        """Batches of one replicated partition go one at a time: the second waits while the first is retried."""
        producer = self.make({0: 1, 1: 2})
        self.successResultOf(producer.partitions("r"))
        self.connections["b1"].hold_requests = True
        first = producer.send("r", b"first", partition_index=0)
        second = producer.send("r", b"second", partition_index=0)
        self.assertEqual(produced(self.connections["b1"]), [(0, [b"first"])])  # the second waits its turn
        self.move(0, 2)
        self.connections["b1"].held.pop(0).errback(NotLeader("broker 1 follows r-0"))
        self.clock.advance(MAX_BACKOFF_S)
        self.successResultOf(first)
        self.successResultOf(second)
        self.assertEqual(produced(self.connections["b2"]), [(0, [b"first"]), (0, [b"second"])])

    def test_batches_that_waited_go_together_each_with_its_offsets(self) -> None:
        """While a request is out, later batches wait; the next request carries them all, a set each, in order,
        and each send gets its own set's offsets."""
        producer = self.make({0: 1, 1: 2})
        self.successResultOf(producer.partitions("r"))
        self.connections["b1"].hold_requests = True
        first = producer.send("r", [b"a"], partition_index=0)
        later = [producer.send("r", [b"b%d" % n] * (n + 1), partition_index=0) for n in range(3)]
        requests = [r for r in self.connections["b1"].requests if isinstance(r, AckProduceRequest)]
        self.assertEqual(len(requests), 1)
        self.connections["b1"].held.pop(0).callback(None)
        self.connections["b1"].held.pop(0).callback(None)
        requests = [r for r in self.connections["b1"].requests if isinstance(r, AckProduceRequest)]
        self.assertEqual([len(r.produces) for r in requests], [1, 3])
        self.assertEqual(produced(self.connections["b1"]),
                         [(0, [b"a"]), (0, [b"b0"]), (0, [b"b1"] * 2), (0, [b"b2"] * 3)])
        results = [self.successResultOf(d) for d in [first, *later]]
        for before, after in zip(results, results[1:]):
            self.assertEqual(after.offset, before.next_offset)
        self.assertEqual([r.next_offset - r.offset for r in results[1:]],
                         [len(p.messages) for p in requests[1].produces])

    def test_a_refused_set_fails_its_own_send_only(self) -> None:
        """A set refused for itself (too large) fails its send; the sets around it in the request are stored."""
        producer = self.make({0: 1})
        self.successResultOf(producer.partitions("r"))
        self.connections["b1"].hold_requests = True
        sends = [producer.send("r", [b"%d" % n], partition_index=0) for n in range(4)]
        held = self.connections["b1"].held.pop(0)
        self.connections["b1"].responses.append(codec.encode_ack_produce_response(0, [
            ProduceResult("r", 0, 0, 10, 20), ProduceResult("r", 0, MessageSizeTooLarge.code, 5000, 1000),
            ProduceResult("r", 0, 0, 20, 30)]))
        held.callback(None)
        self.assertEqual(self.successResultOf(sends[1]).offset, 10)
        error = self.failureResultOf(sends[2], MessageSizeTooLarge).value
        self.assertIn("5000", str(error))
        self.assertEqual(self.successResultOf(sends[3]).offset, 20)

    def test_batching_producer_keeps_order_too(self) -> None:
        producer = self.make({0: 1}, batch_size=1)
        self.successResultOf(producer.partitions("r"))
        self.connections["b1"].responses.append(not_leader(0))
        self.move(0, 2)
        for n in range(3):
            self.successResultOf(producer.send("r", b"%d" % n, partition_index=0))
        self.clock.advance(MAX_BACKOFF_S)
        self.successResultOf(producer.flush())
        self.assertEqual(produced(self.connections["b2"]), [(0, [b"0"]), (0, [b"1"]), (0, [b"2"])])

    def test_waits_for_a_leader_then_gives_up(self) -> None:
        """A partition with no leader: a keyed batch waits (it is not offline for good), and fails with
        LeaderNotAvailable once leader_wait_s has passed."""
        producer = self.make({0: NO_BROKER, 1: 2}, leader_wait_s=5)
        self.successResultOf(producer.partitions("r"))
        sent = producer.send("r", b"m", partition_index=0)
        self.clock.pump([MAX_BACKOFF_S] * 3)
        self.assertNoResult(sent)
        self.clock.pump([MAX_BACKOFF_S] * 3)
        self.failureResultOf(sent, LeaderNotAvailable)
        waiting = producer.send("r", b"n", partition_index=0)
        self.clock.advance(MAX_BACKOFF_S)
        self.move(0, 1)
        self.clock.pump([MAX_BACKOFF_S] * 2)
        self.assertEqual(self.successResultOf(waiting).error, 0)
        self.assertEqual(produced(self.connections["b1"]), [(0, [b"n"])])

    def test_unreachable_leader_then_the_new_one(self) -> None:
        """The leader cannot be reached: the batch is sent to the leader the brokers name next."""
        producer = self.make({0: 2})
        self.successResultOf(producer.partitions("r"))
        self.connections["b2"].down = True
        sent = producer.send("r", b"m", partition_index=0)
        self.move(0, 1)
        self.clock.advance(MAX_BACKOFF_S)
        self.assertEqual(self.successResultOf(sent).error, 0)
        self.assertEqual(produced(self.connections["b1"]), [(0, [b"m"])])

    def test_older_broker_is_asked_type_8(self) -> None:
        """A broker that refuses type 14 is asked type 8, then and from then on (its 0.7 topics as before)."""
        self.clock = Clock()
        connection = FakeConnection("old", 9092, 3, {"t": 2})
        producer = Producer([("old", 9092)], connection_factory=lambda h, p: connection, reactor=self.clock)
        self.assertEqual([tp.name for tp in self.successResultOf(producer.partitions("t"))], ["3-0", "3-1"])
        producer._router.forget("t")
        self.successResultOf(producer.partitions("t"))
        kinds = [type(r).__name__ for r in connection.requests]
        self.assertEqual(kinds, ["ClusterMetadataV2Request", "ClusterMetadataRequest", "ClusterMetadataRequest"])

    def test_replicated_layout_kept_for_a_while(self) -> None:
        """Static mode asks again after REPLICATED_MAX_AGE_S (fire-and-forget meets no NotLeader)."""
        from twlog.producer.router import REPLICATED_MAX_AGE_S
        producer = self.make({0: 1}, ack="none")
        self.successResultOf(producer.send("r", b"a", partition_index=0))
        self.move(0, 2)
        self.clock.advance(REPLICATED_MAX_AGE_S)
        self.successResultOf(producer.send("r", b"b", partition_index=0))
        self.assertEqual([r.partition for r in self.connections["b2"].sent], [0])


class ZooKeeperFailoverTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.zk = FakeZooKeeper()
        self.zk.start()
        for broker_id, host in BROKERS.items():
            self.successResultOf(self.zk.create(paths.broker_id_path(broker_id), f"{host}-1:{host}:9092".encode(),
                                                makepath=True))
        self.successResultOf(store.create_replicated_topic(self.zk, "r", {0: (1, 2), 1: (2, 1)}, {}))
        self.versions = {p: self.successResultOf(store.create_state(self.zk, "r", p, PartitionState(1 + p, 1, 1,
                                                                                                    (1, 2))))
                         for p in (0, 1)}
        self.connections: dict[str, FakeConnection] = {}

        def factory(host: str, port: int) -> FakeConnection:
            broker_id = next(b for b, h in BROKERS.items() if h == host)
            return self.connections.setdefault(host, FakeConnection(host, port, broker_id, {}))

        self.producer = Producer(zookeeper=self.zk, connection_factory=factory, reactor=self.clock, ack="appended")

    def test_follows_the_state_znode(self) -> None:
        """The view's watch on the partition's state moves the producer's batches to the new leader."""
        self.assertEqual(self.successResultOf(self.producer.partitions("r")),
                         [TopicPartition("r", "0"), TopicPartition("r", "1")])
        self.successResultOf(self.producer.send("r", b"a", partition_index=0))
        self.connections["b1"].responses.append(not_leader(0))
        sent = self.producer.send("r", b"b", partition_index=0)
        self.successResultOf(store.write_state_cas(self.zk, "r", 0, PartitionState(2, 2, 1, (1, 2)),
                                                   self.versions[0]))
        self.clock.advance(MAX_BACKOFF_S)
        self.successResultOf(sent)
        self.successResultOf(self.producer.send("r", b"c", partition_index=0))
        self.assertEqual(produced(self.connections["b2"]), [(0, [b"b"]), (0, [b"c"])])

    def test_offline_partition_waits_instead_of_failing(self) -> None:
        self.successResultOf(self.producer.partitions("r"))
        self.successResultOf(store.write_state_cas(self.zk, "r", 0, PartitionState(-1, 2, 1, (1,)),
                                                   self.versions[0]))
        sent = self.producer.send("r", b"x", partition_index=0)
        self.clock.advance(MAX_BACKOFF_S)
        self.assertNoResult(sent)
        self.successResultOf(store.write_state_cas(self.zk, "r", 0, PartitionState(2, 3, 1, (2,)),
                                                   self.versions[0] + 1))
        self.clock.pump([MAX_BACKOFF_S] * 2)
        self.successResultOf(sent)
        self.assertEqual(produced(self.connections["b2"]), [(0, [b"x"])])

    def test_random_batches_go_to_partitions_with_a_leader(self) -> None:
        self.successResultOf(self.producer.partitions("r"))
        self.successResultOf(store.write_state_cas(self.zk, "r", 0, PartitionState(-1, 2, 1, (1,)),
                                                   self.versions[0]))
        for _ in range(5):
            self.successResultOf(self.producer.send("r", b"r"))
        self.assertEqual({p for p, _ in produced(self.connections["b2"])}, {1})
        self.assertEqual(produced(self.connections.get("b1", FakeConnection())), [])



class WaitCreatedTests(SynchronousTestCase):
    """A 0.7 partition's broker answering LeaderNotAvailable or NotLeader: the topic is (being) made replicated."""

    def setUp(self) -> None:
        self.forgotten: list[str] = []
        router = type("R", (), {"forget": lambda _self, topic: self.forgotten.append(topic)})()
        self.producer = type("P", (), {"leader_wait_s": 1.0, "_router": router, "_reactor": Clock()})()

    def test_waits_and_forgets_the_layout(self) -> None:
        old = TopicPartition("t", "1-0")
        for error in (LeaderNotAvailable("being created"), NotLeader("replicated now")):
            d = Deferred.fromCoroutine(wait_created(self.producer, old, error, 0.0))
            self.assertNoResult(d)
            self.producer._reactor.advance(MAX_BACKOFF_S / 4)
            self.assertEqual(self.successResultOf(d), MAX_BACKOFF_S / 4)
        self.assertEqual(self.forgotten, ["t", "t"])

    def test_raises_for_a_replicated_partition_offline_or_after_the_wait(self) -> None:
        cases = [(TopicPartition("t", "0"), LeaderNotAvailable("x"), 0.0),
                 (TopicPartition("t", "1-0"), PartitionsOffline("down", offline=(), available=()), 0.0),
                 (TopicPartition("t", "1-0"), LeaderNotAvailable("x"), 1.0)]
        for target, error, waited in cases:
            self.failureResultOf(Deferred.fromCoroutine(wait_created(self.producer, target, error, waited)),
                                 type(error))
        self.assertEqual(self.forgotten, [])


class PartitionQueueTests(SynchronousTestCase):
    """The queue alone, with a scripted send."""

    def setUp(self) -> None:
        self.calls: list[tuple[TopicPartition, list[list[bytes]]]] = []
        self.answers: list[Deferred] = []

        def send(tp, sets):
            self.calls.append((tp, sets))
            d: Deferred = Deferred()
            self.answers.append(d)
            return d

        self.queue = PartitionQueue(send, max_bytes=10)
        self.tp = TopicPartition("r", "0")

    def test_a_request_carries_at_most_max_bytes_unless_one_batch_is_larger(self) -> None:
        sends = [self.queue.deliver(self.tp, [b"x" * size]) for size in (1, 4, 4, 4, 20, 1)]
        self.answers.pop(0).callback([1])
        self.answers.pop(0).callback([2, 3])  # 4 + 4: a third 4 would pass 10
        self.answers.pop(0).callback([4])
        self.answers.pop(0).callback([5])  # 20: alone
        self.answers.pop(0).callback([6])
        self.assertEqual([[len(p[0]) for p in sets] for _, sets in self.calls], [[1], [4, 4], [4], [20], [1]])
        self.assertEqual([self.successResultOf(d) for d in sends], [1, 2, 3, 4, 5, 6])
        self.assertFalse(self.queue.busy(self.tp))

    def test_partitions_do_not_wait_for_each_other(self) -> None:
        self.queue.deliver(self.tp, [b"a"])
        self.queue.deliver(TopicPartition("r", "1"), [b"b"])
        self.assertEqual([tp.name for tp, _ in self.calls], ["0", "1"])

    def test_a_failed_request_fails_each_of_its_batches_and_the_next_goes_on(self) -> None:
        sends = [self.queue.deliver(self.tp, [b"%d" % n]) for n in range(3)]
        self.answers.pop(0).callback([1])
        self.answers.pop(0).errback(ConnectionFailed("refused"))
        self.failureResultOf(sends[1], ConnectionFailed)
        self.failureResultOf(sends[2], ConnectionFailed)
        later = self.queue.deliver(self.tp, [b"3"])
        self.answers.pop(0).callback([4])
        self.assertEqual(self.successResultOf(later), 4)

    def test_a_leader_moving_between_sets_sends_the_rest_again_in_order(self) -> None:
        sends = [self.queue.deliver(self.tp, [b"%d" % n]) for n in range(4)]
        self.answers.pop(0).callback([0])
        self.answers.pop(0).callback([1, NotLeader("moved"), 3])
        self.assertEqual(self.calls[-1][1], [[b"2"], [b"3"]])
        self.answers.pop(0).callback([2, 3])
        self.assertEqual([self.successResultOf(d) for d in sends], [0, 1, 2, 3])
