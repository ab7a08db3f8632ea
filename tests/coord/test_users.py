"""The users' credentials in ZooKeeper (twlog.coord.users) on a FakeZooKeeper: Kafka's layout, and the broker's
cache following additions, changes and deletions through watches, and after a lost connection."""

from __future__ import annotations

from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.coord.users import USERS, UserCache, UserStore, user_path
from twlog.security.credentials import ScramCredential, user_config

ONE = ScramCredential(b"salt1", b"stored1", b"server1", 4096)
TWO = ScramCredential(b"salt2", b"stored2", b"server2", 8192)


class UsersTests(SynchronousTestCase):
    def setUp(self) -> None:
        server = FakeZooKeeperServer()
        self.admin = FakeZooKeeper(server)
        self.broker_zk = FakeZooKeeper(server)
        self.successResultOf(self.admin.start())
        self.successResultOf(self.broker_zk.start())
        self.store = UserStore(self.admin)
        self.events: list[dict] = []
        self.patch(UserCache, "_log", Logger(observer=self.events.append))
        self.cache = UserCache(self.broker_zk)

    def test_store_writes_kafkas_layout(self) -> None:
        """add writes /config/users/<user> as Kafka does and says whether it replaced; list and delete."""
        self.assertFalse(self.successResultOf(self.store.add("bob", {"SCRAM-SHA-256": ONE})))
        self.assertTrue(self.successResultOf(self.store.add("bob", {"SCRAM-SHA-256": ONE, "SCRAM-SHA-512": TWO})))
        value, _ = self.successResultOf(self.admin.get(user_path("bob")))
        self.assertEqual(value, user_config({"SCRAM-SHA-256": ONE, "SCRAM-SHA-512": TWO}))
        self.successResultOf(self.admin.create(user_path("odd"), b"{not json"))
        self.assertEqual(self.successResultOf(self.store.list()),
                         [("bob", ("SCRAM-SHA-256", "SCRAM-SHA-512")), ("odd", None)])
        self.assertTrue(self.successResultOf(self.store.delete("bob")))
        self.assertFalse(self.successResultOf(self.store.delete("bob")))
        self.assertEqual(USERS, "/config/users")

    def test_cache_follows_changes(self) -> None:
        """Users added, changed and deleted after the start are seen at once; a malformed record is left out."""
        self.successResultOf(self.store.add("bob", {"SCRAM-SHA-256": ONE}))
        self.successResultOf(self.cache.start())
        self.assertEqual(self.cache.lookup("bob"), {"SCRAM-SHA-256": ONE})
        self.assertIsNone(self.cache.lookup("alice"))
        self.successResultOf(self.store.add("alice", {"SCRAM-SHA-512": TWO}))
        self.assertEqual(self.cache.lookup("alice"), {"SCRAM-SHA-512": TWO})
        self.successResultOf(self.store.add("bob", {"SCRAM-SHA-512": TWO}))
        self.assertEqual(self.cache.lookup("bob"), {"SCRAM-SHA-512": TWO})
        self.successResultOf(self.store.delete("bob"))
        self.assertIsNone(self.cache.lookup("bob"))
        self.successResultOf(self.admin.set(user_path("alice"), b'{"version":1,"config":{"SCRAM-SHA-256":"x"}}'))
        self.assertIsNone(self.cache.lookup("alice"))
        [line] = [e for e in self.events if "cannot authenticate" in e["log_format"]]
        self.assertEqual(line["user"], "alice")

    def test_cache_reads_again_after_a_lost_connection(self) -> None:
        """Changes made while the broker's session was cut off are read when it is back."""
        self.successResultOf(self.cache.start())
        self.broker_zk.suspend()
        self.successResultOf(self.store.add("carol", {"SCRAM-SHA-256": ONE}))
        self.assertIsNone(self.cache.lookup("carol"))
        self.broker_zk.reconnect()
        self.assertEqual(self.cache.lookup("carol"), {"SCRAM-SHA-256": ONE})
        self.successResultOf(self.store.delete("carol"))  # and the watches are set again
        self.assertIsNone(self.cache.lookup("carol"))
        self.cache.stop()
        self.successResultOf(self.store.add("dave", {"SCRAM-SHA-256": ONE}))
        self.assertIsNone(self.cache.lookup("dave"))
