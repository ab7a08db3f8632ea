"""serialize_batch and the deserialize helpers the producer and consumers use."""

from typing import NamedTuple

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from twlog.client.serde import deserialize_all, deserialize_one, serialize_batch


class Message(NamedTuple):
    offset: int
    payload: object


class SerdeTests(SynchronousTestCase):
    def test_batch_or_one(self) -> None:
        """A list is a batch of values; anything else (a dict, bytes) one value."""
        upper = lambda topic, value: f"{topic}:{value}".encode()  # noqa: E731
        self.assertEqual(self.successResultOf(serialize_batch(upper, "t", ["a", "b"])), [b"t:a", b"t:b"])
        self.assertEqual(self.successResultOf(serialize_batch(upper, "t", {"k": 1})), [b"t:{'k': 1}"])

    def test_deferred_values_in_order(self) -> None:
        later: Deferred = Deferred()
        answers = {"a": later, "b": b"B"}
        d = serialize_batch(lambda topic, value: answers[value], "t", ["a", "b"])
        self.assertNoResult(d)
        later.callback(b"A")
        self.assertEqual(self.successResultOf(d), [b"A", b"B"])

    def test_errors_fail_the_deferred(self) -> None:
        def refuse(topic, value):
            raise ValueError(f"no {value}")

        self.assertIn("no x", str(self.failureResultOf(serialize_batch(refuse, "t", ["x"]), ValueError).value))
        later: Deferred = Deferred()
        d = serialize_batch(lambda topic, value: later, "t", ["x"])
        later.errback(KeyError("gone"))
        self.failureResultOf(d, KeyError)  # the error itself, not gatherResults' FirstError

    def test_deserialize(self) -> None:
        """The message with its payload replaced by the value; offsets kept."""
        decode = lambda topic, payload: payload.decode().upper()  # noqa: E731
        self.assertEqual(self.successResultOf(deserialize_one(decode, "t", Message(3, b"a"))), Message(3, "A"))
        self.assertEqual(self.successResultOf(deserialize_one(None, "t", Message(3, b"a"))), Message(3, b"a"))
        got = self.successResultOf(Deferred.fromCoroutine(deserialize_all(decode, "t", [Message(0, b"x"),
                                                                                         Message(5, b"y")])))
        self.assertEqual(got, (Message(0, "X"), Message(5, "Y")))
