"""C{twlog bench replication}'s tables from result objects (nothing runs), and its readers of a replica's files:
where a replica ends on disk, and where a leader epoch began."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from tests.bench.test_tables import TableRules
from twlog.bench.replication import catch_up_table, failover_table, throughput_ratio, throughput_table
from twlog.bench.replication_cluster import replica_end
from twlog.bench.replication_runs import CatchUpRun, FailoverRun, ThroughputRun, epoch_start
from twlog.storage.directory import partition_directory
from twlog.storage.epochs import LEADER_EPOCH_CHECKPOINT


def throughput(rf1: float, rf3_all: float) -> list[ThroughputRun]:
    """Runs of 10,000 200-byte messages: RF 1 appended in C{rf1} s, RF 3 all in C{rf3_all} s, the others in 1 s;
    two rounds each, the second twice as slow."""
    runs = []
    for slower in (1, 2):
        for factor in (1, 2, 3):
            for ack in ("appended", "all"):
                seconds = {(1, "appended"): rf1, (3, "all"): rf3_all}.get((factor, ack), 1.0)
                runs.append(ThroughputRun(factor, ack, 10_000, 200, seconds * slower))
    return runs


class ThroughputTableTests(TableRules, SynchronousTestCase):
    def test_rows_ratios_and_target(self) -> None:
        """A row per factor and ack with the medians; RF 3 ack=all at 50% of RF 1 appended meets the 40% target."""
        runs = throughput(1.0, 2.0)
        self.assertEqual(throughput_ratio(runs, 3, "all"), 0.5)
        text = self.assertWellFormed(throughput_table(runs, 50, 200, 1), 6)
        # median of 10,000 and 5,000 msg/s: 7,500; of 5,000 and 2,500: 3,750 (50% of RF 1 appended).
        self.assertRegex(text, r"\n1\s+appended\s+2\s+7,500\s+1.50\s+5,000\s+100\s+100\s")
        self.assertRegex(text, r"\n3\s+all\s+2\s+3,750\s+0.75\s+2,500\s+50\s+50\s")
        self.assertIn("RF 3 with ack=all reaches 50% of RF 1 with ack=appended: meets issue 22's target of 40%.", text)

    def test_below_target(self) -> None:
        text = throughput_table(throughput(1.0, 4.0), 50, 200, 3).text()
        self.assertIn("reaches 25% of RF 1 with ack=appended: does NOT meet issue 22's target of 40%.", text)
        self.assertIn("3 partitions", text)


class FailoverTableTests(TableRules, SynchronousTestCase):
    def test_verdicts(self) -> None:
        """kill -9 is held to the session timeout + 2 s; SIGTERM to 1 s and no producer error, in its worst round."""
        runs = [FailoverRun("kill -9", 1, 2, True, 7.5, 6.1, 7.6, 0, None),
                FailoverRun("kill -9", 2, 3, False, 8.5, 6.2, 8.6, 0, None),
                FailoverRun("SIGTERM", 3, 1, False, 0.2, 0.05, 0.3, 0, None),
                FailoverRun("SIGTERM", 1, 2, True, 0.4, 0.05, 0.4, 1, "NotLeader: broker 1 does not lead")]
        text = self.assertWellFormed(failover_table(runs, 6.0), 2)
        self.assertRegex(text, r"\nkill -9\s+2\s+8.000\s+8.500\s+6.150\s+8.100\s+0\s+8\s+does NOT meet\s+1\s")
        self.assertRegex(text, r"\nSIGTERM\s+2\s+0.300\s+0.400\s+0.050\s+0.350\s+1\s+1\s+does NOT meet\s+1\s")
        self.assertIn("SIGTERM: the first producer error: NotLeader: broker 1 does not lead", text)
        text = failover_table(runs[:1] + runs[2:3], 6.0).text()
        self.assertRegex(text, r"\nkill -9\s+1\s+7.500\s.*\smeets\s")
        self.assertRegex(text, r"\nSIGTERM\s+1\s+0.200\s.*\smeets\s")


class CatchUpTableTests(TableRules, SynchronousTestCase):
    def test_speed(self) -> None:
        """The speed is the bytes behind over the time from the first fetched byte to the leader's end."""
        runs = [CatchUpRun(50_000_000, 1.0, 3.0, 3.5), CatchUpRun(50_000_000, 2.0, 4.0, 4.5),
                CatchUpRun(50_000_000, 0.5, 2.5, 3.0)]
        self.assertEqual(runs[1].mb_s, 25.0)
        text = self.assertWellFormed(catch_up_table(runs, 50), 1)
        self.assertRegex(text, r"\nrestarted after SIGTERM\s+3\s+50.0\s+50.0\s+25.0\s+3.000\s+3.500\s")


class ReplicaFilesTests(SynchronousTestCase):
    def test_replica_end(self) -> None:
        """The last segment's base offset plus its size; 0 without a partition directory or segments."""
        log_dir = self.mktemp()
        self.assertEqual(replica_end(log_dir, "t", 0), 0)
        directory = os.path.join(log_dir, partition_directory("t", 0))
        os.makedirs(directory)
        self.assertEqual(replica_end(log_dir, "t", 0), 0)
        for base, size in ((0, 100), (100, 42)):
            with open(os.path.join(directory, f"{base:020d}.log"), "wb") as f:
                f.write(b"x" * size)
        self.assertEqual(replica_end(log_dir, "t", 0), 142)

    def test_epoch_start(self) -> None:
        """Where an epoch began, from the leader-epoch checkpoint; None without the file or the epoch."""
        log_dir = self.mktemp()
        self.assertIsNone(epoch_start(log_dir, "t", 0, 1))
        directory = os.path.join(log_dir, partition_directory("t", 0))
        os.makedirs(directory)
        with open(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), "w") as f:
            f.write("0\n2\n0 0\n3 1090\n")
        self.assertEqual(epoch_start(log_dir, "t", 0, 3), 1090)
        self.assertEqual(epoch_start(log_dir, "t", 0, 0), 0)
        self.assertIsNone(epoch_start(log_dir, "t", 0, 4))
