"""Tests for group-commit flushing (LogConfig.flush_policy = "group", twlog.storage.flush).

Group commit as in database logs: one fsync in flight per log, started off the reactor thread at the end
of the turn that made the log dirty; whatever is appended while it runs waits for the next one, which
starts as soon as it returns and flush_min_gap_ms (2 ms) has passed since it started; readers see data
only once the fsync covering it has returned.  The
thread pool is L{ManualRunner} (an fsync stays "in flight" until the test runs it) and time is a
L{Clock}, so every step is explicit.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.broker.tap import Options
from twlog.config import LogConfig
from twlog.errors import StorageFailed, TooManyOpenFiles
from twlog.storage.flush import TimedRunner
from twlog.storage.log import Log
from twlog.storage.message import encode_message, encode_message_set

from ..fakes import ManualRunner
from .support import ENTRY, payloads, read_all


class GroupCommitTests(SynchronousTestCase):
    def open_log(self, **overrides) -> Log:
        settings = dict(segment_bytes=1024 * 1024, flush_messages=1_000_000, flush_interval_ms=1000)
        settings.update(overrides)
        self.runner = ManualRunner()
        self.clock = Clock()
        directory = self.mktemp()
        log = Log.open(directory, LogConfig(directory, **settings), self.clock, self.runner)
        self.addCleanup(log.close)
        return log

    def test_group_is_the_default(self) -> None:
        """A LogConfig and twistd twlog's options default to group commit; timer is the paper's policy."""
        self.assertEqual(LogConfig("d").flush_policy, "group")
        options = Options()
        options.parseOptions([])
        self.assertEqual(options.config.log.flush_policy, "group")
        options = Options()
        options.parseOptions(["--flush-policy", "timer"])
        self.assertEqual(options.config.log.flush_policy, "timer")

    def test_unknown_policy_is_refused(self) -> None:
        """A policy name outside group and timer is refused, naming what is accepted."""
        e = self.assertRaises(usage.UsageError, Options().parseOptions, ["--flush-policy", "never"])
        self.assertEqual(str(e), "--flush-policy must be one of group, timer, not 'never'")
        e = self.assertRaises(ValueError, LogConfig, "d", flush_policy="sometimes")
        self.assertIn("flush_policy must be one of group, timer", str(e))

    def test_fsync_starts_at_the_end_of_the_turn(self) -> None:
        """The appends of one reactor turn share one fsync, started when the turn ends, long before the
        interval; nothing is visible before that fsync returns."""
        log = self.open_log()
        log.append(encode_message_set(payloads(2)))
        log.append(encode_message_set(payloads(3, 2)))
        self.assertEqual(self.runner.pending, [])  # still in the turn that appended
        self.clock.advance(0)
        self.assertEqual(len(self.runner.pending), 1)
        self.assertEqual((log.flushed_offset, read_all(log)), (0, []))
        self.runner.run_one()
        self.assertEqual(log.flushed_offset, 5 * ENTRY)
        self.assertEqual(read_all(log), payloads(5))
        self.assertEqual(self.runner.pending, [])
        self.assertEqual(self.clock.getDelayedCalls(), [])  # clean: no timer, no further fsync

    def test_one_fsync_in_flight(self) -> None:
        """However many appends and turns pass while an fsync runs, no second one starts beside it."""
        log = self.open_log(flush_messages=10)
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        for i in range(50):  # past flush_messages, past the interval, many turns
            log.append(encode_message_set(payloads(1, i)))
            self.clock.advance(0.1)
        self.assertEqual(len(self.runner.pending), 1)

    def test_appends_during_an_fsync_go_into_the_next(self) -> None:
        """What is appended while an fsync runs is covered by the next fsync, which starts as soon as the
        previous returns and the gap since its start has passed (no interval timer); it becomes visible only
        when that next fsync returns."""
        log = self.open_log()
        seen: list[int] = []
        log.add_flush_listener(lambda log_: seen.append(log_.flushed_offset))
        log.append(encode_message_set(payloads(1)))
        self.clock.advance(0)
        log.append(encode_message_set(payloads(4, 1)))
        log.append(encode_message_set(payloads(2, 5)))
        self.runner.run_one()
        self.assertEqual(log.flushed_offset, ENTRY)  # the first fsync covered only the first append
        self.assertEqual(read_all(log), payloads(1))
        self.assertEqual(self.runner.pending, [])  # the fsync took no time: the gap has not passed
        self.clock.advance(0.002)
        self.assertEqual(len(self.runner.pending), 1)
        self.runner.run_one()
        self.assertEqual(log.flushed_offset, 7 * ENTRY)
        self.assertEqual(read_all(log), payloads(7))
        self.assertEqual(seen, [ENTRY, 7 * ENTRY])
        self.assertEqual(self.runner.pending, [])

    def test_visible_only_after_the_covering_fsync(self) -> None:
        """Data already written to the file (an "appended" acknowledgement) stays invisible until the
        fsync that covers it returns; a waiting reader hears of it only then."""
        log = self.open_log()
        woken: list[int] = []
        log.add_flush_listener(lambda log_: woken.append(log_.flushed_offset))
        log.append(encode_message_set(payloads(3)))
        log.write_out()
        self.clock.advance(5)  # any time passes: the fsync is still in flight
        self.assertEqual((log.flushed_offset, read_all(log), woken), (0, [], []))
        self.assertEqual(log.offsets_before(-1, 1, 0), [0])
        self.runner.run_one()
        self.assertEqual((log.flushed_offset, woken), (3 * ENTRY, [3 * ENTRY]))
        self.assertEqual(log.offsets_before(-1, 1, 0), [3 * ENTRY])

    def test_failed_fsync_fails_the_partition(self) -> None:
        """A failed fsync fails the log as under the timer policy: what waited for the next fsync is never
        fsynced or shown, no fsync starts again, appends get StorageFailed."""
        log = self.open_log()
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        log.append(encode_message(b"b"))  # waits for the next fsync
        waiting = log.flush()
        self.runner.fail_one(OSError(5, "Input/output error"))
        self.assertIsInstance(log.failed, OSError)
        self.failureResultOf(waiting, StorageFailed)
        self.clock.advance(60)
        self.assertEqual((self.runner.pending, log.flushed_offset), ([], 0))
        self.assertRaises(StorageFailed, log.append, encode_message(b"c"))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_out_of_descriptors_retries_on_the_timer(self) -> None:
        """An fsync put off for lack of descriptors is retried by the interval timer, not at every append
        (which would spin); the data stays invisible meanwhile, and the log is not failed."""
        log = self.open_log(flush_interval_ms=500)
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        self.runner.fail_one(TooManyOpenFiles("out of file descriptors"))
        log.append(encode_message(b"b"))
        self.clock.advance(0)
        self.assertEqual((self.runner.pending, log.failed, log.flushed_offset), ([], None, 0))
        self.clock.advance(0.5)
        self.assertEqual(len(self.runner.pending), 1)
        self.runner.run_one()
        self.assertEqual(log.flushed_offset, 20)
        log.append(encode_message(b"c"))  # back to group commit: after the gap, not the interval
        self.clock.advance(0.002)
        self.assertEqual(len(self.runner.pending), 1)

    def test_asked_flush_ends_the_postponement(self) -> None:
        """After a flush put off for lack of descriptors, a flush that succeeds (asked for, here) brings group commit
        back at once: what was appended while it ran is fsynced right after it and the gap, not at the retry timer."""
        log = self.open_log(flush_interval_ms=500)
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        self.runner.fail_one(TooManyOpenFiles("out of file descriptors"))
        asked = log.flush()
        log.append(encode_message(b"b"))
        self.runner.run_one()
        self.assertEqual(self.successResultOf(asked), 10)
        self.clock.advance(0.002)
        self.assertEqual(len(self.runner.pending), 1)  # "b", without waiting for the timer
        self.runner.run_one()
        self.assertEqual(log.flushed_offset, 20)

    def test_asked_flush_joins_the_group(self) -> None:
        """A flush asked for while an fsync runs (an acknowledged produce waiting for "flushed") is answered
        by the next fsync, the same one group commit starts for the appends made meanwhile."""
        log = self.open_log()
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        log.append(encode_message(b"b"))
        asked = log.flush()
        self.runner.run_one()
        self.assertNoResult(asked)
        self.assertEqual(len(self.runner.pending), 1)
        self.runner.run_one()
        self.assertEqual(self.successResultOf(asked), 20)

    def test_close_cancels_the_pending_fsync(self) -> None:
        """A log closed in the turn that dirtied it leaves no call behind and starts no fsync."""
        log = self.open_log()
        log.append(encode_message(b"a"))
        log.close()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(0)
        self.assertEqual(self.runner.pending, [])

    def test_timer_policy_waits(self) -> None:
        """Under the timer policy nothing is fsynced before flush_interval_ms or flush_messages."""
        log = self.open_log(flush_policy="timer", flush_interval_ms=500, flush_messages=3)
        log.append(encode_message(b"a"))
        self.clock.advance(0.499)
        self.assertEqual(self.runner.pending, [])
        self.clock.advance(0.001)
        self.assertEqual(len(self.runner.pending), 1)
        self.runner.run_one()
        log.append(encode_message_set(payloads(3)))  # the count, within the gap after the timed fsync
        self.assertEqual(self.runner.pending, [])
        self.clock.advance(0.002)
        self.assertEqual(len(self.runner.pending), 1)

    def test_background_fsyncs_keep_the_gap(self) -> None:
        """Under load, fsyncs nobody waits for start at most once per flush_min_gap_ms, each covering all
        that came meanwhile; with 0 they run back to back."""
        log = self.open_log(flush_min_gap_ms=5)
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        self.clock.advance(0.001)
        self.runner.run_one()  # returned 1 ms after it started
        for i in range(3):
            log.append(encode_message_set(payloads(1, i)))
            self.clock.advance(0.001)
        self.assertEqual(self.runner.pending, [])  # 4 ms since the last start
        self.clock.advance(0.001)
        self.assertEqual(len(self.runner.pending), 1)
        self.runner.run_one()
        self.assertEqual(log.flushed_offset, 10 + 3 * ENTRY)
        self.assertEqual(self.clock.getDelayedCalls(), [])

        log = self.open_log(flush_min_gap_ms=0)
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        log.append(encode_message(b"b"))
        self.runner.run_one()
        self.assertEqual(len(self.runner.pending), 1)  # at once

    def test_waited_flush_skips_the_gap(self) -> None:
        """A flush someone waits for (an ack=flushed produce) starts at once, even within the gap."""
        log = self.open_log(flush_min_gap_ms=50)
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        self.runner.run_one()
        log.append(encode_message(b"b"))
        asked = log.flush()
        self.assertEqual(len(self.runner.pending), 1)
        self.runner.run_one()
        self.assertEqual(self.successResultOf(asked), 20)
        log.append(encode_message(b"c"))
        first = log.flush()
        log.append(encode_message(b"d"))
        second = log.flush()  # while an fsync is in flight: right after it, no gap
        self.clock.advance(0.001)
        self.runner.run_one()
        self.assertEqual(self.successResultOf(first), 30)
        self.assertEqual(len(self.runner.pending), 1)
        self.runner.run_one()
        self.assertEqual(self.successResultOf(second), 40)

    def test_close_within_the_gap(self) -> None:
        """A log closed while a flush waits for the gap starts none and leaves no call behind."""
        log = self.open_log(flush_min_gap_ms=5)
        log.append(encode_message(b"a"))
        self.clock.advance(0)
        self.runner.run_one()
        log.append(encode_message(b"b"))
        self.clock.advance(0.001)
        log.close()
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.clock.advance(1)
        self.assertEqual(self.runner.pending, [])

    def test_gap_option(self) -> None:
        """twistd twlog's --flush-min-gap-ms sets the gap (2 ms by default); out-of-range values are refused."""
        options = Options()
        options.parseOptions([])
        self.assertEqual(options.config.log.flush_min_gap_ms, 2.0)
        options = Options()
        options.parseOptions(["--flush-min-gap-ms", "0.5"])
        self.assertEqual(options.config.log.flush_min_gap_ms, 0.5)
        for bad in ("-1", "nan", "2000", "soon"):
            e = self.assertRaises(usage.UsageError, Options().parseOptions, ["--flush-min-gap-ms", bad])
            self.assertEqual(str(e), f"--flush-min-gap-ms must be a number of milliseconds from 0 to 1000, not {bad!r}")
        self.assertRaises(ValueError, LogConfig, "d", flush_min_gap_ms=-1)


class TimedRunnerTests(SynchronousTestCase):
    """TimedRunner: how long each fsync took, for the broker's metrics."""

    def test_observer_told_duration_and_outcome(self) -> None:
        """Each call's time from hand-off to end is reported with whether it worked; the result passes through."""
        clock, runner = Clock(), ManualRunner()
        timed = TimedRunner(runner, clock)
        seen: list[tuple[float, bool]] = []
        timed(lambda: None)  # no observer yet: nothing timed
        runner.run_one()
        timed.observer = lambda seconds, ok: seen.append((seconds, ok))
        ok = timed(lambda: 7)
        failed = timed(self.fail_now)
        clock.advance(0.25)
        runner.run_one()
        runner.run_one()
        self.assertEqual(self.successResultOf(ok), 7)
        self.failureResultOf(failed, OSError)
        self.assertEqual(seen, [(0.25, True), (0.25, False)])

    def fail_now(self) -> None:
        raise OSError("fsync failed")
