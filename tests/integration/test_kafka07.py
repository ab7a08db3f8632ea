"""Kafka 0.7 compatibility: a 0.7-style client (tests/integration/kafka07.py) against a real `twlog local` cluster.

The client knows nothing of twlog: it speaks request types 0 to 4 with 0.7's byte
layouts, reads the ZooKeeper registry as 0.7 clients read it (C{split(":")} of
C{/brokers/ids/<id>}), and balances a consumer group with 0.7's paths and range
assignment.  The cluster is the real C{twlog local --brokers 2} command, run as a
subprocess and stopped by its pid.  The scenarios themselves are blocking code
run in a thread, as a 0.7 client application would run them; every wait is
bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass

from kazoo.client import KazooClient
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.integration import kafka07
from tests.integration.kafka07 import (
    EARLIEST,
    KAFKA07_ERROR_CODES,
    LATEST,
    BalancedConsumer,
    Connection,
    ConnectionClosed,
    Message,
    assign,
    decode_message_set,
    fetch_messages,
    gzip_message_set,
    message,
    message_set,
    parse_broker,
    topic_count_value,
)
from tests.integration.shared_local import shared_local
from tests.integration.test_local import LocalProcess
from twlog.coord.zkserver import free_port, free_ports

PARTITIONS_PER_BROKER = 2


@dataclass
class Cluster:
    zookeeper: str
    #: broker id -> port, from the banner (twlog local numbers its brokers 0, 1, ... in port order).
    ports: dict[int, int]


async def start_local(testcase: TestCase, brokers: int = 2) -> Cluster:
    """Run `twlog local --brokers N` on free ports under a temporary directory; stop it (by pid) after the test."""
    data = os.path.abspath(testcase.mktemp())
    local = LocalProcess()
    argv = [sys.executable, "-m", "twlog.cli", "local", "--brokers", str(brokers), "--data", data,
            "--port", str(free_ports(brokers)), "--zookeeper-port", str(free_port()),
            "--num-partitions", str(PARTITIONS_PER_BROKER), "--flush-interval-ms", "20", "--no-metrics"]
    transport = reactor.spawnProcess(local, sys.executable, argv, env=os.environ.copy())

    async def stop() -> None:
        if local.ended.called or transport.pid is None:
            return
        os.kill(transport.pid, signal.SIGINT)  # twlog local stops its brokers and ZooKeeper cleanly
        timer = reactor.callLater(20, lambda: local.ended.called or os.kill(transport.pid, signal.SIGKILL))
        await local.ended
        if timer.active():
            timer.cancel()

    testcase.addCleanup(stop)
    timeout = reactor.callLater(30, lambda: local.ready.called or local.ready.errback(
        AssertionError("twlog local not ready in 30 s:\n" + local.output.decode(errors="replace"))))
    try:
        banner = await local.ready
    finally:
        if timeout.active():
            timeout.cancel()
    return banner_cluster(banner, brokers)


def banner_cluster(banner: str, brokers: int) -> Cluster:
    """The cluster twlog local's banner describes (C{brokers} of them)."""
    zookeeper = re.search(r"ZooKeeper at (\S+?),", banner).group(1)
    ports = [int(p) for p in re.findall(r":(\d+)", banner.split("broker(s) at ")[1].split(";")[0])]
    assert len(ports) == brokers, banner
    return Cluster(zookeeper, dict(enumerate(ports)))


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.05):
    """Poll C{predicate} until it returns something true; fail after C{timeout_s}."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what() if callable(what) else what}")
        time.sleep(interval_s)


def latest(connection: Connection, topic: str, partition: int) -> int:
    error, offsets = connection.offsets(topic, partition, LATEST, 1)
    assert error == 0, f"OFFSETS -1 {topic} {partition}: error {error}"
    return offsets[0]


def wait_visible(connection: Connection, topic: str, partition: int, end: int, timeout_s: float = 15.0) -> None:
    """Wait until OFFSETS -1 reports C{end} (everything produced is flushed and visible)."""
    wait_for(lambda: latest(connection, topic, partition) == end, timeout_s,
             lambda: f"{topic} {partition} to reach {end} (now {latest(connection, topic, partition)})")


def zk_client(cluster: Cluster) -> KazooClient:
    zk = KazooClient(cluster.zookeeper)
    zk.start(timeout=15)
    return zk


class ClientTests(SynchronousTestCase):
    """The 0.7 client itself, against the layouts written out in the spec (no broker)."""

    def test_message_layouts(self) -> None:
        """Magic 0 is [N][0][crc][payload]; magic 1 adds attributes; a PRODUCE frame is [size][0][topic][p][n][set]."""
        self.assertEqual(message(b"hi"), bytes.fromhex("00000007 00 d8932aac 6869"))
        self.assertEqual(message(b"hi", magic=1), bytes.fromhex("00000008 01 00 d8932aac 6869"))
        body = Connection.produce_body("logs", 0, message(b"hi"))
        frame = (2 + len(body)).to_bytes(4, "big") + b"\x00\x00" + body
        self.assertEqual(frame, bytes.fromhex("0000001b 0000 00046c6f6773 00000000 0000000b 00000007 00d8932aac 6869"))
        self.assertEqual(Connection.fetch_body("logs", 0, 0, 1024),
                         bytes.fromhex("00046c6f6773 00000000 0000000000000000 00000400"))

    def test_decode_sets(self) -> None:
        """Offsets are byte positions; gzip wrappers open to their inner messages; a partial tail is dropped."""
        data = message_set([b"a", b"bb"]) + gzip_message_set([b"c", b"d"]) + message(b"tail")[:-1]
        messages, valid = decode_message_set(data, 100)
        self.assertEqual([m.payload for m in messages], [b"a", b"bb", b"c", b"d"])
        self.assertEqual([m.offset for m in messages], [100, 110, 121, 121])
        self.assertEqual(messages[-1].next_offset, 100 + valid)
        self.assertEqual(valid, len(data) - len(message(b"tail")) + 1)
        self.assertEqual(decode_message_set(message(b"x" * 100)[:50], 0), ([], 0))
        bad = bytearray(message(b"abc"))
        bad[-1] ^= 1
        self.assertRaises(kafka07.InvalidMessage, decode_message_set, bytes(bad))

    def test_broker_value_is_split_on_colons(self) -> None:
        """0.7's Broker.createBroker: creator id, host, port; a bare host:port does not parse."""
        broker = parse_broker("3", b"myhost-1325000000000:myhost:9092")
        self.assertEqual(broker, kafka07.Broker(3, "myhost-1325000000000", "myhost", 9092))
        self.assertRaises(ValueError, parse_broker, 3, b"127.0.0.1:9092")

    def test_registration_and_assignment(self) -> None:
        """0.7's topic-count value, thread ids, and the contiguous range split (first |P| mod |C| get one extra)."""
        self.assertEqual(topic_count_value({"clicks": 1}), b'{ "clicks": 1 }')
        self.assertEqual(json.loads(topic_count_value({"a": 2, "b": 1})), {"a": 2, "b": 1})
        partitions = ["1-1", "0-0", "1-0", "0-1", "2-0"]
        threads = ["g_b-1-0", "g_a-1-0"]
        self.assertEqual(assign(partitions, threads, "g_a-1-0"), ["0-0", "0-1", "1-0"])
        self.assertEqual(assign(partitions, threads, "g_b-1-0"), ["1-1", "2-0"])


def payload(broker: int, partition: int, seq: int) -> bytes:
    """A distinct payload naming its partition and sequence number; every 25th is 2,000 bytes long."""
    pad = b"#" * (2000 if seq % 25 == 7 else seq % 40)
    return b"%d-%d/%d/" % (broker, partition, seq) + pad


def seq_of(data: bytes) -> tuple[str, int]:
    where, seq, _ = data.split(b"/", 2)
    return where.decode(), int(seq)


class Kafka07CompatibilityTests(TestCase):
    """A 0.7 client's view of `twlog local --brokers 2`."""

    timeout = 90

    async def setUp(self) -> None:  # one cluster for the class: each test has topics and groups of its own
        self.cluster = banner_cluster(await shared_local("kafka07", 2, "--num-partitions", str(PARTITIONS_PER_BROKER),
                                                         "--flush-interval-ms", "20"), 2)

    def connection(self, broker: int) -> Connection:
        connection = Connection("127.0.0.1", self.cluster.ports[broker])
        self.addCleanup(connection.close)
        return connection

    def zk(self) -> KazooClient:
        zk = zk_client(self.cluster)
        self.addCleanup(lambda: (zk.stop(), zk.close()))
        return zk

    # -----------------------------------------------------------------------------------------------------------

    def test_broker_registration(self):
        """/brokers/ids/<id> holds 0.7's <host>-<ms>:<host>:<port>, which a 0.7 client's split(":") reads."""
        return deferToThread(self._broker_registration)

    def _broker_registration(self) -> None:
        zk = self.zk()
        ids = sorted(zk.get_children("/brokers/ids"), key=int)
        self.assertEqual(ids, ["0", "1"])
        for broker_id in ids:
            value, _ = zk.get(f"/brokers/ids/{broker_id}")
            try:
                broker = parse_broker(broker_id, value)
            except ValueError:
                self.fail(f"/brokers/ids/{broker_id} = {value!r} is not <creator id>:<host>:<port>")
            self.assertEqual(broker.port, self.cluster.ports[int(broker_id)])
            creator_host, _, millis = broker.creator_id.rpartition("-")
            self.assertTrue(creator_host, broker.creator_id)
            self.assertTrue(millis.isdigit(), broker.creator_id)
            self.assertLess(abs(int(millis) / 1000 - time.time()), 3600, broker.creator_id)
            with Connection(broker.host, broker.port) as connection:  # the registered address serves 0.7 requests
                self.assertEqual(connection.offsets("anything", 0, LATEST, 1), (0, [0]))

    # -----------------------------------------------------------------------------------------------------------

    def test_balanced_group(self):
        """Two balanced 0.7 consumers split 4 partitions 2+2 and get every message once, in order; their
        offsets end at the log end; `twlog groups` reads them; a second group gets everything again."""
        return deferToThread(self._balanced_group)

    def _produce_group_topic(self, topic: str) -> dict[str, list[int]]:
        """PRODUCE and MULTIPRODUCE, magic 0, magic 1 and gzip, to partitions 0 and 1 of both brokers.
        Returns the sequence numbers per "<b>-<p>"; waits until all of it is visible."""
        expected: dict[str, list[int]] = {}
        ends: dict[tuple[int, int], int] = {}
        for broker in self.cluster.ports:
            connection = self.connection(broker)
            seqs = {p: iter(range(1000)) for p in range(PARTITIONS_PER_BROKER)}

            def batch(p: int, count: int) -> list[bytes]:
                numbers = [next(seqs[p]) for _ in range(count)]
                expected.setdefault(f"{broker}-{p}", []).extend(numbers)
                return [payload(broker, p, n) for n in numbers]

            sets: list[tuple[int, bytes]] = []
            for p in range(PARTITIONS_PER_BROKER):
                sets.append((p, message_set(batch(p, 20))))
                connection.produce(topic, p, sets[-1][1])
                sets.append((p, gzip_message_set(batch(p, 15))))
                connection.produce(topic, p, sets[-1][1])
            multi = []
            for p in range(PARTITIONS_PER_BROKER):
                multi.append((topic, p, message_set(batch(p, 10), magic=1)))
                multi.append((topic, p, gzip_message_set(batch(p, 15))))
            connection.multiproduce(multi)
            sets.extend((p, data) for _, p, data in multi)
            for p, data in sets:
                ends[(broker, p)] = ends.get((broker, p), 0) + len(data)
            for p in range(PARTITIONS_PER_BROKER):
                wait_visible(connection, topic, p, ends[(broker, p)])
        zk = self.zk()
        wait_for(lambda: sorted(zk.get_children(f"/brokers/topics/{topic}")) == ["0", "1"], 10,
                 f"/brokers/topics/{topic} to list both brokers")
        for broker in self.cluster.ports:
            value, _ = zk.get(f"/brokers/topics/{topic}/{broker}")
            self.assertEqual(int(value), PARTITIONS_PER_BROKER)
        return expected

    def _run_group(self, group: str, topic: str, total: int,
                   inspect=None) -> tuple[list[tuple[str, str, Message]], list[BalancedConsumer]]:
        """Two consumers of C{group}, each in its own thread, until C{total} messages came in and the group is
        settled (then a short quiet period to catch duplicates); C{inspect(consumers)} runs before they leave."""
        received: list[tuple[str, str, Message]] = []
        lock = threading.Lock()

        def on_message(thread: str, partition: str, m: Message) -> None:
            with lock:
                received.append((thread, partition, m))

        millis = int(time.time() * 1000)
        consumers = [BalancedConsumer(self.cluster.zookeeper, group, topic,
                                      consumer_id=f"{group}_{socket.gethostname()}-{millis}-{i}",
                                      fetch_size=1024, rebalance_backoff_s=0.1, commit_interval_s=0.2)
                     for i in range(2)]
        stop = threading.Event()
        errors: list[BaseException] = []
        threads: list[threading.Thread] = []

        def run(consumer: BalancedConsumer, deadline: float) -> None:
            try:
                consumer.run(on_message, stop, deadline)
            except BaseException as e:  # reported by the test thread
                errors.append(e)
                stop.set()

        def settled() -> bool:
            if errors:
                raise errors[0]
            return (len(received) >= total and all(len(c.owned) == 2 for c in consumers)
                    and not any(c.rebalance_pending for c in consumers))

        try:
            try:
                for consumer in consumers:
                    consumer.start()
                deadline = time.monotonic() + 30
                threads = [threading.Thread(target=run, args=(c, deadline), daemon=True) for c in consumers]
                for t in threads:
                    t.start()
                wait_for(settled, 30, lambda: f"{group}: {total} messages and a settled group (got {len(received)}, "
                                              f"owned {[sorted(c.owned) for c in consumers]})")
                time.sleep(0.5)  # anything more would be a duplicate
            finally:
                stop.set()
                for t in threads:
                    t.join(15)
            if errors:
                raise errors[0]
            self.assertFalse(any(t.is_alive() for t in threads), "a consumer thread did not stop")
            if inspect is not None:
                inspect(consumers)
        finally:
            for consumer in consumers:
                consumer.close()
        return received, consumers

    def _check_delivery(self, received, expected: dict[str, list[int]]) -> None:
        payloads = Counter(m.payload for _, _, m in received)
        duplicates = {p: n for p, n in payloads.items() if n > 1}
        self.assertEqual(duplicates, {})
        self.assertEqual(len(payloads), sum(len(v) for v in expected.values()))
        per_partition: dict[str, list[int]] = {}
        for _, partition, m in received:
            where, seq = seq_of(m.payload)
            self.assertEqual(where, partition)
            per_partition.setdefault(partition, []).append(seq)
        self.assertEqual(per_partition, expected)  # nothing lost, nothing extra, in order within each partition

    def _balanced_group(self) -> None:
        topic = "clicks07"
        expected = self._produce_group_topic(topic)
        total = sum(len(v) for v in expected.values())
        zk = self.zk()
        owners_seen: dict[str, str] = {}
        groups_output: list[str] = []

        def inspect(consumers: list[BalancedConsumer]) -> None:
            # The split: 2+2, disjoint, every partition owned, owner nodes naming the thread ids.
            owned = [set(c.owned) for c in consumers]
            self.assertEqual([len(o) for o in owned], [2, 2])
            self.assertEqual(owned[0] | owned[1], set(expected))
            for c in consumers:
                for partition, thread in c.owned.items():
                    value, _ = zk.get(f"/consumers/g07a/owners/{topic}/{partition}")
                    self.assertEqual(value.decode(), thread)
                    owners_seen[partition] = thread
            # Committed offsets end at the log end.
            for partition in sorted(expected):
                broker, number = (int(x) for x in partition.split("-"))
                value, _ = zk.get(f"/consumers/g07a/offsets/{topic}/{partition}")
                self.assertEqual(int(value), latest(self.connection(broker), topic, number), partition)
            # The real `twlog groups` reads the 0.7 group's registry.
            result = subprocess.run([sys.executable, "-m", "twlog.cli", "groups", "-z", self.cluster.zookeeper,
                                     "-g", "g07a"], capture_output=True, timeout=30, env=os.environ.copy())
            self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace"))
            groups_output.append(result.stdout.decode())

        received, consumers = self._run_group("g07a", topic, total, inspect)
        self._check_delivery(received, expected)
        # 2,000-byte messages and 1,024-byte fetches: the consumers had to grow their fetch size.
        self.assertGreater(sum(c.fetch_size_growths for c in consumers), 0)
        for thread, partition, _ in received[-4:]:
            self.assertEqual(owners_seen[partition], thread)

        output = groups_output[0]
        self.assertIn("group g07a: 2 member(s)", output)
        for c in consumers:
            self.assertRegex(output, rf"member {re.escape(c.consumer_id)}: {topic} x1")
        rows = {}
        for line in output.splitlines():
            fields = line.split()
            if len(fields) == 6 and fields[0] == topic:
                rows[fields[1]] = fields[2:]
        self.assertEqual(sorted(rows), sorted(expected), output)
        for partition, (owner, offset, end, lag) in rows.items():
            broker, number = (int(x) for x in partition.split("-"))
            committed, _ = zk.get(f"/consumers/g07a/offsets/{topic}/{partition}")
            self.assertEqual(owner, owners_seen[partition], output)
            self.assertEqual(offset.replace(",", ""), committed.decode(), output)
            self.assertEqual(end.replace(",", ""), committed.decode(), output)
            self.assertEqual(lag, "0", output)

        # The consumers left: their ids and owner nodes are gone, their offsets stay.
        self.assertEqual(zk.get_children("/consumers/g07a/ids"), [])
        self.assertEqual(zk.get_children(f"/consumers/g07a/owners/{topic}"), [])
        self.assertEqual(sorted(zk.get_children(f"/consumers/g07a/offsets/{topic}")), sorted(expected))

        # A second group starts at the earliest offsets and gets everything again.
        received, _ = self._run_group("g07b", topic, total)
        self._check_delivery(received, expected)

    # -----------------------------------------------------------------------------------------------------------

    def test_fetch_size_grows_on_partial_message(self):
        """A message larger than the fetch size comes back as error 0 and exactly max-size bytes of it; the 0.7
        client sees no whole message, doubles its fetch size and gets it."""
        return deferToThread(self._fetch_size_growth)

    def _fetch_size_growth(self) -> None:
        topic, connection = "big07", self.connection(0)
        big = bytes(range(256)) * 256  # 64 KiB
        sets = [message(b"small-1"), message(big), message(b"small-2")]
        connection.produce(topic, 0, b"".join(sets))
        big_offset = len(sets[0])
        end = sum(len(s) for s in sets)
        wait_visible(connection, topic, 0, end)

        error, data = connection.fetch(topic, 0, big_offset, 4096)
        self.assertEqual(error, 0, "a 0.7 broker answers an oversize first message with error 0")
        self.assertEqual(len(data), 4096)
        self.assertEqual(data, sets[1][:4096])
        self.assertEqual(decode_message_set(data, big_offset), ([], 0))
        error, parts = connection.multifetch([(topic, 0, big_offset, 4096), (topic, 0, 0, 4096)])
        self.assertEqual(error, 0)
        self.assertEqual([(e, len(d)) for e, d in parts], [(0, 4096), (0, 4096)])
        self.assertEqual(parts[1][1], sets[0] + sets[1][:4096 - len(sets[0])])

        # The client's loop: the first fetch gets small-1 and drops the partial big message, the next grows.
        messages, offset, size = fetch_messages(connection, topic, 0, 0, 4096)
        self.assertEqual(([m.payload for m in messages], offset, size), ([b"small-1"], big_offset, 4096))
        messages, offset, size = fetch_messages(connection, topic, 0, offset, 4096)
        self.assertEqual([m.payload for m in messages], [big, b"small-2"])
        self.assertEqual([m.offset for m in messages], [big_offset, big_offset + len(sets[1])])
        self.assertEqual(size, 131072)  # 4096 doubled until the 4 + 65,541 bytes of the big message fit
        self.assertEqual(offset, end)
        self.assertEqual(fetch_messages(connection, topic, 0, offset, 4096), ([], end, 4096))

    # -----------------------------------------------------------------------------------------------------------

    def test_error_codes_stay_in_07_range(self):
        """No response to request types 0-4 carries an error code a 0.7 client does not know (-1 to 4);
        rejected produces answer nothing and leave the connection and the log as they were."""
        return deferToThread(self._error_codes)

    def _error_codes(self) -> None:
        topic, connection = "err07", self.connection(0)
        good = message_set([b"one", b"two", b"three"])
        connection.produce(topic, 0, good)
        end = len(good)
        wait_visible(connection, topic, 0, end)
        codes: dict[str, int] = {}

        def fetch(name: str, *args) -> int:
            codes[f"FETCH {name}"], _ = connection.fetch(*args)
            return codes[f"FETCH {name}"]

        fetch("inside a message", topic, 0, 1, 1024)
        fetch("inside the last message", topic, 0, end - 2, 1024)
        fetch("invalid topic with /", "bad/topic", 0, 0, 1024)
        fetch("topic ..", "..", 0, 0, 1024)
        fetch("empty topic", "", 0, 0, 1024)
        fetch("long topic", "x" * 300, 0, 0, 1024)
        fetch("negative offset", topic, 0, -5, 1024)
        fetch("zero max size", topic, 0, 0, 0)
        self.assertEqual(fetch("past the end", topic, 0, end + 1000, 1024), kafka07.OFFSET_OUT_OF_RANGE)
        self.assertEqual(fetch("wrong partition", topic, 99, 0, 1024), kafka07.WRONG_PARTITION)
        for name, args in [("invalid topic", ("bad/topic", 0, LATEST, 1)), ("wrong partition", (topic, 99, LATEST, 1)),
                           ("empty topic", ("", 0, EARLIEST, 1)), ("time", (topic, 0, 12345, 10))]:
            codes[f"OFFSETS {name}"], _ = connection.offsets(*args)
        outer, parts = connection.multifetch([(topic, 0, 1, 1024), ("bad/topic", 0, 0, 1024), (topic, 99, 0, 1024),
                                              (topic, 0, end + 1000, 1024), (topic, 0, 0, 0), (topic, 0, 0, 1024)])
        codes["MULTIFETCH"] = outer
        self.assertEqual(len(parts), 6)
        for i, (code, _) in enumerate(parts):
            codes[f"MULTIFETCH part {i}"] = code
        self.assertEqual(parts[-1], (0, good))
        outside = {name: code for name, code in codes.items() if code not in KAFKA07_ERROR_CODES}
        self.assertEqual(outside, {}, f"codes outside 0.7's -1..4: {outside}")

        # Rejected produces: no response, the connection stays usable, nothing reaches the log.
        bad_crc = bytearray(message(b"corrupt"))
        bad_crc[-1] ^= 0xFF
        connection.produce(topic, 0, message(b"z" * 1_100_000))  # larger than the broker takes
        connection.produce(topic, 0, bytes(bad_crc))
        connection.produce("bad/topic", 0, message(b"x"))
        connection.produce(topic, 99, message(b"x"))
        connection.produce(topic, 0, message(b"y")[:-1])  # a truncated set
        connection.multiproduce([(topic, 0, message(b"w" * 1_100_000)), (topic, 0, message(b"after"))])
        end += len(message(b"after"))
        wait_visible(connection, topic, 0, end)  # a stray response would break this OFFSETS reply
        error, data = connection.fetch(topic, 0, 0, 1 << 20)
        self.assertEqual((error, data), (0, good + message(b"after")))
        time.sleep(0.3)
        self.assertEqual(latest(connection, topic, 0), end)
        error, offsets = connection.offsets(topic, 0, EARLIEST, 1)
        self.assertEqual((error, offsets), (0, [0]))
        # A fresh connection still gets the right answers too.
        with Connection("127.0.0.1", self.cluster.ports[0]) as other:
            self.assertEqual(other.fetch(topic, 0, len(good), 1024), (0, message(b"after")))

    # -----------------------------------------------------------------------------------------------------------

    def test_malformed_requests_get_07_codes(self):
        """A malformed or oversized request of types 0-4 gets at most an error-only response with a 0.7 code
        (a 0.7 broker just closed the connection), and then the connection is closed."""
        return deferToThread(self._malformed)

    def _malformed(self) -> None:
        requests = {
            "truncated FETCH": (kafka07.FETCH, b"\x00\x04abcd\x00"),
            "FETCH with trailing bytes": (kafka07.FETCH, Connection.fetch_body("a", 0, 0, 10) + b"x"),
            "truncated OFFSETS": (kafka07.OFFSETS, b"\x00\x01a"),
            "MULTIFETCH short of its count": (kafka07.MULTIFETCH, b"\x00\x05"),
            "PRODUCE set size past the frame": (kafka07.PRODUCE, Connection.produce_body("a", 0, b"")[:-4] +
                                                b"\x00\x00\x10\x00"),
            "MULTIPRODUCE negative count": (kafka07.MULTIPRODUCE, b"\xff\xff"),
        }
        for name, (request_type, body) in requests.items():
            with Connection("127.0.0.1", self.cluster.ports[0], timeout_s=5) as connection:
                connection.send(request_type, body)
                self._expect_closed_after_07_code(connection, name)
        with Connection("127.0.0.1", self.cluster.ports[0], timeout_s=5) as connection:
            connection._socket.sendall(struct.pack(">ih", 200 << 20, kafka07.FETCH))  # over the frame limit
            self._expect_closed_after_07_code(connection, "a 200 MiB FETCH frame")
        with Connection("127.0.0.1", self.cluster.ports[0]) as connection:  # the broker is fine
            self.assertEqual(connection.offsets("anything", 0, LATEST, 1), (0, [0]))

    def _expect_closed_after_07_code(self, connection: Connection, name: str) -> None:
        try:
            error, body = connection.receive()
        except ConnectionClosed:
            return
        self.assertIn(error, KAFKA07_ERROR_CODES, name)
        self.assertNotEqual(error, 0, name)
        self.assertEqual(body, b"", name)
        self.assertRaises(ConnectionClosed, connection.receive)
