"""The replication values' exact JSON (shared/DESIGN.md, "Replication"), and assign_replicas."""

from __future__ import annotations

import random
from collections import Counter

from twisted.trial.unittest import SynchronousTestCase

from twlog.coord import paths
from twlog.coord.replication.assign import InvalidReplicationFactor, assign_replicas
from twlog.coord.replication.values import (
    BadReplicationValue,
    ControllerRecord,
    PartitionState,
    TopicAssignment,
    decode_epoch,
    encode_epoch,
)

TOPIC_PATH = "/twlog/topics/clicks"
STATE_PATH = "/twlog/topics/clicks/partitions/0/state"


class PathTests(SynchronousTestCase):
    def test_paths(self) -> None:
        self.assertEqual(paths.CONTROLLER, "/twlog/controller")
        self.assertEqual(paths.CONTROLLER_EPOCH, "/twlog/controller_epoch")
        self.assertEqual(paths.replicated_topic_path(), "/twlog/topics")
        self.assertEqual(paths.replicated_topic_path("clicks"), TOPIC_PATH)
        self.assertEqual(paths.partition_state_path("clicks", 0), STATE_PATH)
        self.assertEqual(paths.partition_state_path("clicks"), "/twlog/topics/clicks/partitions")


class TopicAssignmentTests(SynchronousTestCase):
    def test_encode_exact(self) -> None:
        value = TopicAssignment("clicks", {1: [2, 3, 1], 0: (1, 2, 3)}, {"min.insync.replicas": "2"})
        self.assertEqual(value.encode(), b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1]},'
                                         b'"config":{"min.insync.replicas":"2"}}')
        self.assertEqual(TopicAssignment.decode("clicks", value.encode(), TOPIC_PATH), value)
        self.assertEqual(value.replication_factor, 3)
        self.assertEqual(value.replicas(1), (2, 3, 1))

    def test_decode_kafka_spacing(self) -> None:
        """Whitespace, as another writer may leave it, is fine; the shape is what counts."""
        data = b'{ "version": 1, "partitions": {"0": [1, 2]}, "config": {} }'
        self.assertEqual(TopicAssignment.decode("t", data, TOPIC_PATH), TopicAssignment("t", {0: (1, 2)}, {}))

    def test_refused(self) -> None:
        bad = {
            b"not json": "is not JSON",
            b"[1]": "is not a JSON object",
            b'{"version":2,"partitions":{"0":[1]},"config":{}}': "version 2 is not 1",
            b'{"version":1,"partitions":{"0":[1]}}': "missing config",
            b'{"version":1,"partitions":{"0":[1]},"config":{},"x":1}': "unknown x",
            b'{"version":1,"partitions":{"1":[1]},"config":{}}': "are not 0 to P-1",
            b'{"version":1,"partitions":{},"config":{}}': "are not 0 to P-1",
            b'{"version":1,"partitions":{"a":[1]},"config":{}}': "keyed by partition number",
            b'{"version":1,"partitions":{"0":[1,1]},"config":{}}': "names a broker twice",
            b'{"version":1,"partitions":{"0":[]},"config":{}}': "is empty",
            b'{"version":1,"partitions":{"0":["1"]},"config":{}}': "is not a list of broker ids",
            b'{"version":1,"partitions":{"0":[1],"1":[1,2]},"config":{}}': "different replica counts",
            b'{"version":1,"partitions":{"0":[1]},"config":{"a":2}}': "not strings to strings",
            b'{"version":1,"partitions":{"0":[1]},"config":[]}': "config [] is not an object",
        }
        for data, problem in bad.items():
            with self.assertRaises(BadReplicationValue, msg=data) as caught:
                TopicAssignment.decode("clicks", data, TOPIC_PATH)
            self.assertTrue(str(caught.exception).startswith(TOPIC_PATH + ": "), str(caught.exception))
            self.assertIn(problem, str(caught.exception))


class PartitionStateTests(SynchronousTestCase):
    def test_encode_exact(self) -> None:
        state = PartitionState(2, 5, 3, [2, 1])
        self.assertEqual(state.encode(), b'{"version":1,"leader":2,"leader_epoch":5,"controller_epoch":3,"isr":[2,1]}')
        self.assertEqual(PartitionState.decode(state.encode(), STATE_PATH), state)
        self.assertTrue(state.online)
        self.assertFalse(PartitionState(-1, 6, 3, (2,)).online)

    def test_refused(self) -> None:
        bad = {
            b'{"version":1,"leader":-2,"leader_epoch":0,"controller_epoch":1,"isr":[]}': "leader -2",
            b'{"version":1,"leader":true,"leader_epoch":0,"controller_epoch":1,"isr":[]}': "leader True",
            b'{"version":1,"leader":1,"leader_epoch":-1,"controller_epoch":1,"isr":[1]}': "leader_epoch -1",
            b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":"1","isr":[1]}': "controller_epoch '1'",
            b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1,1]}': "names a broker twice",
            b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":1}': "isr 1 is not a list",
            b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1}': "missing isr",
        }
        for data, problem in bad.items():
            with self.assertRaises(BadReplicationValue, msg=data) as caught:
                PartitionState.decode(data, STATE_PATH)
            self.assertTrue(str(caught.exception).startswith(STATE_PATH + ": "), str(caught.exception))
            self.assertIn(problem, str(caught.exception))


class ControllerValueTests(SynchronousTestCase):
    def test_record(self) -> None:
        record = ControllerRecord(3, 1700000000123)
        self.assertEqual(record.encode(), b'{"version":1,"brokerid":3,"timestamp":"1700000000123"}')
        self.assertEqual(ControllerRecord.decode(record.encode(), paths.CONTROLLER), record)
        with self.assertRaises(BadReplicationValue) as caught:
            ControllerRecord.decode(b'{"version":1,"brokerid":3,"timestamp":17}', paths.CONTROLLER)
        self.assertIn("/twlog/controller: timestamp 17", str(caught.exception))

    def test_epoch(self) -> None:
        self.assertEqual(encode_epoch(7), b"7")
        self.assertEqual(decode_epoch(b"7", paths.CONTROLLER_EPOCH), 7)
        with self.assertRaises(BadReplicationValue) as caught:
            decode_epoch(b"-1", paths.CONTROLLER_EPOCH)
        self.assertIn("/twlog/controller_epoch", str(caught.exception))


class AssignReplicasTests(SynchronousTestCase):
    def test_kafka_example(self) -> None:
        """Kafka's own example (AdminUtils' comment): 5 brokers, 10 partitions, start index 0."""
        got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
        self.assertEqual(got, {
            0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
            5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
        })

    def test_broker_order_and_ids(self) -> None:
        """The ids are sorted first; any ids work, not only 0..n-1."""
        self.assertEqual(assign_replicas([30, 10, 20], 3, 2, start_index=1),
                         {0: (20, 10), 1: (30, 20), 2: (10, 30)})

    def test_even_spread(self) -> None:
        for brokers, partitions, factor in [(3, 3, 3), (3, 6, 2), (4, 8, 3), (5, 10, 3), (2, 4, 2)]:
            for seed in range(5):
                got = assign_replicas(list(range(1, brokers + 1)), partitions, factor, rng=random.Random(seed))
                self.assertEqual(sorted(got), list(range(partitions)))
                for replicas in got.values():
                    self.assertEqual(len(set(replicas)), factor)
                leaders = Counter(replicas[0] for replicas in got.values())
                replicas_per_broker = Counter(b for replicas in got.values() for b in replicas)
                self.assertEqual(set(leaders.values()), {partitions // brokers}, (brokers, partitions, seed))
                self.assertEqual(set(replicas_per_broker.values()), {partitions * factor // brokers})

    def test_random_start_is_injected(self) -> None:
        self.assertEqual(assign_replicas([1, 2, 3], 6, 2, rng=random.Random(4)),
                         assign_replicas([1, 2, 3], 6, 2, rng=random.Random(4)))
        starts = {assign_replicas([1, 2, 3], 1, 1, rng=random.Random(seed))[0] for seed in range(20)}
        self.assertEqual(starts, {(1,), (2,), (3,)})

    def test_factor_above_brokers(self) -> None:
        with self.assertRaises(InvalidReplicationFactor) as caught:
            assign_replicas([1, 2], 3, 3)
        self.assertEqual(str(caught.exception), "replication factor 3 is larger than the 2 live brokers (1, 2)")
        with self.assertRaises(InvalidReplicationFactor):
            assign_replicas([], 1, 1)
        with self.assertRaises(InvalidReplicationFactor):
            assign_replicas([1], 1, 0)
        with self.assertRaises(ValueError):
            assign_replicas([1], 0, 1)
