"""Tests for twlog.storage.checkpoints: Kafka's checkpoint text format, atomic writes, the high watermarks file."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import CorruptLog, StorageFailed
from twlog.storage.checkpoints import (
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointWriter,
    OffsetCheckpoint,
    format_checkpoint,
    format_offsets,
    parse_checkpoint,
    parse_offsets,
    read_replication_offsets,
    write_atomically,
)

from ..fakes import ManualRunner, run_now


class FormatTests(SynchronousTestCase):
    def test_format_is_kafkas(self) -> None:
        """Version 0, the count, then one line of space-separated fields per row, each ending in a newline."""
        self.assertEqual(format_checkpoint([(3, 0), (5, 1090)]), "0\n2\n3 0\n5 1090\n")
        self.assertEqual(format_checkpoint([]), "0\n0\n")

    def test_offsets_round_trip_sorted(self) -> None:
        """The high watermarks file holds `topic partition offset`, sorted, and parses back to the same."""
        offsets = {("clicks", 1): 218, ("clicks", 0): 0, ("a.b_c-d", 12): 10**12}
        text = format_offsets(offsets)
        self.assertEqual(text, "0\n3\na.b_c-d 12 1000000000000\nclicks 0 0\nclicks 1 218\n")
        self.assertEqual(parse_offsets(text), offsets)

    def test_parse_accepts_no_final_newline(self) -> None:
        self.assertEqual(parse_checkpoint("0\n1\n3 0", 2), [["3", "0"]])

    def test_parse_refuses_what_is_not_the_format(self) -> None:
        """Another version, a wrong count, a row of the wrong width, junk: ValueError naming the problem."""
        cases = {
            "": "version",
            "1\n0\n": "version",
            "0\n": "count",
            "0\nx\n": "count",
            "0\n2\n3 0\n": "count says 2",
            "0\n1\n3 0\n4 5\n": "count says 1",
            "0\n1\n3 0 7\n": "line 3 has 3 fields",
        }
        for text, reason in cases.items():
            e = self.assertRaises(ValueError, parse_checkpoint, text, 2)
            self.assertIn(reason, str(e), text)

    def test_parse_offsets_refuses_bad_numbers_and_repeats(self) -> None:
        for text, reason in [("0\n1\nt -1 5\n", "partition"), ("0\n1\nt 0 x\n", "offset"),
                             ("0\n2\nt 0 5\nt 0 6\n", "twice")]:
            e = self.assertRaises(ValueError, parse_offsets, text)
            self.assertIn(reason, str(e))


class FileTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.path = os.path.join(self.directory, REPLICATION_OFFSET_CHECKPOINT)

    def test_write_atomically_replaces_and_leaves_no_temporary(self) -> None:
        write_atomically(self.path, "old\n")
        write_atomically(self.path, "new\n")
        with open(self.path) as f:
            self.assertEqual(f.read(), "new\n")
        self.assertEqual(os.listdir(self.directory), [REPLICATION_OFFSET_CHECKPOINT])

    def test_missing_file_is_no_offsets(self) -> None:
        self.assertEqual(read_replication_offsets(self.directory), {})

    def test_corrupt_file_is_one_clear_error(self) -> None:
        """A file that is not the format stops the start with CorruptLog naming it, in one line."""
        with open(self.path, "w") as f:
            f.write("0\n2\nclicks 0 5\n")
        e = self.assertRaises(CorruptLog, read_replication_offsets, self.directory)
        self.assertIn(self.path, str(e))
        self.assertIn("count says 2", str(e))
        self.assertNotIn("\n", str(e))

    def test_offset_checkpoint_written_then_read(self) -> None:
        """What OffsetCheckpoint writes (on the runner) a new one reads back at start."""
        runner = ManualRunner()
        checkpoint = OffsetCheckpoint(self.directory, runner)
        self.assertEqual(checkpoint.read(), {})
        d = checkpoint.write({("clicks", 0): 1090})
        self.assertFalse(os.path.exists(self.path))  # not until the pool runs it
        self.assertNoResult(d)
        runner.run_all()
        self.assertIsNone(self.successResultOf(d))
        self.assertEqual(OffsetCheckpoint(self.directory, run_now).read(), {("clicks", 0): 1090})

    def test_writes_are_one_at_a_time_and_coalesce(self) -> None:
        """Saves asked for while a write runs are covered by one more write with the latest contents."""
        runner = ManualRunner()
        contents = ["a\n"]
        writer = CheckpointWriter(self.path, runner, lambda: contents[0])
        first = writer.save()
        contents[0] = "b\n"
        second, third = writer.save(), writer.save()
        contents[0] = "c\n"
        self.assertEqual(len(runner.pending), 1)
        runner.run_one()
        self.successResultOf(first)
        self.assertNoResult(second)
        self.assertEqual(len(runner.pending), 1)  # one write for both
        runner.run_one()
        self.successResultOf(second)
        self.successResultOf(third)
        self.assertEqual(runner.pending, [])
        with open(self.path) as f:
            self.assertEqual(f.read(), "c\n")

    def test_failed_write_fails_its_waiters_with_storage_failed(self) -> None:
        runner = ManualRunner()
        writer = CheckpointWriter(self.path, runner, lambda: "x\n")
        d = writer.save()
        runner.fail_one(OSError(28, "No space left on device"))
        failure = self.failureResultOf(d, StorageFailed)
        self.assertIn("[Errno 28] No space left on device", str(failure.value))
        self.assertIn(self.path, str(failure.value))
        self.assertEqual(len(self.flushLoggedErrors()), 0)
        writer.save()  # the writer goes on after a failure
        runner.run_one()
        self.assertTrue(os.path.exists(self.path))
