"""Tests for twlog.client.options.ClientOptions, and that every client shares one set of options and one
connection interface."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from tests.client.support import FakeEndpoint
from tests.fakes import FakeConnection
from twlog.client.connection import BrokerConnection, IBrokerConnection
from twlog.client.options import DEFAULT_MAX_RESPONSE_BYTES, ClientOptions
from twlog.client.sync import SyncConnection
from twlog.consumer.simple import SimpleConsumer
from twlog.producer import Producer


class ClientOptionsTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        """The defaults are those the clients always had."""
        options = ClientOptions()
        self.assertEqual(
            (options.timeout_s, options.connect_timeout_s, options.connect_attempts, options.max_response_bytes),
            (30.0, 10.0, 3, DEFAULT_MAX_RESPONSE_BYTES),
        )

    def test_build_with_overrides(self) -> None:
        """build() replaces the fields given as keywords, and refuses names that are not fields."""
        base = ClientOptions(timeout_s=5)
        self.assertIs(ClientOptions.build(base), base)
        self.assertEqual(ClientOptions.build(base, connect_attempts=1), ClientOptions(timeout_s=5, connect_attempts=1))
        self.assertEqual(ClientOptions.build(None, timeout_s=2), ClientOptions(timeout_s=2))
        self.assertRaises(TypeError, ClientOptions.build, base, timeout=3)

    def test_for_fetches_makes_room(self) -> None:
        """for_fetches raises max_response_bytes to twice the fetch size when it is smaller, never lowers it."""
        small = ClientOptions(max_response_bytes=100)
        self.assertEqual(small.for_fetches(80).max_response_bytes, 160)
        self.assertIs(small.for_fetches(10), small)

    def test_backoff(self) -> None:
        """backoff() is the given policy, or the default one."""
        policy = lambda attempt: 1.0  # noqa: E731
        self.assertIs(ClientOptions(retry_policy=policy).backoff(), policy)
        self.assertLess(ClientOptions().backoff()(1), 1.0)


class SharedOptionsTests(SynchronousTestCase):
    def test_clients_take_options_or_keywords(self) -> None:
        """Every client takes options=, and the options' fields as keywords (the public keywords of before)."""
        clock = Clock()
        options = ClientOptions(timeout_s=4, connect_attempts=1)
        connection = BrokerConnection("h", 1, reactor=clock, options=options, endpoint=FakeEndpoint())
        self.assertIs(connection.options, options)
        keywords = BrokerConnection("h", 1, reactor=clock, timeout_s=4, connect_attempts=1, endpoint=FakeEndpoint())
        self.assertEqual(keywords.options, options)
        consumer = SimpleConsumer("h", 1, reactor=clock, options=options, max_bytes=10)
        self.assertEqual(consumer.options, options)
        self.assertEqual(SimpleConsumer("h", 1, reactor=clock, timeout_s=4, connect_attempts=1).options, options)
        producer = Producer("h:1", reactor=clock, timeout_s=4, connect_attempts=1)
        self.assertEqual(producer.options, options)
        self.assertEqual(SyncConnection("h", 1, options).options, options)


class InterfaceTests(SynchronousTestCase):
    def test_broker_connection_provides_interface(self) -> None:
        """BrokerConnection provides IBrokerConnection."""
        connection = BrokerConnection("h", 1, reactor=Clock(), endpoint=FakeEndpoint())
        self.assertTrue(verifyObject(IBrokerConnection, connection))

    def test_fake_connection_provides_interface(self) -> None:
        """The tests' one FakeConnection provides IBrokerConnection, so it can stand in for the real one."""
        self.assertTrue(verifyObject(IBrokerConnection, FakeConnection("h", 1)))
