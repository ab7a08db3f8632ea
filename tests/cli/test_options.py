"""Tests for the option types of the twlog command: each bad value is one line naming it and what is accepted."""

from __future__ import annotations

import argparse

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.main import reset_target
from twlog.cli.options import (
    broker_list,
    offset_option,
    partition_option,
    time_option,
    topic_name,
    zookeeper_address,
)
from twlog.protocol.codec import EARLIEST, LATEST


class OptionTypeTests(SynchronousTestCase):
    def refused(self, parse, text: str) -> str:
        return str(self.assertRaises(argparse.ArgumentTypeError, parse, text))

    def test_brokers(self) -> None:
        """HOST:PORT lists pass; a missing or non-numeric port is refused naming the item and the form."""
        self.assertEqual(broker_list("localhost:9092,[::1]:9093"), "localhost:9092,[::1]:9093")
        for bad in ("localhost", "localhost:abc", ":9092", "h:0", "h:70000"):
            self.assertIn(f"broker address {bad!r} is not HOST:PORT", self.refused(broker_list, bad))
        self.assertIn("no broker address given", self.refused(broker_list, ","))

    def test_zookeeper(self) -> None:
        """HOST:PORT[,...][/chroot] passes; a missing port or a bad chroot is refused."""
        self.assertEqual(zookeeper_address("a:2181,b:2181/twlog"), "a:2181,b:2181/twlog")
        self.assertIn("is not HOST:PORT[,HOST:PORT...][/chroot]", self.refused(zookeeper_address, "localhost"))
        self.assertIn("chroot '/a b' is not a path", self.refused(zookeeper_address, "h:1/a b"))

    def test_topic(self) -> None:
        """Topic names are checked before anything is sent, naming the allowed characters."""
        self.assertEqual(topic_name("clicks.v2_x-y"), "clicks.v2_x-y")
        for bad in ("../y", "a b", "a/b"):
            self.assertIn("may only contain letters, digits, '.', '_' and '-'", self.refused(topic_name, bad))
        self.assertIn("is not a valid topic name", self.refused(topic_name, ".."))
        self.assertIn("empty", self.refused(topic_name, ""))

    def test_offset(self) -> None:
        """earliest, latest or a byte offset from 0; anything else names what is accepted."""
        self.assertEqual([offset_option(t) for t in ("earliest", "latest", "42")], ["earliest", "latest", 42])
        for bad in ("foo", "-3", "1.5"):
            self.assertIn(f"offset {bad!r} is not earliest, latest or a byte offset", self.refused(offset_option, bad))

    def test_time(self) -> None:
        """latest, earliest, epoch milliseconds or an ISO date/time; 'yesterday' is refused naming them."""
        self.assertEqual(time_option("latest"), LATEST)
        self.assertEqual(time_option("earliest"), EARLIEST)
        self.assertEqual(time_option("2011-03-13T07:06:40"), 1300000000000)
        self.assertIn("'yesterday' is not latest, earliest, milliseconds", self.refused(time_option, "yesterday"))

    def test_partition(self) -> None:
        """A partition is BROKER-PARTITION (normalized) or a cluster-wide index."""
        self.assertEqual(partition_option("0-1"), "0-1")
        self.assertEqual(partition_option("1-2"), "1-2")
        self.assertEqual(partition_option("5"), "5")
        for bad in ("a", "1-", "-1", "1-2-3"):
            self.assertIn("is not BROKER-PARTITION (e.g. 0-1) or a cluster-wide index",
                          self.refused(partition_option, bad))

    def test_reset_target(self) -> None:
        """groups reset --to takes earliest, latest, a date/time or a byte offset."""
        self.assertEqual(reset_target("earliest"), "earliest")
        self.assertEqual(reset_target("120"), 120)
        self.assertEqual(reset_target("2011-03-13T07:06:40"), ("time", 1300000000000))
        self.assertIn("is not earliest, latest, an ISO date/time", self.refused(reset_target, "soon"))
