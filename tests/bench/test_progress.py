"""Tests for L{BenchProgress}: plain lines off a terminal; on one, a bar that counts n of N with the current
step's name, and that is gone before the table prints."""

from __future__ import annotations

import io
import re

from twisted.trial.unittest import TestCase

from twlog.bench.common import BenchProgress, BenchTable, Column


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def screen(output: str) -> list[str]:
    """What a terminal shows after C{output}: enough of a terminal for rich's live display (carriage return,
    erase line, cursor up, and plain text)."""
    lines = [""]
    row = 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+", output):
        if token == "\n":
            row += 1
            if row == len(lines):
                lines.append("")
        elif token == "\r":
            pass  # back to the start of the line: the next text overwrites it (rich erases first)
        elif token.startswith("\x1b["):
            if token.endswith("A"):
                row = max(0, row - int(token[2:-1] or 1))
            elif token == "\x1b[2K":
                lines[row] = ""
        else:
            lines[row] = token if not lines[row] else lines[row] + token
    return [line for line in lines if line.strip()]


class PlainTests(TestCase):
    def test_off_a_terminal_lines_only(self) -> None:
        """Piped, steps and logged lines are written as plain lines; counts write nothing."""
        out = io.StringIO()
        with BenchProgress(out) as progress:
            self.assertFalse(progress.live)
            progress.step("producing", total=10, unit="msg")
            progress.update(5, "producing, batch 2")
            progress.advance(5)
            progress.log("done")
        self.assertEqual(out.getvalue(), "  producing\ndone\n")
        self.assertIsNone(progress.task)


class LiveTests(TestCase):
    def test_counts_n_of_n(self) -> None:
        """The step under way has a known total, its count and its current name (the round and read); the bar
        shows them as n/N with the unit."""
        out = Terminal()
        with BenchProgress(out) as progress:
            self.assertTrue(progress.live)
            progress.step("consuming", total=12, unit="reads")
            progress.update(3, "consuming, round 1/2, read 4/12")
            task = progress.task
            self.assertEqual((task.total, task.completed, task.description, task.fields["unit"]),
                             (12, 3, "consuming, round 1/2, read 4/12", "reads"))
            progress._progress.refresh()
            self.assertIn("3/12 reads", out.getvalue())
            self.assertIn("round 1/2, read 4/12", out.getvalue())
            progress.advance(2)
            self.assertEqual(progress.task.completed, 5)

    def test_gone_before_the_table(self) -> None:
        """Leaving the block erases the bar: a table printed after it, on the same terminal, has no spinner or
        bar above it; the logged lines stay."""
        out = Terminal()
        with BenchProgress(out) as progress:
            progress.step("producing in batches of 50", total=100, unit="msg")
            progress.update(40)
            progress.log("  a line that stays")
            progress._progress.refresh()
            self.assertIn("producing in batches of 50", screen(out.getvalue())[-1])
        table = BenchTable("the table", [Column.label("test"), Column("throughput", "msg/s")])
        table.add_row("produce", "1,000")
        table.print(out)
        shown = screen(out.getvalue())
        self.assertEqual(shown[0], "  a line that stays")
        self.assertEqual(shown[1].strip(), "the table")
        self.assertFalse(any("producing" in line or "━" in line for line in shown), shown)
        self.assertIsNone(progress.task)

    def test_updates_before_a_step(self) -> None:
        """Counts before any step are ignored, not an error."""
        with BenchProgress(Terminal(), live=True) as progress:
            progress.update(3)
            progress.advance()
        self.assertIsNone(progress.task)
