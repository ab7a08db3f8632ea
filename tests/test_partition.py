"""Tests of the one partition identity, L{twlog.partition.TopicPartition}."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.partition import TopicPartition, describe_partitions, partition_ranges, resolve_partition


class TopicPartitionTests(SynchronousTestCase):
    def test_text_form_round_trips(self) -> None:
        tp = TopicPartition("page.views-v2", "3-11")
        self.assertEqual(str(tp), "page.views-v2:3-11")
        self.assertEqual(TopicPartition.parse(str(tp)), tp)

    def test_zookeeper_name(self) -> None:
        tp = TopicPartition("clicks", "0-1")
        self.assertEqual(tp.name, "0-1")
        self.assertEqual(TopicPartition.from_name("clicks", "0-1"), tp)

    def test_sorts_by_topic_then_broker_then_partition(self) -> None:
        parts = [TopicPartition("b", "0-0"), TopicPartition("a", "1-0"),
                 TopicPartition("a", "0-10"), TopicPartition("a", "0-2")]
        self.assertEqual([str(p) for p in sorted(parts)], ["a:0-2", "a:0-10", "a:1-0", "b:0-0"])

    def test_bad_forms_are_refused(self) -> None:
        for text in ["clicks", "clicks:a-1", ":0-1", "clicks:0-", "clicks:-1-2", "clicks:0-1-2", "clicks:", "clicks:+1",
                     "clicks:\u0663"]:
            self.assertRaises(ValueError, TopicPartition.parse, text)

    def test_old_attribute_names_warn(self) -> None:
        """broker_id and partition, the old fields, still read (as fixed_leader and number), with a warning."""
        tp = TopicPartition("clicks", "2-5")
        self.assertEqual((tp.broker_id, tp.partition), (2, 5))
        warnings = self.flushWarnings([self.test_old_attribute_names_warn])
        self.assertEqual([(w["category"], w["message"]) for w in warnings], [
            (DeprecationWarning, "TopicPartition.broker_id is deprecated: use .fixed_leader"),
            (DeprecationWarning, "TopicPartition.partition is deprecated: use .number"),
        ])

    def test_replicated_names(self) -> None:
        """A replicated topic's partition is named by its number alone: no fixed leader, the same number on the wire."""
        tp = TopicPartition.parse("clicks:3")
        self.assertEqual((tp.topic, tp.name, tp.number, tp.fixed_leader, str(tp)), ("clicks", "3", 3, None, "clicks:3"))
        legacy = TopicPartition.on_broker("clicks", 2, 5)
        self.assertEqual((legacy.name, legacy.number, legacy.fixed_leader), ("2-5", 5, 2))
        self.assertEqual(sorted([TopicPartition("c", "10"), TopicPartition("c", "9")]),
                         [TopicPartition("c", "9"), TopicPartition("c", "10")])


class ResolvePartitionTests(SynchronousTestCase):
    #: A topic on brokers 0 and 2, given out of order.
    PARTITIONS = [TopicPartition("clicks", "2-0"), TopicPartition("clicks", "0-1"), TopicPartition("clicks", "0-0")]

    def test_names(self) -> None:
        """A name <broker id>-<partition> (or the text form) resolves to that partition."""
        self.assertEqual(resolve_partition("2-0", self.PARTITIONS), TopicPartition("clicks", "2-0"))
        self.assertEqual(resolve_partition("clicks:0-1", self.PARTITIONS), TopicPartition("clicks", "0-1"))

    def test_cluster_wide_index(self) -> None:
        """A bare number is the index in the partitions sorted by (broker id, partition), as produce -p uses."""
        self.assertEqual([resolve_partition(str(i), self.PARTITIONS).name for i in range(3)], ["0-0", "0-1", "2-0"])

    def test_errors_list_the_valid_names(self) -> None:
        """Anything else is a ValueError naming the text, the valid names and the index range."""
        for text in ["3", "1-0", "0-2", "-1", "x", "other:0-0", "0-0-0", ""]:
            with self.assertRaises(ValueError) as caught:
                resolve_partition(text, self.PARTITIONS)
            self.assertEqual(
                str(caught.exception),
                f"topic 'clicks' has no partition {text!r}: give a name <broker id>-<partition> "
                "(0-0, 0-1, 2-0) or an index 0-2",
            )

    def test_long_lists_are_shortened(self) -> None:
        """An error for a topic of many partitions lists the first ones and the last."""
        many = [TopicPartition.on_broker("t", 0, p) for p in range(100)]
        with self.assertRaises(ValueError) as caught:
            resolve_partition("1-0", many)
        self.assertIn("0-30, ..., 0-99) or an index 0-99", str(caught.exception))
        self.assertEqual(describe_partitions([]), "none")


class PartitionRangesTests(SynchronousTestCase):
    def test_runs(self) -> None:
        """Consecutive partitions of one broker are one run; a new broker or a gap starts another."""
        tps = [TopicPartition("clicks", n) for n in ("0-3", "0-1", "0-0", "0-2", "1-0", "1-2")]
        self.assertEqual(partition_ranges(tps), "clicks:{0-0..0-3, 1-0, 1-2}")
        self.assertEqual(partition_ranges(tps[:4]), "clicks:0-0..0-3")
        self.assertEqual(partition_ranges([TopicPartition("clicks", "1-0")]), "clicks:1-0")

    def test_topics_and_replicated_names(self) -> None:
        tps = [TopicPartition("views", "0-1"), TopicPartition("r", "2"), TopicPartition("r", "3"),
               TopicPartition("r", "3")]
        self.assertEqual(partition_ranges(tps), "r:2..3, views:0-1")
        self.assertEqual(partition_ranges([]), "none")
