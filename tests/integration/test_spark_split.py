"""minPartitions through a local Spark session and a real broker: N tasks for one partition, the same rows."""

from __future__ import annotations

import os

from tests.integration.broker import start_broker
from tests.integration.spark import spark_call
from tests.integration.test_spark_source import TOPIC, SparkTestCase, collect
from tests.storage.corrupt import write_partition
from twlog.producer import Producer
from twlog.storage.manager import CLEAN_SHUTDOWN_MARKER
from twlog.storage.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, encode_message_set

CODECS = (CODEC_NONE, CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY)


def batch(i: int) -> list[bytes]:
    """The i-th batch of payloads: sizes vary, so messages do not fall on round positions."""
    return [b"m%04d.%02d-" % (i, j) + b"v" * ((i * 7 + j * 13) % 150) for j in range(40)]


class MinPartitionsTests(SparkTestCase):
    async def read_with(self, brokers: str, min_partitions: int | None, **options) -> tuple[int, list[tuple]]:
        """The number of Spark tasks and the rows of a read with C{minPartitions}."""
        reader = self.spark.read.format("twlog").option("brokers", brokers).option("subscribe", TOPIC)
        if min_partitions is not None:
            reader = reader.option("minPartitions", str(min_partitions))
        for key, value in options.items():
            reader = reader.option(key, value)
        df = reader.load()
        tasks = await spark_call(lambda: df.rdd.getNumPartitions())
        rows = await spark_call(lambda: collect(df))
        return tasks, sorted(rows, key=lambda r: (r[2], r[3]))

    async def test_one_partition_split_in_eight(self):
        """A one-partition topic of plain, gzip and snappy sets over several segments, read with minPartitions 1,
        3 and 8 and a fetch size that cuts messages: 1, 3 and 8 tasks, and the same rows in every case."""
        service = await start_broker(self, num_partitions=1, segment_bytes=32 * 1024)
        brokers = f"127.0.0.1:{service.broker.port}"
        for codec_name, codec in (("none", CODEC_NONE), ("gzip", CODEC_GZIP), ("snappy", CODEC_SNAPPY)):
            producer = Producer(brokers, ack="flushed", codec=codec_name)
            for i in range(codec, 60, 3):
                await producer.send(TOPIC, batch(i))
            await producer.close()
        self.assertGreater(len(service.logs.get_log(TOPIC, 0).segments), 2)
        tasks, whole = await self.read_with(brokers, None, fetchSize="3000")
        self.assertEqual(tasks, 1)
        self.assertEqual(len(whole), 60 * 40)
        self.assertEqual(sorted(r[3] for r in whole), sorted(p for i in range(60) for p in batch(i)))
        for parts in (1, 3, 8):
            tasks, rows = await self.read_with(brokers, parts, fetchSize="3000")
            self.assertEqual(tasks, parts)
            self.assertEqual(rows, whole, parts)

    async def test_segments_found_on_disk_and_a_corrupt_message(self):
        """Segments written before the broker started (indexed on first use) holding a message with a bad CRC:
        with failOnDataLoss false, minPartitions 1, 3 and 8 skip it alike; with true, each read fails naming it."""
        log_dir = self.mktemp()
        sets = [encode_message_set(batch(i), CODECS[i % 4]) for i in range(40)]
        bad = bytearray(sets[22])
        bad[-1] ^= 0xFF  # the last message of a plain set: its CRC fails, its length is sane
        sets[22] = bytes(bad)
        offsets = write_partition(log_dir, TOPIC, *sets)
        with open(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER), "w"):
            pass  # a clean stop before: no recovery (which would cut the log at the bad message)
        service = await start_broker(self, log_dir=log_dir, num_partitions=1)
        brokers = f"127.0.0.1:{service.broker.port}"
        _, whole = await self.read_with(brokers, None, failOnDataLoss="false")
        self.assertEqual(len(whole), 40 * 40 - 1)
        self.assertNotIn(batch(22)[-1], [r[3] for r in whole])
        for parts in (3, 8):
            tasks, rows = await self.read_with(brokers, parts, failOnDataLoss="false")
            self.assertEqual(tasks, parts)
            self.assertEqual(rows, whole)
            try:
                await spark_call(lambda: self.spark.read.format("twlog").option("brokers", brokers)
                                 .option("subscribe", TOPIC).option("minPartitions", str(parts)).load().collect())
            except Exception as e:  # Spark wraps the worker's InvalidMessage in its own error
                self.assertIn(f"the message at offset {_last_message(offsets[22], sets[22])} is corrupt", str(e))
            else:
                self.fail("a read with failOnDataLoss true did not fail")


def _last_message(offset: int, message_set: bytes) -> int:
    """The offset of the last message of the plain C{message_set} written at C{offset}."""
    pos = 0
    while True:
        size = int.from_bytes(message_set[pos : pos + 4], "big")
        if pos + 4 + size == len(message_set):
            return offset + pos
        pos += 4 + size
