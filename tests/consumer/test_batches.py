"""Tests for the Twisted batch API: SimpleConsumer.fetch_batch and the pipelined BatchReader (batches)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.client.test_consumer import make_consumer, wait_frame
from twlog.consumer.batches import BATCH_MAX_BYTES
from twlog.errors import FetchSizeTooSmall, InvalidMessage
from twlog.protocol.codec import FetchRequest, WaitFetchRequest
from twlog.storage.batch import MessageBatch
from twlog.storage.message import CODEC_GZIP, CODEC_SNAPPY, CorruptMessage, encode_message_set

PLAIN = encode_message_set([b"a", b"bb", b"ccc"])  # entries of 10, 11 and 12 bytes
ZIPPED = encode_message_set([b"d", b"ee"], CODEC_GZIP)
SNAPPED = encode_message_set([b"f" * 30, b"g"], CODEC_SNAPPY)
LOG = PLAIN + ZIPPED + PLAIN + SNAPPED + PLAIN


def fetch_offsets(connection) -> list[int]:
    return [r.fetches[0].offset for r in connection.requests if isinstance(r, WaitFetchRequest)]


def bad_crc(entry: bytes) -> bytes:
    return entry[:-1] + bytes([entry[-1] ^ 0xFF])


class FetchBatchTests(SynchronousTestCase):
    def test_same_as_fetch(self) -> None:
        """On the same responses (plain, compressed, cut inside the last entry), fetch_batch gives fetch's
        messages and next offset."""
        for data in (LOG, LOG[:-5], PLAIN + ZIPPED[:7], SNAPPED + PLAIN):
            consumer, (connection,), _ = make_consumer()
            connection.responses += [wait_frame(data), wait_frame(data)]
            fetched = self.successResultOf(consumer.fetch("t", 0, 100, len(data)))
            batch = self.successResultOf(consumer.fetch_batch("t", 0, 100, len(data)))
            self.assertEqual(list(batch), list(fetched.messages))
            self.assertEqual((batch.next_offset, batch.corrupt), (fetched.next_offset, None))
            self.assertEqual(len(batch), len(fetched))

    def test_corrupt_message(self) -> None:
        """The valid messages before a corrupt one; a fetch from it raises CorruptMessage naming the offsets;
        with on_corrupt="skip" it is skipped."""
        data = PLAIN + bad_crc(ZIPPED) + PLAIN
        consumer, (connection,), _ = make_consumer()
        connection.responses += [wait_frame(data), wait_frame(data[33:])]
        batch = self.successResultOf(consumer.fetch_batch("t", 0, 0))
        self.assertEqual(([m.payload for m in batch], batch.next_offset, batch.corrupt.offset), ([b"a", b"bb", b"ccc"],
                                                                                                   33, 33))
        error = self.failureResultOf(consumer.fetch_batch("t", 0, 33), InvalidMessage).value
        self.assertEqual((error.offset, error.next_offset), (33, 33 + len(ZIPPED)))
        self.assertIn("t-0: the message at offset 33 is corrupt", str(error))

        consumer, (connection,), _ = make_consumer(on_corrupt="skip")
        connection.responses.append(wait_frame(data))
        batch = self.successResultOf(consumer.fetch_batch("t", 0, 0))
        self.assertEqual([m.payload for m in batch], [b"a", b"bb", b"ccc"] * 2)
        self.assertEqual([e.offset for e in batch.skipped], [33])
        self.assertIsNone(batch.corrupt)

    def test_message_larger_than_fetch(self) -> None:
        """A first message that does not fit is FetchSizeTooSmall naming the size needed, as for fetch."""
        consumer, (connection,), _ = make_consumer()
        connection.responses.append(wait_frame(PLAIN[:6]))
        failure = self.failureResultOf(consumer.fetch_batch("t", 3, 0, 6), FetchSizeTooSmall)
        self.assertIn("the message at offset 0 of t-3 is 10 bytes, larger than max_bytes=6", str(failure.value))


class BatchReaderTests(SynchronousTestCase):
    def reader(self, **options):
        consumer, connections, _ = make_consumer(batch_max_bytes=options.pop("max_bytes", 60))
        reader = consumer.batches("t", 0, 0, **options)
        return consumer, reader, connections[1]

    def test_asks_for_the_next_fetch_before_handing_out(self) -> None:
        """As soon as a response is decoded, the fetch after its whole entries goes out: the next batch is
        asked for before the current one is handed out."""
        _, reader, connection = self.reader()
        first = reader.__anext__()
        self.assertEqual(fetch_offsets(connection), [0])
        connection.answer(wait_frame(LOG[:40]))  # three whole entries (33 bytes) and part of the wrapper
        batch = self.successResultOf(first)
        self.assertEqual(fetch_offsets(connection), [0, 33])
        self.assertEqual(([m.payload for m in batch], batch.next_offset), ([b"a", b"bb", b"ccc"], 33))
        self.assertEqual(reader.prefetched, 1)

    def test_reads_the_log_in_order(self) -> None:
        """Batch after batch, the reader gives every message of the log once, in order, as fetch would, and
        stops at the end offset without fetching past it."""
        _, reader, connection = self.reader(end=len(LOG))
        batches = []
        while True:
            d = reader.__anext__()
            while connection.waiting:  # the broker answers whatever was asked, in order
                request, _ = connection.waiting[0]
                fetch = request.fetches[0]
                connection.answer(wait_frame(LOG[fetch.offset : fetch.offset + fetch.max_bytes]))
            results: list = []
            d.addBoth(results.append)
            if not isinstance(results[0], MessageBatch):
                results[0].trap(StopAsyncIteration)
                break
            batches.append(results[0])
        expected = [m for batch in batches for m in batch]
        self.assertEqual([m.payload for m in expected],
                         [b"a", b"bb", b"ccc", b"d", b"ee", b"a", b"bb", b"ccc", b"f" * 30, b"g", b"a", b"bb", b"ccc"])
        self.assertEqual(reader.next_offset, len(LOG))
        self.assertTrue(all(offset < len(LOG) for offset in fetch_offsets(connection)))
        self.assertEqual(fetch_offsets(connection), sorted(set(fetch_offsets(connection))))
        self.assertEqual(reader.dropped, 0)

    def test_fetches_ahead_are_bounded(self) -> None:
        """However fast responses arrive, at most AHEAD fetches beyond the batch being decoded are in flight."""
        _, reader, connection = self.reader(max_bytes=12)
        log = encode_message_set([b"%02d" % i for i in range(30)])
        d = reader.__anext__()
        for _ in range(30):
            if not connection.waiting:
                break
            request, _ = connection.waiting[0]
            fetch = request.fetches[0]
            connection.answer(wait_frame(log[fetch.offset : fetch.offset + fetch.max_bytes]))
        self.successResultOf(d)
        self.assertLessEqual(len(fetch_offsets(connection)), 1 + reader.AHEAD + 1)

    def test_corrupt_message_asks_for_nothing_past_it(self) -> None:
        """A batch ending at a corrupt message asks for nothing past it, and the next fetch, from the corrupt
        message, raises CorruptMessage naming its offsets."""
        data = PLAIN + bad_crc(ZIPPED) + PLAIN
        _, reader, connection = self.reader(max_bytes=len(data))
        d = reader.__anext__()
        connection.answer(wait_frame(data))
        batch = self.successResultOf(d)
        self.assertEqual((len(batch), batch.next_offset), (3, 33))
        self.assertEqual(fetch_offsets(connection), [0])  # decoding found it: nothing asked for past it
        d = reader.__anext__()
        self.assertEqual(reader.dropped, 0)
        self.assertEqual(fetch_offsets(connection), [0, 33])
        connection.answer(wait_frame(data[33:]))
        error = self.failureResultOf(d, CorruptMessage).value
        self.assertEqual((error.offset, error.next_offset), (33, 33 + len(ZIPPED)))

    def test_without_pipelining(self) -> None:
        """pipeline=False: one fetch at a time, each sent once the batch before it was handed out."""
        _, reader, connection = self.reader(pipeline=False)
        d = reader.__anext__()
        connection.answer(wait_frame(LOG[:40]))
        self.successResultOf(d)
        self.assertEqual(fetch_offsets(connection), [0])
        reader.__anext__()
        self.assertEqual(fetch_offsets(connection), [0, 33])
        self.assertEqual(connection.requests[-1], WaitFetchRequest(0, 0, (FetchRequest("t", 0, 33, 60),)))

    def test_ends_at_the_end_of_the_log(self) -> None:
        """Without an end offset, an empty fetch (the end of the flushed log) ends the iteration."""
        _, reader, connection = self.reader()
        d = reader.__anext__()
        connection.answer(wait_frame(b""))
        self.assertEqual(len(self.successResultOf(d)), 0)
        self.failureResultOf(reader.__anext__(), StopAsyncIteration)

    def test_close(self) -> None:
        """Closing ends the iteration and closes the reader's own connection."""
        consumer, reader, connection = self.reader()
        waiting = reader.__anext__()
        self.successResultOf(reader.close())
        self.assertTrue(connection.closed)
        self.failureResultOf(waiting, StopAsyncIteration)
        self.failureResultOf(reader.__anext__(), StopAsyncIteration)
        self.successResultOf(consumer.close())


class DefaultFetchSizeTests(SynchronousTestCase):
    def test_batch_readers_fetch_one_mib(self) -> None:
        """fetch_batch and batches fetch 1 MiB by default; the per-message fetch keeps max_bytes (300 KiB); each
        can be given its size, the paper's 200 KB included, and the responses may be that large."""
        consumer, connections, _ = make_consumer()
        self.assertEqual((consumer.max_bytes, consumer.batch_max_bytes), (300 * 1024, BATCH_MAX_BYTES))
        self.assertEqual(BATCH_MAX_BYTES, 1024 * 1024)
        self.assertGreaterEqual(consumer.options.max_response_bytes, 2 * BATCH_MAX_BYTES)
        consumer.fetch_batch("t", 0, 0)
        consumer.fetch("t", 0, 0)
        consumer.fetch_batch("t", 0, 0, 200 * 1024)
        reader = consumer.batches("t", 0, 0)
        reader.__anext__()
        sizes = [r.fetches[0].max_bytes for c in connections for r in c.requests if isinstance(r, WaitFetchRequest)]
        self.assertEqual(sizes, [BATCH_MAX_BYTES, 300 * 1024, 200 * 1024, BATCH_MAX_BYTES])

        consumer, connections, _ = make_consumer(max_bytes=200 * 1024, batch_max_bytes=200 * 1024)
        consumer.fetch_batch("t", 0, 0)
        self.assertEqual(connections[0].requests[-1].fetches[0].max_bytes, 200 * 1024)
        self.assertRaises(ValueError, make_consumer, batch_max_bytes=0)
