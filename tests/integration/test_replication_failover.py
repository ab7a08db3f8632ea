"""Replication end to end on loopback with the suite's real ZooKeeper, brokers in this process: leaders and
followers take the roles the controller's states give, `ack=all` is answered once every ISR member holds
the set, replicas are byte-identical, a stopping leader's partitions move to an in-sync follower with no
acknowledged message lost, and a returning broker catches up and rejoins the ISR; the replication metrics,
scraped over HTTP, say so."""

from __future__ import annotations

import filecmp
import json
import os

from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_metrics import get, samples
from tests.integration.test_replication_control import run
from tests.integration.test_replication_zk import until
from tests.integration.zookeeper import fresh_connect_string
from twlog.bench.faultproxy import FaultProxy
from twlog.cli.inspect import create_topic, delete_topic, describe_topic
from twlog.client.connection import BrokerConnection
from twlog.coord import paths
from twlog.errors import NotEnoughReplicas, NotLeader, TwlogError
from twlog.protocol.codec import ACK_ALL, AckProduceRequest, FetchRequest, ProduceRequest
from twlog.storage.fetched import iter_messages
from twlog.storage.message import encode_message_set

TOPIC = "events"


class FailoverTests(TestCase):
    timeout = 60

    async def start(self, broker_id: int, log_dir: str | None = None):
        service = await start_broker(self, log_dir or self.mktemp(), broker_id=broker_id, zookeeper=self.hosts,
                                     flush_interval_ms=5, replica_lag_time_ms=2000, metrics_port=0)
        self.brokers[broker_id] = service
        return service

    def connect(self, broker_id: int) -> BrokerConnection:
        connection = BrokerConnection("127.0.0.1", self.brokers[broker_id].broker.port, timeout_s=10)
        self.addCleanup(connection.close)
        return connection

    def roles(self, partition: int) -> tuple[int | None, set[int]]:
        """Who leads C{partition} and who follows it, as the brokers' replica managers say."""
        leader = next((b for b, s in self.brokers.items()
                       if s.replicas is not None and (TOPIC, partition) in s.replicas.manager.leaders), None)
        followers = {b for b, s in self.brokers.items()
                     if s.replicas is not None and (TOPIC, partition) in s.replicas.manager.followers}
        return leader, followers

    async def produce_all(self, broker_id: int, partition: int, payloads: list[bytes]) -> int:
        """Produce C{payloads} with ack=all to broker C{broker_id}; the offset after them."""
        response = await self.connect(broker_id).request(AckProduceRequest(ACK_ALL, 10_000, (
            ProduceRequest(TOPIC, partition, encode_message_set(payloads)),)))
        (result,) = response.results
        if result.error:
            raise {NotLeader.code: NotLeader, NotEnoughReplicas.code: NotEnoughReplicas}.get(
                result.error, AssertionError)(f"produce answered error {result.error}")
        return result.next_offset

    async def scrape(self, broker_id: int, name: str, **labels: str) -> float:
        """One sample of broker C{broker_id}'s /metrics, over HTTP."""
        _, body = await get(self.brokers[broker_id].metrics_url)
        return samples(body.decode())[(name, tuple(sorted(labels.items())))]

    async def read_all(self, broker_id: int, partition: int) -> list[bytes]:
        payloads, offset = [], 0
        connection = self.connect(broker_id)
        while True:
            response = await connection.request(FetchRequest(TOPIC, partition, offset, 1 << 20))
            batch = list(iter_messages(response.messages, offset))
            if not batch:
                return payloads
            payloads += [m.payload for m in batch]
            offset = batch[-1].next_offset

    async def test_ack_all_failover_and_rejoin(self) -> None:
        self.hosts, self.brokers = fresh_connect_string(), {}
        log_dirs = {b: self.mktemp() for b in (1, 2, 3)}
        for b in (1, 2, 3):
            await self.start(b, log_dirs[b])
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "2", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        for p in (0, 1):
            await until(lambda p=p: self.roles(p)[0] is not None and len(self.roles(p)[1]) == 2,
                        f"partition {p} has a leader and two followers")
        leader, followers = self.roles(0)

        # ack=all: answered once the followers hold the set; a follower refuses produces.
        first = [b"m%03d" % i for i in range(100)]
        end = 0
        for i in range(0, 100, 10):
            end = await self.produce_all(leader, 0, first[i:i + 10])
        with self.assertRaises(NotLeader):
            await self.produce_all(min(followers), 0, [b"not here"])
        for b in followers:
            log = self.brokers[b].logs.get_log(TOPIC, 0)
            self.assertGreaterEqual(log.end_offset, end, "every ISR member holds what ack=all acknowledged")
        self.assertEqual(await self.read_all(leader, 0), first)
        await until(lambda: all(self.brokers[b].logs.get_log(TOPIC, 0).high_watermark == end for b in followers),
                    "the followers learn the high watermark")
        await self.assert_described(0, end, {1: end, 2: end, 3: end})
        await self.assert_described(1, 0, {1: 0, 2: 0, 3: 0})
        segments = {b: self.brokers[b].logs.get_log(TOPIC, 0).segments[0].path for b in (1, 2, 3)}
        for b in followers:
            self.assertTrue(filecmp.cmp(segments[leader], segments[b], shallow=False), "replicas byte-identical")

        # The leader stops (SIGTERM's path): the partition moves to an in-sync follower, nothing acknowledged lost.
        await self.brokers[leader].stopService()
        del self.brokers[leader]
        await until(lambda: self.roles(0)[0] in followers and len(self.roles(0)[1]) == 1, "a follower leads")
        new_leader = self.roles(0)[0]
        second = [b"n%03d" % i for i in range(20)]
        await self.produce_all(new_leader, 0, second)  # ISR of 2 = min.insync.replicas: still accepted
        self.assertEqual(await self.read_all(new_leader, 0), first + second)
        self.assertGreaterEqual(await self.scrape(new_leader, "twlog_under_replicated_partitions"), 1)
        self.assertEqual(await self.scrape(new_leader, "twlog_under_min_isr_partitions"), 0)
        controllers = [b for b in self.brokers if await self.scrape(b, "twlog_active_controller") == 1]
        self.assertEqual(len(controllers), 1, "one active controller")
        self.assertEqual(await self.scrape(controllers[0], "twlog_offline_partitions"), 0)

        # The old leader returns with its log: it follows, catches up, and rejoins the ISR.
        await self.start(leader, log_dirs[leader])
        await until(lambda: leader in self.roles(0)[1], "the returned broker follows")
        await until(lambda: self.brokers[leader].logs.get_log(TOPIC, 0).end_offset
                    == self.brokers[new_leader].logs.get_log(TOPIC, 0).end_offset, "it caught up", timeout_s=20)
        state = self.brokers[new_leader].replicas.manager.leaders[(TOPIC, 0)]
        await until(lambda: leader in state.state.isr, "it rejoined the ISR", timeout_s=20)
        # The new leader wrote the returned broker back into the ISR (the controller, not it, took it out).
        self.assertGreaterEqual(await self.scrape(new_leader, "twlog_isr_expands_total"), 1)
        self.assertEqual(await self.scrape(new_leader, "twlog_replica_lag_bytes", topic=TOPIC, partition="0",
                                           replica=str(leader)), 0)
        self.assertTrue(os.path.exists(segments[leader]))
        total = self.brokers[new_leader].logs.get_log(TOPIC, 0).end_offset
        await until(lambda: all(state.state.ends.get(b) == total for b in state.state.followers),
                    "the new leader has heard both followers at its end")
        await self.assert_described(0, total, {1: total, 2: total, 3: total})

    async def assert_described(self, partition: int, high_watermark: int, ends: dict[int, int]) -> None:
        """`twlog topics describe` (JSON and table) gives C{partition}'s high watermark and each replica's end, as
        its leader answers REPLICA_STATUS."""
        address = f"127.0.0.1:{self.brokers[min(self.brokers)].broker.port}"
        described = json.loads(await run(describe_topic, "describe", "-b", address, "-t", TOPIC, "--json"))
        found = next(p for p in described["partitions"] if p["name"] == str(partition))
        self.assertEqual((found["high_watermark"], found["replica_ends"]),
                         (high_watermark, {str(b): end for b, end in ends.items()}), found)
        table = await run(describe_topic, "describe", "-b", address, "-t", TOPIC)
        row = next(line.split() for line in table.splitlines() if line.split()[:1] == [str(partition)])
        self.assertEqual(row[-2:], [str(high_watermark), ",".join(f"{r}:{ends[r]}" for r in found["replicas"])])

    async def test_segment_files_identical_over_many_segments(self) -> None:
        """With small segments the leader rolls many times; every replica's segment files are the leader's, byte
        for byte (the same names, the same bytes), after catching up and after a follower's restart."""
        self.hosts, self.brokers = fresh_connect_string(), {}
        log_dirs = {b: self.mktemp() for b in (1, 2, 3)}

        async def start(b: int) -> None:
            self.brokers[b] = await start_broker(self, log_dirs[b], broker_id=b, zookeeper=self.hosts,
                                                 flush_interval_ms=5, replica_lag_time_ms=2000, segment_bytes=1024)

        def logs() -> dict:
            return {b: s.logs.get_log(TOPIC, 0) for b, s in self.brokers.items()}

        async def assert_identical(what: str) -> None:
            await until(lambda: len({(log.end_offset, log.flushed_offset) for log in logs().values()}) == 1,
                        f"every replica holds and has flushed the same end ({what})", timeout_s=20)
            directories = {b: log.directory for b, log in logs().items()}
            names = sorted(n for n in os.listdir(directories[leader]) if n.endswith(".log"))
            self.assertGreater(len(names), 5, "the leader rolled many times")
            for b in followers:
                self.assertEqual(sorted(n for n in os.listdir(directories[b]) if n.endswith(".log")), names, what)
                _, mismatch, errors = filecmp.cmpfiles(directories[leader], directories[b], names, shallow=False)
                self.assertEqual((mismatch, errors), ([], []), f"broker {b}'s segment files ({what})")

        for b in (1, 2, 3):
            await start(b)
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "1", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        await until(lambda: self.roles(0)[0] is not None and len(self.roles(0)[1]) == 2, "a leader, two followers")
        leader, followers = self.roles(0)
        sent = []
        for i in range(40):  # sets of 1 to 4 messages of 40 to 160 bytes: rolls fall short of full segments
            batch = [b"s%03d-%d" % (i, j) + b"." * (40 * (1 + (i + j) % 4)) for j in range(1 + i % 4)]
            await self.produce_all(leader, 0, batch)
            sent += batch
        await assert_identical("caught up")

        restarted = min(followers)
        await self.brokers[restarted].stopService()
        del self.brokers[restarted]
        for i in range(20):
            batch = [b"t%03d-%d" % (i, j) + b"." * (60 * (1 + j % 3)) for j in range(1 + i % 3)]
            await self.produce_all(leader, 0, batch)
            sent += batch
        await start(restarted)
        await until(lambda: restarted in self.roles(0)[1], "the restarted broker follows")
        await assert_identical("after a follower's restart")
        self.assertEqual(await self.read_all(leader, 0), sent)

    async def test_lost_disk(self) -> None:
        """A broker started again with its id on an empty log directory (a lost disk) follows from the start,
        holds every acknowledged message, rejoins the ISR, and can lead: nothing is lost with it."""
        self.hosts, self.brokers = fresh_connect_string(), {}
        for b in (1, 2, 3):
            await self.start(b)
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "1", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        await until(lambda: self.roles(0)[0] is not None and len(self.roles(0)[1]) == 2, "a leader, two followers")
        leader, followers = self.roles(0)
        sent = [b"d%03d" % i for i in range(60)]
        for i in range(0, 60, 6):
            await self.produce_all(leader, 0, sent[i:i + 6])
        lost = min(followers)
        await self.brokers[lost].stopService()
        del self.brokers[lost]
        await self.start(lost, self.mktemp())  # the same id, an empty disk
        await until(lambda: lost in self.roles(0)[1], "the broker with the new disk follows")
        state = self.brokers[leader].replicas.manager.leaders[(TOPIC, 0)].state
        await until(lambda: lost in state.isr, "it rejoined the ISR", timeout_s=20)
        self.assertEqual(self.brokers[lost].logs.get_log(TOPIC, 0).end_offset,
                         self.brokers[leader].logs.get_log(TOPIC, 0).end_offset)
        # Its leader and the other follower go (SIGTERM's path): it leads, with everything.
        other = next(b for b in followers if b != lost)
        await self.brokers[other].stopService()
        del self.brokers[other]
        await self.brokers[leader].stopService()
        del self.brokers[leader]
        await until(lambda: self.roles(0)[0] == lost, "the broker with the new disk leads")
        self.assertEqual(await self.read_all(lost, 0), sent)

    async def test_leader_cut_off_from_followers_then_zookeeper(self) -> None:
        """Jepsen 2013's case: the leader cut off from its followers, not from ZooKeeper, shrinks the ISR to itself,
        and then acknowledges nothing with ack=all (below min.insync.replicas 2); cut off from ZooKeeper too, it
        fences itself, and as the only ISR member left it is not replaced by an out-of-sync follower (unclean
        election off): the partition is offline, and once healed nothing acknowledged is lost."""
        self.hosts, self.brokers = fresh_connect_string(), {}
        server, chroot = self.hosts.split("/", 1) if "/" in self.hosts else (self.hosts, "")
        host, port = server.split(":")
        zk_proxies, replica_proxies = {}, {}
        for b in (1, 2, 3):
            zk_proxies[b] = FaultProxy(host, int(port))
            await zk_proxies[b].start()
            self.addCleanup(zk_proxies[b].stop)
            self.brokers[b] = await start_broker(
                self, self.mktemp(), broker_id=b, zookeeper=zk_proxies[b].address + (f"/{chroot}" if chroot else ""),
                flush_interval_ms=5, replica_lag_time_ms=1500, zookeeper_session_timeout_s=3.0)
        for b, service in self.brokers.items():  # followers reach each leader through a proxy of its own
            replica_proxies[b] = FaultProxy("127.0.0.1", service.broker.port)
            await replica_proxies[b].start()
            self.addCleanup(replica_proxies[b].stop)
        for service in self.brokers.values():
            service.replicas.manager._connect = lambda leader: BrokerConnection(
                "127.0.0.1", replica_proxies[leader].port)
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "1", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        await until(lambda: self.roles(0)[0] is not None and len(self.roles(0)[1]) == 2, "a leader, two followers")
        leader, followers = self.roles(0)
        acknowledged = [b"a%02d" % i for i in range(20)]
        await self.produce_all(leader, 0, acknowledged)
        led = self.brokers[leader].replicas.manager.leaders[(TOPIC, 0)]

        replica_proxies[leader].cut()  # the followers can no longer fetch; ZooKeeper still reachable
        await until(lambda: led.state.isr == (leader,), "the leader shrank the ISR to itself", timeout_s=15)
        with self.assertRaises(NotEnoughReplicas):
            await self.produce_all(leader, 0, [b"never acknowledged"])

        zk_proxies[leader].cut()  # and now cut off from ZooKeeper as well
        await until(lambda: led.state.fenced, "the leader fenced itself")
        with self.assertRaises(NotEnoughReplicas):
            await self.produce_all(leader, 0, [b"never acknowledged either"])
        await until(lambda: leader not in self.brokers[min(followers)].cluster.brokers, "its session expired",
                    timeout_s=15)
        view = self.brokers[min(followers)].cluster
        await until(lambda: view.replica_states(TOPIC)[1][0].leader == -1, "the controller took it offline")
        self.assertEqual(view.replica_states(TOPIC)[1][0].isr, (leader,), "no out-of-sync follower leads")
        self.assertEqual(set(self.brokers[min(followers)].replicas.manager.leaders), set())

        zk_proxies[leader].heal()
        replica_proxies[leader].heal()
        await until(lambda: self.roles(0)[0] == leader and len(self.roles(0)[1]) == 2, "healed: it leads again",
                    timeout_s=20)
        await until(lambda: len(self.brokers[leader].replicas.manager.leaders[(TOPIC, 0)].state.isr) == 3,
                    "the followers rejoined", timeout_s=20)
        self.assertEqual(await self.read_all(leader, 0), acknowledged)
        await self.produce_all(leader, 0, [b"after"])

    async def test_delete_and_create_again(self) -> None:
        """twlog topics delete of a replicated topic: refused while a replica's broker is down (nothing deleted);
        with every broker up, every replica log goes and its ZooKeeper state; the name then makes a new, empty
        topic."""
        self.hosts, self.brokers = fresh_connect_string(), {}
        log_dirs = {b: self.mktemp() for b in (1, 2, 3)}
        for b in (1, 2, 3):
            await self.start(b, log_dirs[b])
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "2", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        for p in (0, 1):
            await until(lambda p=p: self.roles(p)[0] is not None and len(self.roles(p)[1]) == 2, f"{p} has roles")
        await self.produce_all(self.roles(0)[0], 0, [b"old"])
        await self.brokers[3].stopService()
        del self.brokers[3]
        with self.assertRaises(TwlogError) as refused:
            await run(delete_topic, "delete", "-z", self.hosts, "-t", TOPIC)
        self.assertIn("broker 3, with replicas of 'events', is down", str(refused.exception))
        await self.start(3, log_dirs[3])
        await until(lambda: self.roles(0)[0] is not None and len(self.roles(0)[1]) == 2, "every replica back")

        out = await run(delete_topic, "delete", "-z", self.hosts, "-t", TOPIC)
        self.assertIn("deleted replicated topic events: its replicas on brokers 1, 2, 3", out)
        for service in self.brokers.values():
            self.assertEqual([k for k in service.logs.logs() if k[0] == TOPIC], [])
            self.assertEqual((service.replicas.manager.leaders, service.replicas.manager.followers), ({}, {}))
        zk = self.brokers[1].zookeeper
        self.assertIsNone(await zk.exists(paths.replicated_topic_path(TOPIC)))
        self.assertIsNone(await zk.exists(paths.delete_topic_path(TOPIC)))

        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "1", "--replication-factor", "3")
        await until(lambda: self.roles(0)[0] is not None and len(self.roles(0)[1]) == 2, "the new topic has roles")
        await self.produce_all(self.roles(0)[0], 0, [b"new"])
        self.assertEqual(await self.read_all(self.roles(0)[0], 0), [b"new"])
