"""ZooKeeper authentication and znode ACLs against the suite's real ZooKeeper (docs/security.md, "ZooKeeper").

A broker (and the admin tools) given the cluster's credentials create znodes only that identity may write;
a client without credentials can still read them, but neither unregister a broker, nor change replication state,
nor rewrite a secured group's offsets (ZooKeeper answers NoAuth); a group's members, authenticated as the users
with Read on it, write its nodes, and another user cannot.  One test per protected path family.
"""

from __future__ import annotations

import os
import signal

from kazoo.protocol.connection import _CONNECTION_DROP
from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.groups import FAST, Collector, run_twlog
from tests.integration.test_cli import one_line, twlog
from tests.integration.test_replication_zk import until
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.broker import service as service_module
from twlog.client.connection import BrokerConnection
from twlog.client.topics import create_replicated
from twlog.consumer.group import GroupConsumer
from twlog.coord import paths
from twlog.coord.replication import store
from twlog.coord.zk import NoAuthError, NoNodeError, ZooKeeper
from twlog.coord.zkauth import (
    ACL,
    CONFIG_USERS,
    WORLD_ALL,
    WORLD_READ,
    ZooKeeperCredentials,
    identity_acl,
)
from twlog.coord.zksecure import digest_path, record_user_digest, secure_tree, set_group_acl
from twlog.mirror.mirror import Mirror, MirrorSettings
from twlog.protocol.codec import ACK_ALL, ACK_FLUSHED, AckProduceRequest, FetchRequest, ProduceRequest
from twlog.storage.fetched import iter_messages
from twlog.storage.message import encode_message_set

CLUSTER = ZooKeeperCredentials("twlog-cluster", "cluster-secret")
ALICE = ZooKeeperCredentials("alice", "alice-secret")
BOB = ZooKeeperCredentials("bob", "bob-secret")


class Secured(TestCase):
    """A fresh chroot, with sessions as the cluster, as alice, as bob and as nobody."""

    timeout = 60

    async def sessions(self) -> None:
        self.hosts = fresh_connect_string()
        self.cluster = await connect(self, self.hosts, credentials=CLUSTER)
        self.alice = await connect(self, self.hosts, credentials=ALICE)
        self.bob = await connect(self, self.hosts, credentials=BOB)
        self.anonymous = await connect(self, self.hosts, credentials=None)

    def credentials_file(self, credentials: ZooKeeperCredentials) -> str:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(f"# the cluster's ZooKeeper identity\n{credentials.user}:{credentials.password}\n")
        os.chmod(path, 0o600)
        return path

    async def assertNoAuth(self, d) -> None:
        try:
            await d
        except NoAuthError:
            return
        self.fail("ZooKeeper allowed a write it should have refused (no NoAuth)")


class BrokerRegistrationTests(Secured):
    async def test_secured_broker_registers_serves_and_cannot_be_unregistered(self) -> None:
        await self.sessions()
        broker = await start_broker(self, zookeeper=self.hosts, broker_id=3, num_partitions=1, flush_messages=1,
                                    zookeeper_credentials_file=self.credentials_file(CLUSTER))
        self.assertEqual(broker.zookeeper.credentials, CLUSTER)
        self.assertEqual(await produce_and_read(broker.broker.port, [b"one", b"two"]), [b"one", b"two"])
        topic_node = paths.broker_topic_path("clicks", 3)
        await appeared(self.anonymous, topic_node)

        # Readable by everyone: a 0.7 client or a producer without credentials still finds the broker.
        value, _ = await self.anonymous.get(paths.broker_id_path(3))
        self.assertTrue(value.decode().endswith(f":{broker.broker.port}"))
        cluster_only = [identity_acl(CLUSTER.digest_id), WORLD_READ]
        for path in ("/brokers", paths.BROKER_IDS, paths.broker_id_path(3), topic_node, paths.CONSUMERS):
            self.assertEqual(await self.cluster.get_acls(path), cluster_only, path)
        # ZooKeeper shows the others a digest identity without its hash.
        self.assertEqual(await self.anonymous.get_acls(paths.BROKER_IDS), [ACL("digest", "twlog-cluster:x", 31),
                                                                           WORLD_READ])
        # Nobody else may unregister it, take its id, or rewrite its topics.
        await self.assertNoAuth(self.anonymous.delete(paths.broker_id_path(3)))
        await self.assertNoAuth(self.anonymous.set(paths.broker_id_path(3), b"x:evil:1"))
        await self.assertNoAuth(self.anonymous.create(paths.broker_id_path(4), b"x:evil:1", ephemeral=True))
        await self.assertNoAuth(self.alice.delete(topic_node))
        await self.assertNoAuth(self.anonymous.set(topic_node, b"99"))
        await self.assertNoAuth(self.anonymous.create("/brokers/other", b""))
        self.assertIsNotNone(await self.anonymous.exists(paths.broker_id_path(3)))
        # The admin tools share the cluster's identity: they may.
        await self.cluster.set(topic_node, b"1")


class BrokerCommandTests(Secured):
    timeout = 120

    async def test_twlog_broker_with_a_credentials_file(self) -> None:
        """twlog broker --zookeeper-credentials-file (how twlog local starts its brokers): its registration is the
        cluster's; SIGTERM deregisters it (its own nodes); a bad file stops it before it serves, in one line."""
        await self.sessions()
        cluster_file = self.credentials_file(CLUSTER)
        started: list = []
        running = twlog("broker", "--port", "0", "--log-dir", self.mktemp(), "--broker-id", "5", "-z", self.hosts,
                        "--zookeeper-credentials-file", cluster_file, started=started)
        process, command = started[0]
        # Started: registered (its held log is shown then).  (A SIGTERM before that abandons the start: see
        # tests.cli.test_foreground.ServeTests.test_stopped_while_starting.)
        await wait_until(lambda: b"registered in ZooKeeper" in command.err or running.called, timeout_s=30)
        self.assertFalse(running.called, command.err)
        self.assertEqual(await self.cluster.get_acls(paths.broker_id_path(5)),
                         [identity_acl(CLUSTER.digest_id), WORLD_READ])
        await self.assertNoAuth(self.anonymous.delete(paths.broker_id_path(5)))
        process.signalProcess(signal.SIGTERM)
        status, _, err = await running
        self.assertEqual(status, 0, err)
        self.assertIn(b"broker 5 deregistered from ZooKeeper", err)
        self.assertIsNone(await self.anonymous.exists(paths.broker_id_path(5)))
        status, _, err = await twlog("broker", "--port", "0", "--log-dir", self.mktemp(), "-z", self.hosts,
                                     "--zookeeper-credentials-file", cluster_file + "-missing")
        self.assertEqual(status, 2)
        self.assertIn(b"cannot read the ZooKeeper credentials file", err)
        one_line(self, err)


class DroppingZooKeeper(ZooKeeper):
    """A broker's session whose connection drops (kazoo's testing hook) just before it first claims its id: the
    claim fails with ConnectionLoss, and kazoo reconnects to the same session."""

    dropped = 0

    def create(self, path: str, *args, **kwargs):
        if path.startswith(paths.BROKER_IDS + "/") and not DroppingZooKeeper.dropped:
            DroppingZooKeeper.dropped += 1
            self._client._call(_CONNECTION_DROP, None)
        return super().create(path, *args, **kwargs)


class StartTests(Secured):
    async def test_a_connection_dropped_while_registering_is_retried(self) -> None:
        """A dropped connection (ConnectionLoss, the session lives on) while the broker registers: it registers
        once the session is back, within its connect timeout, rather than fail to start."""
        await self.sessions()
        self.patch(service_module, "ZooKeeper", DroppingZooKeeper)
        self.patch(DroppingZooKeeper, "dropped", 0)
        broker = await start_broker(self, zookeeper=self.hosts, broker_id=7, num_partitions=1, flush_messages=1,
                                    zookeeper_credentials_file=self.credentials_file(CLUSTER))
        self.assertEqual(DroppingZooKeeper.dropped, 1)
        self.assertIsNotNone(broker.registration)
        value, stat = await self.anonymous.get(paths.broker_id_path(7))
        self.assertEqual(stat.ephemeralOwner, broker.zookeeper.session_id)
        self.assertEqual(await produce_and_read(broker.broker.port, [b"after"]), [b"after"])


class ReplicationStateTests(Secured):
    async def test_replication_state_and_controller_are_the_clusters(self) -> None:
        await self.sessions()
        broker = await start_broker(self, zookeeper=self.hosts, broker_id=1, num_partitions=1, flush_messages=1,
                                    zookeeper_credentials_file=self.credentials_file(CLUSTER))
        created = await create_replicated(self.cluster, "orders", 1, 1, clock=reactor)
        self.assertTrue(created.started)
        state_path = paths.partition_state_path("orders", 0)
        state, stat = await store.read_state(self.anonymous, "orders", 0)
        self.assertEqual(state.leader, 1)
        for path in (paths.replicated_topic_path("orders"), state_path, paths.CONTROLLER, paths.CONTROLLER_EPOCH):
            self.assertEqual(await self.cluster.get_acls(path), [identity_acl(CLUSTER.digest_id), WORLD_READ], path)
        await self.assertNoAuth(self.anonymous.set(state_path, b'{"version":1,"leader":9,"leader_epoch":99,'
                                                               b'"controller_epoch":1,"isr":[9]}'))
        await self.assertNoAuth(self.alice.set(paths.replicated_topic_path("orders"), b"{}"))
        await self.assertNoAuth(self.anonymous.delete(paths.CONTROLLER))
        await self.assertNoAuth(self.anonymous.set(paths.CONTROLLER_EPOCH, b"99"))
        await self.assertNoAuth(self.anonymous.create(paths.replicated_topic_path("evil"), b"{}"))
        await self.assertNoAuth(self.anonymous.create(paths.delete_topic_path("orders"), b""))
        self.assertEqual((await store.read_state(self.anonymous, "orders", 0))[0].leader, 1)
        self.assertEqual(await produce_and_read(broker.broker.port, [b"x"], topic="orders"), [b"x"])


class SensitivePathTests(Secured):
    async def test_credentials_are_readable_by_the_cluster_alone(self) -> None:
        await self.sessions()
        await self.cluster.create(f"{CONFIG_USERS}/alice", b'{"version":1,"config":{}}', makepath=True)
        identity = await record_user_digest(self.cluster, ALICE.user, ALICE.password)
        self.assertEqual(identity, ALICE.digest_id)
        for path in (CONFIG_USERS, f"{CONFIG_USERS}/alice", digest_path("alice")):
            self.assertEqual(await self.cluster.get_acls(path), [identity_acl(CLUSTER.digest_id)], path)
            await self.assertNoAuth(self.anonymous.get(path))
            await self.assertNoAuth(self.alice.get(path))
        self.assertEqual((await self.cluster.get(digest_path("alice")))[0], ALICE.digest_id.encode())


class GroupTests(Secured):
    async def secured_group(self) -> None:
        await self.sessions()
        self.broker = await start_broker(self, zookeeper=self.hosts, broker_id=0, num_partitions=2, flush_messages=1,
                                         zookeeper_credentials_file=self.credentials_file(CLUSTER))
        for user in (ALICE, BOB):
            await record_user_digest(self.cluster, user.user, user.password)
        self.assertEqual(await set_group_acl(self.cluster, "g", ["User:alice"]), 1)

    async def test_a_member_with_read_commits_and_no_one_else_writes(self) -> None:
        await self.secured_group()
        sent = [b"a", b"b", b"c"]
        await produce_and_read(self.broker.broker.port, sent, topic="t")
        await appeared(self.anonymous, paths.broker_topic_path("t", 0))
        consumer = GroupConsumer(self.alice, "g", reactor=reactor, **FAST)
        self.addCleanup(consumer.close)
        collector = Collector()
        collector.read(consumer, await consumer.create_message_streams({"t": 1}))
        await collector.has_all(set(sent))
        await consumer.commit()
        offset = paths.offset_path("g", "t", "0-0")
        committed, _ = await self.anonymous.get(offset)  # offsets stay readable by everyone
        self.assertGreater(int(committed), 0)
        group_acl = [identity_acl(CLUSTER.digest_id), identity_acl(ALICE.digest_id), WORLD_READ]
        for path in (paths.group_path("g"), paths.offset_path("g", "t"), offset, paths.consumer_ids_path("g")):
            self.assertEqual(await self.alice.get_acls(path), group_acl, path)
        # bob has no Read on g, and nobody without credentials: no rewriting its offsets, no joining, no owning.
        for intruder in (self.bob, self.anonymous):
            await self.assertNoAuth(intruder.set(offset, b"0"))
            await self.assertNoAuth(intruder.delete(offset))
            await self.assertNoAuth(intruder.create(paths.consumer_ids_path("g", "evil"), b"{}", ephemeral=True))
            await self.assertNoAuth(intruder.create(paths.owner_path("g", "t", "0-1"), b"evil", ephemeral=True,
                                                    makepath=True))
        self.assertEqual((await self.anonymous.get(offset))[0], committed)
        # Read granted to bob later: the subtree's ACL follows.
        self.assertEqual(await set_group_acl(self.cluster, "g", ["User:alice", "User:bob"]),
                         await count_nodes(self.cluster, paths.group_path("g")))
        await self.bob.set(offset, committed)

    async def test_only_the_cluster_starts_groups_and_everyone_can_be_let_in(self) -> None:
        await self.secured_group()
        for user in (self.alice, self.bob, self.anonymous):  # /consumers is the cluster's
            await self.assertNoAuth(user.create(paths.consumer_ids_path("new", "b"), b"{}", ephemeral=True,
                                                makepath=True))
        self.assertIsNone(await self.anonymous.exists(paths.group_path("new")))
        await set_group_acl(self.cluster, "open", ["User:*"])
        await self.anonymous.create(paths.offset_path("open", "t", "0-0"), b"5", makepath=True)
        await self.bob.set(paths.offset_path("open", "t", "0-0"), b"6")
        self.assertEqual(await self.cluster.get_acls(paths.group_path("open")),
                         [identity_acl(CLUSTER.digest_id), WORLD_ALL])


class SecureTreeTests(Secured):
    async def test_secure_an_open_tree_then_open_it_again(self) -> None:
        """twlog zookeeper secure: nodes made before the cluster had credentials get the policy's ACLs."""
        await self.sessions()
        await self.anonymous.create(paths.broker_id_path(1), b"h-1:127.0.0.1:9092", ephemeral=True, makepath=True)
        await self.anonymous.create(paths.offset_path("g", "t", "0-0"), b"7", makepath=True)
        await self.anonymous.create(f"{CONFIG_USERS}/alice", b"{}", makepath=True)
        count = await secure_tree(self.cluster)
        self.assertEqual(count, await count_nodes(self.cluster, "/"))  # (a chroot: ZooKeeper's /zookeeper is not in it)
        await self.assertNoAuth(self.anonymous.delete(paths.broker_id_path(1)))
        await self.assertNoAuth(self.anonymous.set(paths.offset_path("g", "t", "0-0"), b"0"))
        await self.assertNoAuth(self.anonymous.get(f"{CONFIG_USERS}/alice"))
        self.assertEqual(await self.cluster.get_acls(paths.group_path("g")),
                         [identity_acl(CLUSTER.digest_id), WORLD_READ])
        await secure_tree(self.cluster, unsecure=True)
        await self.anonymous.set(paths.offset_path("g", "t", "0-0"), b"0")


class CommandLineTests(Secured):
    timeout = 120

    async def test_commands_with_and_without_credentials(self) -> None:
        """twlog zookeeper secure secures a tree made open; then the admin commands need the cluster's file, a
        group member its user's, and a refusal is one line."""
        await self.sessions()
        open_broker = await start_broker(self, zookeeper=self.hosts, broker_id=0, num_partitions=1, flush_messages=1)
        await produce_and_read(open_broker.broker.port, [b"1", b"2", b"3"])
        await appeared(self.anonymous, paths.broker_topic_path("clicks", 0))
        await open_broker.stopService()
        cluster_file, alice_file = self.credentials_file(CLUSTER), self.credentials_file(ALICE)
        status, out, err = await run_twlog("zookeeper", "secure", "-z", self.hosts,
                                           "--zookeeper-credentials-file", cluster_file)
        self.assertEqual((status, err), (0, ""), err)
        self.assertIn("only twlog-cluster (the cluster) may write them", out)
        await self.assertNoAuth(self.anonymous.set(paths.held_path("clicks", 0), b"9"))
        broker = await start_broker(self, log_dir=None, zookeeper=self.hosts, broker_id=0, num_partitions=1,
                                    flush_messages=1, zookeeper_credentials_file=cluster_file)
        await produce_and_read(broker.broker.port, [b"4"])
        await appeared(self.anonymous, paths.broker_topic_path("clicks", 0))

        reset = ("groups", "reset", "-z", self.hosts, "-g", "etl", "-t", "clicks", "--to", "earliest", "--create")
        status, _, err = await run_twlog(*reset)
        self.assertEqual(status, 1)
        self.assertEqual(err, "twlog: ZooKeeper refused to create /consumers/etl/offsets/clicks/0-0: not authorized "
                              "(its ACL): give the credentials of an identity allowed to "
                              "(--zookeeper-credentials-file; docs/security.md, ZooKeeper)\n")
        status, out, err = await run_twlog(*reset, "--zookeeper-credentials-file", cluster_file)
        self.assertEqual(status, 0, err)
        self.assertIn("clicks  0-0", out)
        await record_user_digest(self.cluster, ALICE.user, ALICE.password)
        await set_group_acl(self.cluster, "etl", ["User:alice"])
        status, out, err = await run_twlog("consume", "-z", self.hosts, "-g", "etl", "-t", "clicks", "-n", "1",
                                           "--zookeeper-credentials-file", alice_file)
        self.assertEqual((status, out), (0, "4\n"), err)  # (the new broker's log starts empty)
        committed, _ = await self.anonymous.get(paths.offset_path("etl", "clicks", "0-0"))
        self.assertGreater(int(committed), 0)
        status, out, err = await run_twlog("consume", "-z", self.hosts, "-g", "etl", "-t", "clicks", "-n", "1")
        self.assertEqual((status, out), (1, ""))
        self.assertRegex(err, r"^twlog: ZooKeeper refused to create /consumers/etl/ids/\S+: not authorized \(its "
                              r"ACL\): give the credentials of an identity allowed to .*\n$")
        status, _, err = await run_twlog("groups", "delete", "-z", self.hosts, "-g", "etl")
        self.assertEqual(status, 1)
        self.assertIn("twlog: ZooKeeper refused to delete /consumers/etl/", err)


class ReplicationTests(Secured):
    timeout = 120

    async def test_three_secured_brokers_replicate_and_fail_over(self) -> None:
        """Leaders, followers, the controller and ISR changes (compare-and-set on the state znodes) all work with
        the brokers' shared identity; nobody else can move a leader."""
        await self.sessions()
        cluster_file = self.credentials_file(CLUSTER)
        brokers = {b: await start_broker(self, zookeeper=self.hosts, broker_id=b, num_partitions=1,
                                         flush_messages=1, zookeeper_credentials_file=cluster_file)
                   for b in (1, 2, 3)}
        await create_replicated(self.cluster, "orders", 1, 3, clock=reactor)
        leader = await self.leader_with_isr(3)
        # The state names the leader before its broker has read it: wait until the brokers take their roles (a
        # produce sent before that is answered NotLeader, which a client retries; see test_replication_failover).
        await until(lambda: roles(brokers) == (leader, {1, 2, 3} - {leader}), "the brokers take the state's roles")
        await produce(brokers[leader].broker.port, "orders", [b"a", b"b"])
        await self.assertNoAuth(self.anonymous.set(paths.partition_state_path("orders", 0), b"{}"))
        await brokers.pop(leader).stopService()
        new_leader = await self.leader_with_isr(2, other_than=leader)
        await until(lambda: roles(brokers) == (new_leader, set(brokers) - {new_leader}),
                    "the follower in the new state leads, the other follows it")
        await produce(brokers[new_leader].broker.port, "orders", [b"c"])
        self.assertEqual(await produce_and_read(brokers[new_leader].broker.port, [], topic="orders"),
                         [b"a", b"b", b"c"])

    async def leader_with_isr(self, size: int, other_than: int | None = None) -> int:
        for _ in range(400):
            try:
                state, _ = await store.read_state(self.anonymous, "orders", 0)
            except NoNodeError:
                state = None
            if state is not None and state.leader not in (None, -1, other_than) and len(state.isr) == size:
                return state.leader
            await deferLater(reactor, 0.05, lambda: None)
        raise AssertionError(f"no leader with {size} in-sync replicas within 20 s")


class MirrorTests(Secured):
    timeout = 120

    async def test_mirror_between_secured_clusters(self) -> None:
        """The mirror authenticates to each cluster with its file's identity: the cluster's of the source (whose
        group it then creates) and of the target (whose topics its producer's broker registers)."""
        await self.sessions()
        cluster_file = self.credentials_file(CLUSTER)
        source = await start_broker(self, zookeeper=self.hosts, broker_id=0, num_partitions=1, flush_messages=1,
                                    zookeeper_credentials_file=cluster_file)
        target_hosts = fresh_connect_string()
        target = await start_broker(self, zookeeper=target_hosts, broker_id=0, num_partitions=1, flush_messages=1,
                                    zookeeper_credentials_file=cluster_file)
        await produce_and_read(source.broker.port, [b"m1", b"m2"])
        await appeared(self.anonymous, paths.broker_topic_path("clicks", 0))
        mirror = Mirror(MirrorSettings(sources=(self.hosts,), target=target_hosts, group="m", status_s=0,
                                       source_credentials=CLUSTER, target_credentials=CLUSTER),
                        reactor=reactor, say=lambda line: None)
        await mirror.start()
        self.addCleanup(mirror.stop)
        for _ in range(200):  # (bounded: 200 reads, 0.1 s apart)
            if await produce_and_read(target.broker.port, [], topic="clicks") == [b"m1", b"m2"]:
                break
            await deferLater(reactor, 0.1, lambda: None)
        else:
            self.fail("the mirror did not copy the messages")
        await mirror.stop()
        self.assertIsNone(mirror.error)
        offset = paths.offset_path("m", "clicks", "0-0")
        self.assertGreater(int((await self.anonymous.get(offset))[0]), 0)
        await self.assertNoAuth(self.anonymous.set(offset, b"0"))  # nobody else rewinds (or skips) the mirror


def roles(brokers: dict, topic: str = "orders", partition: int = 0) -> tuple[int | None, set[int]]:
    """Who leads C{partition} of C{topic} and who follows it, as the brokers' replica managers say."""
    leader = next((b for b, s in brokers.items()
                   if s.replicas is not None and (topic, partition) in s.replicas.manager.leaders), None)
    followers = {b for b, s in brokers.items()
                 if s.replicas is not None and (topic, partition) in s.replicas.manager.followers}
    return leader, followers


async def produce(port: int, topic: str, payloads: list[bytes]) -> None:
    """Produce C{payloads} to partition 0 of C{topic}, acknowledged by every in-sync replica."""
    connection = BrokerConnection("127.0.0.1", port, reactor=reactor)
    try:
        produced = await connection.request(AckProduceRequest(
            ACK_ALL, 10_000, (ProduceRequest(topic, 0, encode_message_set(payloads)),)))
        assert [r.error for r in produced.results] == [0], produced
    finally:
        await connection.close()


async def produce_and_read(port: int, payloads: list[bytes], topic: str = "clicks") -> list[bytes]:
    """Produce C{payloads} to partition 0 of C{topic} (flushed), then read the partition from the start."""
    connection = BrokerConnection("127.0.0.1", port, reactor=reactor)
    try:
        if payloads:
            produced = await connection.request(AckProduceRequest(
                ACK_FLUSHED, 10_000, (ProduceRequest(topic, 0, encode_message_set(payloads)),)))
            assert [r.error for r in produced.results] == [0], produced
        fetched = await connection.request(FetchRequest(topic, 0, 0, 1 << 20))
        return [m.payload for m in iter_messages(fetched.messages, 0)]
    finally:
        await connection.close()


async def appeared(zk, path: str, timeout_s: float = 10.0) -> None:
    """Wait until C{path} exists (polled, bounded)."""
    for _ in range(int(timeout_s / 0.05)):
        if await zk.exists(path) is not None:
            return
        await deferLater(reactor, 0.05, lambda: None)
    raise AssertionError(f"{path} did not appear within {timeout_s} s")


async def count_nodes(zk, path: str) -> int:
    try:
        children = await zk.children(path)
    except NoNodeError:
        return 0
    total = 1
    for child in children:
        total += await count_nodes(zk, f"{path.rstrip('/')}/{child}")
    return total
