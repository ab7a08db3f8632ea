"""The Spark source reading a replicated topic, with the suite's one Spark session: three brokers in this process
and the suite's real ZooKeeper, a topic of two partitions on all three.  Batch reads return every message, with
partitions named by number in the rows and in the offsets JSON; a streaming query runs across a leader change
(the leader stopped: SIGTERM's path), and a batch read after it still returns everything; then, with broker
processes, the same through a leader killed by kill -9."""

from __future__ import annotations

import glob
import json
import os
import signal

from twisted.internet.defer import DeferredList

from tests.integration.broker import start_broker
from tests.integration.spark import spark_call
from tests.integration.test_produce_resume import registered, spawn
from tests.integration.test_replication_control import run
from tests.integration.test_replication_zk import until
from tests.integration.test_spark_source import SparkTestCase
from tests.integration.zookeeper import fresh_connect_string
from twlog.cli.inspect import create_topic
from twlog.coord.replication.store import read_state
from twlog.coord.zk import ZooKeeper
from twlog.coord.zkserver import free_port
from twlog.producer import Producer

TOPIC = "orders"


class StreamHelpers:
    """A streaming query of TOPIC into a memory sink, and a bounded wait for what it sank."""

    def start_stream(self, out: str, checkpoint: str):
        return (self.spark.readStream.format("twlog").option("zookeeper", self.hosts).option("subscribe", TOPIC)
                .option("startingOffsets", "earliest").load()
                .writeStream.format("memory").queryName(out).option("checkpointLocation", checkpoint)
                .trigger(processingTime="200 milliseconds").start())

    def sunk(self, out: str) -> list[bytes]:
        return sorted(bytes(r.value) for r in self.spark.table(out).collect())

    async def wait_sunk(self, query, out: str, expected: list[bytes]) -> None:
        got: list[bytes] = []
        for _ in range(300):  # (bounded: 300 polls of at most ~0.2 s each)
            if query.exception() is not None:
                self.fail(f"the query failed: {query.exception()}")
            got = await spark_call(self.sunk, out)
            if got == sorted(expected):
                return
            await spark_call(query.awaitTermination, 0.2)
        self.fail(f"the stream's sink holds {len(got)} of {len(expected)} messages")


class ReplicatedSparkTests(StreamHelpers, SparkTestCase):
    async def start(self, broker_id: int) -> None:
        self.brokers[broker_id] = await start_broker(self, self.log_dirs[broker_id], broker_id=broker_id,
                                                     zookeeper=self.hosts, flush_interval_ms=5,
                                                     replica_lag_time_ms=1000)

    def leader(self, partition: int) -> int | None:
        return next((b for b, s in self.brokers.items()
                     if s.replicas is not None and (TOPIC, partition) in s.replicas.manager.leaders), None)

    def followers(self, partition: int) -> set[int]:
        return {b for b, s in self.brokers.items()
                if s.replicas is not None and (TOPIC, partition) in s.replicas.manager.followers}

    async def produce(self, producer: Producer, prefix: str, partition: int, count: int) -> list[bytes]:
        values = [b"%s-%d-%03d" % (prefix.encode(), partition, n) for n in range(count)]
        results = await DeferredList([producer.send(TOPIC, v, partition_index=partition) for v in values],
                                     consumeErrors=True)
        self.assertEqual([r.getErrorMessage() for ok, r in results if not ok], [])
        return values

    async def test_read_through_a_leader_change(self) -> None:
        self.hosts, self.brokers = fresh_connect_string(), {}
        self.log_dirs = {b: self.mktemp() for b in (1, 2, 3)}
        for b in (1, 2, 3):
            await self.start(b)
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "2", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        for p in (0, 1):
            await until(lambda p=p: self.leader(p) is not None and len(self.followers(p)) == 2,
                        f"partition {p} has a leader and two followers")
        producer = Producer(zookeeper=self.hosts, ack="all", ack_timeout_ms=10_000, leader_wait_s=20)
        self.addCleanup(producer.close)
        written = {p: await self.produce(producer, "a", p, 50) for p in (0, 1)}

        rows = await self.rows(zookeeper=self.hosts, subscribe=TOPIC)
        self.assertEqual({p: [r[3] for r in rows if r[1] == str(p)] for p in (0, 1)}, written)
        self.assertEqual({r[4] for r in rows if r[1] == "0"}, {self.leader(0)})
        # The offsets JSON names partitions by number: from the 10th message of 0, up to the 20th of 1.
        offsets = {p: [r[2] for r in rows if r[1] == str(p)] for p in (0, 1)}
        some = await self.rows(zookeeper=self.hosts, subscribe=TOPIC,
                               startingOffsets={TOPIC: {"0": offsets[0][10], "1": -2}},
                               endingOffsets={TOPIC: {"0": -1, "1": offsets[1][20]}})
        self.assertEqual([r[3] for r in some], written[0][10:] + written[1][:20])

        out, checkpoint = "replicated_orders", self.mktemp()
        query = await spark_call(self.start_stream, out, checkpoint)
        self.addCleanup(lambda: spark_call(query.stop))
        await self.wait_sunk(query, out, written[0] + written[1])

        old = self.leader(0)
        await self.brokers.pop(old).stopService()  # controlled shutdown: its leaderships move first
        await until(lambda: self.leader(0) is not None and self.leader(1) is not None, "both partitions lead")
        self.assertNotEqual(self.leader(0), old)
        for p in (0, 1):
            written[p] += await self.produce(producer, "b", p, 30)
        await self.wait_sunk(query, out, written[0] + written[1])
        await self.start(old)  # it comes back as a follower; the stream goes on
        await until(lambda: old in self.followers(0) | self.followers(1), "the returned broker follows")
        for p in (0, 1):
            written[p] += await self.produce(producer, "c", p, 20)
        await self.wait_sunk(query, out, written[0] + written[1])
        await spark_call(query.stop)

        latest = max(glob.glob(os.path.join(checkpoint, "offsets", "[0-9]*")), key=lambda f: int(os.path.basename(f)))
        with open(latest) as f:
            checkpointed = json.loads(f.read().splitlines()[-1])
        self.assertEqual(sorted(checkpointed[TOPIC]), ["0", "1"])

        after = await self.rows(zookeeper=self.hosts, subscribe=TOPIC)
        self.assertEqual({p: [r[3] for r in after if r[1] == str(p)] for p in (0, 1)}, written)
        self.assertEqual(checkpointed[TOPIC], {str(p): max(r[2] for r in after if r[1] == str(p)) + len(b"c-0-000") + 9
                                               for p in (0, 1)})


class KilledLeaderSparkTests(StreamHelpers, SparkTestCase):
    """Three broker processes, and the leader of a replicated partition killed (kill -9) while a streaming query
    reads it: no controlled shutdown, the leadership moves once its ZooKeeper session has expired (2 s here), and
    the stream and a later batch read still return every acknowledged message."""

    timeout = 240

    async def test_stream_and_batch_through_a_kill_9(self) -> None:
        self.hosts = fresh_connect_string()
        self.processes = {}
        for b in (1, 2, 3):
            self.processes[b] = spawn(
                self, "broker", "--broker-id", str(b), "--port", str(free_port()), "--log-dir", self.mktemp(),
                "--zookeeper", self.hosts, "--flush-interval-ms", "5", "--replica-lag-time-ms", "1000",
                "--zookeeper-session-timeout-s", "2")
        for b in (1, 2, 3):
            await registered(self.hosts, b)
        await run(create_topic, "create", "-z", self.hosts, "-t", TOPIC, "-n", "1", "--replication-factor", "3",
                  "--min-insync-replicas", "2")
        producer = Producer(zookeeper=self.hosts, ack="all", ack_timeout_ms=10_000, leader_wait_s=30)
        self.addCleanup(producer.close)
        written = [b"k-%03d" % n for n in range(40)]
        await producer.send(TOPIC, written, partition_index=0)

        out, checkpoint = "killed_orders", self.mktemp()
        query = await spark_call(self.start_stream, out, checkpoint)
        self.addCleanup(lambda: spark_call(query.stop))
        await self.wait_sunk(query, out, written)

        zk = ZooKeeper(self.hosts)
        await zk.start()
        self.addCleanup(zk.stop)
        state, _ = await read_state(zk, TOPIC, 0)
        self.processes[state.leader].transport.signalProcess(signal.SIGKILL)
        await self.processes[state.leader].ended
        more = [b"after-%03d" % n for n in range(30)]
        for value in more:  # one at a time: the first waits for the new leader (the producer's leader_wait_s)
            await producer.send(TOPIC, value, partition_index=0)
        new_state, _ = await read_state(zk, TOPIC, 0)
        self.assertNotEqual(new_state.leader, state.leader)
        self.assertGreater(new_state.leader_epoch, state.leader_epoch)
        await self.wait_sunk(query, out, written + more)
        await spark_call(query.stop)
        rows = await self.rows(zookeeper=self.hosts, subscribe=TOPIC)
        self.assertEqual([r[3] for r in rows], written + more)
