"""Tests for twlog.producer: discovery, partitioning, batches, acknowledgements and async batching."""

from __future__ import annotations

import random
import zlib

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeConnection
from twlog.errors import (
    ClientClosed,
    ConnectionFailed,
    ConnectionLost,
    InvalidTopic,
    MessageSizeTooLarge,
    OutcomeUnknown,
    PartitionsOffline,
    QueueFull,
    StorageFailed,
)
from twlog.partition import TopicPartition
from twlog.producer import Producer, hash_partitioner
from twlog.producer.router import DOWN_S, PROVISIONAL_S
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_APPENDED,
    ACK_FLUSHED,
    AckProduceRequest,
    ClusterMetadataRequest,
    ProduceRequest,
    ProduceResult,
)
from twlog.protocol.responses import VIEW_CURRENT, BrokerAddress, TopicLayout
from twlog.storage.message import CODEC_GZIP, iter_messages


def make_producer(brokers=((0, {"t": 1}),), **options):
    """A Producer over FakeConnections: C{brokers} lists (broker id, partition counts), one address each."""
    connections = {}
    table = {f"b{i}": spec for i, spec in enumerate(brokers)}

    def factory(host: str, port: int) -> FakeConnection:
        broker_id, partitions = table[host]
        connections[host] = FakeConnection(host, port, broker_id, partitions)
        return connections[host]

    options.setdefault("reactor", Clock())
    producer = Producer([(host, 9092) for host in table], connection_factory=factory, **options)
    return producer, connections, options["reactor"]


class DiscoveryTests(SynchronousTestCase):
    def test_partitions_ordered_by_broker_then_partition(self) -> None:
        """A topic's partitions are the union over brokers, ordered by (broker id, partition)."""
        producer, _, _ = make_producer([(7, {"t": 2}), (3, {"t": 3})])
        partitions = self.successResultOf(producer.partitions("t"))
        self.assertEqual(
            partitions,
            [TopicPartition.on_broker("t", b, p) for b, p in [(3, 0), (3, 1), (3, 2), (7, 0), (7, 1)]],
        )

    def test_one_metadata_request_per_broker(self) -> None:
        """Concurrent sends to an unknown topic share one discovery (one CLUSTER_METADATA per broker), and later
        sends use the cache."""
        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})])
        for _ in range(3):
            producer.send("t", b"m")
        for connection in connections.values():
            self.assertEqual(sum(isinstance(r, ClusterMetadataRequest) for r in connection.requests), 1)

    def test_unreachable_broker_is_left_out(self) -> None:
        """A broker (without ZooKeeper) that does not answer contributes no partitions; the others are used."""
        producer, connections, _ = make_producer([(0, {"t": 2}), (1, {"t": 2})])
        connections["b0"].down = True
        self.assertEqual(self.successResultOf(producer.partitions("t")),
                         [TopicPartition("t", "1-0"), TopicPartition("t", "1-1")])

    def test_no_broker_reachable(self) -> None:
        """When no broker answers, send fails with ConnectionFailed naming every broker's problem."""
        producer, connections, _ = make_producer([(0, {"t": 1})])
        connections["b0"].down = True
        failure = self.failureResultOf(producer.send("t", b"m"), ConnectionFailed)
        self.assertIn("b0:9092", str(failure.value))

    def test_invalid_topic(self) -> None:
        """A topic the broker refuses fails the send with InvalidTopic."""
        producer, connections, _ = make_producer()
        connections["b0"].topic_errors["bad/topic"] = InvalidTopic.code
        failure = self.failureResultOf(producer.send("bad/topic", b"m"), InvalidTopic)
        self.assertIn("refuses topic 'bad/topic'", str(failure.value))

    def test_connection_failure_forgets_partitions(self) -> None:
        """A delivery that fails with ConnectionFailed makes the next send ask the brokers again."""
        producer, connections, _ = make_producer(ack="appended")
        self.successResultOf(producer.send("t", b"a"))
        connections["b0"].responses.append(ConnectionFailed("lost"))
        self.failureResultOf(producer.send("t", b"b"), ConnectionFailed)
        self.successResultOf(producer.send("t", b"c"))
        self.assertEqual(sum(isinstance(r, ClusterMetadataRequest) for r in connections["b0"].requests), 2)


    def test_lost_connection_resends(self) -> None:
        """A batch whose connection broke is resent once by default; with retries=0 the error surfaces."""
        producer, connections, _ = make_producer(ack="appended")
        self.successResultOf(producer.partitions("t"))
        connections["b0"].responses.append(ConnectionLost("lost"))
        self.assertEqual(self.successResultOf(producer.send("t", b"a")).offset, 0)
        self.assertEqual(len([r for r in connections["b0"].requests if isinstance(r, AckProduceRequest)]), 2)
        strict, connections, _ = make_producer(ack="appended", retries=0)
        connections["b0"].responses.append(ConnectionLost("lost"))
        self.failureResultOf(strict.send("t", b"a"), ConnectionLost)

    def test_outcome_unknown_resends_under_retries(self) -> None:
        """OutcomeUnknown (23: appended, flush failed) is an unknown outcome like a lost connection: resent
        under C{retries} (at-least-once: it may be stored twice), raised as itself with retries=0."""
        unknown = codec.encode_ack_produce_response(0, [ProduceResult("t", 0, OutcomeUnknown.code, 0, 10)])
        producer, connections, _ = make_producer(ack="flushed")
        self.successResultOf(producer.partitions("t"))
        connections["b0"].responses.append(unknown)
        self.assertEqual(self.successResultOf(producer.send("t", b"a")).error, 0)
        self.assertEqual(len([r for r in connections["b0"].requests if isinstance(r, AckProduceRequest)]), 2)
        self.assertTrue(OutcomeUnknown.retriable)
        strict, connections, _ = make_producer(ack="flushed", retries=0)
        connections["b0"].responses.append(unknown)
        failure = self.failureResultOf(strict.send("t", b"a"), OutcomeUnknown)
        self.assertIn("the batch for t:0-0 may or may not be stored: OutcomeUnknown (error 23)", str(failure.value))

    def test_refused_resend_after_an_unknown_outcome_stays_unknown(self) -> None:
        """A resend refused with "not written" (StorageFailed) says nothing of the first attempt, which may
        be stored: the send fails with OutcomeUnknown, not StorageFailed."""
        producer, connections, _ = make_producer(ack="flushed")
        self.successResultOf(producer.partitions("t"))
        connections["b0"].responses += [
            codec.encode_ack_produce_response(0, [ProduceResult("t", 0, OutcomeUnknown.code, 0, 10)]),
            codec.encode_ack_produce_response(0, [ProduceResult("t", 0, StorageFailed.code, -1, -1)]),
        ]
        failure = self.failureResultOf(producer.send("t", b"a"), OutcomeUnknown)
        self.assertIn("the resend was refused", str(failure.value))

    def test_storage_failed_is_not_resent(self) -> None:
        """StorageFailed (nothing written) is raised at once: no resend, so no duplicate."""
        producer, connections, _ = make_producer(ack="appended", retries=3)
        self.successResultOf(producer.partitions("t"))
        connections["b0"].responses.append(
            codec.encode_ack_produce_response(0, [ProduceResult("t", 0, StorageFailed.code, -1, -1)]))
        self.failureResultOf(producer.send("t", b"a"), StorageFailed)
        self.assertEqual(len([r for r in connections["b0"].requests if isinstance(r, AckProduceRequest)]), 1)


class PartitioningTests(SynchronousTestCase):
    def targets(self, producer, connections, **send_options) -> list[tuple[int, int]]:
        """Send one message and return the (broker id, partition) it went to."""
        before = {name: len(c.sent) for name, c in connections.items()}
        self.successResultOf(producer.send("t", b"m", **send_options))
        for name, connection in connections.items():
            if len(connection.sent) > before[name]:
                return (connection.broker_id, connection.sent[-1].partition)
        raise AssertionError("nothing sent")

    def test_keyed_sends_are_stable(self) -> None:
        """The same key always goes to the same partition, the default being crc32(key) mod n."""
        producer, connections, _ = make_producer([(0, {"t": 2}), (1, {"t": 3})])
        partitions = self.successResultOf(producer.partitions("t"))
        for key in (b"alice", b"bob", "carol"):
            raw = key.encode() if isinstance(key, str) else key
            expected = partitions[zlib.crc32(raw) % 5]
            for _ in range(3):
                self.assertEqual(
                    self.targets(producer, connections, key=key), (expected.fixed_leader, expected.number)
                )

    def test_pluggable_partitioner(self) -> None:
        """A custom partitioner gets the key and the partition count, and its index is used."""
        calls = []

        def last(key: bytes, n: int) -> int:
            calls.append((key, n))
            return n - 1

        producer, connections, _ = make_producer([(0, {"t": 2}), (1, {"t": 2})], partitioner=last)
        self.assertEqual(self.targets(producer, connections, key=b"k"), (1, 1))
        self.assertEqual(calls, [(b"k", 4)])

    def test_random_without_key(self) -> None:
        """Without a key, partitions are chosen at random (from the injected generator) and all get used."""
        producer, connections, _ = make_producer([(0, {"t": 2}), (1, {"t": 2})], rng=random.Random(1))
        seen = {self.targets(producer, connections) for _ in range(40)}
        self.assertEqual(seen, {(0, 0), (0, 1), (1, 0), (1, 1)})

    def test_explicit_partition(self) -> None:
        """partition_index= picks an index in the ordered partition list; an index outside it is a ValueError."""
        producer, connections, _ = make_producer([(0, {"t": 2}), (1, {"t": 2})])
        self.assertEqual(self.targets(producer, connections, partition_index=2), (1, 0))
        self.failureResultOf(producer.send("t", b"m", partition_index=4), ValueError)

    def test_partition_keyword_is_deprecated(self) -> None:
        """The old keyword partition= still picks the index, with a DeprecationWarning naming partition_index=;
        giving both is a TypeError."""
        producer, connections, _ = make_producer([(0, {"t": 2}), (1, {"t": 2})])
        self.assertEqual(self.targets(producer, connections, partition=3), (1, 1))
        (warning,) = self.flushWarnings([self.targets])
        self.assertEqual((warning["category"], warning["message"]),
                         (DeprecationWarning, "partition= is deprecated: use partition_index="))
        self.assertRaises(TypeError, producer.send, "t", b"m", partition=1, partition_index=1)

    def test_hash_partitioner(self) -> None:
        """The default partitioner is CRC-32 modulo n, in range."""
        self.assertEqual(hash_partitioner(b"abc", 7), zlib.crc32(b"abc") % 7)


class SendTests(SynchronousTestCase):
    def test_batch_is_one_produce_request(self) -> None:
        """A list of messages is one PRODUCE request whose set holds them all, in order."""
        producer, connections, _ = make_producer()
        self.assertIsNone(self.successResultOf(producer.send("t", [b"a", b"bb", b"ccc"])))
        (request,) = connections["b0"].sent
        self.assertIsInstance(request, ProduceRequest)
        self.assertEqual(connections["b0"].produced_payloads(), [[b"a", b"bb", b"ccc"]])

    def test_acknowledged_modes(self) -> None:
        """ack="appended" and "flushed" send ACK_PRODUCE and fire with the offsets given."""
        for ack, code in (("appended", ACK_APPENDED), ("flushed", ACK_FLUSHED)):
            producer, connections, _ = make_producer(ack=ack, ack_timeout_ms=1234)
            first = self.successResultOf(producer.send("t", [b"a", b"b"]))
            second = self.successResultOf(producer.send("t", b"c"))
            self.assertEqual(first, ProduceResult("t", 0, 0, 0, 20))
            self.assertEqual(second.offset, 20)
            request = connections["b0"].requests[-1]
            self.assertIsInstance(request, AckProduceRequest)
            self.assertEqual((request.ack, request.timeout_ms), (code, 1234))

    def test_rejected_batch_raises_typed_error(self) -> None:
        """A produce result with an error code fails the send with that code's exception."""
        producer, connections, _ = make_producer(ack="appended")
        rejected = ProduceResult("t", 0, MessageSizeTooLarge.code, -1, -1)
        connections["b0"].responses.append(codec.encode_ack_produce_response(0, [rejected]))
        failure = self.failureResultOf(producer.send("t", b"x"), MessageSizeTooLarge)
        self.assertIn("t:0-0", str(failure.value))

    def test_compression_per_batch(self) -> None:
        """With gzip, a batch is one compressed wrapper holding the messages."""
        producer, connections, _ = make_producer(codec="gzip")
        self.successResultOf(producer.send("t", [b"x" * 100, b"y" * 100]))
        (request,) = connections["b0"].sent
        (wrapper,) = list(iter_messages(request.messages, 0, deep=False))
        self.assertEqual(request.messages[5], CODEC_GZIP)  # magic 1, attributes: gzip
        self.assertLess(len(request.messages), 100)
        self.assertEqual([m.payload for m in iter_messages(request.messages, 0)], [b"x" * 100, b"y" * 100])
        self.assertEqual(wrapper.offset, 0)

    def test_rejects_text_and_empty_batches(self) -> None:
        """Messages must be bytes, and a batch must not be empty."""
        producer, _, _ = make_producer()
        self.failureResultOf(producer.send("t", "text"), TypeError)
        self.failureResultOf(producer.send("t", []), ValueError)

    def test_bad_options(self) -> None:
        """Unknown ack modes, codecs and full-queue policies are refused at construction."""
        self.assertRaises(ValueError, make_producer, ack="some")
        self.assertRaises(ValueError, make_producer, codec="lz4")
        self.assertRaises(ValueError, make_producer, on_full="wait")

    def test_close(self) -> None:
        """close() closes every connection, and later sends fail with ClientClosed."""
        producer, connections, _ = make_producer()
        self.successResultOf(producer.close())
        self.assertTrue(connections["b0"].closed)
        self.failureResultOf(producer.send("t", b"m"), ClientClosed)

    def test_flush_waits_for_sends_in_flight(self) -> None:
        """flush() fires only once the sends in flight have been written."""
        producer, connections, _ = make_producer()
        connections["b0"].hold_sends = True
        sent = producer.send("t", b"m")
        flushed = producer.flush()
        self.assertNoResult(flushed)
        connections["b0"].held[0].callback(None)
        self.successResultOf(sent)
        self.successResultOf(flushed)


class BatchingTests(SynchronousTestCase):
    def test_sends_at_batch_size(self) -> None:
        """Queued messages of a partition go out as one request when batch_size is reached."""
        producer, connections, _ = make_producer(batch_size=3, linger_ms=1000)
        self.successResultOf(producer.send("t", b"1"))
        self.successResultOf(producer.send("t", b"2"))
        self.assertEqual(connections["b0"].sent, [])
        self.successResultOf(producer.send("t", b"3"))
        self.assertEqual(connections["b0"].produced_payloads(), [[b"1", b"2", b"3"]])
        self.assertEqual(producer.queued, 0)

    def test_sends_after_linger(self) -> None:
        """A partition's queue goes out linger_ms after its first message, by the injected clock."""
        producer, connections, clock = make_producer(batch_size=100, linger_ms=50)
        producer.send("t", b"1")
        clock.advance(0.02)
        producer.send("t", b"2")
        clock.advance(0.029)
        self.assertEqual(connections["b0"].sent, [])
        clock.advance(0.001)
        self.assertEqual(connections["b0"].produced_payloads(), [[b"1", b"2"]])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_batches_per_partition(self) -> None:
        """Each partition has its own queue: keyed messages are batched with their partition's."""
        producer, connections, _ = make_producer([(0, {"t": 2})], batch_size=2, partitioner=lambda k, n: k[0] - 48)
        for key in (b"0", b"1", b"0", b"1"):
            producer.send("t", b"m" + key, key=key)
        self.assertEqual(
            sorted((r.partition, [m.payload for m in iter_messages(r.messages, 0)]) for r in connections["b0"].sent),
            [(0, [b"m0", b"m0"]), (1, [b"m1", b"m1"])],
        )

    def test_flush_sends_everything(self) -> None:
        """flush() sends every queue at once and fires when delivered."""
        producer, connections, clock = make_producer([(0, {"t": 2})], batch_size=100, linger_ms=10_000)
        producer.send("t", b"a", partition_index=0)
        producer.send("t", b"b", partition_index=1)
        self.successResultOf(producer.flush())
        self.assertEqual(len(connections["b0"].sent), 2)
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_block_policy_waits_for_room(self) -> None:
        """With on_full="block", send's Deferred waits until delivered batches make room."""
        producer, connections, _ = make_producer(batch_size=2, max_queued_messages=2, on_full="block")
        connections["b0"].hold_sends = True
        self.successResultOf(producer.send("t", b"1"))
        self.successResultOf(producer.send("t", b"2"))  # a full batch, now in flight
        waiting = producer.send("t", b"3")
        self.assertNoResult(waiting)
        self.assertEqual(producer.queued, 2)
        connections["b0"].held[0].callback(None)
        self.successResultOf(waiting)
        self.assertEqual(producer.queued, 1)
        self.assertEqual(producer.dropped, 0)

    def test_drop_policy_counts(self) -> None:
        """With on_full="drop", a send without room fails at once with QueueFull and is counted."""
        producer, connections, _ = make_producer(batch_size=10, max_queued_messages=3, on_full="drop")
        self.successResultOf(producer.send("t", [b"1", b"2"]))
        failure = self.failureResultOf(producer.send("t", [b"3", b"4"]), QueueFull)
        self.assertIn("3 messages", str(failure.value))
        self.assertEqual(producer.dropped, 2)
        self.successResultOf(producer.send("t", b"3"))
        self.successResultOf(producer.flush())
        self.assertEqual(connections["b0"].produced_payloads(), [[b"1", b"2", b"3"]])

    def test_oversized_send_into_empty_queue(self) -> None:
        """A single send larger than the queue bound is let in when the queue is empty, rather than never."""
        producer, connections, _ = make_producer(batch_size=10, max_queued_messages=2, on_full="drop")
        self.successResultOf(producer.send("t", [b"a", b"b", b"c"]))
        self.successResultOf(producer.flush())
        self.assertEqual(connections["b0"].produced_payloads(), [[b"a", b"b", b"c"]])

    def test_delivery_failure_reported_by_flush(self) -> None:
        """A batch that cannot be delivered is counted in failed and raised by the next flush."""
        producer, connections, _ = make_producer(batch_size=1, ack="appended")
        self.successResultOf(producer.partitions("t"))
        connections["b0"].responses.append(MessageSizeTooLarge("too big"))
        self.successResultOf(producer.send("t", b"m"))
        self.assertEqual(producer.failed, 1)
        self.failureResultOf(producer.flush(), MessageSizeTooLarge)
        self.successResultOf(producer.flush())
        self.assertEqual(producer.queued, 0)

    def test_close_flushes(self) -> None:
        """close() sends what is queued before closing the connections."""
        producer, connections, _ = make_producer(batch_size=100, linger_ms=10_000)
        producer.send("t", b"last")
        self.successResultOf(producer.close())
        self.assertEqual(connections["b0"].produced_payloads(), [[b"last"]])
        self.assertTrue(connections["b0"].closed)


class BootstrapTests(SynchronousTestCase):
    """Static mode with CLUSTER_METADATA: one address of a ZooKeeper cluster is enough."""

    def make(self, cluster: codec.ClusterMetadataResponse):
        connections: dict[str, FakeConnection] = {}

        def factory(host: str, port: int) -> FakeConnection:
            connections[host] = FakeConnection(host, port, int(host[1:]), {})
            return connections[host]

        clock = Clock()
        producer = Producer([("b0", 9092)], connection_factory=factory, reactor=clock)
        connections["b0"].cluster = cluster
        return producer, connections, clock

    def cluster(self, holders: dict[int, int]) -> codec.ClusterMetadataResponse:
        brokers = tuple(BrokerAddress(b, f"b{b}", 9092) for b in (0, 1, 2))
        return codec.ClusterMetadataResponse(0, VIEW_CURRENT, brokers,
                                             (TopicLayout("t", 0, tuple(sorted(holders.items()))),))

    def test_one_address_finds_every_broker(self) -> None:
        """The brokers the answering one describes join the pool, and their partitions are chosen."""
        producer, connections, _ = self.make(self.cluster({0: 1, 1: 2, 2: 1}))
        partitions = self.successResultOf(producer.partitions("t"))
        self.assertEqual([p.name for p in partitions], ["0-0", "1-0", "1-1", "2-0"])
        self.successResultOf(producer.send("t", b"m", partition_index=2))
        self.assertEqual(connections["b1"].produced_payloads(), [[b"m"]])

    def test_holder_that_is_not_live_is_not_a_target(self) -> None:
        """An answer's holder it gives no address for is a broker that is down: its partitions are offline (the
        layout's rule), not targets of the producer, and not a problem to warn about."""
        warnings: list[str] = []

        def observer(event) -> None:
            if event.get("log_level") is LogLevel.warn and "problem" in event:
                warnings.append(event["problem"])

        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        producer, _, clock = self.make(self.cluster({0: 1, 7: 2}))
        self.assertEqual([p.name for p in self.successResultOf(producer.partitions("t"))], ["0-0", "1-0", "2-0"])
        producer._router.forget("t")
        self.successResultOf(producer.partitions("t"))
        self.assertEqual(warnings, [])

    def test_broker_without_the_topic_gets_partition_0_for_a_while(self) -> None:
        """A live broker not holding the topic yet is a target (its partition 0); the cluster is asked again
        after PROVISIONAL_S, and not before."""
        producer, connections, clock = self.make(self.cluster({0: 2}))
        self.assertEqual([p.name for p in self.successResultOf(producer.partitions("t"))],
                         ["0-0", "0-1", "1-0", "2-0"])
        asked = connections["b0"].requests.count
        self.successResultOf(producer.send("t", b"m"))
        self.assertEqual(asked(codec.ClusterMetadataRequest(("t",))), 1)
        connections["b0"].cluster = self.cluster({0: 2, 1: 2, 2: 2})
        clock.advance(PROVISIONAL_S)
        self.assertEqual(len(self.successResultOf(producer.partitions("t"))), 6)
        self.assertEqual(asked(codec.ClusterMetadataRequest(("t",))), 2)
        clock.advance(10 * PROVISIONAL_S)
        self.successResultOf(producer.send("t", b"m"))
        self.assertEqual(asked(codec.ClusterMetadataRequest(("t",))), 2)


class DeadBrokerTests(SynchronousTestCase):
    """A broker that cannot be reached: random batches go to a live one, keys and indices are never moved."""

    def sent_to(self, connections) -> dict[str, int]:
        return {name: len([r for r in c.requests if isinstance(r, AckProduceRequest)]) for name, c in
                connections.items()}

    def test_random_batch_goes_to_a_live_broker_and_the_dead_one_is_avoided(self) -> None:
        """A random batch whose broker cannot be reached (still described live, as a killed broker is until its
        ZooKeeper session expires) is delivered by another broker; later random batches avoid the dead one for
        DOWN_S, then try it again."""
        connections: dict[str, FakeConnection] = {}

        def factory(host: str, port: int) -> FakeConnection:
            connections[host] = FakeConnection(host, port, int(host[1:]), {})
            return connections[host]

        clock = Clock()
        producer = Producer([("b0", 9092)], connection_factory=factory, reactor=clock, ack="appended",
                            rng=random.Random(3))
        connections["b0"].cluster = codec.ClusterMetadataResponse(
            0, VIEW_CURRENT, (BrokerAddress(0, "b0", 9092), BrokerAddress(1, "b1", 9092)),
            (TopicLayout("t", 0, ((0, 1), (1, 1))),))
        self.successResultOf(producer.partitions("t"))
        connections["b1"].down = True
        for i in range(20):
            self.successResultOf(producer.send("t", b"m%d" % i))
        self.assertEqual(sum(len(p) for p in connections["b0"].produced_payloads()), 20)
        self.assertEqual(self.sent_to(connections)["b1"], 1)  # one failed attempt, then avoided
        connections["b1"].down = False
        clock.advance(DOWN_S)
        for i in range(20):
            self.successResultOf(producer.send("t", b"n%d" % i))
        self.assertGreater(self.sent_to(connections)["b1"], 1)

    def test_no_live_broker_left_fails_with_the_last_error(self) -> None:
        """When every broker is down, a random batch fails with the connection error, not a generic one."""
        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})], ack="appended")
        self.successResultOf(producer.partitions("t"))
        connections["b0"].responses.append(ConnectionFailed("cannot connect to broker b0:9092: refused"))
        connections["b1"].responses.append(ConnectionFailed("cannot connect to broker b1:9092: refused"))
        connections["b0"].down = connections["b1"].down = True
        failure = self.failureResultOf(producer.send("t", b"m"), ConnectionFailed)
        self.assertIn("cannot connect to broker", str(failure.value))

    def test_key_of_a_dead_broker_is_not_moved(self) -> None:
        """Keys keep counting over the partitions seen before: a key whose broker went down fails naming
        its partition, it is never written to another one; keys of live partitions still work."""
        producer, connections, _ = make_producer([(0, {"t": 2}), (1, {"t": 2})], ack="appended")
        partitions = self.successResultOf(producer.partitions("t"))
        keys = [b"k%d" % i for i in range(40)]
        dead = next(k for k in keys if partitions[hash_partitioner(k, 4)].fixed_leader == 1)
        alive = next(k for k in keys if partitions[hash_partitioner(k, 4)].fixed_leader == 0)
        connections["b1"].down = True
        failure = self.failureResultOf(producer.send("t", b"x", key=dead), PartitionsOffline)
        # The brokers were asked again: b1 does not answer, so only b0's partitions are live.
        self.assertEqual([p.name for p in self.successResultOf(producer.partitions("t"))], ["0-0", "0-1"])
        self.assertEqual(self.successResultOf(producer.partitions("t", offline=True)), partitions)
        self.assertIs(type(self.failureResultOf(producer.send("t", b"y", key=dead)).value), PartitionsOffline)
        target = partitions[hash_partitioner(dead, 4)]
        self.assertEqual(failure.value.offline, [target])
        self.assertIn(f"cannot write to {target}, its key's partition (a key is never moved to another one): "
                      "broker 1", str(failure.value))
        self.failureResultOf(producer.send("t", b"z", partition_index=3), PartitionsOffline)
        self.successResultOf(producer.send("t", b"w", key=alive))
        self.assertEqual(connections["b0"].produced_payloads(), [[b"w"]])

    def test_offline_holder_counts_for_keys_and_indices(self) -> None:
        """A holder the cluster's answer gives no address for (a broker that is down) keeps its partitions'
        indices: an index or key picking one fails with PartitionsOffline; random batches use the live ones."""
        connections: dict[str, FakeConnection] = {}

        def factory(host: str, port: int) -> FakeConnection:
            connections[host] = FakeConnection(host, port, int(host[1:]), {})
            return connections[host]

        producer = Producer([("b0", 9092)], connection_factory=factory, reactor=Clock(), ack="appended",
                            rng=random.Random(5))
        connections["b0"].cluster = codec.ClusterMetadataResponse(
            0, VIEW_CURRENT, (BrokerAddress(0, "b0", 9092), BrokerAddress(2, "b2", 9092)),
            (TopicLayout("t", 0, ((0, 1), (1, 2), (2, 1))),))
        self.assertEqual([p.name for p in self.successResultOf(producer.partitions("t", offline=True))],
                         ["0-0", "1-0", "1-1", "2-0"])
        self.assertEqual([p.name for p in self.successResultOf(producer.partitions("t"))], ["0-0", "2-0"])
        failure = self.failureResultOf(producer.send("t", b"m", partition_index=2), PartitionsOffline)
        self.assertIn("cannot write to t:1-1, the partition asked for: broker 1, which holds t:1-1, is not "
                      "registered: down?", str(failure.value))
        self.successResultOf(producer.send("t", b"m", partition_index=3))
        self.assertEqual(connections["b2"].produced_payloads(), [[b"m"]])
        key = next(k for k in (b"k%d" % i for i in range(40)) if hash_partitioner(k, 4) in (1, 2))
        self.failureResultOf(producer.send("t", b"m", key=key), PartitionsOffline)
        for _ in range(10):
            self.successResultOf(producer.send("t", b"r"))
        self.assertEqual(len(connections["b0"].produced_payloads()) + len(connections["b2"].produced_payloads()), 11)

    def test_resend_that_cannot_connect_may_still_be_stored(self) -> None:
        """A batch written before its connection broke, whose resend then cannot connect, fails with
        ConnectionLost (it may be stored), not a plain ConnectionFailed that reads as "nothing written"."""
        producer, connections, _ = make_producer(ack="appended", retries=1)
        self.successResultOf(producer.partitions("t"))
        connections["b0"].responses.extend([ConnectionLost("connection to b0:9092 was lost"),
                                            ConnectionFailed("cannot connect to broker b0:9092: refused")])
        failure = self.failureResultOf(producer.send("t", b"m", partition_index=0), ConnectionLost)
        self.assertEqual(str(failure.value), "cannot connect to broker b0:9092: refused, after the connection broke "
                                             "once the batch was written (connection to b0:9092 was lost): it may "
                                             "be stored")

    def test_pinned_batch_that_may_be_stored_says_so(self) -> None:
        """A pinned batch whose connection broke after it was written fails with ConnectionLost even once its
        partition is known offline: that it may be stored is not lost behind PartitionsOffline."""
        producer, connections, _ = make_producer([(0, {"t": 1}), (1, {"t": 1})], ack="appended", retries=0)
        self.successResultOf(producer.partitions("t"))
        answer: Deferred = Deferred()
        connections["b1"].responses.append(answer)
        sending = producer.send("t", b"m", partition_index=1)
        connections["b1"].down = True  # (so the rediscovery finds 1-0 offline)
        answer.errback(ConnectionLost("connection to b1:9092 was lost"))
        self.assertIs(type(self.failureResultOf(sending).value), ConnectionLost)
        self.assertIs(type(self.failureResultOf(producer.send("t", b"m", partition_index=1)).value),
                      PartitionsOffline)
