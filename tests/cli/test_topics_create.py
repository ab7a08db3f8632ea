"""Parsing of `twlog topics` and `twlog topics create`, and the sentence create prints."""

from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stderr, redirect_stdout

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.cli.test_main import run_main
from twlog.cli.common import UsageError
from twlog.cli.inspect import _created_sentence, _describe_replicated, create_topic
from twlog.cli.main import build_parser
from twlog.client.replica_status import PartitionProgress
from twlog.client.topics import TopicCreated
from twlog.errors import LeaderNotAvailable
from twlog.protocol.replication_codec import NO_BROKER, UNDEFINED_EPOCH, ReplicatedLayout
from twlog.protocol.replication_codec import PartitionState as ReplicatedPartition


class ParseTests(SynchronousTestCase):
    def test_topics_alone_still_lists(self) -> None:
        """`twlog topics -b ...` without an action runs the listing."""
        args = build_parser().parse_args(["topics", "-b", "h:1"])
        self.assertEqual((args.run, args.broker, args.action), ("twlog.cli.inspect:topics", "h:1", None))

    def test_create_options(self) -> None:
        """create takes --topic and --partitions; --broker given before or after `create` is used."""
        for argv in (["topics", "-b", "h:1", "create", "-t", "clicks", "-n", "2"],
                     ["topics", "create", "--broker", "h:1", "--topic", "clicks", "--partitions", "2"]):
            args = build_parser().parse_args(argv)
            self.assertEqual((args.run, args.broker, args.topic, args.partitions),
                             ("twlog.cli.inspect:create_topic", "h:1", "clicks", 2), argv)
        args = build_parser().parse_args(["topics", "create", "-z", "zk:2181/c", "-t", "t", "-n", "1", "--json"])
        self.assertEqual((args.zookeeper, args.json), ("zk:2181/c", True))

    def test_usage_errors(self) -> None:
        """A bad name, a count outside 1 to 1024, or no count: one line naming what is accepted, exit 2."""
        for argv, expected in ((["-t", "a b", "-n", "2"], "may only contain"),
                               (["-t", "ok", "-n", "0"], "from 1 to 1024"),
                               (["-t", "ok", "-n", "1025"], "from 1 to 1024"),
                               (["-t", "ok", "-n", "two"], "from 1 to 1024"),
                               (["-t", "ok"], "--partitions")):
            status, out, err = run_main("topics", "create", *argv)
            self.assertEqual((status, out), (2, ""), argv)
            self.assertEqual(err.count("\n"), 1, err)
            self.assertIn(expected, err)

    def test_help_says_per_broker(self) -> None:
        """--help explains that partitions are per broker."""
        status, out, _ = run_main("topics", "create", "--help")
        self.assertEqual(status, 0)
        self.assertIn("partitions on each broker", out)


class SentenceTests(SynchronousTestCase):
    def created(self, brokers: int, existed=()) -> TopicCreated:
        return TopicCreated("clicks", 2, {b: ("h", 9092 + b) for b in range(brokers)}, frozenset(existed), True)

    def test_sentences(self) -> None:
        """The output says N on each broker and the total, and which brokers had the topic already."""
        self.assertEqual(_created_sentence(self.created(2)),
                         "created clicks: 2 partitions on each of 2 brokers (4 in all)")
        self.assertEqual(_created_sentence(self.created(1)), "created clicks: 2 partitions on 1 broker (2 in all)")
        self.assertEqual(_created_sentence(self.created(3, {1})),
                         "created clicks: 2 partitions on each of 3 brokers (6 in all); broker 1 had them already")
        self.assertEqual(_created_sentence(self.created(2, {0, 1})),
                         "clicks already exists: 2 partitions on each of 2 brokers (4 in all); nothing changed")


class ReplicatedParseTests(SynchronousTestCase):
    """`twlog topics create --replication-factor`: the two meanings of --partitions, and what it needs."""

    def test_options(self) -> None:
        args = build_parser().parse_args(["topics", "create", "-z", "zk:2181", "-t", "t", "-n", "6",
                                          "--replication-factor", "3", "--min-insync-replicas", "2"])
        self.assertEqual((args.partitions, args.replication_factor, args.min_insync_replicas), (6, 3, 2))
        args = build_parser().parse_args(["topics", "create", "-b", "h:1", "-t", "t", "-n", "2"])
        self.assertEqual((args.replication_factor, args.min_insync_replicas), (None, None))

    def test_bad_factor_is_one_line(self) -> None:
        for bad in ("0", "two"):
            status, out, err = run_main("topics", "create", "-z", "zk:2181", "-t", "t", "-n", "2", "-r", bad)
            self.assertEqual((status, out, err.count("\n")), (2, "", 1), err)
            self.assertIn("--replication-factor", err)

    def test_help_says_both_meanings(self) -> None:
        status, out, _ = run_main("topics", "create", "--help")
        self.assertEqual(status, 0)
        flat = " ".join(out.split())
        self.assertIn("partitions on each broker", flat)
        self.assertIn("--partitions N counts its partitions in all", flat)
        self.assertIn("needs --zookeeper", flat)

    def run_create(self, *argv: str):
        args = build_parser().parse_args(["topics", "create", *argv])
        return Deferred.fromCoroutine(create_topic(None, args))

    def test_factor_needs_zookeeper(self) -> None:
        """Without --zookeeper, --replication-factor is refused before anything is asked (one line, exit 2)."""
        failure = self.failureResultOf(self.run_create("-b", "h:1", "-t", "t", "-n", "2", "-r", "2"), UsageError)
        self.assertIn("give --zookeeper HOST:PORT", str(failure.value))

    def test_min_insync_needs_factor(self) -> None:
        failure = self.failureResultOf(self.run_create("-b", "h:1", "-t", "t", "-n", "2", "--min-insync-replicas",
                                                       "2"), UsageError)
        self.assertIn("give --replication-factor too", str(failure.value))


class DescribeReplicatedTests(SynchronousTestCase):
    """What `twlog topics describe` prints for a replicated topic: leader, leader epoch, replicas, ISR, and as
    each leader answered REPLICA_STATUS, high watermark and replica ends (unknown: "?" or null)."""

    LAYOUT = ReplicatedLayout("orders", 0, (
        ReplicatedPartition(0, 0, 1, 2, (1, 2, 3), (1, 3)),
        ReplicatedPartition(1, LeaderNotAvailable.code, NO_BROKER, UNDEFINED_EPOCH, (2, 3, 1), ()),
        ReplicatedPartition(2, 0, 3, 0, (3, 1, 2), (3, 1, 2)),
    ))
    #: Partition 0's leader answered (follower 2, out of the ISR, has not fetched); partition 2's could not be asked.
    PROGRESS = {0: PartitionProgress(0, 1, 2, 1200, {1: 1200, 2: None, 3: 1200})}

    def describe(self, json: bool) -> tuple[str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            _describe_replicated(argparse.Namespace(json=json), self.LAYOUT, self.PROGRESS)
        return out.getvalue(), err.getvalue()

    def test_json(self) -> None:
        out, _ = self.describe(True)
        self.assertEqual(json.loads(out), {"topic": "orders", "replicated": True, "partitions": [
            {"name": "0", "leader": 1, "leader_epoch": 2, "replicas": [1, 2, 3], "isr": [1, 3],
             "high_watermark": 1200, "replica_ends": {"1": 1200, "2": None, "3": 1200}},
            {"name": "1", "leader": None, "leader_epoch": None, "replicas": [2, 3, 1], "isr": [],
             "high_watermark": None, "replica_ends": None},
            {"name": "2", "leader": 3, "leader_epoch": 0, "replicas": [3, 1, 2], "isr": [3, 1, 2],
             "high_watermark": None, "replica_ends": None},
        ]})

    def test_table(self) -> None:
        out, err = self.describe(False)
        self.assertIn("orders: 3 partitions, replication factor 3", out)
        self.assertEqual(out.split("\n")[1].split(), ["partition", "leader", "leader", "epoch", "replicas", "isr",
                                                      "high", "watermark", "replica", "ends"])
        rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
        self.assertEqual(rows, [["0", "1", "2", "1,2,3", "1,3", "1200", "1:1200,2:?,3:1200"],
                                ["1", "none", "-", "2,3,1", "-", "?", "?"],
                                ["2", "3", "0", "3,1,2", "3,1,2", "?", "?"]])
        self.assertEqual(err, "twlog: warning: orders: partition 1 has no live leader\n")
