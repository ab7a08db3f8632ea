"""The twlog command against a real broker: produce, consume, offsets, topics, and their errors."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.protocol import ProcessProtocol
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.zookeeper import fresh_connect_string


class Command(ProcessProtocol):
    def __init__(self, stdin: bytes) -> None:
        self.stdin = stdin
        self.out = b""
        self.err = b""
        self.ended: Deferred = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.stdin)
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason) -> None:
        self.ended.callback((reason.value.exitCode, self.out, self.err))


def twlog(*args: str, stdin: bytes = b"", started: list | None = None) -> Deferred:
    """Run the twlog command; fire with (exit status, stdout, stderr).  C{started} receives the process."""
    command = Command(stdin)
    argv = [sys.executable, "-m", "twlog.cli", *args]
    process = reactor.spawnProcess(command, sys.executable, argv, env=os.environ.copy())
    if started is not None:
        started.append((process, command))
    return command.ended


def twlog_all(*argvs: tuple[str, ...]) -> Deferred:
    """Run several twlog commands at once (each a process, as L{twlog}); fire with their results, in order.

    For commands independent of each other: the processes' start-up (the interpreter, twlog's imports) overlaps."""
    return gatherResults([twlog(*argv) for argv in argvs], consumeErrors=True)


def one_line(testcase: TestCase, err: bytes) -> None:
    """Exactly one line on stderr, and no traceback."""
    testcase.assertEqual(err.count(b"\n"), 1, err)
    testcase.assertNotIn(b"Traceback", err)


class CommandTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.service = await start_broker(self, num_partitions=3, flush_interval_ms=20, segment_bytes=4096)
        self.broker = f"127.0.0.1:{self.service.broker.port}"

    async def test_produce_then_consume(self) -> None:
        """Lines produced from stdin come back from consume, one per line, in order, across segment rolls."""
        lines = b"".join(b"line %d\n" % i for i in range(500))
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "logs", "-p", "0", "--batch-size", "50",
                                     stdin=lines)
        self.assertEqual(status, 0, err)
        self.assertIn(b"sent 500 messages to logs", err)
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "logs", "-p", "0-0")
        self.assertEqual((status, out), (0, lines), err)
        self.assertGreater(len(self.service.logs.get_log("logs", 0).segments), 1)

    async def test_keyed_produce_and_files(self) -> None:
        """A key sends every line of the named files to one partition."""
        path = self.mktemp()
        with open(path, "wb") as f:
            f.write(b"a\nb\nc\n")
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "k", "--key", "member-42", path, path)
        self.assertEqual(status, 0, err)
        counts = [self.service.logs.get_log("k", p) for p in range(3)]
        written = [log.end_offset // 10 if log else 0 for log in counts]
        self.assertEqual(sorted(written), [0, 0, 6])

    async def test_offsets_and_max_messages(self) -> None:
        """offsets prints latest and earliest; consume can start at a printed offset and stop after N."""
        await twlog("produce", "-b", self.broker, "-t", "o", "-p", "0", "--ack", "flushed",
                    stdin=b"".join(b"%05d\n" % i for i in range(10)))
        _, latest, _ = await twlog("offsets", "-b", self.broker, "-t", "o", "-p", "0-0")
        _, earliest, _ = await twlog("offsets", "-b", self.broker, "-t", "o", "-p", "0", "--time", "earliest")
        self.assertEqual((latest, earliest), (b"140\n", b"0\n"))
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "o", "-p", "0-0", "-o", "42", "-n", "2")
        self.assertEqual((status, out), (0, b"00003\n00004\n"), err)

    async def test_follow_wakes_on_new_data(self) -> None:
        """consume --follow waits for messages produced after it started."""
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "f", "-p", "0", stdin=b"x\n")
        self.assertEqual(status, 0, err)
        following = twlog("consume", "-b", self.broker, "-t", "f", "--offset", "earliest", "--follow", "-n", "3")
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "f", "-p", "0", stdin=b"y\nz\n")
        self.assertEqual(status, 0, err)
        status, out, err = await following
        self.assertEqual((status, out), (0, b"x\ny\nz\n"), err)

    async def test_topics(self) -> None:
        """topics lists the broker and its topics with their partition counts."""
        await twlog("produce", "-b", self.broker, "-t", "views", stdin=b"v\n")
        status, out, _ = await twlog("topics", "-b", self.broker)
        self.assertEqual(status, 0)
        self.assertRegex(out, rb"views +0 \(127\.0\.0\.1:\d+\) +3 +0-0 \.\. 0-2")

    async def test_errors_are_one_line(self) -> None:
        """Each mistake of issue 11 is one line naming the bad value and what is accepted: 2 for usage, else 1."""
        b = self.broker
        cases = [
            (("consume", "-b", "localhost", "-t", "o"), 2, b"broker address 'localhost' is not HOST:PORT"),
            (("consume", "-b", "localhost:abc", "-t", "o"), 2, b"broker address 'localhost:abc' is not HOST:PORT"),
            (("consume", "-b", b, "-t", "o", "-o", "foo"), 2, b"offset 'foo' is not earliest, latest or a byte offset"),
            (("offsets", "-b", b, "-t", "o", "--time", "yesterday"), 2, b"time 'yesterday' is not latest, earliest"),
            (("produce", "-b", b, "-t", "../y"), 2, b"'../y' may only contain letters, digits, '.', '_' and '-'"),
            (("produce", "-b", b, "-t", "a b"), 2, b"may only contain letters, digits"),
            (("produce", "-b", b, "-t", "o", "--batch-size", "0"), 2, b"must be positive"),
            (("consume", "-b", b, "-t", "nosuch"), 1, b"topic 'nosuch' does not exist on 127.0.0.1:"),
            (("offsets", "-b", b, "-t", "nosuch"), 1, b"topic 'nosuch' does not exist on 127.0.0.1:"),
            (("consume", "-b", b, "-t", "o", "-p", "0-0", "-o", "999999999"), 1,
             b"offset 999999999 is outside partition 0-0 of 'o': valid offsets are 0 to "),
            (("consume", "-b", b, "-t", "o", "-p", "0-0", "-o", "3"), 1,
             b"offset 3 does not start a message of o:0-0: the nearest message boundaries are 0 and 12"),
            (("consume", "-b", b, "-t", "o", "-o", "3"), 2, b"add --partition (one of 0-0, 0-1, 0-2)"),
            (("offsets", "-b", b, "-t", "o", "-p", "7"), 2,
             b"topic 'o' has no partition '7': give a name <broker id>-<partition> (0-0, 0-1, 0-2) or an index 0-2"),
            (("consume", "-b", b, "-t", "o", "-p", "1-0"), 2, b"topic 'o' has no partition '1-0'"),
            (("consume", "-b", b, "-t", "o", "-F", "%x"), 2, b"'%x' is not one of %t (topic)"),
            (("consume", "-b", "127.0.0.1:1", "-t", "o"), 1, b"127.0.0.1:1"),
        ]
        await twlog("produce", "-b", b, "-t", "o", "-p", "0-0", stdin=b"abc\n")
        results = await twlog_all(*(argv for argv, _, _ in cases))
        for (argv, expected_status, expected), (status, _, err) in zip(cases, results, strict=True):
            self.assertEqual(status, expected_status, (argv, err))
            self.assertIn(expected, err, argv)
            one_line(self, err)

    async def test_too_large_message_names_size_and_limit(self) -> None:
        """A line larger than the broker's limit is refused with its size and the limit, exit 1."""
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "big", stdin=b"x" * 1_500_000 + b"\n")
        self.assertEqual(status, 1, err)
        self.assertRegex(err, rb"refused a message of 1,500,0\d\d bytes as too large; the limit is")
        one_line(self, err)

    async def test_whole_topic_json_and_format(self) -> None:
        """Without --partition every partition is read; --json and --format show partition and offset."""
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "w", stdin=b"v0\n")  # creates the topic
        self.assertEqual((status, err), (0, b"sent 1 message to w\n"))
        status, _, err = await twlog("produce", "-b", self.broker, "-t", "w", "-K", ":",
                                     stdin=b"".join(b"k%d:v%d\n" % (i, i) for i in range(1, 30)))
        self.assertEqual((status, err), (0, b"sent 29 messages to w\n"))
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "w", "--json")
        self.assertEqual(status, 0, err)
        records = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(sorted(r["value"] for r in records), sorted(f"v{i}" for i in range(30)))
        self.assertGreater(len({r["partition"] for r in records}), 1)
        status, out, err = await twlog("consume", "-b", self.broker, "-t", "w", "-F", "%p %o %s\\n", "-n", "3")
        self.assertEqual(status, 0, err)
        self.assertEqual(len(out.splitlines()), 3)
        self.assertRegex(out.splitlines()[0], rb"^0-\d \d+ v\d+$")
        status, out, err = await twlog("offsets", "-b", self.broker, "-t", "w", "--json")
        self.assertEqual([r["partition"] for r in json.loads(out)], ["0-0", "0-1", "0-2"])

    async def test_produce_is_visible_at_once(self) -> None:
        """A consume right after a produce sees every message (the produce waited for the flush, here a timer's
        60 s away: the flushed acknowledgement asks for it)."""
        slow = await start_broker(self, num_partitions=2, flush_policy="timer", flush_interval_ms=60_000,
                                  flush_messages=1_000_000)
        broker = f"127.0.0.1:{slow.broker.port}"
        status, _, err = await twlog("produce", "-b", broker, "-t", "now", stdin=b"only one\n")
        self.assertEqual((status, err), (0, b"sent 1 message to now\n"))
        status, out, err = await twlog("consume", "-b", broker, "-t", "now")
        self.assertEqual((status, out), (0, b"only one\n"), err)


class ClusterCommandTests(TestCase):
    timeout = 120

    async def test_produce_and_consume_through_zookeeper(self) -> None:
        """produce --zookeeper spreads over the brokers; a group member reads everything; groups shows no lag."""
        zookeeper = fresh_connect_string()
        brokers = [await start_broker(self, zookeeper=zookeeper, broker_id=i, num_partitions=2,
                                      flush_interval_ms=20) for i in range(2)]
        lines = [b"event %d" % i for i in range(200)]
        status, _, err = await twlog("produce", "--zookeeper", zookeeper, "-t", "events", "--batch-size", "20",
                                     stdin=b"".join(line + b"\n" for line in lines))
        self.assertEqual(status, 0, err)
        status, out, err = await twlog("consume", "--zookeeper", zookeeper, "--group", "g", "-t", "events",
                                       "--streams", "2", "-n", "200")
        self.assertEqual(status, 0, err)
        self.assertEqual(sorted(out.split(b"\n")[:-1]), sorted(lines))
        status, out, err = await twlog("groups", "--zookeeper", zookeeper, "--group", "g")
        self.assertEqual(status, 0, err)
        self.assertIn(b"group g: 0 member(s), total lag 0 bytes", out)
        self.assertEqual(sum(len(b.broker.logs.logs()) > 0 for b in brokers), 2)

    async def test_whole_topic_across_brokers(self) -> None:
        """consume without --group reads every partition of every broker, through ZooKeeper or one broker address."""
        zookeeper = fresh_connect_string()
        brokers = [await start_broker(self, zookeeper=zookeeper, broker_id=i, num_partitions=2,
                                      flush_interval_ms=20) for i in range(2)]
        lines = sorted(b"m%03d" % i for i in range(100))
        status, _, err = await twlog("produce", "-z", zookeeper, "-t", "all", "--batch-size", "10",
                                     stdin=b"".join(line + b"\n" for line in lines))
        self.assertEqual((status, err), (0, b"sent 100 messages to all\n"))
        await wait_until(lambda: all(b.broker.logs.logs() for b in brokers))
        status, out, err = await twlog("consume", "-z", zookeeper, "-t", "all")
        self.assertEqual((status, sorted(out.splitlines())), (0, lines), err)
        one_broker = f"127.0.0.1:{brokers[1].broker.port}"
        status, out, err = await twlog("consume", "-b", one_broker, "-t", "all")
        self.assertEqual((status, sorted(out.splitlines())), (0, lines), err)
        status, out, err = await twlog("offsets", "-z", zookeeper, "-t", "all", "--json")
        self.assertEqual(status, 0, err)
        self.assertEqual({r["partition"] for r in json.loads(out)} >= {"0-0", "1-0"}, True)
        status, out, err = await twlog("topics", "-z", zookeeper, "--json")
        self.assertEqual(status, 0, err)
        self.assertEqual([t["topic"] for t in json.loads(out)], ["all"])

    async def test_groups_describe_and_reset(self) -> None:
        """groups -g nosuch is exit 1 naming it; reset rewinds a stopped group, and is refused while one is live."""
        zookeeper = fresh_connect_string()
        await start_broker(self, zookeeper=zookeeper, broker_id=0, num_partitions=1, flush_interval_ms=20)
        await twlog("produce", "-z", zookeeper, "-t", "r", stdin=b"a\nb\nc\n")
        status, _, err = await twlog("groups", "-z", zookeeper, "-g", "nosuch")
        self.assertEqual(status, 1, err)
        self.assertIn(b"no group 'nosuch'", err)
        one_line(self, err)
        status, out, err = await twlog("consume", "-z", zookeeper, "-g", "g", "-t", "r", "-n", "3")
        self.assertEqual((status, out), (0, b"a\nb\nc\n"), err)
        status, out, _ = await twlog("groups", "describe", "-z", zookeeper, "-g", "g", "--json")
        (group,) = json.loads(out)
        self.assertEqual([(p["partition"], p["offset"], p["lag_bytes"]) for p in group["partitions"]], [("0-0", 30, 0)])
        status, out, err = await twlog("groups", "reset", "-z", zookeeper, "-g", "g", "-t", "r", "--to", "earliest")
        self.assertEqual(status, 0, err)
        self.assertRegex(out, rb"^topic +partition +offset +new offset\nr +0-0 +30 +0\n$")
        status, out, err = await twlog("consume", "-z", zookeeper, "-g", "g", "-t", "r", "-n", "1")
        self.assertEqual((status, out), (0, b"a\n"), err)
        started: list = []
        member = twlog("consume", "-z", zookeeper, "-g", "g", "-t", "r", "--follow", started=started)
        await wait_until(lambda: b"" != started[0][1].out, timeout_s=30)
        status, _, err = await twlog("groups", "reset", "-z", zookeeper, "-g", "g", "-t", "r", "--to", "latest")
        self.assertEqual(status, 1, err)
        self.assertIn(b"group 'g' has 1 live member", err)
        one_line(self, err)
        started[0][0].signalProcess("INT")
        await member

    async def test_group_waits_for_topic_and_stops_on_ctrl_c(self) -> None:
        """A group consume of an unknown topic says once that it waits; Ctrl-C stops it within 2 s."""
        zookeeper = fresh_connect_string()
        await start_broker(self, zookeeper=zookeeper, broker_id=0, num_partitions=1, flush_interval_ms=20)
        started: list = []
        member = twlog("consume", "-z", zookeeper, "-g", "w", "-t", "later", started=started)
        process, command = started[0]
        await wait_until(lambda: b"waiting for it to appear" in command.err, timeout_s=30)
        self.assertIn(b"topic 'later' does not exist yet", command.err)
        await twlog("produce", "-z", zookeeper, "-t", "later", stdin=b"hello\n")
        await wait_until(lambda: command.out == b"hello\n", timeout_s=30)
        self.assertIn(b"topic 'later' appeared", command.err)
        began = time.monotonic()
        process.signalProcess(signal.SIGINT)
        status, _, err = await member
        self.assertLess(time.monotonic() - began, 2.5)
        self.assertEqual(status, 0, err)
        self.assertNotIn(b"Traceback", err)

    async def test_group_needs_zookeeper(self) -> None:
        """--group without --zookeeper is a usage error; an unreachable ZooKeeper is said in one line."""
        for argv, expected in ((("consume", "--group", "g", "-t", "x"), 2),
                               (("consume", "--zookeeper", "127.0.0.1:1", "-t", "x"), 1)):
            status, _, err = await twlog(*argv)
            self.assertEqual(status, expected, err)
            self.assertEqual(err.count(b"\n"), 1, err)


class BenchmarkCommandTests(TestCase):
    timeout = 120

    async def test_bench_broker(self) -> None:
        """twlog bench broker runs a broker process and prints a row per test, every message accounted for."""
        status, out, err = await twlog("bench", "broker", "-n", "2000", "--batch", "1,50",
                                       "--fetch-bytes", "65536,1048576")
        self.assertEqual(status, 0, err)
        rows = re.findall(r"^(produce, batch \d+, fire-and-forget)\s+([\d,]+)\s+([\d,]+)", out.decode(), re.MULTILINE)
        self.assertEqual([(test, count) for test, count, _ in rows], [
            ("produce, batch 1, fire-and-forget", "2,000"),
            ("produce, batch 50, fire-and-forget", "2,000"),
        ])
        self.assertTrue(all(int(rate.replace(",", "")) > 0 for _, _, rate in rows))
        sweep = re.findall(r"^\s*(64|1,024)\s+(per message|batch, pipelined|batch)\s+([\d,]+)\s+([\d,]+)\s+[\d.]+",
                           out.decode(), re.MULTILINE)
        apis = ("per message", "batch", "batch, pipelined")
        self.assertEqual([(size, api) for size, api, _, _ in sweep],
                         [(size, api) for size in ("64", "1,024") for api in apis])
        self.assertTrue(all(int(a.replace(",", "")) > 0 and int(b.replace(",", "")) > 0 for _, _, a, b in sweep))
        self.assertIn("decoding alone", out.decode())
