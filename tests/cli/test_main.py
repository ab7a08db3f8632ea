"""Tests for the twlog command line: parsing, errors, and the benchmarks it runs."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from importlib import import_module

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.main import build_parser, main


def run_main(*argv: str) -> tuple[int, str, str]:
    """Run twlog in process; return (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as e:
            status = e.code
    return status, out.getvalue(), err.getvalue()


class CommandLineTests(SynchronousTestCase):
    def test_help_for_every_command(self) -> None:
        """--help works for the command and each subcommand, exiting 0."""
        for argv in (["--help"], ["bench", "--help"], ["bench", "storage", "--help"], ["bench", "crc", "--help"]):
            status, out, _ = run_main(*argv)
            self.assertEqual(status, 0, argv)
            self.assertIn("usage: twlog", out)

    def test_bad_number_is_one_line(self) -> None:
        """A bad option value is one line on stderr and exit status 2, no traceback."""
        status, _, err = run_main("bench", "storage", "--messages", "lots")
        self.assertEqual(status, 2)
        self.assertEqual(err.count("\n"), 1)
        self.assertIn("'lots' is not a whole number", err)
        self.assertNotIn("Traceback", err)

    def test_unknown_command(self) -> None:
        """An unknown subcommand is a usage error."""
        status, _, err = run_main("frobnicate")
        self.assertEqual(status, 2)
        self.assertIn("invalid choice", err)

    def test_bare_twlog_lists_the_commands(self) -> None:
        """A bare C{twlog} lists every command with its one line of help on stderr, and exits 2."""
        status, out, err = run_main()
        self.assertEqual((status, out), (2, ""))
        self.assertIn("usage: twlog COMMAND", err)
        for name in ("produce", "consume", "offsets", "groups", "topics", "broker", "local", "bench"):
            self.assertRegex(err, rf"\n  {name} +\S")
        self.assertIn("print a topic's messages", err)

    def test_crc_benchmark_table(self) -> None:
        """twlog bench crc prints a row for ISA-L (the hot path), zlib and crcmod's C extension."""
        status, out, _ = run_main("bench", "crc", "--count", "200")
        self.assertEqual(status, 0)
        self.assertIn("crcmod C extension in use: True", out)
        self.assertIn("isal_zlib.crc32 (hot path)", out)
        self.assertIn("zlib.crc32 ", out)
        self.assertIn("crcmod crc-32 (C extension)", out)

    def test_every_command_runs_a_function(self) -> None:
        """Each subcommand's run= target names a module and a function that exist."""
        parser = build_parser()
        argvs = [["produce", "-t", "t"], ["consume", "-t", "t"], ["offsets", "-t", "t"], ["groups"], ["topics"],
                 ["local"]] + [["bench", name] for name in ("storage", "broker", "rebalance", "spark", "crc")]
        for argv in argvs:
            module_name, _, function_name = parser.parse_args(argv).run.partition(":")
            self.assertTrue(callable(getattr(import_module(module_name), function_name)), argv)
