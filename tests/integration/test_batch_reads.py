"""Over real TCP: the batch API and pipelined fetches read what the per-message path reads.

A broker in the test's reactor holds plain, gzip and snappy sets; one consumer
reads the partition through fetch (per message), fetch_batch and the pipelined
batches reader, with sendfile on and off, and through the blocking and sync
clients.  A partition with a corrupt message stored (as an older version
could) gives the valid messages, then the same CorruptMessage on every path.
"""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.storage.corrupt import NOT_GZIP, write_partition
from twlog.blocking import BlockingConsumer
from twlog.client.connection import BrokerConnection
from twlog.client.sync import SyncConnection
from twlog.consumer.simple import SimpleConsumer
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, ProduceRequest
from twlog.storage.message import CODEC_GZIP, CODEC_NONE, CODEC_SNAPPY, CorruptMessage, encode_message_set

SETS = [(CODEC_NONE, 300), (CODEC_GZIP, 50), (CODEC_SNAPPY, 50), (CODEC_NONE, 7), (CODEC_GZIP, 1)] * 6


def payload(i: int) -> bytes:
    return (b"%08d " % i) * (1 + i % 23)


def port_of(service) -> int:
    return service.port.getHost().port


async def fill(service, topic: str = "t") -> tuple[list[bytes], int]:
    """Produce SETS to C{topic} partition 0 (flushed); the payloads in log order, and the largest entry."""
    connection = BrokerConnection("127.0.0.1", port_of(service), reactor=reactor)
    items, n, largest = [], 0, 0
    try:
        for codec, count in SETS:
            batch = [payload(n + i) for i in range(count)]
            n += count
            items += batch
            data = encode_message_set(batch, codec)
            largest = max(largest, len(data) if codec else max(map(len, batch)) + 9)
            await connection.request(AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest(topic, 0, data),)))
    finally:
        await connection.close()
    return items, largest


async def read_per_message(consumer: SimpleConsumer, topic: str, end: int):
    out, offset = [], 0
    while offset < end:
        fetched = await consumer.fetch(topic, 0, offset)
        out += list(fetched)
        offset = fetched.next_offset
    return out


async def read_batches(consumer: SimpleConsumer, topic: str, end: int):
    out, offset = [], 0
    while offset < end:
        batch = await consumer.fetch_batch(topic, 0, offset)
        out += list(batch)
        offset = batch.next_offset
    return out


async def read_pipelined(consumer: SimpleConsumer, topic: str, end: int):
    out = []
    reader = consumer.batches(topic, 0, 0, end=end)
    try:
        async for batch in reader:
            out += list(batch)
    finally:
        await reader.close()
    return out


class BatchReadTests(TestCase):
    timeout = 120

    async def read_every_way(self, sendfile_on: bool) -> None:
        service = await start_broker(self, sendfile=sendfile_on)
        items, largest = await fill(service)
        for max_bytes in (largest + 11, 8192, 65536, 1 << 20):  # (cutting the sets at different places)
            consumer = SimpleConsumer("127.0.0.1", port_of(service), reactor=reactor, max_bytes=max_bytes)
            try:
                (end,) = await consumer.offsets("t", 0)
                expected = await read_per_message(consumer, "t", end)
                self.assertEqual([m.payload for m in expected], items)
                self.assertEqual(await read_batches(consumer, "t", end), expected, max_bytes)
                self.assertEqual(await read_pipelined(consumer, "t", end), expected, max_bytes)
            finally:
                await consumer.close()

    async def test_sendfile(self) -> None:
        """Through sendfile, at fetch sizes that cut sets anywhere: the batch API and the pipelined reader
        give exactly the per-message path's messages and offsets, all of them, in order."""
        await self.read_every_way(True)

    async def test_copying(self) -> None:
        """The same with --no-sendfile (log bytes copied through the broker)."""
        await self.read_every_way(False)

    async def test_blocking_and_sync_clients(self) -> None:
        """BlockingConsumer.fetch_batch and batches, and SyncConnection.fetch_batch, read the same messages."""
        service = await start_broker(self)
        items, _ = await fill(service)

        def read() -> tuple[list[bytes], list[bytes], list[bytes]]:
            with BlockingConsumer("127.0.0.1", port_of(service), max_bytes=65536) as consumer:
                (end,) = consumer.offsets("t", 0)
                first, offset = [], 0
                while offset < end:
                    batch = consumer.fetch_batch("t", 0, offset)
                    first += [bytes(v) for v in batch.views()]
                    offset = batch.next_offset
                second = [m.payload for batch in consumer.batches("t", 0, 0, end=end) for m in batch]
            third, offset = [], 0
            with SyncConnection("127.0.0.1", port_of(service)) as connection:
                while offset < end:
                    batch = connection.fetch_batch("t", 0, offset, 65536)
                    third += [m.payload for m in batch]
                    offset = batch.next_offset
            return first, second, third

        for got in await deferToThread(read):
            self.assertEqual(got, items)


class CorruptStoredMessageTests(TestCase):
    timeout = 60

    async def test_valid_messages_then_the_error(self) -> None:
        """5 good messages, a wrapper whose payload is not gzip (stored by an older version), 5 more: every
        batch path returns the 5, then raises CorruptMessage naming the offsets; skipping reads all 10."""
        log_dir = self.mktemp()
        good = [encode_message_set([b"before %d" % i]) for i in range(5)]
        after = [encode_message_set([b"after %d" % i]) for i in range(5)]
        offsets = write_partition(log_dir, "t", *good, NOT_GZIP, *after)
        service = await start_broker(self, log_dir=log_dir)
        bad_offset, next_offset = offsets[5], offsets[6]
        for on_corrupt in ("fail", "skip"):
            consumer = SimpleConsumer("127.0.0.1", port_of(service), reactor=reactor, on_corrupt=on_corrupt)
            try:
                batch = await consumer.fetch_batch("t", 0, 0)
                if on_corrupt == "skip":
                    self.assertEqual(len(batch), 10)
                    self.assertEqual([e.offset for e in batch.skipped], [bad_offset])
                    continue
                self.assertEqual([m.payload for m in batch], [b"before %d" % i for i in range(5)])
                self.assertEqual(batch.next_offset, bad_offset)
                with self.assertRaises(CorruptMessage) as raised:
                    await consumer.fetch_batch("t", 0, bad_offset)
                self.assertEqual((raised.exception.offset, raised.exception.next_offset), (bad_offset, next_offset))
                reader = consumer.batches("t", 0, 0)
                self.assertEqual(len(await reader.__anext__()), 5)
                with self.assertRaises(CorruptMessage):
                    await reader.__anext__()
                await reader.close()
            finally:
                await consumer.close()
