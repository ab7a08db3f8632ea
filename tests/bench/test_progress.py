"""Tests for L{BenchProgress}: plain lines off a terminal, a rich bar on one, and the stream interface the
benchmarks write their progress lines to."""

from __future__ import annotations

import io

from twisted.trial.unittest import TestCase

from twlog.bench.common import BenchProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class PlainTests(TestCase):
    def test_off_a_terminal_lines_only(self) -> None:
        """Piped, steps and finished lines are written as plain lines; counts and "\\r" updates write nothing."""
        out = io.StringIO()
        with BenchProgress(out) as progress:
            self.assertFalse(progress.live)
            progress.step("producing 10 messages", total=10)
            progress.update(5)
            progress.advance(5)
            progress.write("  batch 1: appended 5 messages\r")
            progress.write("  consuming bench-50\n")
            progress.log("done")
        self.assertEqual(out.getvalue(), "  producing 10 messages\n  consuming bench-50\ndone\n")

    def test_write_returns_length(self) -> None:
        """It can stand in for a text stream: write returns what it took, flush does nothing."""
        progress = BenchProgress(io.StringIO())
        self.assertEqual(progress.write("two\nlines\n"), 10)
        progress.flush()
        self.assertEqual(progress.stream.getvalue(), "two\nlines\n")


class LiveTests(TestCase):
    def test_terminal_draws_a_bar(self) -> None:
        """On a terminal the bar is drawn (and removed at the end); logged lines stay."""
        out = Terminal()
        with BenchProgress(out) as progress:
            self.assertTrue(progress.live)
            progress.step("producing", total=4)
            progress.update(4)
            progress.write("  a line that stays\n")
            progress.write("  reading back\r")
            progress.step("consuming", total=2)
            progress.advance(2)
        self.assertIn("a line that stays", out.getvalue())

    def test_updates_before_a_step(self) -> None:
        """Counts before any step are ignored, not an error."""
        with BenchProgress(Terminal(), live=True) as progress:
            progress.update(3)
            progress.advance()
        self.assertIsNone(progress._task)
