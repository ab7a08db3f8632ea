"""Tests for twlog.client.leader: a blocking connection that follows a partition's leader on the reader's refreshes."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.client.test_sync import SET, FakeSocket, wait_frame
from twlog.client.leader import LeaderConnection
from twlog.client.reader import PartitionReader
from twlog.client.sync import SyncConnection
from twlog.coord.layout import PartitionLocation
from twlog.errors import ConnectionFailed, LeaderNotAvailable, NotLeader
from twlog.partition import TopicPartition

TP = TopicPartition("t", "0")
FIRST = PartitionLocation(TP, 1, "h1", 9091)
MOVED = PartitionLocation(TP, 2, "h2", 9092)


class Cluster:
    """Stand-ins for discover and for opening connections: each address answers its scripted frames."""

    def __init__(self, answers: dict[tuple[str, int], list[bytes | None]], leaders: list[PartitionLocation]):
        self.answers = answers
        self.leaders = leaders
        self.asked: list[dict] = []
        self.opened: list[tuple[str, int]] = []

    def find(self, topics, **kwargs) -> list[PartitionLocation]:
        self.asked.append(kwargs)
        if not self.leaders:
            raise ConnectionFailed("nobody answers")
        return [self.leaders.pop(0)]

    def connect(self, host: str, port: int, options) -> SyncConnection:
        self.opened.append((host, port))
        sock = FakeSocket(self.answers[host, port])
        return SyncConnection(host, port, options, connect=lambda address, timeout=None: sock)


class LeaderConnectionTests(SynchronousTestCase):
    def test_follows_a_moved_leader(self) -> None:
        """NotLeader: the partition is discovered again from the same brokers, and read from its new leader."""
        cluster = Cluster({("h1", 9091): [wait_frame(b"", NotLeader.code)], ("h2", 9092): [wait_frame(SET)]},
                          [MOVED])
        leader = LeaderConnection(FIRST, brokers="h1:9091", find=cluster.find, connect=cluster.connect)
        fetched = leader.read(PartitionReader(TP, 0, max_bytes=100))
        self.assertEqual(fetched.next_offset, 33)
        self.assertEqual(cluster.opened, [("h1", 9091), ("h2", 9092)])
        self.assertEqual(leader.location, MOVED)
        self.assertEqual(cluster.asked[0]["brokers"], "h1:9091")
        self.assertFalse(cluster.asked[0]["check_reachable"])

    def test_same_leader_reconnects(self) -> None:
        """A broken connection whose partition did not move: the same address is asked again."""
        cluster = Cluster({("h1", 9091): [None, wait_frame(SET)]}, [FIRST])
        leader = LeaderConnection(FIRST, zookeeper="zk:2181", find=cluster.find, connect=cluster.connect)
        self.assertEqual(leader.read(PartitionReader(TP, 0, max_bytes=100)).next_offset, 33)
        self.assertEqual(cluster.opened, [("h1", 9091)])

    def test_discovery_fails_then_the_bound(self) -> None:
        """When the layout cannot be read the same address is tried; after the reader's bound the error surfaces."""
        cluster = Cluster({("h1", 9091): [wait_frame(b"", LeaderNotAvailable.code)] * 4}, [])
        leader = LeaderConnection(FIRST, brokers="h1:9091", find=cluster.find, connect=cluster.connect)
        self.assertRaises(LeaderNotAvailable, leader.read, PartitionReader(TP, 0, max_bytes=100))
        self.assertEqual(len(cluster.asked), 3)

    def test_waits_while_the_leader_stays(self) -> None:
        """With C{wait_s}, a refresh that finds the leader where it was (killed, its session not expired yet)
        waits before the request goes again; one that finds it moved does not."""
        cluster = Cluster({("h1", 9091): [wait_frame(b"", LeaderNotAvailable.code), wait_frame(b"", NotLeader.code)],
                           ("h2", 9092): [wait_frame(SET)]}, [FIRST, MOVED])
        slept: list[float] = []
        leader = LeaderConnection(FIRST, zookeeper="zk:2181", find=cluster.find, connect=cluster.connect, wait_s=1.0,
                                  sleep=slept.append)
        self.assertEqual(leader.read(PartitionReader(TP, 0, max_bytes=100)).next_offset, 33)
        self.assertEqual((slept, leader.location), ([1.0], MOVED))

    def test_without_a_source_it_reconnects(self) -> None:
        """Given neither brokers nor ZooKeeper, a refresh keeps the address (nothing to ask)."""
        cluster = Cluster({("h1", 9091): [wait_frame(b"", NotLeader.code), wait_frame(SET)]}, [])
        with LeaderConnection(FIRST, find=cluster.find, connect=cluster.connect) as leader:
            self.assertEqual(leader.read(PartitionReader(TP, 0, max_bytes=100)).next_offset, 33)
        self.assertEqual(cluster.asked, [])


class _Offsets:
    """A connection whose OFFSETS answer is C{answer} (a value, or an error raised)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.asked: list[tuple[str, int, int]] = []

    def offset(self, topic: str, partition: int, time: int) -> int:
        self.asked.append((topic, partition, time))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        pass


class LeaderOffsetTests(SynchronousTestCase):
    def test_offset_follows_a_moved_leader(self) -> None:
        """NotLeader, then a broker gone: the partition is found again each time; its leader then answers."""
        answers = {("h1", 9091): _Offsets(NotLeader("no")), ("h3", 9093): _Offsets(ConnectionFailed("refused")),
                   ("h2", 9092): _Offsets(42)}
        found = [PartitionLocation(TP, 3, "h3", 9093), MOVED]
        leader = LeaderConnection(FIRST, zookeeper="zk:2181", find=lambda topics, **k: [found.pop(0)],
                                  connect=lambda host, port, options: answers[host, port])
        self.assertEqual(leader.offset(-1), 42)
        self.assertEqual(answers["h2", 9092].asked, [("t", 0, -1)])
        self.assertEqual(leader.location, MOVED)

    def test_offset_gives_up(self) -> None:
        """A leader that does not come: the error, after max_refreshes refreshes."""
        stuck = _Offsets(LeaderNotAvailable("none"))
        leader = LeaderConnection(FIRST, zookeeper="zk:2181", find=lambda topics, **k: [FIRST],
                                  connect=lambda host, port, options: stuck)
        self.assertRaises(LeaderNotAvailable, leader.offset, -2, max_refreshes=2)
        self.assertEqual(len(stuck.asked), 3)
