"""The ZooKeeper reads and writes of consumer groups, on a FakeZooKeeper."""

from __future__ import annotations

from twisted.internet.defer import succeed
from twisted.logger import Logger, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.consumer import membership
from twlog.consumer.membership import (
    Ownership,
    delete_session_owners,
    deregister_member,
    parse_offset,
    read_members,
    read_offsets,
    register_member,
    write_offsets,
)
from twlog.coord import paths
from twlog.errors import RebalanceFailed
from twlog.partition import TopicPartition

P0, P1 = TopicPartition("t", "0-0"), TopicPartition("t", "0-1")


class RegistryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.server = FakeZooKeeperServer()
        self.zk, self.other = FakeZooKeeper(self.server), FakeZooKeeper(self.server)
        self.zk.start()
        self.other.start()

    def test_members(self) -> None:
        """Members are read with their subscriptions; an unreadable one is None (and logged)."""
        self.successResultOf(register_member(self.zk, "g", "a", b'{"t":2}', attempts=1, pause=None))
        self.successResultOf(self.other.create(paths.consumer_ids_path("g", "b"), b"junk!", ephemeral=True))
        self.assertEqual(self.successResultOf(read_members(self.zk, "g")), {"a": {"t": 2}, "b": None})
        self.successResultOf(deregister_member(self.zk, "g", "a"))
        self.successResultOf(deregister_member(self.zk, "g", "a"))  # gone already: fine
        self.assertEqual(list(self.successResultOf(read_members(self.zk, "g"))), ["b"])
        self.assertEqual(self.successResultOf(read_members(self.zk, "nobody")), {})

    def test_07_era_member_values(self) -> None:
        """A bare topic name is one stream of it; any other unreadable value is skipped with a log line
        naming its path, and the other members still read."""
        logged = []
        self.patch(membership, "_log", Logger(observer=logged.append))
        for member, value in (("a", b'{"t":2}'), ("bare", b"t\n"), ("wild", b"white_list:1:.*"), ("bin", b"\xff")):
            self.successResultOf(self.other.create(paths.consumer_ids_path("g", member), value, ephemeral=True,
                                                   makepath=True))
        members = self.successResultOf(read_members(self.zk, "g"))
        self.assertEqual(members, {"a": {"t": 2}, "bare": {"t": 1}, "wild": None, "bin": None})
        lines = sorted(formatEvent(e) for e in logged)
        self.assertEqual(len(lines), 2)
        self.assertIn("/consumers/g/ids/bin holds an unreadable subscription", lines[0])
        self.assertIn("/consumers/g/ids/wild holds an unreadable subscription", lines[1])

    def test_register_member_own_and_others(self) -> None:
        """A node of this session is updated; one of another session is waited for, then refused."""
        self.successResultOf(register_member(self.zk, "g", "a", b"1", attempts=1, pause=None))
        self.successResultOf(register_member(self.zk, "g", "a", b"2", attempts=1, pause=None))
        self.assertEqual(self.successResultOf(self.zk.get(paths.consumer_ids_path("g", "a")))[0], b"2")
        pauses = []
        d = register_member(self.other, "g", "a", b"3", attempts=3, pause=lambda n: succeed(pauses.append(n)))
        self.failureResultOf(d, RebalanceFailed)
        self.assertEqual(pauses, [1, 2])

    def test_offsets(self) -> None:
        """Offsets round-trip; missing or garbage ones read as None."""
        self.assertEqual(self.successResultOf(write_offsets(self.zk, "g", [(P0, 7)])), [True])
        self.successResultOf(self.zk.set_or_create(paths.offset_path("g", "t", P1.name), b"junk"))
        self.assertEqual(self.successResultOf(read_offsets(self.zk, "g", [P0, P1, TopicPartition("t", "9-9")])),
                         {P0: 7, P1: None, TopicPartition("t", "9-9"): None})

    def test_offset_values_read_leniently(self) -> None:
        """Whitespace, newlines and NULs around the number are ignored; anything else is no offset."""
        for value, offset in ((b"12\n", 12), (b" 12 \r\n", 12), (b"12\x00", 12), (b"\t0", 0), (b"-5", None),
                              (b"1 2", None), (b"", None), (b"0x10", None), (b"\xff", None)):
            self.assertEqual(parse_offset(value), offset, value)
        self.successResultOf(self.zk.set_or_create(paths.offset_path("g", "t", P0.name), b" 4096\n"))
        self.assertEqual(self.successResultOf(read_offsets(self.zk, "g", [P0])), {P0: 4096})

    def test_ownership(self) -> None:
        """Claims create owner nodes; another session's node is a conflict; release deletes ours only."""
        ownership = Ownership(self.zk, "g")
        self.successResultOf(self.other.create(paths.owner_path("g", "t", P1.name), b"x-0", ephemeral=True,
                                               makepath=True))
        conflicts = self.successResultOf(ownership.claim_all({P0: "a-0", P1: "a-0"}, lambda: None))
        self.assertEqual((conflicts, ownership.held), (["t:0-1"], {P0}))
        self.assertTrue(self.successResultOf(ownership.claim(P0, "a-1", lambda: None)))  # ours: value updated
        self.assertEqual(self.successResultOf(self.zk.get(paths.owner_path("g", "t", P0.name)))[0], b"a-1")
        self.successResultOf(ownership.release())
        self.assertEqual(ownership.held, set())
        self.assertEqual(self.successResultOf(self.zk.children(paths.owner_path("g", "t"))), [P1.name])

    def test_delete_session_owners(self) -> None:
        """Owner nodes of this session not in keep are deleted; others' and kept ones stay."""
        for tp, zk in ((P0, self.zk), (P1, self.zk), (TopicPartition("t", "1-0"), self.other)):
            self.successResultOf(zk.create(paths.owner_path("g", "t", tp.name), b"s", ephemeral=True, makepath=True))
        self.successResultOf(delete_session_owners(self.zk, "g", ["t", "u"], {P1}))
        self.assertEqual(self.successResultOf(self.zk.children(paths.owner_path("g", "t"))), ["0-1", "1-0"])
