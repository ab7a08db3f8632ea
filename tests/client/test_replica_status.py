"""L{ask_leaders}: one REPLICA_STATUS per leader, all sent at once; an unreachable leader, a partition its leader no
longer leads, or a leader not live each give one line and leave those partitions out, never an exception."""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.client.replica_status import PartitionProgress, ask_leaders
from twlog.errors import NO_ERROR, BrokerTimeout, ConnectionFailed, NotLeader
from twlog.protocol.replica_status_codec import (
    UNKNOWN,
    FollowerStatus,
    ReplicaStatus,
    ReplicaStatusRequest,
    ReplicaStatusResponse,
)
from twlog.protocol.replication_codec import PartitionState, ReplicatedLayout

ADDRESSES = {1: ("h1", 9001), 2: ("h2", 9002), 3: ("h3", 9003)}
LAYOUT = ReplicatedLayout("orders", NO_ERROR, (
    PartitionState(0, NO_ERROR, 1, 3, (1, 2, 3), (1, 2, 3)),
    PartitionState(1, NO_ERROR, 2, 1, (2, 3, 1), (2, 3)),
    PartitionState(2, NO_ERROR, 1, 0, (3, 1, 2), (1, 2)),
    PartitionState(3, NotLeader.code, -1, -1, (1, 2, 3), ()),
))


class FakeConnection:
    def __init__(self, fakes: FakeLeaders, address: tuple[str, int]) -> None:
        self.fakes, self.address = fakes, address
        self.closed = False

    def request(self, request: ReplicaStatusRequest) -> Deferred:
        self.fakes.asked.append((self.address, request))
        return self.fakes.answers[self.address]

    def close(self) -> Deferred:
        self.closed = True
        return succeed(None)


class FakeLeaders:
    def __init__(self, answers) -> None:
        self.answers = answers
        self.asked: list[tuple[tuple[str, int], ReplicaStatusRequest]] = []
        self.connections: list[FakeConnection] = []

    def connect(self, host: str, port: int, *, reactor, options) -> FakeConnection:
        connection = FakeConnection(self, (host, port))
        self.connections.append(connection)
        return connection


class AskLeadersTests(SynchronousTestCase):
    def ask(self, fakes: FakeLeaders, addresses=ADDRESSES) -> Deferred:
        return Deferred.fromCoroutine(ask_leaders(LAYOUT, addresses, reactor=Clock(), connect=fakes.connect))

    def test_every_leader_asked_at_once(self) -> None:
        """Broker 1 is asked for partitions 0 and 2, broker 2 for 1, both before either answers; a partition with no
        live leader is asked of no one.  Each answer becomes the replicas' ends in replica order, the leader's
        own end included, an unknown follower end None."""
        one, two = Deferred(), Deferred()
        fakes = FakeLeaders({("h1", 9001): one, ("h2", 9002): two})
        d = self.ask(fakes)
        self.assertEqual(fakes.asked, [(("h1", 9001), ReplicaStatusRequest("orders", (0, 2))),
                                       (("h2", 9002), ReplicaStatusRequest("orders", (1,)))])
        two.callback(ReplicaStatusResponse(NO_ERROR, (
            ReplicaStatus(1, NO_ERROR, 1, 50, 60, (FollowerStatus(3, 50, 0), FollowerStatus(1, UNKNOWN, 900))),)))
        self.assertNoResult(d)
        one.callback(ReplicaStatusResponse(NO_ERROR, (
            ReplicaStatus(0, NO_ERROR, 3, 100, 100, (FollowerStatus(2, 100, 0), FollowerStatus(3, 100, 5))),
            ReplicaStatus(2, NO_ERROR, 0, 7, 9, (FollowerStatus(3, 0, 4000), FollowerStatus(2, 7, 0))))))
        progress, problems = self.successResultOf(d)
        self.assertEqual(problems, [])
        self.assertEqual(progress, {
            0: PartitionProgress(0, 1, 3, 100, {1: 100, 2: 100, 3: 100}),
            1: PartitionProgress(1, 2, 1, 50, {2: 60, 3: 50, 1: None}),
            2: PartitionProgress(2, 1, 0, 7, {3: 0, 1: 9, 2: 7}),
        })
        self.assertEqual(list(progress[2].ends), [3, 1, 2])
        self.assertTrue(all(c.closed for c in fakes.connections))

    def test_problems_are_lines(self) -> None:
        """A leader that cannot be reached or times out, or that answers NotLeader for a partition: one line each,
        naming the topic, partitions and leader; the partitions answered are still given."""
        fakes = FakeLeaders({
            ("h1", 9001): succeed(ReplicaStatusResponse(NO_ERROR, (
                ReplicaStatus(0, NotLeader.code), ReplicaStatus(2, NO_ERROR, 0, 7, 9, ())))),
            ("h2", 9002): fail(ConnectionFailed("cannot connect to broker h2:9002: refused")),
        })
        progress, problems = self.successResultOf(self.ask(fakes))
        self.assertEqual(progress, {2: PartitionProgress(2, 1, 0, 7, {3: None, 1: 9, 2: None})})
        self.assertEqual(problems, [
            "orders partition 0: broker 1 answers NotLeader (the leader changed since the metadata was read?)",
            "orders partition 1: cannot ask leader broker 2 at h2:9002: cannot connect to broker h2:9002: refused",
        ])
        fakes = FakeLeaders({("h1", 9001): fail(BrokerTimeout("broker h1:9001 did not answer within 5 s"))})
        progress, problems = self.successResultOf(self.ask(fakes, {1: ADDRESSES[1]}))
        self.assertEqual(progress, {})
        self.assertEqual(problems, [
            "orders partitions 0, 2: cannot ask leader broker 1 at h1:9001: broker h1:9001 did not answer within 5 s",
            "orders partition 1: leader broker 2 is not among the live brokers",
        ])
        self.assertTrue(all(c.closed for c in fakes.connections))
