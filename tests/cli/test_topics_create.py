"""Parsing of `twlog topics` and `twlog topics create`, and the sentence create prints."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.cli.test_main import run_main
from twlog.cli.inspect import _created_sentence
from twlog.cli.main import build_parser
from twlog.client.topics import TopicCreated


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
