"""Over real TCP: nothing invalid is stored, a bad stored message never hides the good ones, and a message over
the maximum is MessageSizeTooLarge carrying its size and the broker's limit (issue 9, items 4-6)."""

from __future__ import annotations

from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_cli import twlog
from tests.storage.corrupt import NOT_GZIP, gzip_bomb, nested_gzip, write_partition
from twlog.blocking import BlockingConsumer
from twlog.client.connection import BrokerConnection
from twlog.consumer.simple import SimpleConsumer
from twlog.errors import InvalidMessage, MessageSizeTooLarge
from twlog.producer import Producer
from twlog.protocol.codec import AckProduceRequest, ProduceRequest
from twlog.storage.message import CorruptMessage, encode_message_set

GOOD = [b"good-%d" % i for i in range(10)]
TOPIC = "t"


class CorruptPartitionTests(TestCase):
    """5 good messages, a wrapper whose payload is not gzip (written straight to the segment), then 5 more."""

    timeout = 120

    async def setUp(self) -> None:
        log_dir = self.mktemp()
        _, self.bad, self.after = write_partition(log_dir, TOPIC, encode_message_set(GOOD[:5]), NOT_GZIP,
                                                  encode_message_set(GOOD[5:]))
        self.service = await start_broker(self, log_dir=log_dir)
        self.port = self.service.broker.port

    def check_error(self, error: Exception) -> None:
        self.assertIsInstance(error, InvalidMessage)
        self.assertEqual((error.offset, error.next_offset), (self.bad, self.after))
        self.assertIn(f"{TOPIC}-0: the message at offset {self.bad} is corrupt", str(error))
        self.assertIn(f"the next message starts at offset {self.after}", str(error))

    async def test_blocking_fetch(self) -> None:
        """BlockingConsumer.fetch(0) returns the 5 good ones; the fetch from the bad one raises with its offsets;
        with on_corrupt="skip" all 10 come through."""

        def script():
            with BlockingConsumer("127.0.0.1", self.port) as consumer:
                fetched = consumer.fetch(TOPIC, 0, 0)
                try:
                    consumer.fetch(TOPIC, 0, fetched.next_offset)
                except InvalidMessage as e:
                    error = e
            with BlockingConsumer("127.0.0.1", self.port, on_corrupt="skip") as consumer:
                skipping = consumer.fetch(TOPIC, 0, 0)
            return fetched, error, skipping

        fetched, error, skipping = await deferToThread(script)
        self.assertEqual([m.payload for m in fetched], GOOD[:5])
        self.assertEqual(fetched.next_offset, self.bad)
        self.check_error(error)
        self.assertEqual([m.payload for m in skipping], GOOD)
        self.assertEqual([(s.offset, s.next_offset) for s in skipping.skipped], [(self.bad, self.after)])

    async def test_stream(self) -> None:
        """SimpleConsumer.stream hands out the 5 good ones, then raises; skipping, all 10."""
        for on_corrupt in ("fail", "skip"):
            consumer = SimpleConsumer("127.0.0.1", self.port, on_corrupt=on_corrupt, max_wait_ms=100)
            got, error = [], None
            try:
                async for message in consumer.stream(TOPIC, 0, 0, idle_timeout_s=1):
                    got.append(message.payload)
            except InvalidMessage as e:
                error = e
            finally:
                await consumer.close()
            if on_corrupt == "fail":
                self.assertEqual(got, GOOD[:5])
                self.check_error(error)
            else:
                self.assertEqual((got, error), (GOOD, None))

    async def test_stream_after_a_cut(self) -> None:
        """A fetch cut before the bad message: the next fetch starts on it; the error still names both offsets."""
        consumer = SimpleConsumer("127.0.0.1", self.port, max_bytes=self.bad + 10)
        try:
            fetched = await consumer.fetch(TOPIC, 0, 0)
            self.assertEqual(fetched.next_offset, self.bad)
            with self.assertRaises(CorruptMessage) as caught:
                await consumer.fetch(TOPIC, 0, self.bad)
            self.check_error(caught.exception)
        finally:
            await consumer.close()

    async def test_consume_command(self) -> None:
        """twlog consume prints the 5, then one line naming the bad range, exit 1; --skip-corrupt prints 10."""
        broker = f"127.0.0.1:{self.port}"
        status, out, err = await twlog("consume", "-b", broker, "-t", TOPIC, "-o", "earliest")
        self.assertEqual(out.decode().splitlines(), [g.decode() for g in GOOD[:5]])
        self.assertEqual(status, 1)
        lines = err.decode().strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn(f"offset {self.bad} is corrupt", lines[0])
        self.assertIn(f"offset {self.after}", lines[0])
        self.assertIn("--skip-corrupt", lines[0])
        status, out, err = await twlog("consume", "-b", broker, "-t", TOPIC, "-o", "earliest", "--skip-corrupt")
        self.assertEqual((status, out.decode().splitlines()), (0, [g.decode() for g in GOOD]), err)
        self.assertIn(f"[{self.bad}, {self.after})", err.decode())


class HostileSetTests(TestCase):
    timeout = 120

    async def test_refused_on_append(self) -> None:
        """The invalid wrapper, a 2,000-deep nest and a gzip bomb get InvalidMessage (2) or MessageSizeTooLarge (6)
        and are not stored; the good set after them is."""
        service = await start_broker(self, flush_interval_ms=10)
        connection = BrokerConnection("127.0.0.1", service.broker.port)
        producer = Producer(f"127.0.0.1:{service.broker.port}", ack="flushed")
        try:
            for data, expected in ((NOT_GZIP, InvalidMessage), (nested_gzip(2000), InvalidMessage),
                                   (gzip_bomb(200 * 1000 * 1000), MessageSizeTooLarge)):
                error = await self.append_raw(connection, data)
                self.assertEqual(error, expected.code)
            result = await producer.send(TOPIC, [b"after"])
            self.assertEqual(result.offset, 0)  # nothing was stored before it
        finally:
            await producer.close()
            await connection.close()

    async def append_raw(self, connection, data: bytes) -> int:
        response = await connection.request(AckProduceRequest(1, 1000, (ProduceRequest(TOPIC, 0, data),)))
        return response.results[0].error

    async def test_one_byte_over(self) -> None:
        """One byte over --max-message-bytes is MessageSizeTooLarge (6) with the size and the broker's limit."""
        service = await start_broker(self, max_message_bytes=100)
        producer = Producer(f"127.0.0.1:{service.broker.port}", ack="appended")
        try:
            await producer.send(TOPIC, [b"x" * 95])  # N = 100
            with self.assertRaises(MessageSizeTooLarge) as caught:
                await producer.send(TOPIC, [b"x" * 96])
            error = caught.exception
        finally:
            await producer.close()
        self.assertEqual((error.message_size, error.limit), (101, 100))
        self.assertIn("a message of 101 bytes; the broker's limit is 100", str(error))

    async def test_read_of_stored_hostile_sets(self) -> None:
        """Stored by an older version, a nest and a bomb read as InvalidMessage (no RecursionError), after the
        good messages before them."""
        log_dir = self.mktemp()
        offsets = write_partition(log_dir, TOPIC, encode_message_set(GOOD[:2]), nested_gzip(2000),
                                  encode_message_set(GOOD[2:4]), gzip_bomb(200 * 1000 * 1000),
                                  encode_message_set(GOOD[4:6]))
        service = await start_broker(self, log_dir=log_dir)
        consumer = SimpleConsumer("127.0.0.1", service.broker.port, max_bytes=1024 * 1024)
        try:
            got, errors, offset = [], [], 0
            while offset < offsets[-1]:
                try:
                    fetched = await consumer.fetch(TOPIC, 0, offset)
                except InvalidMessage as e:
                    errors.append((e.offset, e.next_offset))
                    offset = e.next_offset
                    continue
                got.extend(m.payload for m in fetched)
                offset = fetched.next_offset
        finally:
            await consumer.close()
        self.assertEqual(errors, [(offsets[1], offsets[2]), (offsets[3], offsets[4])])
        self.assertEqual(got, GOOD[:4])
