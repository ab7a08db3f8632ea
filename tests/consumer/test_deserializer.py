"""A group stream with a deserializer hands out messages whose payload is the value, in order."""

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from twlog.consumer.stream import GroupMessage, GroupStream, OwnedPartition
from twlog.partition import TopicPartition
from twlog.storage.message import MessageAndOffset


class GroupStreamDeserializerTests(SynchronousTestCase):
    def test_values(self) -> None:
        stream = GroupStream("t", "s-0", 10, deserializer=lambda topic, payload: (topic, payload.upper()))
        owned = OwnedPartition(TopicPartition("t", "0-0"), 0, stream, 0)
        stream.deliver(owned, (MessageAndOffset(0, 5, b"a"), MessageAndOffset(5, 10, b"b")))
        self.assertEqual(self.successResultOf(stream.__anext__()),
                         GroupMessage("t", TopicPartition("t", "0-0"), 0, 5, ("t", b"A")))
        self.assertEqual(self.successResultOf(stream.__anext__()).payload, ("t", b"B"))
        self.assertEqual(owned.consumed, 10)

    def test_deferred_value_and_error(self) -> None:
        """A Deferred value is waited for; a deserializer's error fails that message's call only."""
        later: Deferred = Deferred()

        def deserialize(topic, payload):
            if payload == b"bad":
                raise ValueError("not Avro")
            return later

        stream = GroupStream("t", "s-0", 10, deserializer=deserialize)
        owned = OwnedPartition(TopicPartition("t", "0-0"), 0, stream, 0)
        stream.deliver(owned, (MessageAndOffset(0, 5, b"x"), MessageAndOffset(5, 8, b"bad")))
        first = stream.__anext__()
        self.assertNoResult(first)
        later.callback({"v": 1})
        self.assertEqual(self.successResultOf(first).payload, {"v": 1})
        self.failureResultOf(stream.__anext__(), ValueError)
