"""Tests of the one partition identity, L{twlog.partition.TopicPartition}."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.partition import TopicPartition


class TopicPartitionTests(SynchronousTestCase):
    def test_text_form_round_trips(self) -> None:
        tp = TopicPartition("page.views-v2", 3, 11)
        self.assertEqual(str(tp), "page.views-v2:3-11")
        self.assertEqual(TopicPartition.parse(str(tp)), tp)

    def test_zookeeper_name(self) -> None:
        tp = TopicPartition("clicks", 0, 1)
        self.assertEqual(tp.name, "0-1")
        self.assertEqual(TopicPartition.from_name("clicks", "0-1"), tp)

    def test_sorts_by_topic_then_broker_then_partition(self) -> None:
        parts = [TopicPartition("b", 0, 0), TopicPartition("a", 1, 0),
                 TopicPartition("a", 0, 10), TopicPartition("a", 0, 2)]
        self.assertEqual([str(p) for p in sorted(parts)], ["a:0-2", "a:0-10", "a:1-0", "b:0-0"])

    def test_bad_forms_are_refused(self) -> None:
        for text in ["clicks", "clicks:1", "clicks:a-1", ":0-1", "clicks:0-", "clicks:-1-2", "clicks:0-1-2"]:
            self.assertRaises(ValueError, TopicPartition.parse, text)
