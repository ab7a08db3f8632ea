"""Tests for twlog produce's pieces: counting words, per-line keys, partition naming, size errors."""

from __future__ import annotations

from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.common import UsageError
from twlog.cli.produce import _explain, count, partition_index, split_key
from twlog.errors import MessageSizeTooLarge, TwlogError
from twlog.partition import TopicPartition


class ProduceTests(SynchronousTestCase):
    def test_count(self) -> None:
        """1 message, 0 messages, 1,000 messages."""
        self.assertEqual([count(1), count(0), count(1000)], ["1 message", "0 messages", "1,000 messages"])

    def test_split_key(self) -> None:
        """With a separator, the part before its first occurrence is the key; a line without it has --key."""
        self.assertEqual(split_key(b"user1:a:b", b":", None), (b"user1", b"a:b"))
        self.assertEqual(split_key(b"plain", b":", b"k"), (b"k", b"plain"))
        self.assertEqual(split_key(b"a:b", None, None), (None, b"a:b"))

    def test_partition_index(self) -> None:
        """-p takes BROKER-PARTITION or an index; anything else lists the valid partitions."""
        partitions = [TopicPartition.on_broker("t", b, p) for b in (0, 1) for p in (0, 1)]
        self.assertEqual(partition_index(partitions, "1-0"), 2)
        self.assertEqual(partition_index(partitions, "3"), 3)
        e = self.assertRaises(UsageError, partition_index, partitions, "2-0")
        self.assertIn("(0-0, 0-1, 1-0, 1-1) or an index 0-3", str(e))

    def test_size_error_names_size_and_limit(self) -> None:
        """A refused too-large message says its size and the limit (the broker's, when the error carries it)."""
        error = MessageSizeTooLarge("refused")
        e = self.assertRaises(TwlogError, _explain, Failure(error), [b"x" * 10, b"y" * 2_000_000])
        self.assertEqual(str(e), "the broker refused a message of 2,000,000 bytes as too large; the limit is the "
                                 "broker's --max-message-bytes (default 1,000,000)")
        error.message_size, error.limit = 5_000_000, 1_000_000
        e = self.assertRaises(TwlogError, _explain, Failure(error), [b"x"])
        self.assertIn("5,000,000 bytes as too large; the limit is 1,000,000 bytes", str(e))
