"""ACLs end to end: C{twlog acls} against the suite's real ZooKeeper, and a real broker started with --acls that
the real CLI reaches as User:ANONYMOUS: refused, allowed once an ACL is added, refused again once it is removed."""

from __future__ import annotations

import json
import signal

from twisted.internet.defer import gatherResults
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.test_cli import one_line, twlog
from tests.integration.test_cli_broker import free_port
from tests.integration.test_zk_acls import ALICE, CLUSTER, Secured
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.coord.acls import read_acls
from twlog.coord.zkauth import WORLD_READ, identity_acl
from twlog.coord.zksecure import record_user_digest
from twlog.security import ANONYMOUS
from twlog.security.acls import (
    AccessControlEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

CLICKS = ResourcePattern(ResourceType.TOPIC, "clicks")


class AclsCommandTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.zk = await connect(self)
        self.hosts = self.zk.hosts

    async def test_add_list_remove(self) -> None:
        status, out, err = await twlog("acls", "add", "-z", self.hosts, "--allow-principal", "User:bob",
                                       "--operation", "Write", "--operation", "Read", "--topic", "clicks",
                                       "--topic", "logs-", "--resource-pattern-type", "prefixed")
        self.assertEqual(status, 0, err)
        self.assertIn(b"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=logs-, "
                      b"patternType=PREFIXED)`:\n\t(principal=User:bob, host=*, operation=READ, "
                      b"permissionType=ALLOW)\n", out)
        value, _ = await self.zk.get("/kafka-acl-extended/prefixed/Topic/logs-")
        self.assertEqual(json.loads(value)["version"], 1)
        notified = await self.zk.children("/kafka-acl-extended-changes")  # Kafka's change notifications
        self.assertEqual(len(notified), 2)
        self.assertEqual(json.loads((await self.zk.get(f"/kafka-acl-extended-changes/{min(notified)}"))[0]),
                         {"version": 1, "resourceType": "Topic", "name": "clicks", "patternType": "PREFIXED"})
        status, out, err = await twlog("acls", "add", "-z", self.hosts, "--deny-principal", "User:eve",
                                       "--deny-host", "10.0.0.7", "--topic", "clicks")
        self.assertEqual(status, 0, err)
        self.assertEqual((await self.zk.get("/kafka-acl/Topic/clicks"))[0],
                         b'{"version":1,"acls":[{"principal":"User:eve","permissionType":"Deny","operation":"All",'
                         b'"host":"10.0.0.7"}]}')
        status, out, err = await twlog("acls", "list", "-z", self.hosts, "--json")
        self.assertEqual(status, 0, err)
        listed = {(p["resourceType"], p["name"], p["patternType"]): p["acls"] for p in json.loads(out)}
        self.assertEqual(set(listed), {("Topic", "clicks", "LITERAL"), ("Topic", "clicks", "PREFIXED"),
                                       ("Topic", "logs-", "PREFIXED")})
        status, out, _ = await twlog("acls", "list", "-z", self.hosts, "--topic", "logs-2024",
                                     "--resource-pattern-type", "match", "--principal", "User:bob")
        self.assertEqual(out.count(b"Current ACLs"), 1, out)
        self.assertIn(b"`ResourcePattern(resourceType=TOPIC, name=logs-, patternType=PREFIXED)`", out)
        status, _, err = await twlog("acls", "remove", "-z", self.hosts, "--topic", "clicks")
        self.assertEqual(status, 2)
        one_line(self, err)
        self.assertIn(b"stdin is not a terminal: add --force", err)
        status, out, err = await twlog("acls", "remove", "-z", self.hosts, "--topic", "clicks", "--force")
        self.assertEqual(status, 0, err)
        self.assertEqual(await self.zk.exists("/kafka-acl/Topic/clicks"), None)
        status, out, err = await twlog("acls", "remove", "-z", self.hosts, "--allow-principal", "User:bob",
                                       "--operation", "Read", "--topic", "logs-", "--resource-pattern-type",
                                       "prefixed", "--force")
        self.assertEqual(status, 0, err)
        self.assertEqual(await read_acls(self.zk), {
            ResourcePattern(ResourceType.TOPIC, "clicks", PatternType.PREFIXED):
                {AccessControlEntry("User:bob", Permission.ALLOW, Operation.WRITE),
                 AccessControlEntry("User:bob", Permission.ALLOW, Operation.READ)},
            ResourcePattern(ResourceType.TOPIC, "logs-", PatternType.PREFIXED):
                {AccessControlEntry("User:bob", Permission.ALLOW, Operation.WRITE)}})

    async def test_concurrent_adds_lose_nothing(self) -> None:
        """Eight `twlog acls add` at once on one topic: every ACL is there."""
        results = await gatherResults([
            twlog("acls", "add", "-z", self.hosts, "--allow-principal", f"User:u{i}", "--operation", "Read",
                  "--topic", "clicks") for i in range(8)])
        self.assertEqual([status for status, _, _ in results], [0] * 8, results)
        self.assertEqual({e.principal for e in (await read_acls(self.zk))[CLICKS]}, {f"User:u{i}" for i in range(8)})

    async def test_mistakes_in_one_line(self) -> None:
        for argv in (["add", "--allow-principal", "User:bob", "--operation", "Write", "--group", "g"],
                     ["add", "--allow-principal", "User:bob"],
                     ["list", "--principal", "bob"]):
            status, _, err = await twlog("acls", *argv, "-z", self.hosts)
            self.assertIn(status, (1, 2), err)
            one_line(self, err)


class EndToEndTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.hosts = fresh_connect_string()
        self.service = await start_broker(self, zookeeper=self.hosts, acls=True, num_partitions=1,
                                          flush_interval_ms=10)
        self.broker = f"127.0.0.1:{self.service.broker.port}"
        guard = self.service.broker.guard
        await wait_until(lambda: getattr(guard.acls, "ready", False))
        self.cache = guard.acls

    def allowed(self, operation: Operation, topic: str = "clicks") -> bool:
        return self.cache.authorize(ANONYMOUS, "127.0.0.1", operation, ResourceType.TOPIC, topic)

    async def test_refused_then_allowed_then_refused_again(self) -> None:
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "clicks", stdin=b"a\nb\n")
        self.assertEqual(status, 1, err)
        one_line(self, err)
        self.assertIn(b"TopicAuthorizationFailed (error 21)", err)
        self.assertIn(b"clicks", err)
        self.assertIsNone(self.service.logs.get_log("clicks", 0))
        status, _, err = await twlog("acls", "add", "-z", self.hosts, "--allow-principal", ANONYMOUS,
                                     "--operation", "Write", "--operation", "Create", "--operation", "Read",
                                     "--topic", "clicks")
        self.assertEqual(status, 0, err)
        await wait_until(lambda: self.allowed(Operation.READ))  # the broker's watch, without a restart
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "clicks", stdin=b"a\nb\n")
        self.assertEqual(status, 0, err)
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "clicks", "-p", "0-0")
        self.assertEqual((status, out), (0, b"a\nb\n"), err)
        status, out, err = await twlog("topics", "-b", self.broker, "--json")
        self.assertEqual(status, 0, err)
        self.assertIn("clicks", out.decode())
        status, _, err = await twlog("acls", "remove", "-z", self.hosts, "--allow-principal", ANONYMOUS,
                                     "--operation", "Read", "--topic", "clicks", "--force")
        self.assertEqual(status, 0, err)
        await wait_until(lambda: not self.allowed(Operation.READ))
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "clicks", "-p", "0-0")
        self.assertEqual((status, out), (1, b""), err)
        one_line(self, err)
        self.assertIn(b"TopicAuthorizationFailed", err)
        refusals = self.service.broker.guard.refusals
        self.assertEqual((refusals[("Write", "Topic")], refusals[("Read", "Topic")]), (1, 1), refusals)

    async def test_topics_not_described_are_not_listed(self) -> None:
        """A topic the principal may not Describe is left out of `twlog topics` (made by a super-user-free way:
        written while an ACL allowed it, then the ACL removed)."""
        await twlog("acls", "add", "-z", self.hosts, "--allow-principal", ANONYMOUS, "--operation", "All",
                    "--topic", "secret")
        await wait_until(lambda: self.allowed(Operation.WRITE, "secret"))
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "secret", stdin=b"x\n")
        self.assertEqual(status, 0, err)
        status, out, _ = await twlog("topics", "-b", self.broker, "--json")
        self.assertIn("secret", out.decode())
        await twlog("acls", "remove", "-z", self.hosts, "--topic", "secret", "--force")
        await wait_until(lambda: not self.allowed(Operation.WRITE, "secret"))
        status, out, err = await twlog("topics", "-b", self.broker, "--json")
        self.assertEqual(status, 0, err)
        self.assertNotIn("secret", out.decode())


class BrokerOptionTests(TestCase):
    timeout = 120

    async def test_broker_process_with_acls(self) -> None:
        """`twlog broker --zookeeper ZK --acls`: it says when it has read the ACLs, refuses a produce no ACL allows,
        takes it once `twlog acls add` allowed it, and stops cleanly."""
        hosts, port = fresh_connect_string(), free_port()
        started: list = []
        running = twlog("broker", "--port", str(port), "--log-dir", self.mktemp(), "--zookeeper", hosts, "--acls",
                        "--super-users", "User:admin;User:CN=broker,O=x", started=started)
        process, command = started[0]
        await wait_until(lambda: b"read 0 ACL pattern(s) from ZooKeeper" in command.err, timeout_s=30)
        broker = f"127.0.0.1:{port}"
        status, _, err = await twlog("produce", "-b", broker, "-t", "clicks", stdin=b"x\n")
        self.assertEqual(status, 1, err)
        self.assertIn(b"TopicAuthorizationFailed", err)
        await twlog("acls", "add", "-z", hosts, "--allow-principal", ANONYMOUS, "--operation", "Write",
                    "--operation", "Create", "--topic", "clicks")
        for _ in range(50):  # (bounded: the broker's watch brings the ACL in well under a second)
            status, _, err = await twlog("produce", "-b", broker, "-t", "clicks", stdin=b"x\n")
            if status == 0:
                break
        self.assertEqual(status, 0, err)
        process.signalProcess(signal.SIGTERM)
        status, _, err = await running
        self.assertEqual(status, 0, err)
        self.assertIn(b"stopped cleanly", err)

    async def test_acls_without_zookeeper_refused_in_one_line(self) -> None:
        status, out, err = await twlog("broker", "--acls", "--port", "0", "--log-dir", self.mktemp())
        self.assertEqual((status, out), (2, b""))
        one_line(self, err)
        self.assertIn(b"--acls needs --zookeeper (the ACLs are kept there)", err)


class SecuredZooKeeperTests(Secured):
    """With ZooKeeper authentication (docs/security.md, "ZooKeeper"): the ACL nodes are the cluster's, and a
    group's ACLs give its znodes' ACL."""

    timeout = 120

    async def test_only_the_cluster_changes_acls(self) -> None:
        await self.sessions()
        cluster_file = self.credentials_file(CLUSTER)
        service = await start_broker(self, zookeeper=self.hosts, acls=True, zookeeper_credentials_file=cluster_file)
        await wait_until(lambda: getattr(service.broker.guard.acls, "ready", False))
        allow = ("--allow-principal", ANONYMOUS, "--operation", "Write", "--topic", "clicks")
        status, _, err = await twlog("acls", "add", "-z", self.hosts, *allow)
        self.assertEqual(status, 1, err)
        one_line(self, err)
        self.assertIn(b"/kafka-acl/Topic/clicks", err)
        status, _, err = await twlog("acls", "add", "-z", self.hosts, "--zookeeper-credentials-file", cluster_file,
                                     *allow)
        self.assertEqual(status, 0, err)
        await self.assertNoAuth(self.anonymous.set("/kafka-acl/Topic/clicks", b'{"version":1,"acls":[]}'))
        await self.assertNoAuth(self.anonymous.delete("/kafka-acl/Topic/clicks"))
        await wait_until(lambda: service.broker.guard.acls.authorize(
            ANONYMOUS, "127.0.0.1", Operation.WRITE, ResourceType.TOPIC, "clicks"))

    async def test_group_acls_make_the_groups_znode_acl(self) -> None:
        await self.sessions()
        cluster_file = self.credentials_file(CLUSTER)
        alice_id = await record_user_digest(self.cluster, ALICE.user, ALICE.password)
        status, out, err = await twlog("acls", "add", "-z", self.hosts, "--zookeeper-credentials-file", cluster_file,
                                       "--allow-principal", "User:alice", "--operation", "Read", "--group", "etl")
        self.assertEqual(status, 0, err)
        self.assertIn(b"ZooKeeper ACL of group etl's nodes (1): writable by the cluster and User:alice", out)
        self.assertEqual(await self.cluster.get_acls("/consumers/etl"),
                         [identity_acl(CLUSTER.digest_id), identity_acl(alice_id), WORLD_READ])
        await self.alice.create("/consumers/etl/ids/m1", b"{}", makepath=True)  # alice may write the group
        await self.assertNoAuth(self.bob.create("/consumers/etl/ids/m2", b"{}"))
