"""Issue 19's cross-path check: the same malformed registrations in a real ZooKeeper, read by every path.

Every path that reads the cluster from ZooKeeper (the CLI, the Spark source's options, the Twisted
producer's router, the Twisted consumer's ClusterView as the group rebalancer uses it, the blocking
facade and C{discover}) must agree: the good partitions present, each bad value skipped with exactly
one warning (the same lines: L{twlog.coord.layout}'s problems), and a topic that cannot be refused with
the same typed error.  The suite's one ZooKeeper server serves the module; each test has its own chroot
with one real broker and the same bad nodes (L{BAD_NODES}).
"""

from __future__ import annotations

import json
import os
import re
import sys

from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial.unittest import TestCase

from tests.integration.broker import wait_until
from tests.integration.groups import produce_all, registered, start_brokers
from tests.integration.test_cli import Command, twlog
from tests.integration.zookeeper import connect
from twlog.client import discovery
from twlog.client.async_discovery import discover_async
from twlog.client.discovery import discover
from twlog.coord.cluster import ClusterView
from twlog.errors import InvalidTopic, UnknownTopic
from twlog.partition import TopicPartition
from twlog.producer import Producer
from twlog.spark.options import SourceOptions

TOPIC = "clicks"
#: The good partitions: broker 0 (real, registered by itself) holds 2 of TOPIC.
GOOD = [TopicPartition(TOPIC, "0-0"), TopicPartition(TOPIC, "0-1")]

#: Bad registrations, beside the real broker's (persistent nodes written by the test).
BAD_NODES = {
    "/brokers/ids/x1": b"127.0.0.1:1",  # not a broker id
    "/brokers/ids/7": b"nonsense",  # not host:port
    "/brokers/ids/6": b"127.0.0.1:1",  # live, but its count of TOPIC is bad
    f"/brokers/topics/{TOPIC}/6": b"two",  # not a count
    f"/brokers/topics/{TOPIC}/7": b"1",  # broker 7's registration is bad: not live
    f"/brokers/topics/{TOPIC}/9": b"2",  # no broker 9: not live
    f"/brokers/topics/{TOPIC}/b2": b"1",  # not a broker id
    "/brokers/topics/ghost/9": b"1",  # a topic only a departed broker holds
    "/brokers/topics/bad*topic/0": b"1",  # not a topic name
}

#: The warnings every path reading TOPIC gives, once each.
EXPECTED = {
    "/brokers/ids/x1: 'x1' is not a broker id",
    "/brokers/ids/7: broker registration 'nonsense' does not end in :<port>",
    f"/brokers/topics/{TOPIC}/6: partition count b'two' is not a non-negative integer",
    f"/brokers/topics/{TOPIC}/7: broker 7 is not live (no usable /brokers/ids/7)",
    f"/brokers/topics/{TOPIC}/9: broker 9 is not live (no usable /brokers/ids/9)",
    f"/brokers/topics/{TOPIC}/b2: 'b2' is not a broker id",
}
#: What a path reading every topic gives besides.
EVERY_TOPIC = {
    "/brokers/topics/ghost/9: broker 9 is not live (no usable /brokers/ids/9)",
    "/brokers/topics/bad*topic: the topic name 'bad*topic' may only contain letters, digits, '.', '_' and '-'",
}

_PROBLEM = re.compile(r"ignoring [^:]*: (.*)$")


def problems_in(lines) -> list[str]:
    """The problems named by warning lines C{ignoring ...: <problem>}, in order, repeats kept."""
    return [m.group(1) for line in lines if (m := _PROBLEM.search(line.strip()))]


class TwistedWarnings:
    """Twisted log warnings whose source C{chosen(source)} accepts: the problem each names."""

    def __init__(self, testcase: TestCase, chosen) -> None:
        self.chosen = chosen
        self.problems: list[str] = []
        globalLogPublisher.addObserver(self)
        testcase.addCleanup(globalLogPublisher.removeObserver, self)

    def __call__(self, event) -> None:
        if event.get("log_level") is LogLevel.warn and self.chosen(event.get("log_source")):
            self.problems.append(event.get("problem", event.get("log_format")))


class MalformedRegistrationTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.zk = await connect(self)
        self.hosts = self.zk.hosts
        self.brokers = brokers = await start_brokers(self, self.hosts, 1, partitions=2)
        await produce_all(brokers, TOPIC, 1)
        await registered(self.zk, TOPIC, brokers)
        for path, value in BAD_NODES.items():
            await self.zk.create(path, value, makepath=True)

    def assertOnce(self, problems, expected=EXPECTED) -> None:
        self.assertEqual(sorted(problems), sorted(expected))

    async def test_blocking_discover(self) -> None:
        """discover (the blocking facade's and scripts' reading): good ones, one warning per bad value."""
        with self.assertLogs(discovery.__name__, "WARNING") as logged:
            found = await deferToThread(discover, [TOPIC], zookeeper=self.hosts)
        self.assertEqual([location.tp for location in found], GOOD)
        self.assertOnce(problems_in(logged.output))

    async def test_spark_options(self) -> None:
        """The Spark source's options resolve the same partitions, with the same warnings."""
        options = SourceOptions({"zookeeper": self.hosts, "subscribe": TOPIC}, stream=False)
        with self.assertLogs(discovery.__name__, "WARNING") as logged:
            found = await deferToThread(options.partitions)
        self.assertEqual([location.tp for location in found], GOOD)
        self.assertOnce(problems_in(logged.output))

    async def test_async_discover(self) -> None:
        """discover_async (the CLI's reading, on the reactor): the same."""
        with self.assertLogs(discovery.__name__, "WARNING") as logged:
            found = await discover_async([TOPIC], zookeeper=self.hosts, reactor=reactor)
        self.assertEqual([location.tp for location in found], GOOD)
        self.assertOnce(problems_in(logged.output))

    async def test_twisted_consumer_view(self) -> None:
        """ClusterView, as the group rebalancer reads it (layout()): the same, logged once even when read again."""
        view = ClusterView(self.zk, [TOPIC])
        warnings = TwistedWarnings(self, lambda source: source is view)
        await view.start()
        self.addCleanup(view.stop)
        self.assertEqual(view.layout().topic_partitions(TOPIC), GOOD)
        await self.zk.set(f"/brokers/topics/{TOPIC}/9", b"3")  # a watch reads the topic again
        await self.zk.create(f"/brokers/topics/{TOPIC}/8", b"1")
        expected = EXPECTED | {f"/brokers/topics/{TOPIC}/8: broker 8 is not live (no usable /brokers/ids/8)"}
        await wait_until(lambda: len(warnings.problems) == len(expected))
        self.assertOnce(warnings.problems, expected)
        self.assertEqual(view.layout().topic_partitions(TOPIC), GOOD)

    async def test_twisted_producer(self) -> None:
        """The producer's router (through its view of ZooKeeper): the same partitions, the same warnings."""
        broker_view = self.brokers[0].service.cluster
        warnings = TwistedWarnings(self, lambda source: isinstance(source, ClusterView) and source is not broker_view)
        producer = Producer(zookeeper=self.hosts, reactor=reactor)
        self.addCleanup(producer.close)
        self.assertEqual(await producer.partitions(TOPIC), GOOD)
        self.assertOnce(warnings.problems)

    async def test_blocking_producer(self) -> None:
        """The blocking facade's producer, in its own process: the same partitions and warnings on stderr."""
        script = (
            "import sys\n"
            "from twisted.logger import globalLogPublisher, LogLevel, formatEvent\n"
            "globalLogPublisher.addObserver(lambda e: e.get('log_level') is LogLevel.warn and"
            " print(formatEvent(e), file=sys.stderr, flush=True))\n"
            "from twlog.blocking import BlockingProducer\n"
            "with BlockingProducer(zookeeper=sys.argv[1]) as producer:\n"
            "    print(' '.join(str(tp) for tp in producer.partitions(sys.argv[2])))\n"
        )
        status, out, err = await run_python(script, self.hosts, TOPIC)
        self.assertEqual((status, out.decode().split()), (0, [str(tp) for tp in GOOD]), err)
        self.assertOnce(problems_in(err.decode().splitlines()))

    async def test_cli_consume_and_topics(self) -> None:
        """The twlog command (its real entry point): consume reads the good partitions, each bad value one line."""
        status, out, err = await twlog("consume", "-z", self.hosts, "-t", TOPIC)
        self.assertEqual(status, 0, err)
        self.assertEqual(len(out.splitlines()), len(GOOD))
        self.assertOnce(problems_in(err.decode().splitlines()))
        self.assertTrue(all(line.startswith("twlog: warning: ignoring ") for line in err.decode().splitlines()), err)
        status, out, err = await twlog("topics", "-z", self.hosts, "--json")
        self.assertEqual(status, 0, err)
        listed = {t["topic"]: [p["partition"] for p in t["partitions"]] for t in json.loads(out)}
        self.assertEqual(listed, {TOPIC: [tp.name for tp in GOOD]})
        self.assertOnce(problems_in(err.decode().splitlines()), EXPECTED | EVERY_TOPIC)

    async def test_refusals(self) -> None:
        """A topic only a departed broker holds is UnknownTopic, a name that cannot be is InvalidTopic: on every
        discovering path alike (the CLI says so in one line)."""
        for topic, error in (("ghost", UnknownTopic), ("bad*topic", InvalidTopic)):
            await self.assertFailure(deferToThread(discover, [topic], zookeeper=self.hosts), error)
            await self.assertFailure(discover_async([topic], zookeeper=self.hosts, reactor=reactor), error)
            options = SourceOptions({"zookeeper": self.hosts, "subscribe": topic}, stream=False)
            await self.assertFailure(deferToThread(options.partitions), error)
        status, _, err = await twlog("consume", "-z", self.hosts, "-t", "ghost")
        self.assertEqual(status, 1, err)
        self.assertIn(b"topic 'ghost' does not exist", err)


async def run_python(script: str, *args: str):
    """Run C{script} in a new Python process; fire with (exit status, stdout, stderr)."""
    command = Command(b"")
    argv = [sys.executable, "-c", script, *args]
    reactor.spawnProcess(command, sys.executable, argv, env=os.environ.copy())
    return await command.ended
