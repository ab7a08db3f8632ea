"""Tests for twlog produce: its pieces, the exact acknowledged prefix, --skip-lines, and a dead broker."""

from __future__ import annotations

import random
import sys
from io import BytesIO, StringIO

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.producer.test_producer import make_producer
from twlog.cli.common import UsageError
from twlog.cli.main import build_parser
from twlog.cli.produce import (
    InputReader,
    Ledger,
    _explain,
    chunks,
    count,
    maybe_stored,
    partition_index,
    produce,
    split_key,
)
from twlog.errors import (
    ConnectionFailed,
    ConnectionLost,
    MessageSizeTooLarge,
    PartitionsOffline,
    TwlogError,
)
from twlog.partition import TopicPartition
from twlog.producer import hash_partitioner


class ProduceTests(SynchronousTestCase):
    def test_count(self) -> None:
        """1 message, 0 messages, 1,000 messages."""
        self.assertEqual([count(1), count(0), count(1000)], ["1 message", "0 messages", "1,000 messages"])

    def test_split_key(self) -> None:
        """With a separator, the part before its first occurrence is the key; a line without it has --key."""
        self.assertEqual(split_key(b"user1:a:b", b":", None), (b"user1", b"a:b"))
        self.assertEqual(split_key(b"plain", b":", b"k"), (b"k", b"plain"))
        self.assertEqual(split_key(b"a:b", None, None), (None, b"a:b"))

    def test_partition_index(self) -> None:
        """-p takes BROKER-PARTITION or an index; anything else lists the valid partitions."""
        partitions = [TopicPartition.on_broker("t", b, p) for b in (0, 1) for p in (0, 1)]
        self.assertEqual(partition_index(partitions, "1-0"), 2)
        self.assertEqual(partition_index(partitions, "3"), 3)
        e = self.assertRaises(UsageError, partition_index, partitions, "2-0")
        self.assertIn("(0-0, 0-1, 1-0, 1-1) or an index 0-3", str(e))

    def test_size_error_names_size_and_limit(self) -> None:
        """A refused too-large message says its size and the limit (the broker's, when the error carries it)."""
        error = MessageSizeTooLarge("refused")
        e = self.assertRaises(TwlogError, _explain, Failure(error), [b"x" * 10, b"y" * 2_000_000])
        self.assertEqual(str(e), "the broker refused a message of 2,000,000 bytes as too large; the limit is the "
                                 "broker's --max-message-bytes (default 1,000,000)")
        error.message_size, error.limit = 5_000_000, 1_000_000
        e = self.assertRaises(TwlogError, _explain, Failure(error), [b"x"])
        self.assertIn("5,000,000 bytes as too large; the limit is 1,000,000 bytes", str(e))


class _Lines:
    """An input reader over lists of lines given up front (as the reader thread hands them over); with
    C{more}, a pipe that then sends nothing (its next read never returns)."""

    def __init__(self, *chunks: list[bytes], more: bool = False) -> None:
        self._chunks = list(chunks)
        self._more = more

    def next(self):
        if not self._chunks and self._more:
            return Deferred()
        return succeed(self._chunks.pop(0) if self._chunks else None)


def produce_args(*options: str):
    return build_parser().parse_args(["produce", "-b", "b0:9092,b1:9092", "-t", "t", *options])


class LedgerTests(SynchronousTestCase):
    """The acknowledged prefix is exact whatever order the batches in flight are answered in."""

    def test_prefix_waits_for_the_oldest_batch(self) -> None:
        """A later chunk acknowledged first does not move the prefix; the older one then moves it past both."""
        ledger = Ledger()
        (first,) = ledger.chunk([[0, 1, 2, 3]], 4)
        (second,) = ledger.chunk([[4, 5, 6, 7]], 8)
        ledger.acknowledged(second)
        self.assertEqual((ledger.prefix, ledger.beyond()), (0, (4, 0)))
        ledger.acknowledged(first)
        self.assertEqual((ledger.prefix, ledger.beyond()), (8, (0, 0)))

    def test_keyed_batches_of_one_chunk(self) -> None:
        """A chunk split by key: the prefix stops at the first line of a batch not acknowledged, and the lines
        of acknowledged batches after it are what a resume sends again."""
        ledger = Ledger(skipped=10)
        a, b = ledger.chunk([[10, 12, 14], [11, 13, 15]], 16)
        ledger.acknowledged(a)
        ledger.failed(b, ConnectionFailed("refused"))
        self.assertEqual((ledger.prefix, ledger.beyond()), (11, (2, 0)))
        self.assertEqual(ledger.report(ledger.first_error()),
                         "stopped after 11 of the input's lines were acknowledged (resume with --skip-lines 11; "
                         "resuming there sends again 2 later lines that were acknowledged too): refused")

    def test_no_answer_may_be_stored(self) -> None:
        """A batch whose connection broke after it was written may be stored: the report says so; one refused
        before being sent (or by a typed refusal) is not."""
        ledger = Ledger()
        (a,) = ledger.chunk([[0, 1]], 2)
        (b,) = ledger.chunk([[2, 3]], 4)
        (c,) = ledger.chunk([[4, 5]], 6)
        ledger.acknowledged(a)
        ledger.failed(b, ConnectionFailed("refused"))
        ledger.failed(c, ConnectionLost("lost"))
        self.assertEqual((ledger.prefix, ledger.beyond()), (2, (0, 2)))
        self.assertIn("(resume with --skip-lines 2; resuming there sends again 2 later lines that may be stored "
                      "(no answer came)): refused", ledger.report(ledger.first_error()))
        self.assertEqual([maybe_stored(e) for e in (ConnectionLost("x"), ConnectionFailed("x"),
                                                    PartitionsOffline("x"), MessageSizeTooLarge("x"))],
                         [True, False, False, False])

    def test_nothing_acknowledged(self) -> None:
        ledger = Ledger()
        (a,) = ledger.chunk([[0]], 1)
        ledger.failed(a, ConnectionFailed("refused"))
        self.assertEqual(ledger.report(ledger.first_error()),
                         "stopped before any of the input's lines were acknowledged: refused")


class ProduceRunTests(SynchronousTestCase):
    """twlog produce over fake brokers: a dead broker, the resume line, --skip-lines."""

    def setUp(self) -> None:
        self.stderr = StringIO()
        self.patch(sys, "stderr", self.stderr)

    def run_produce(self, producer, args, *chunks: list[bytes]):
        return Deferred.fromCoroutine(produce(None, args, reader=_Lines(*chunks), producer=producer))

    def test_pinned_partition_of_a_dead_broker_stops_with_an_exact_prefix(self) -> None:
        """Batches pipelined to broker 1 are answered out of order, one is refused, one loses its answer: the
        command waits for them all, then says how many lines at the start were acknowledged; resuming from
        there sends every line not acknowledged, in order."""
        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})], ack="flushed", retries=0)
        connections["b1"].hold_requests = True
        lines = [b"line %d" % i for i in range(10)]
        args = produce_args("-p", "1-0", "--batch-size", "2")
        running = self.run_produce(producer, args, lines[:5], lines[5:])
        self.assertNoResult(running)
        held = connections["b1"].held
        self.assertEqual(len(held), 5)  # all five batches in flight at once
        held[3].callback(None)  # lines 6-7, answered first
        held[1].callback(None)
        held[2].errback(ConnectionFailed("cannot connect to broker b1:9092: refused"))
        held[0].callback(None)
        self.assertNoResult(running)  # the last batch is still in flight: the count is not final yet
        held[4].errback(ConnectionLost("connection to b1:9092 was lost"))
        error = self.failureResultOf(running, TwlogError).value
        self.assertEqual(str(error), "stopped after 4 of the input's lines were acknowledged (resume with "
                                     "--skip-lines 4; resuming there sends again 2 later lines that were "
                                     "acknowledged too and 2 later lines that may be stored (no answer came)): "
                                     "cannot connect to broker b1:9092: refused (sending to b0:9092, b1:9092)")

        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})], ack="flushed")
        self.successResultOf(self.run_produce(producer, produce_args("-p", "1-0", "--batch-size", "2",
                                                                     "--skip-lines", "4"), lines[:7], lines[7:]))
        self.assertEqual([m for batch in connections["b1"].produced_payloads() for m in batch], lines[4:])
        self.assertEqual(self.stderr.getvalue(), "sent 6 messages to t (after skipping the input's first 4 lines)\n")

    def test_random_batches_go_around_a_dead_broker(self) -> None:
        """Without --partition or a key, a dead broker's batches go to the live one, and the command succeeds."""
        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})], ack="flushed",
                                                 rng=random.Random(2))
        self.successResultOf(producer.partitions("t"))
        connections["b1"].down = True
        lines = [b"m%d" % i for i in range(40)]
        self.successResultOf(self.run_produce(producer, produce_args("--batch-size", "4"), lines))
        self.assertEqual(sorted(m for batch in connections["b0"].produced_payloads() for m in batch), sorted(lines))
        self.assertEqual(self.stderr.getvalue(), "sent 40 messages to t\n")

    def test_key_of_a_dead_broker_stops_the_command(self) -> None:
        """A key whose partition is on the dead broker is not moved: the command stops naming the partition,
        with the count of lines acknowledged before it."""
        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})], ack="flushed")
        partitions = self.successResultOf(producer.partitions("t"))
        keys = [b"k%d" % i for i in range(40)]
        live = next(k for k in keys if partitions[hash_partitioner(k, 2)].fixed_leader == 0)
        dead = next(k for k in keys if partitions[hash_partitioner(k, 2)].fixed_leader == 1)
        connections["b1"].down = True
        lines = [live + b":a", live + b":b", dead + b":c", live + b":d"]
        running = self.run_produce(producer, produce_args("-K", ":", "--batch-size", "2"), lines)
        error = str(self.failureResultOf(running, TwlogError).value)
        self.assertTrue(error.startswith("stopped after 2 of the input's lines were acknowledged (resume with "
                                         "--skip-lines 2"), error)
        self.assertIn("cannot write to t:1-0, its key's partition (a key is never moved to another one)", error)
        self.assertNotIn(b"c", [m for batch in connections["b0"].produced_payloads() for m in batch])

    def test_failure_stops_waiting_for_a_slow_input(self) -> None:
        """Once a batch fails, the command stops without waiting for more of an input that is still open."""
        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})], ack="flushed", retries=0)
        connections["b1"].hold_requests = True
        reader = _Lines([b"a", b"b", b"c", b"d"], more=True)
        running = Deferred.fromCoroutine(produce(None, produce_args("-p", "1-0", "--batch-size", "2"), reader=reader,
                                                 producer=producer))
        connections["b1"].held[0].callback(None)
        self.assertNoResult(running)
        connections["b1"].held[1].errback(ConnectionFailed("cannot connect to broker b1:9092: refused"))
        error = self.failureResultOf(running, TwlogError).value
        self.assertTrue(str(error).startswith("stopped after 2 of the input's lines were acknowledged (resume with "
                                              "--skip-lines 2): cannot connect"), error)

    def test_skip_lines_past_the_end(self) -> None:
        producer, _, _ = make_producer([(0, {"t": 1})], ack="flushed")
        args = build_parser().parse_args(["produce", "-b", "b0:9092", "-t", "t", "--skip-lines", "5"])
        error = self.failureResultOf(self.run_produce(producer, args, [b"a", b"b"]), TwlogError).value
        self.assertEqual(str(error), "--skip-lines 5 is more than the 2 lines of the input: nothing sent")

    def test_skip_lines_option(self) -> None:
        """--skip-lines takes 0 or more, with thousands separators."""
        self.assertEqual(produce_args("--skip-lines", "12,000").skip_lines, 12000)
        self.assertEqual(produce_args().skip_lines, 0)
        self.patch(sys, "stderr", StringIO())
        self.assertRaises(SystemExit, produce_args, "--skip-lines", "-1")


class InputTests(SynchronousTestCase):
    def test_chunks_split_lines_across_reads(self) -> None:
        """Lines cut by a read's end are joined; CR LF endings are dropped; a last line without one counts."""
        streams = [BytesIO(b"a\r\nbb\nccc"), BytesIO(b"d\n")]
        self.assertEqual([line for chunk in chunks(streams, size=4) for line in chunk],
                         [b"a", b"bb", b"ccc", b"d"])


class InputReaderTests(TestCase):
    async def test_reads_in_a_thread(self) -> None:
        """The reader thread hands the lines over in order, then None at the end."""
        from twisted.internet import reactor

        reader = InputReader(reactor, [BytesIO(b"".join(b"%d\n" % i for i in range(50_000)))])
        got = []
        while (lines := await reader.next()) is not None:
            got.extend(lines)
        self.assertEqual(got, [b"%d" % i for i in range(50_000)])
