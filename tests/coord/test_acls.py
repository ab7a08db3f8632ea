"""ACLs in ZooKeeper (twlog.coord.acls): Kafka's layout, compare-and-set changes, and the broker's watched cache,
on the fake ZooKeeper."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.fakezk import FakeZooKeeper
from twlog.coord.acls import CHANGE_EXPIRY_MS, AclCache, change_acls, pattern_path, read_acls
from twlog.security.acls import (
    AccessControlEntry,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    encode_acls,
)

BOB = AccessControlEntry("User:bob", Permission.ALLOW, Operation.WRITE)
EVE = AccessControlEntry("User:eve", Permission.ALLOW, Operation.READ)
DENY_EVE = AccessControlEntry("User:eve", Permission.DENY, Operation.READ)
CLICKS = ResourcePattern(ResourceType.TOPIC, "clicks")
LOGS = ResourcePattern(ResourceType.TOPIC, "logs-", PatternType.PREFIXED)


class StoreTests(TestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()

    async def test_kafkas_layout(self) -> None:
        await change_acls(self.zk, CLICKS, add={BOB})
        await change_acls(self.zk, LOGS, add={EVE})
        await change_acls(self.zk, ResourcePattern(ResourceType.GROUP, "billing"), add={EVE})
        nodes = self.zk.server.nodes
        self.assertEqual(nodes["/kafka-acl/Topic/clicks"].value, b'{"version":1,"acls":[{"principal":"User:bob",'
                         b'"permissionType":"Allow","operation":"Write","host":"*"}]}')
        self.assertIn("/kafka-acl-extended/prefixed/Topic/logs-", nodes)
        self.assertIn("/kafka-acl/Group/billing", nodes)
        self.assertEqual(await read_acls(self.zk), {CLICKS: {BOB}, LOGS: {EVE},
                                                    ResourcePattern(ResourceType.GROUP, "billing"): {EVE}})

    async def test_add_merges_remove_takes_out_and_deletes_the_empty_node(self) -> None:
        self.assertEqual(await change_acls(self.zk, CLICKS, add={BOB}), {BOB})
        self.assertEqual(await change_acls(self.zk, CLICKS, add={EVE, BOB}), {BOB, EVE})
        self.assertEqual(await change_acls(self.zk, CLICKS, remove={BOB}), {EVE})
        self.assertEqual(await change_acls(self.zk, CLICKS, remove={EVE}), frozenset())
        self.assertNotIn(pattern_path(CLICKS), self.zk.server.nodes)
        self.assertEqual(await change_acls(self.zk, CLICKS, remove={EVE}), frozenset())  # nothing there: nothing done

    async def test_concurrent_adds_lose_nothing(self) -> None:
        """Two writers reading the same version: the second's set fails its compare-and-set, and it reads again."""
        await change_acls(self.zk, CLICKS, add={BOB})
        other = FakeZooKeeper(self.zk.server)
        other.start()
        self.zk.hold()
        first = Deferred.fromCoroutine(change_acls(self.zk, CLICKS, add={EVE}))  # read done, its answer held
        await change_acls(other, CLICKS, add={DENY_EVE})  # changes the node meanwhile
        self.zk.flush()
        self.assertEqual(await first, {BOB, EVE, DENY_EVE})
        self.assertEqual((await read_acls(other))[CLICKS], {BOB, EVE, DENY_EVE})

    async def test_concurrent_creates_lose_nothing(self) -> None:
        other = FakeZooKeeper(self.zk.server)
        other.start()
        self.zk.hold()
        first = Deferred.fromCoroutine(change_acls(self.zk, CLICKS, add={EVE}))  # found no node
        await change_acls(other, CLICKS, add={BOB})
        self.zk.flush()
        self.assertEqual(await first, {BOB, EVE})

    async def test_kafkas_change_notifications(self) -> None:
        """Each change writes Kafka's notification (none when nothing changes); those older than 15 minutes go."""
        await change_acls(self.zk, CLICKS, add={BOB}, now_ms=0)
        await change_acls(self.zk, CLICKS, add={BOB}, now_ms=0)  # no change: no notification
        await change_acls(self.zk, LOGS, add={EVE}, now_ms=0)
        nodes = self.zk.server.nodes
        literal = sorted(p for p in nodes if p.startswith("/kafka-acl-changes/"))
        self.assertEqual(literal, ["/kafka-acl-changes/acl_changes_0000000000"])
        self.assertEqual(nodes[literal[0]].value, b"Topic:clicks")
        self.assertEqual(nodes["/kafka-acl-extended-changes/acl_changes_0000000000"].value,
                         b'{"version":1,"resourceType":"Topic","name":"logs-","patternType":"PREFIXED"}')
        # (The fake server's ctimes are its zxids: "15 minutes later" is CHANGE_EXPIRY_MS past them.)
        await change_acls(self.zk, CLICKS, remove={BOB}, now_ms=CHANGE_EXPIRY_MS + nodes[literal[0]].ctime + 1)
        self.assertEqual(sorted(p for p in nodes if p.startswith("/kafka-acl-changes/")),
                         ["/kafka-acl-changes/acl_changes_0000000001"])

    def test_names_that_cannot_be_nodes(self) -> None:
        for name in ("a/b", ".", ".."):
            self.assertRaises(AclError, pattern_path, ResourcePattern(ResourceType.GROUP, name))


class CacheTests(TestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()
        self.cache = AclCache(self.zk, super_users={"User:admin"})

    def may(self, principal: str, operation: Operation, name: str = "clicks") -> bool:
        return self.cache.authorize(principal, "10.0.0.1", operation, ResourceType.TOPIC, name)

    async def test_fails_closed_until_read(self) -> None:
        await change_acls(self.zk, CLICKS, add={BOB})
        self.assertFalse(self.may("User:bob", Operation.WRITE))
        self.assertTrue(self.may("User:admin", Operation.WRITE))
        self.zk.hold()
        started = Deferred.fromCoroutine(self.cache.start())
        self.assertFalse(self.may("User:bob", Operation.WRITE))
        self.zk.flush()
        await started
        self.assertTrue(self.cache.ready)
        self.assertTrue(self.may("User:bob", Operation.WRITE))

    async def test_follows_changes_without_restart(self) -> None:
        """Adds, removals, new prefixed patterns and deleted nodes reach the cache by their watches."""
        await change_acls(self.zk, CLICKS, add={BOB})
        await self.cache.start()
        writer = FakeZooKeeper(self.zk.server)
        writer.start()
        await change_acls(writer, CLICKS, add={EVE})
        self.assertTrue(self.may("User:eve", Operation.READ))
        await change_acls(writer, CLICKS, add={DENY_EVE})
        self.assertFalse(self.may("User:eve", Operation.READ))
        await change_acls(writer, LOGS, add={EVE})
        self.assertTrue(self.may("User:eve", Operation.READ, "logs-1"))
        await change_acls(writer, CLICKS, remove={BOB, EVE, DENY_EVE})
        self.assertFalse(self.may("User:bob", Operation.WRITE))
        await change_acls(writer, CLICKS, add={BOB})  # created again
        self.assertTrue(self.may("User:bob", Operation.WRITE))

    async def test_one_watch_per_node(self) -> None:
        """A node read again (its directory's watch, then its own) holds one watch function, not one per read."""
        await change_acls(self.zk, CLICKS, add={BOB})
        await self.cache.start()
        for _ in range(3):
            await change_acls(self.zk, CLICKS, add={EVE})
            await change_acls(self.zk, CLICKS, remove={EVE})
        self.assertEqual(len(self.zk.server._data_watches.get(pattern_path(CLICKS), {})), 1)

    async def test_a_bad_value_keeps_what_the_node_held(self) -> None:
        """A value not in Kafka's layout is ignored (logged once): a Deny read before stays in force."""
        await change_acls(self.zk, CLICKS, add={EVE, DENY_EVE})
        await self.cache.start()
        await self.zk.set(pattern_path(CLICKS), b"not json")
        self.assertFalse(self.may("User:eve", Operation.READ))
        self.assertEqual(len(self.flushLoggedErrors()), 0)
        await self.zk.set(pattern_path(CLICKS), encode_acls({EVE}))
        self.assertTrue(self.may("User:eve", Operation.READ))

    async def test_reads_everything_again_after_a_new_session(self) -> None:
        """Changes made while the session was lost are read on reconnecting; the old ACLs decide meanwhile."""
        await change_acls(self.zk, CLICKS, add={BOB})
        await self.cache.start()
        self.zk.expire()
        self.assertTrue(self.may("User:bob", Operation.WRITE))
        writer = FakeZooKeeper(self.zk.server)
        writer.start()
        await change_acls(writer, CLICKS, remove={BOB})
        await change_acls(writer, LOGS, add={EVE})
        self.zk.reconnect()
        self.assertFalse(self.may("User:bob", Operation.WRITE))
        self.assertTrue(self.may("User:eve", Operation.READ, "logs-x"))
        await change_acls(writer, CLICKS, add={BOB})  # the new session's watches work
        self.assertTrue(self.may("User:bob", Operation.WRITE))

    async def test_stop(self) -> None:
        await self.cache.start()
        self.cache.stop()
        await change_acls(self.zk, CLICKS, add={BOB})
        self.assertFalse(self.may("User:bob", Operation.WRITE))
