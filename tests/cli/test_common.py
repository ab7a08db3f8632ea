"""Tests for what the client commands share: error reporting, time and broker options."""

from __future__ import annotations

import io
from argparse import Namespace
from contextlib import redirect_stderr

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.common import parse_time, reporting_errors, single_broker
from twlog.consumer.simple import EARLIEST, LATEST
from twlog.errors import OffsetOutOfRange, TwlogError


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

    def test_other_errors_pass(self) -> None:
        """A bug is not dressed up as a user's error."""
        result, err = self.outcome(failing(ZeroDivisionError()))
        self.assertIsInstance(result, ZeroDivisionError)
        self.assertEqual(err, "")


class OptionTests(SynchronousTestCase):
    def test_parse_time(self) -> None:
        self.assertEqual(parse_time("latest"), LATEST)
        self.assertEqual(parse_time("earliest"), EARLIEST)
        self.assertEqual(parse_time("1300000000000"), 1300000000000)
        self.assertRaises(ValueError, parse_time, "yesterday")

    def test_single_broker(self) -> None:
        """One HOST:PORT is accepted; a list is refused with a message naming what was given."""
        self.assertEqual(single_broker("localhost:9092"), ("localhost", 9092))
        e = self.assertRaises(TwlogError, single_broker, "a:1,b:2")
        self.assertEqual(str(e), "name one broker (HOST:PORT), not 'a:1,b:2'")
