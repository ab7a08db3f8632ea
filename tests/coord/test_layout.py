"""ClusterLayout's pure readings: ZooKeeper registrations and CLUSTER_METADATA answers, one tolerance rule."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.coord.layout import ClusterLayout, PartitionLocation, Reading, describe_offline
from twlog.errors import LeaderNotAvailable
from twlog.partition import TopicPartition
from twlog.protocol.responses import (
    VIEW_CURRENT,
    BrokerAddress,
    ClusterMetadataResponse,
    TopicLayout,
)

GOOD_BROKERS = {"0": b"h0-1300000000000:h0:9092", "1": b"h1:9093"}


def tps(topic: str, *names: str) -> list[TopicPartition]:
    return [TopicPartition(topic, name) for name in names]


#: (what is wrong, broker values, topic registrations, the partitions of "clicks", the problems' starts)
REGISTRATION_CASES = [
    ("nothing wrong", GOOD_BROKERS, {"clicks": {"0": b"2", "1": b"1"}},
     tps("clicks", "0-0", "0-1", "1-0"), []),
    ("a broker id that is not a number", {**GOOD_BROKERS, "x7": b"h:1"}, {"clicks": {"0": b"1"}},
     tps("clicks", "0-0"), ["/brokers/ids/x7: 'x7' is not a broker id"]),
    ("a negative broker id", {**GOOD_BROKERS, "-3": b"h:1"}, {"clicks": {"0": b"1"}},
     tps("clicks", "0-0"), ["/brokers/ids/-3: '-3' is not a broker id"]),
    ("a broker value that is not host:port", {**GOOD_BROKERS, "2": b"nonsense"},
     {"clicks": {"0": b"1", "2": b"1"}}, tps("clicks", "0-0"),
     ["/brokers/ids/2: broker registration 'nonsense' does not end in :<port>",
      "/brokers/topics/clicks/2: broker 2 is not live (no usable /brokers/ids/2)"]),
    ("a broker value that is not UTF-8", {**GOOD_BROKERS, "2": b"\xff:1"}, {"clicks": {"0": b"1"}},
     tps("clicks", "0-0"), ["/brokers/ids/2: broker registration b'\\xff:1' is not UTF-8"]),
    ("a port out of range", {**GOOD_BROKERS, "2": b"h:70000"}, {"clicks": {}}, [],
     ["/brokers/ids/2: broker registration 'h:70000' does not end in :<port>"]),
    ("a broker gone meanwhile", {**GOOD_BROKERS, "2": None}, {"clicks": {"0": b"1"}}, tps("clicks", "0-0"), []),
    ("a count that is not a number", GOOD_BROKERS, {"clicks": {"0": b"two", "1": b"1"}}, tps("clicks", "1-0"),
     ["/brokers/topics/clicks/0: partition count b'two' is not a non-negative integer"]),
    ("a negative count", GOOD_BROKERS, {"clicks": {"0": b"-1", "1": b"1"}}, tps("clicks", "1-0"),
     ["/brokers/topics/clicks/0: partition count b'-1' is not a non-negative integer"]),
    ("an empty count", GOOD_BROKERS, {"clicks": {"0": b"", "1": b"1"}}, tps("clicks", "1-0"),
     ["/brokers/topics/clicks/0: partition count b'' is not a non-negative integer"]),
    ("a count that is not ASCII", GOOD_BROKERS, {"clicks": {"0": "\u0663".encode(), "1": b"1"}},
     tps("clicks", "1-0"), ["/brokers/topics/clicks/0: partition count"]),
    ("a count with spaces", GOOD_BROKERS, {"clicks": {"0": b" 2\n"}}, tps("clicks", "0-0", "0-1"), []),
    ("a topic registration under a name that is not a broker id", GOOD_BROKERS,
     {"clicks": {"0": b"1", "b1": b"1"}}, tps("clicks", "0-0"),
     ["/brokers/topics/clicks/b1: 'b1' is not a broker id"]),
    ("a topic registration of a broker that is not live", GOOD_BROKERS, {"clicks": {"0": b"1", "5": b"3"}},
     tps("clicks", "0-0"), ["/brokers/topics/clicks/5: broker 5 is not live (no usable /brokers/ids/5)"]),
    ("a topic registration gone meanwhile", GOOD_BROKERS, {"clicks": {"0": b"1", "1": None}}, tps("clicks", "0-0"),
     []),
    ("an invalid topic name", GOOD_BROKERS, {"clicks": {"0": b"1"}, "bad topic": {"0": b"1"}}, tps("clicks", "0-0"),
     ["/brokers/topics/bad topic: the topic name 'bad topic' may only contain"]),
]


class RegistrationTests(SynchronousTestCase):
    """L{ClusterLayout.from_registrations}: each bad value is skipped with exactly one problem, never raised."""

    def test_table(self) -> None:
        for what, brokers, topics, partitions, problems in REGISTRATION_CASES:
            layout, found = ClusterLayout.from_registrations(brokers, topics)
            self.assertEqual(layout.topic_partitions("clicks"), partitions, what)
            self.assertEqual(len(found), len(problems), (what, found))
            for problem, start in zip(found, problems):
                self.assertTrue(problem.startswith(start), (what, problem, start))

    def test_good_brokers_kept(self) -> None:
        layout, problems = ClusterLayout.from_registrations({**GOOD_BROKERS, "x": b"", "2": b"::"}, {})
        self.assertEqual(layout.brokers, {0: ("h0", 9092), 1: ("h1", 9093)})
        self.assertEqual(len(problems), 2)

    def test_reading_is_a_value(self) -> None:
        reading = ClusterLayout.from_registrations(GOOD_BROKERS, {"clicks": {"1": b"1"}})
        self.assertIsInstance(reading, Reading)
        self.assertEqual(reading.problems, ())
        self.assertEqual(reading.layout.locations("clicks"),
                         [PartitionLocation(TopicPartition("clicks", "1-0"), 1, "h1", 9093)])

    def test_topic_with_no_registrations_is_known(self) -> None:
        layout, _ = ClusterLayout.from_registrations(GOOD_BROKERS, {"clicks": {}})
        self.assertEqual((layout.topics(), layout.topic_partitions("clicks")), (["clicks"], []))

    def test_held_records(self) -> None:
        """/twlog/held: a broker that is not live keeps its partitions in the layout, offline; a live broker's
        record adds nothing (its registration says what it holds); bad records are problems."""
        layout, problems = ClusterLayout.from_registrations(
            GOOD_BROKERS, {"clicks": {"0": b"2"}},
            {"clicks": {"0": b"9", "5": b"2", "x": b"1", "6": b"junk"}, "old": {"5": b"1"}},
        )
        self.assertEqual(layout.topic_partitions("clicks"), tps("clicks", "0-0", "0-1"))
        self.assertEqual(layout.offline_partitions("clicks"), tps("clicks", "5-0", "5-1"))
        self.assertEqual(layout.offline_partitions("old"), tps("old", "5-0"))
        self.assertIn("old", layout.topics())
        self.assertEqual(len(problems), 2, problems)
        self.assertEqual(describe_offline(layout.offline_partitions("clicks") + layout.offline_partitions("old")),
                         "broker 5, which holds clicks:5-0..5-1, old:5-0, is not registered: down?")

    def test_same_input_same_problems(self) -> None:
        brokers = {**GOOD_BROKERS, "x": b"h:1", "2": b"junk"}
        topics = {"clicks": {"0": b"n", "2": b"1"}, "a/b": {}}
        self.assertEqual(ClusterLayout.from_registrations(brokers, topics),
                         ClusterLayout.from_registrations(dict(reversed(brokers.items())), topics))


def answer(*topics: TopicLayout, brokers=((0, "h0", 9092), (1, "h1", 9093))) -> ClusterMetadataResponse:
    return ClusterMetadataResponse(0, VIEW_CURRENT, tuple(BrokerAddress(*b) for b in brokers), topics)


#: (what, answer, the partitions of "clicks", how many problems)
METADATA_CASES = [
    ("nothing wrong", answer(TopicLayout("clicks", 0, ((0, 2), (1, 1)))), tps("clicks", "0-0", "0-1", "1-0"), 0),
    ("a holder that is not live: offline", answer(TopicLayout("clicks", 0, ((0, 1), (7, 2)))), tps("clicks", "0-0"),
     0),
    ("a negative count", answer(TopicLayout("clicks", 0, ((0, -1), (1, 1)))), tps("clicks", "1-0"), 1),
    ("a refused topic: left to the driver", answer(TopicLayout("clicks", 17)), [], 0),
    ("no holders", answer(TopicLayout("clicks", 0)), [], 0),
]


class MetadataTests(SynchronousTestCase):
    """L{ClusterLayout.from_metadata}: the same rule for an answer's holders."""

    def test_table(self) -> None:
        for what, response, partitions, problems in METADATA_CASES:
            layout, found = ClusterLayout.from_metadata(response)
            self.assertEqual(layout.topic_partitions("clicks"), partitions, what)
            self.assertEqual(len(found), problems, (what, found))

    def test_offline_holder(self) -> None:
        """A holder the answer gives no address for is a broker that is down: its partitions are offline, and
        L{describe_offline} names the broker and them."""
        layout, _ = ClusterLayout.from_metadata(answer(TopicLayout("clicks", 0, ((0, 1), (7, 4)))))
        offline = layout.offline_partitions("clicks")
        self.assertEqual(offline, tps("clicks", "7-0", "7-1", "7-2", "7-3"))
        self.assertEqual(layout.offline_holders("clicks"), {7: 4})
        self.assertEqual(describe_offline(offline), "broker 7, which holds clicks:7-0..7-3, is not registered: down?")
        self.assertRaises(LeaderNotAvailable, layout.locate, offline[0])

    def test_brokers_and_locate(self) -> None:
        layout, _ = ClusterLayout.from_metadata(answer(TopicLayout("clicks", 0, ((1, 1),))))
        self.assertEqual(layout.brokers, {0: ("h0", 9092), 1: ("h1", 9093)})
        self.assertEqual(layout.locate(TopicPartition("clicks", "1-0")).address, "h1:9093")
        self.assertRaises(LeaderNotAvailable, layout.locate, TopicPartition("clicks", "4-0"))

    def test_refused_topic_not_known(self) -> None:
        layout, _ = ClusterLayout.from_metadata(answer(TopicLayout("clicks", 17)))
        self.assertEqual(layout.topics(), [])
