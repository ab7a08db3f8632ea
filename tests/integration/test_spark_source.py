"""The twlog Spark data source read by a local Spark session from real brokers: batch reads."""

from __future__ import annotations

import json
import os

from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.spark import spark_call, spark_session
from tests.storage.corrupt import NOT_GZIP, write_partition
from twlog.errors import ConnectionFailed, InvalidMessage, OffsetOutOfRange
from twlog.producer import Producer
from twlog.storage.message import encode_message_set

TOPIC = "clicks"


def payloads(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


async def produce(testcase, brokers: str, topic: str, messages: list[bytes], partition: int = 0):
    """Write C{messages} flushed (so visible at once) to the C{partition}-th partition of C{topic}."""
    producer = Producer(brokers, ack="flushed")
    try:
        return await producer.send(topic, messages, partition_index=partition)
    finally:
        await producer.close()


def collect(df) -> list[tuple]:
    return [(r.topic, r.partition, r.offset, bytes(r.value), r.broker) for r in df.collect()]


class SparkTestCase(TestCase):
    timeout = 240

    async def setUp(self):
        self.spark = await spark_call(spark_session)

    def read(self, **options):
        reader = self.spark.read.format("twlog")
        for key, value in options.items():
            reader = reader.option(key, value if isinstance(value, str) else json.dumps(value))
        return reader.load()

    async def rows(self, **options) -> list[tuple]:
        return sorted(await spark_call(lambda: collect(self.read(**options))), key=lambda r: (r[1], r[2]))

    async def error(self, **options) -> str:
        """The text of the error a read with C{options} fails with."""
        try:
            await spark_call(lambda: self.read(**options).collect())
        except Exception as e:  # Spark wraps Python errors of workers in its own
            return str(e)
        self.fail("the read did not fail")


class BatchTests(SparkTestCase):
    async def test_read_all(self):
        """Every message written is read once, with its topic, partition name, offset and broker."""
        service = await start_broker(self, broker_id=3, num_partitions=2)
        brokers = f"127.0.0.1:{service.broker.port}"
        first = await produce(self, brokers, TOPIC, payloads("a", 300), partition=0)
        await produce(self, brokers, TOPIC, payloads("b", 200), partition=1)
        rows = await self.rows(brokers=brokers, subscribe=TOPIC, startingOffsets="earliest")
        self.assertEqual(len(rows), 500)
        self.assertEqual({r[0] for r in rows}, {TOPIC})
        self.assertEqual({r[4] for r in rows}, {3})
        by_partition = {}
        for r in rows:
            by_partition.setdefault(r[1], []).append(r[3])
        self.assertEqual(by_partition, {"3-0": payloads("a", 300), "3-1": payloads("b", 200)})
        offsets = [r[2] for r in rows if r[1] == "3-0"]
        self.assertEqual(offsets[0], first.offset)
        self.assertEqual(offsets[1] - offsets[0], 9 + len(b"a-00000"))

    async def test_offsets(self):
        """startingOffsets and endingOffsets: earliest, latest, JSON per partition, -2 and -1."""
        service = await start_broker(self, num_partitions=2)
        brokers = f"127.0.0.1:{service.broker.port}"
        await produce(self, brokers, TOPIC, payloads("a", 10), partition=0)
        await produce(self, brokers, TOPIC, payloads("b", 10), partition=1)
        every = await self.rows(brokers=brokers, subscribe=TOPIC)
        a = [r for r in every if r[1] == "0-0"]
        b = [r for r in every if r[1] == "0-1"]
        self.assertEqual(len(a), 10)
        self.assertEqual(await self.rows(brokers=brokers, subscribe=TOPIC, startingOffsets="latest"), [])
        middle = await self.rows(
            brokers=brokers, subscribe=TOPIC,
            startingOffsets={TOPIC: {"0-0": a[3][2], "0-1": -1}},
            endingOffsets={TOPIC: {"0-0": a[7][2]}},
        )
        self.assertEqual(middle, a[3:7])
        tail = await self.rows(
            brokers=brokers, subscribe=TOPIC, startingOffsets={TOPIC: {"0-0": -1, "0-1": b[8][2]}},
            endingOffsets="latest",
        )
        self.assertEqual(tail, b[8:])
        head = await self.rows(
            brokers=brokers, subscribe=TOPIC, startingOffsets={TOPIC: {"0-0": -2}},
            endingOffsets={TOPIC: {"0-0": a[2][2], "0-1": b[0][2]}},
        )
        self.assertEqual(head, a[:2])

    async def test_assign(self):
        """assign reads only the partitions named."""
        service = await start_broker(self, num_partitions=2)
        brokers = f"127.0.0.1:{service.broker.port}"
        await produce(self, brokers, TOPIC, payloads("a", 5), partition=0)
        await produce(self, brokers, TOPIC, payloads("b", 7), partition=1)
        rows = await self.rows(brokers=brokers, assign={TOPIC: ["0-1"]}, startingOffsets="earliest")
        self.assertEqual([r[3] for r in rows], payloads("b", 7))

    async def test_two_brokers(self):
        """A topic spread over two brokers is read from both, partitions named by broker id."""
        one = await start_broker(self, broker_id=1)
        two = await start_broker(self, broker_id=2)
        brokers = f"127.0.0.1:{one.broker.port},127.0.0.1:{two.broker.port}"
        await produce(self, brokers, TOPIC, payloads("one", 40), partition=0)
        await produce(self, brokers, TOPIC, payloads("two", 60), partition=1)
        rows = await self.rows(brokers=brokers, subscribe=TOPIC)
        self.assertEqual(
            {(r[1], r[4]) for r in rows}, {("1-0", 1), ("2-0", 2)}
        )
        self.assertEqual(sorted(r[3] for r in rows), sorted(payloads("one", 40) + payloads("two", 60)))

    async def test_compressed(self):
        """Messages of compressed sets are read, sharing their wrapper's offset."""
        service = await start_broker(self)
        brokers = f"127.0.0.1:{service.broker.port}"
        producer = Producer(brokers, ack="flushed", codec="gzip")
        await producer.send(TOPIC, payloads("z", 20))
        await producer.close()
        rows = await self.rows(brokers=brokers, subscribe=TOPIC)
        self.assertEqual([r[3] for r in rows], payloads("z", 20))
        self.assertEqual(len({r[2] for r in rows}), 1)


class ErrorTests(SparkTestCase):
    async def test_unreachable_broker(self):
        """A broker that cannot be reached is named."""
        service = await start_broker(self)
        port = service.broker.port
        await service.stopService()
        message = await self.error(brokers=f"127.0.0.1:{port}", subscribe=TOPIC)
        self.assertIn("ConnectionFailed", message)
        self.assertIn(f"127.0.0.1:{port}", message)

    async def test_unknown_topic(self):
        """A topic no broker holds is named, with the brokers asked."""
        service = await start_broker(self)
        brokers = f"127.0.0.1:{service.broker.port}"
        await produce(self, brokers, TOPIC, payloads("a", 1))
        message = await self.error(brokers=brokers, subscribe="nosuchtopic")
        self.assertIn("UnknownTopic", message)
        self.assertIn("'nosuchtopic'", message)
        self.assertIn(brokers, message)

    async def test_offset_out_of_range(self):
        """A starting offset outside the log fails, unless failOnDataLoss is false: then reading starts at earliest."""
        service = await start_broker(self)
        brokers = f"127.0.0.1:{service.broker.port}"
        end = (await produce(self, brokers, TOPIC, payloads("a", 3))).next_offset
        message = await self.error(brokers=brokers, subscribe=TOPIC, startingOffsets={TOPIC: {"0-0": end + 100}})
        self.assertIn("OffsetOutOfRange", message)
        self.assertIn("partition 0-0", message)
        self.assertIn(f"[0, {end})", message)
        rows = await self.rows(
            brokers=brokers, subscribe=TOPIC, startingOffsets={TOPIC: {"0-0": end + 100}}, failOnDataLoss="false"
        )
        self.assertEqual([r[3] for r in rows], payloads("a", 3))

    async def test_corrupt_message(self):
        """A CRC mismatch in the range fails the read, naming the partition and the offset."""
        log_dir = self.mktemp()
        service = await start_broker(self, log_dir=log_dir)
        brokers = f"127.0.0.1:{service.broker.port}"
        results = [await produce(self, brokers, TOPIC, [p]) for p in payloads("a", 5)]
        bad = results[2].offset
        path = os.path.join(log_dir, f"{TOPIC}-0", f"{0:020d}.log")
        with open(path, "r+b") as f:
            f.seek(bad + 4 + 9)
            f.write(b"X")
        message = await self.error(brokers=brokers, subscribe=TOPIC)
        self.assertIn("InvalidMessage", message)
        self.assertIn(f"offset {bad}", message)
        self.assertIn("partition 0-0", message)


    async def test_corrupt_wrapper_between_good_messages(self):
        """5 good messages, a wrapper that is not gzip (stored by an older version), 5 more: the read fails naming
        the bad offset and the offset after it; with failOnDataLoss=false the 10 good ones are read."""
        log_dir = self.mktemp()
        good = payloads("g", 10)
        _, bad, after = write_partition(log_dir, TOPIC, encode_message_set(good[:5]), NOT_GZIP,
                                        encode_message_set(good[5:]))
        service = await start_broker(self, log_dir=log_dir)
        brokers = f"127.0.0.1:{service.broker.port}"
        message = await self.error(brokers=brokers, subscribe=TOPIC)
        self.assertIn("InvalidMessage", message)
        self.assertIn(f"the message at offset {bad} is corrupt", message)
        self.assertIn(f"the next message starts at offset {after}", message)
        rows = await self.rows(brokers=brokers, subscribe=TOPIC, failOnDataLoss="false")
        self.assertEqual([r[3] for r in rows], good)


del ConnectionFailed, InvalidMessage, OffsetOutOfRange


class StreamTests(SparkTestCase):
    def run_stream(self, brokers: str, out: str, checkpoint: str, **options):
        """Run an availableNow query into Parquet at C{out} to its end; its progress reports."""
        reader = self.spark.readStream.format("twlog").option("brokers", brokers).option("subscribe", TOPIC)
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (
            reader.load()
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        if query.isActive:
            query.stop()
            raise AssertionError("the query did not finish")
        if query.exception() is not None:
            raise AssertionError(str(query.exception()))
        return query.recentProgress

    async def sink(self, out: str) -> list[tuple]:
        rows = await spark_call(lambda: self.spark.read.parquet(out).collect())
        return sorted((r.partition, r.offset, bytes(r.value)) for r in rows)

    async def test_restart_exactly_once(self):
        """A stream stopped and restarted from its checkpoint has every message once in its file sink,
        including those of a partition on a broker that had none of the topic before."""
        one = await start_broker(self, broker_id=1, num_partitions=2)
        two = await start_broker(self, broker_id=2)
        brokers = f"127.0.0.1:{one.broker.port},127.0.0.1:{two.broker.port}"
        out, checkpoint = self.mktemp(), self.mktemp()
        await produce(self, brokers, TOPIC, payloads("a", 100), partition=0)
        await produce(self, brokers, TOPIC, payloads("b", 30), partition=1)
        # About 1/4 of the backlog per trigger: several micro-batches, each cut on a message boundary.
        progress = await spark_call(
            self.run_stream, brokers, out, checkpoint, startingOffsets="earliest", maxOffsetsPerTrigger="700"
        )
        self.assertGreater(len([p for p in progress if p["numInputRows"]]), 2)
        first = await self.sink(out)
        self.assertEqual(sorted(r[2] for r in first), sorted(payloads("a", 100) + payloads("b", 30)))
        await produce(self, brokers, TOPIC, payloads("c", 20), partition=0)
        await produce(self, brokers, TOPIC, payloads("d", 25), partition=2)  # broker 2's first
        await spark_call(self.run_stream, brokers, out, checkpoint, startingOffsets="earliest")
        rows = await self.sink(out)
        expected = payloads("a", 100) + payloads("b", 30) + payloads("c", 20) + payloads("d", 25)
        self.assertEqual(sorted(r[2] for r in rows), sorted(expected))
        self.assertEqual(len({(r[0], r[1], r[2]) for r in rows}), len(expected))
        self.assertEqual({r[0] for r in rows}, {"1-0", "1-1", "2-0"})

    async def test_latest_by_default(self):
        """A new stream starts at the end: only messages written after its first run are read."""
        service = await start_broker(self)
        brokers = f"127.0.0.1:{service.broker.port}"
        out, checkpoint = self.mktemp(), self.mktemp()
        await produce(self, brokers, TOPIC, payloads("old", 10))
        await spark_call(self.run_stream, brokers, out, checkpoint)
        await produce(self, brokers, TOPIC, payloads("new", 10))
        await spark_call(self.run_stream, brokers, out, checkpoint)
        self.assertEqual([r[2] for r in await self.sink(out)], payloads("new", 10))


class ZooKeeperTests(SparkTestCase):
    async def test_zookeeper_discovery(self):
        """With the zookeeper option, the partitions are those the brokers registered."""
        from kazoo.client import KazooClient

        from tests.integration.broker import wait_until
        from tests.integration.zookeeper import fresh_connect_string

        connect = fresh_connect_string()
        one = await start_broker(self, broker_id=1, zookeeper=connect)
        two = await start_broker(self, broker_id=2, zookeeper=connect)
        brokers = f"127.0.0.1:{one.broker.port},127.0.0.1:{two.broker.port}"
        await produce(self, brokers, TOPIC, payloads("one", 10), partition=0)
        await produce(self, brokers, TOPIC, payloads("two", 20), partition=1)
        zk = KazooClient(connect)
        zk.start(timeout=30)
        self.addCleanup(lambda: (zk.stop(), zk.close()))
        path = f"/brokers/topics/{TOPIC}"
        await wait_until(lambda: zk.exists(path) is not None and len(zk.get_children(path)) == 2)
        rows = await self.rows(zookeeper=connect, subscribe=TOPIC)
        self.assertEqual(sorted(r[3] for r in rows), sorted(payloads("one", 10) + payloads("two", 20)))
        self.assertEqual({r[1] for r in rows}, {"1-0", "2-0"})


class ClusterTests(SparkTestCase):
    async def cluster(self):
        """Two brokers following ZooKeeper, 2 partitions each, 5 messages on each partition; the payloads."""
        from tests.integration.broker import wait_until
        from tests.integration.groups import produce_all, registered, start_brokers
        from tests.integration.zookeeper import connect

        zk = await connect(self)
        brokers = await start_brokers(self, zk.hosts, 2, partitions=2)
        sent = await produce_all(brokers, TOPIC, 5)
        await registered(zk, TOPIC, brokers)
        for broker in brokers:
            view = broker.service.cluster
            await wait_until(lambda view=view: view.ready and len(view.holders(TOPIC)) == 2)
        return brokers, sent

    async def test_one_address_reads_every_partition(self):
        """The brokers option with one broker of a 2-broker cluster reads every row of the topic (the README's
        cluster once returned only that broker's partitions); kafka.bootstrap.servers is the same option."""
        brokers, sent = await self.cluster()
        for option in ("brokers", "kafka.bootstrap.servers"):
            for broker in brokers:
                rows = await self.rows(**{option: f"127.0.0.1:{broker.port}"}, subscribe=TOPIC)
                self.assertEqual(sorted(r[3] for r in rows), sorted(sent))
                self.assertEqual({r[1] for r in rows}, {"0-0", "0-1", "1-0", "1-1"})

    async def test_offsets_by_name_and_index(self):
        """startingOffsets keys are partition names or cluster-wide indexes (3 is 1-1); names are validated."""
        brokers, _ = await self.cluster()
        one = f"127.0.0.1:{brokers[0].port}"
        rows = await self.rows(brokers=one, subscribe=TOPIC, startingOffsets={TOPIC: {"0-0": -1, "1": -1, "2": -1}})
        self.assertEqual({r[1] for r in rows}, {"1-1"})
        message = await self.error(brokers=one, subscribe=TOPIC, startingOffsets={TOPIC: {"7-0": 0}})
        self.assertIn("startingOffsets: topic 'clicks' has no partition '7-0'", message)
        self.assertIn("(0-0, 0-1, 1-0, 1-1) or an index 0-3", message)
        message = await self.error(brokers=one, subscribe=TOPIC, endingOffsets={"other": {"0-0": 0}})
        self.assertIn("endingOffsets names topic 'other', which this query does not read", message)


class OptionTests(SparkTestCase):
    async def test_unknown_option(self):
        """A misspelled option is an error naming it, the nearest known one, and every known option."""
        message = await self.error(brokers="127.0.0.1:1", subscribe=TOPIC, startingOffset="earliest")
        self.assertIn("unknown option 'startingoffset' (did you mean startingOffsets?) for the twlog source", message)
        self.assertIn("the options are: brokers, kafka.bootstrap.servers, zookeeper,", message)

    async def test_case_insensitive(self):
        """Options match in any case, as in Spark's own sources."""
        service = await start_broker(self)
        brokers = f"127.0.0.1:{service.broker.port}"
        await produce(self, brokers, TOPIC, payloads("a", 3))
        rows = await self.rows(BROKERS=brokers, Subscribe=TOPIC, STARTINGOFFSETS="earliest")
        self.assertEqual([r[3] for r in rows], payloads("a", 3))

    async def test_missing_chroot(self):
        """A zookeeper option whose chroot does not exist fails at once, saying what was probably meant."""
        from tests.integration.zookeeper import zookeeper_server

        servers = zookeeper_server().connect_string
        message = await self.error(zookeeper=f"{servers}/twlog", subscribe=TOPIC)
        self.assertIn(f"ZooKeeper at {servers} has no /twlog: did you mean {servers} (no chroot)?", message)
