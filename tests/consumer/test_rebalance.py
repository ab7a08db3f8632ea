"""The range assignment (paper 3.2, Algorithm 1): tables and properties, no I/O."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from twlog.consumer.rebalance import (
    assign,
    consumer_assignment,
    decode_subscription,
    encode_subscription,
    group_assignment,
    natural_key,
    ranges,
    stream_ids,
    streams_by_topic,
    validate_subscription,
)


def names(count: int, brokers: int = 1) -> list[str]:
    """C{count} partition names, C{count // brokers} on each broker and the rest on one more: C{0-0, 0-1, ...}."""
    per = count // brokers
    return [f"{b}-{p}" for b in range(brokers) for p in range(per)] + [f"{brokers}-{p}" for p in range(count % brokers)]


class AssignTests(SynchronousTestCase):
    def test_table(self) -> None:
        """Sorted partitions are cut into contiguous blocks; the first |P| mod |C| streams take one more."""
        table = [
            # partitions, streams, expected blocks in stream order
            (["0-0", "0-1", "0-2", "0-3"], ["a", "b"], [["0-0", "0-1"], ["0-2", "0-3"]]),
            (["0-0", "0-1", "0-2", "0-3", "0-4"], ["a", "b"], [["0-0", "0-1", "0-2"], ["0-3", "0-4"]]),
            (["0-0", "0-1", "0-2", "0-3", "0-4"], ["a", "b", "c"], [["0-0", "0-1"], ["0-2", "0-3"], ["0-4"]]),
            (["0-0", "0-1"], ["a", "b", "c", "d"], [["0-0"], ["0-1"], [], []]),
            ([], ["a", "b"], [[], []]),
            (names(12, 3), ["c0-0", "c1-0", "c2-0"], [names(12, 3)[0:4], names(12, 3)[4:8], names(12, 3)[8:12]]),
            (["0-1", "0-0"], ["b", "a"], [["0-0"], ["0-1"]]),  # order of the inputs does not matter
        ]
        for partitions, streams, blocks in table:
            expected = dict(zip(sorted(streams), blocks))
            self.assertEqual(ranges(partitions, streams), expected, (partitions, streams))
            for stream in streams:
                self.assertEqual(assign(partitions, streams, stream), expected[stream])

    def test_absent_stream_gets_nothing(self) -> None:
        """A stream that is not among the group's streams owns nothing."""
        self.assertEqual(assign(["0-0"], ["a"], "z"), [])
        self.assertEqual(ranges(["0-0"], []), {})

    def test_natural_order(self) -> None:
        """Digit runs compare as numbers: broker 10 sorts after broker 2, stream -10 after stream -2."""
        self.assertEqual(sorted(["10-0", "2-0", "2-10", "2-2"], key=natural_key), ["2-0", "2-2", "2-10", "10-0"])
        self.assertEqual(assign(["2-0", "10-0"], ["c-10", "c-2"], "c-2"), ["2-0"])
        self.assertLess(natural_key("a-01"), natural_key("a-1"))  # a total order: ties broken by the text

    def test_more_streams_than_partitions_in_a_group(self) -> None:
        """With 5 consumers of one stream over 3 partitions, the first three own one each and two idle."""
        subscriptions = {f"c{i}": {"t": 1} for i in range(5)}
        owners = group_assignment(subscriptions, {"t": ["0-0", "0-1", "0-2"]})
        self.assertEqual(owners, {"t": {"0-0": "c0-0", "0-1": "c1-0", "0-2": "c2-0"}})
        self.assertEqual(consumer_assignment("c4", subscriptions, {"t": ["0-0", "0-1", "0-2"]}), {"t": {}})


class ConsumerAssignmentTests(SynchronousTestCase):
    def test_streams_of_consumers(self) -> None:
        """A consumer's streams are C{<id>-<n>}; every subscriber's streams of a topic are sorted together."""
        self.assertEqual(stream_ids("c1", 3), ["c1-0", "c1-1", "c1-2"])
        subscriptions = {"b": {"t": 2, "u": 1}, "a": {"t": 1}}
        self.assertEqual(streams_by_topic(subscriptions), {"t": ["a-0", "b-0", "b-1"], "u": ["b-0"]})

    def test_uneven_split_over_topics(self) -> None:
        """Each topic is split over its own subscribers; the consumer gets partition -> stream per topic."""
        subscriptions = {"a": {"t": 2, "u": 1}, "b": {"t": 1}}
        partitions = {"t": names(7, 2), "u": ["0-0", "1-0"]}  # t: 0-0 0-1 0-2 1-0 1-1 1-2 2-0
        self.assertEqual(
            consumer_assignment("a", subscriptions, partitions),
            {"t": {"0-0": "a-0", "0-1": "a-0", "0-2": "a-0", "1-0": "a-1", "1-1": "a-1"},
             "u": {"0-0": "a-0", "1-0": "a-0"}},
        )
        self.assertEqual(consumer_assignment("b", subscriptions, partitions), {"t": {"1-2": "b-0", "2-0": "b-0"}})

    def test_subscription_values(self) -> None:
        """Subscriptions are registered as JSON topic -> streams, and bad ones are refused."""
        self.assertEqual(encode_subscription({"t": 2, "a": 1}), b'{"a":1,"t":2}')
        self.assertEqual(decode_subscription(b'{"t": 3}'), {"t": 3})
        for bad in (b"not json", b"[1]", b'{"t": 0}', b'{"t": "2"}', b'{"t": true}', b"\xff", b"", b"a/b", b'"."'):
            self.assertRaises(ValueError, decode_subscription, bad)
        self.assertEqual(decode_subscription(b'{ "t": 3, "u": 1 }\n'), {"t": 3, "u": 1})  # 0.7's TopicCount spacing
        self.assertEqual(validate_subscription({"t": 1}), {"t": 1})

    def test_bare_topic_subscription(self) -> None:
        """A registration holding a bare topic name (a 0.7-era client's) is one stream of that topic."""
        for value, topic in ((b"clicks", "clicks"), (b"clicks\n", "clicks"), (b" my.topic-1 ", "my.topic-1"),
                             (b"2024", "2024"), (b"null", "null"), (b'"quoted"', "quoted")):
            self.assertEqual(decode_subscription(value), {topic: 1}, value)
        for bad in ({}, {"": 1}, {"a/b": 1}, {"t": 0}, {"t": 1.5}):
            self.assertRaises(ValueError, validate_subscription, bad)


class PropertyTests(SynchronousTestCase):
    @settings(max_examples=300, deadline=None)
    @given(
        partitions=st.sets(st.tuples(st.integers(0, 20), st.integers(0, 30)), max_size=60),
        members=st.sets(st.text("abcxyz0123456789-", min_size=1, max_size=6), min_size=1, max_size=15),
    )
    def test_every_partition_once_in_contiguous_even_blocks(self, partitions, members) -> None:
        """Every partition is assigned exactly once, each stream's block is contiguous in the sorted order,
        blocks follow the streams' order, and their sizes differ by at most one."""
        parts = [f"{b}-{p}" for b, p in partitions]
        blocks = ranges(parts, sorted(members))
        assigned = [p for block in blocks.values() for p in block]
        self.assertEqual(sorted(assigned), sorted(parts))
        self.assertEqual(len(assigned), len(set(assigned)))
        ordered = sorted(parts, key=natural_key)
        streams = sorted(members, key=natural_key)
        self.assertEqual([p for s in streams for p in blocks[s]], ordered)  # contiguous, in stream order
        sizes = [len(blocks[s]) for s in streams]
        self.assertLessEqual(max(sizes) - min(sizes), 1)
        self.assertEqual(sizes, sorted(sizes, reverse=True))  # the extra ones go to the first streams
        for s in streams:
            self.assertEqual(assign(parts, list(members), s), blocks[s])

    @settings(max_examples=100, deadline=None)
    @given(st.dictionaries(st.sampled_from(["c1", "c2", "c10", "d"]),
                           st.dictionaries(st.sampled_from(["t", "u"]), st.integers(1, 4), min_size=1),
                           min_size=1),
           st.integers(0, 25))
    def test_consumers_agree(self, subscriptions, count) -> None:
        """The consumers' own assignments never overlap and together cover every partition of each topic."""
        partitions = {"t": names(count, 3), "u": names(count // 2, 2)}
        owners: dict[str, dict[str, str]] = {}
        for consumer in subscriptions:
            for topic, owned in consumer_assignment(consumer, subscriptions, partitions).items():
                for partition, stream in owned.items():
                    self.assertNotIn(partition, owners.get(topic, {}))
                    self.assertTrue(stream.startswith(consumer + "-"))
                    owners.setdefault(topic, {})[partition] = stream
        for topic in streams_by_topic(subscriptions):
            self.assertEqual(set(owners.get(topic, {})), set(partitions[topic]))
        self.assertEqual(owners, {t: o for t, o in group_assignment(subscriptions, partitions).items() if o})
