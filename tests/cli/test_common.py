"""Tests for what the client commands share: error reporting, time and broker options."""

from __future__ import annotations

import io
from argparse import Namespace
from contextlib import redirect_stderr

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.common import UsageError, reporting_errors, resolve_partition, single_broker
from twlog.cli.options import parse_time
from twlog.consumer.simple import EARLIEST, LATEST
from twlog.coord.layout import PartitionLocation
from twlog.errors import OffsetOutOfRange, TwlogError
from twlog.partition import TopicPartition


def failing(exception: BaseException):
    async def main(reactor, args) -> None:
        raise exception

    return main


class ReportingErrorsTests(SynchronousTestCase):
    def outcome(self, main) -> tuple[object, str]:
        """What reporting_errors(main) ends with (None or the exception), and what it wrote to stderr."""
        err = io.StringIO()
        with redirect_stderr(err):
            d = Deferred.fromCoroutine(reporting_errors(main, None, Namespace()))
        results: list = []
        d.addCallbacks(results.append, lambda f: results.append(f.value))
        return results[0], err.getvalue()

    def test_success(self) -> None:
        """A command that ends normally ends quietly."""
        async def main(reactor, args) -> None:
            pass

        self.assertEqual(self.outcome(main), (None, ""))

    def test_twlog_error_is_one_line(self) -> None:
        """A twlog error (a broker's refusal too) is one line on stderr and exit status 1."""
        for error in (TwlogError("name one broker"), OffsetOutOfRange("offset 7 is past the end")):
            result, err = self.outcome(failing(error))
            self.assertIsInstance(result, SystemExit)
            self.assertEqual(result.code, 1)
            self.assertEqual(err, f"twlog: {error}\n")

    def test_os_error_names_the_file(self) -> None:
        """A missing file says why and which file."""
        result, err = self.outcome(failing(FileNotFoundError(2, "No such file or directory", "in.txt")))
        self.assertEqual(result.code, 1)
        self.assertEqual(err, "twlog: No such file or directory: in.txt\n")
        result, err = self.outcome(failing(ConnectionRefusedError("refused")))
        self.assertEqual((result.code, err), (1, "twlog: refused\n"))

    def test_broken_pipe_and_ctrl_c_are_quiet(self) -> None:
        """`twlog ... | head` and Ctrl-C stop with status 1 and nothing on stderr."""
        for error in (BrokenPipeError(), KeyboardInterrupt()):
            result, err = self.outcome(failing(error))
            self.assertEqual((result.code, err), (1, ""))

    def test_usage_error_is_exit_2(self) -> None:
        """A value the command cannot use, found after parsing, is one line and exit status 2."""
        result, err = self.outcome(failing(UsageError("partition '9' is not one of 'x''s partitions")))
        self.assertEqual((result.code, err), (2, "twlog: partition '9' is not one of 'x''s partitions\n"))

    def test_bug_is_one_line_naming_debug(self) -> None:
        """A bug is one line naming the exception and --debug, exit status 1, no traceback."""
        result, err = self.outcome(failing(ZeroDivisionError("division by zero")))
        self.assertEqual(result.code, 1)
        self.assertEqual(err, "twlog: unexpected error: ZeroDivisionError: division by zero (--debug shows the "
                              "traceback)\n")

    def test_debug_shows_the_traceback(self) -> None:
        """With --debug, a bug's traceback is printed (and the exit status is still 1)."""
        err = io.StringIO()

        async def main(reactor, args) -> None:
            raise ZeroDivisionError("boom")

        with redirect_stderr(err):
            d = Deferred.fromCoroutine(reporting_errors(main, None, Namespace(debug=True)))
        self.assertEqual(self.failureResultOf(d, SystemExit).value.code, 1)
        self.assertIn("Traceback", err.getvalue())
        self.assertIn("ZeroDivisionError: boom", err.getvalue())


class OptionTests(SynchronousTestCase):
    def test_parse_time(self) -> None:
        self.assertEqual(parse_time("latest"), LATEST)
        self.assertEqual(parse_time("earliest"), EARLIEST)
        self.assertEqual(parse_time("1300000000000"), 1300000000000)
        self.assertEqual(parse_time("2011-03-13T07:06:40"), 1300000000000)
        self.assertEqual(parse_time("2011-03-13T08:06:40+01:00"), 1300000000000)
        e = self.assertRaises(ValueError, parse_time, "yesterday")
        self.assertIn("'yesterday' is not latest, earliest, milliseconds since the epoch, or a date/time", str(e))

    def test_single_broker(self) -> None:
        """One HOST:PORT is accepted; a list is refused with a message naming what was given."""
        self.assertEqual(single_broker("localhost:9092"), ("localhost", 9092))
        e = self.assertRaises(TwlogError, single_broker, "a:1,b:2")
        self.assertEqual(str(e), "name one broker (HOST:PORT), not 'a:1,b:2'")


def locations(*names: str) -> list[PartitionLocation]:
    return [PartitionLocation(TopicPartition.from_name("clicks", n), int(n.split("-")[0]), "h", 1) for n in names]


class ResolvePartitionTests(SynchronousTestCase):
    def test_name_and_index(self) -> None:
        """A partition is named as <broker id>-<partition> or by its index over the sorted partitions."""
        found = locations("0-0", "0-1", "1-0", "1-1")
        self.assertEqual(resolve_partition(found, "1-0").name, "1-0")
        self.assertEqual(resolve_partition(found, "3").name, "1-1")

    def test_unknown_lists_the_valid_ones(self) -> None:
        """A partition that is not there is a usage error listing the valid names and the index range."""
        found = locations("0-0", "1-0")
        for wanted in ("2-0", "2"):
            e = self.assertRaises(UsageError, resolve_partition, found, wanted)
            self.assertIn(f"topic 'clicks' has no partition {wanted!r}: give a name <broker id>-<partition> (0-0, 1-0) "
                          "or an index 0-1", str(e))
