"""Producer(serializer=...): values serialized before they are sent, in order, waiting for a Deferred answer."""

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.producer.test_producer import make_producer


class SerializerTests(SynchronousTestCase):
    def test_values_become_payloads(self) -> None:
        """One value or a list of values (one request); the serializer sees the topic."""
        seen = []

        def serialize(topic, value):
            seen.append(topic)
            return repr(value).encode()

        producer, connections, _ = make_producer(serializer=serialize)
        self.successResultOf(producer.send("t", {"a": 1}))
        self.successResultOf(producer.send("t", [1, 2]))
        self.assertEqual(connections["b0"].produced_payloads(), [[b"{'a': 1}"], [b"1", b"2"]])
        self.assertEqual(seen, ["t", "t", "t"])

    def test_waits_for_a_deferred_answer(self) -> None:
        """A serializer answering with a Deferred (a registry's first answer) holds the send, and flush waits."""
        later: Deferred = Deferred()
        producer, connections, _ = make_producer(serializer=lambda topic, value: later)
        sent = producer.send("t", "v")
        flushed = producer.flush()
        self.assertNoResult(sent)
        self.assertNoResult(flushed)
        later.callback(b"framed")
        self.successResultOf(sent)
        self.successResultOf(flushed)
        self.assertEqual(connections["b0"].produced_payloads(), [[b"framed"]])

    def test_serializer_error_fails_the_send(self) -> None:
        def refuse(topic, value):
            raise ValueError("the value does not fit the Avro schema")

        producer, connections, _ = make_producer(serializer=refuse)
        self.failureResultOf(producer.send("t", {"x": 1}), ValueError)
        self.assertEqual([r for c in connections.values() for r in c.sent], [])
