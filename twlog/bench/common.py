# -*- test-case-name: tests.bench.test_crc,tests.bench.test_progress,tests.integration.test_bench_common -*-
"""What the benchmarks share: payloads that do not compress, blocking reads, running under C{task.react}, stopping
the processes they start, their progress on a terminal (L{BenchProgress}) and their tables (L{BenchTable})."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TextIO

import attrs
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column as TableColumn
from rich.table import Table
from rich.text import Text
from twisted.internet.defer import Deferred
from twisted.internet.task import react

#: Bytes in a megabyte, as the tables count them.
MB = 1_000_000


def payloads(count: int, size: int) -> list[bytes]:
    """Distinct log-like payloads (so nothing compresses or dedupes by accident)."""
    seed = os.urandom(size)
    return [(b"%012d " % i + seed)[:size] for i in range(count)]


def react_status(main: Callable[..., Deferred]) -> int:
    """Run C{main(reactor)} under C{task.react}; its exit status (0 on success)."""
    try:
        react(main)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def react_with_progress(run: Callable[[Any, BenchProgress], Coroutine[Any, Any, None]]) -> int:
    """Run the coroutine C{run(reactor, progress)} under C{task.react}, with a L{BenchProgress} on stderr for it to
    report to; its exit status (0 on success)."""
    with BenchProgress() as progress:
        return react_status(lambda reactor: Deferred.fromCoroutine(run(reactor, progress)))


def stop_process(process: subprocess.Popen, sig: int, timeout_s: float) -> None:
    """Stop C{process} (if it still runs) as a user would, with C{sig}; killed if not ended after C{timeout_s}."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def read_exactly(sock: socket.socket, n: int, who: str = "the broker") -> bytes:
    """Exactly C{n} bytes from C{sock}, blocking; RuntimeError naming C{who} if the connection closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RuntimeError(f"{who} closed the connection")
        buf += chunk
    return bytes(buf)


class _CountColumn(ProgressColumn):
    """C{n/N unit} of the step under way (C{n unit} while the total is unknown)."""

    def render(self, task) -> Text:
        unit = task.fields.get("unit", "")
        done = f"{task.completed:,.0f}"
        text = done if task.total is None else f"{done}/{task.total:,.0f}"
        return Text(f"{text} {unit}".rstrip(), style="progress.download")


class _RateColumn(ProgressColumn):
    """Messages per second of the step under way (rich's own speed columns count bytes)."""

    def render(self, task) -> Text:
        unit = task.fields.get("unit", "")
        fast = unit in ("msg", "rows")  # a rate of slow steps (reads, runs, frames) would read 0/s
        return Text(f"{task.speed:,.0f} {unit}/s" if task.speed and fast else "", style="progress.data.speed")


class BenchProgress:
    """A benchmark's progress: on a terminal, a rich bar for the step under way above the lines it logs.

    Each step says what it counts and how many it will count (C{step("round 1 of 3: produce, batch 50",
    total=20_000, unit="msg")}), and the bar shows C{n/N unit}, the rate and the time taken; L{update} moves
    it and may rename the step (the current round and read). The bar is transient: leaving the C{with} block
    erases it, so a table printed after the block is not preceded by a stale spinner. Off a terminal (piped,
    in tests, under CI) only the steps and the logged lines are written, as plain lines. Safe to call from
    threads (a benchmark's client may run in one).

        with BenchProgress() as progress:
            progress.step("producing 1,000,000 messages", total=1_000_000, unit="msg")
            progress.update(500_000)
        print(table)  # after the block: the bar is gone
    """

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        """@param stream: where it writes (default C{sys.stderr}).
        @param live: draw the bar; default: when C{stream} is a terminal."""
        self.stream = sys.stderr if stream is None else stream
        self.live = bool(getattr(self.stream, "isatty", lambda: False)()) if live is None else live
        self._lock = threading.Lock()
        self._task: TaskID | None = None
        self._progress: Progress | None = None
        if self.live:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", table_column=TableColumn(no_wrap=True, overflow="ellipsis", ratio=1)),
                BarColumn(bar_width=20), _CountColumn(table_column=TableColumn(no_wrap=True)),
                _RateColumn(table_column=TableColumn(no_wrap=True)), TimeElapsedColumn(),
                console=Console(file=self.stream, force_terminal=True), expand=True,
                transient=True,
                redirect_stdout=False,  # tables go to stdout, which may be a file while the bar is drawn
                redirect_stderr=False,
            )

    def __enter__(self) -> BenchProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Erase the bar (on a terminal); what was logged stays. Called on leaving the C{with} block."""
        with self._lock:
            if self._progress is not None:
                if self._task is not None:
                    self._progress.remove_task(self._task)
                    self._task = None
                self._progress.stop()

    @property
    def task(self):
        """The step under way (rich's C{Task}: description, completed, total, fields), or None."""
        with self._lock:
            if self._progress is None or self._task is None:
                return None
            return self._progress.tasks[[t.id for t in self._progress.tasks].index(self._task)]

    def step(self, description: str, total: float | None = None, unit: str = "") -> None:
        """Start a step (logged as a line off a terminal): C{total} C{unit}s to do, if known, for the bar."""
        with self._lock:
            if self._progress is None:
                self.stream.write(f"  {description}\n")
                self.stream.flush()
                return
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(description, total=total, unit=unit)

    def update(self, completed: float | None = None, description: str | None = None) -> None:
        """C{completed} items of the current step are done; C{description} renames it (the current read)."""
        with self._lock:
            if self._progress is not None and self._task is not None:
                self._progress.update(self._task, completed=completed, description=description)

    def advance(self, items: float = 1) -> None:
        """C{items} more of the current step are done."""
        with self._lock:
            if self._progress is not None and self._task is not None:
                self._progress.advance(self._task, items)

    def log(self, line: str) -> None:
        """A line that stays (above the bar on a terminal)."""
        with self._lock:
            if self._progress is not None:
                self._progress.console.print(line, markup=False, highlight=False)
            else:
                self.stream.write(line + "\n")
                self.stream.flush()


@attrs.frozen
class Column:
    """A column of a benchmark's table: its name and its unit; a column of text naming the rows (the test, the
    policy) has none (L{label})."""

    name: str
    unit: str | None
    justify: str = "right"
    names_rows: bool = False

    @classmethod
    def label(cls, name: str) -> Column:
        """A column of text naming the rows: no unit, left-aligned."""
        return cls(name, None, "left", names_rows=True)

    @property
    def header(self) -> str:
        return self.name if self.unit is None else f"{self.name} ({self.unit})"


class BenchTable:
    """A benchmark's table: every column has a header and a unit, and a cell without a value carries a footnote
    saying why (L{missing}); the footnotes and notes print under it. L{problems} lists what breaks those rules.

        table = BenchTable("title", [Column.label("test"), Column("throughput", "msg/s")])
        table.add_row("produce", "1,000")
        table.add_row("consume", table.missing("no consumer ran"))
        table.print(sys.stdout)
    """

    #: What a cell without a value shows (before its footnote mark).
    NONE = "n/a"

    def __init__(self, title: str, columns: Sequence[Column], notes: Sequence[str] = ()) -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[str]] = []
        self.notes = list(notes)
        #: Footnote marks ("[1]", "[2]", ...) -> the reason, in order of first use.
        self.footnotes: dict[str, str] = {}

    def footnote(self, reason: str) -> str:
        """The mark of the footnote giving C{reason} (the same reason gets the same mark)."""
        for mark, text in self.footnotes.items():
            if text == reason:
                return mark
        mark = f"[{len(self.footnotes) + 1}]"
        self.footnotes[mark] = reason
        return mark

    def missing(self, reason: str) -> str:
        """A cell without a value, with a footnote giving the C{reason}."""
        return f"{self.NONE} {self.footnote(reason)}"

    def add_row(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append([str(cell) for cell in cells])

    def note(self, line: str) -> None:
        """A line printed under the table (after the footnotes)."""
        self.notes.append(line)

    def problems(self) -> list[str]:
        """What breaks the table's rules: a column without a header or a unit (only columns of text naming the
        rows may have none), an empty cell, or a mark with no footnote."""
        found = []
        for i, column in enumerate(self.columns):
            if not column.name.strip():
                found.append(f"column {i + 1} has no header")
            if not column.names_rows and not (column.unit or "").strip():
                found.append(f"column {column.name!r} has no unit")
        for row in self.rows:
            for column, cell in zip(self.columns, row):
                if not cell.strip():
                    found.append(f"an empty cell in column {column.header!r} of row {row[0]!r}")
                if cell.startswith(self.NONE) and not any(mark in cell for mark in self.footnotes):
                    found.append(f"{cell!r} in column {column.header!r} of row {row[0]!r} has no footnote")
        return found

    def rich(self) -> Table:
        table = Table(title=self.title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                      header_style="bold", show_edge=False)
        for column in self.columns:
            table.add_column(column.header, justify=column.justify, no_wrap=True)
        for row in self.rows:
            table.add_row(*row)
        return table

    def lines_under(self) -> list[str]:
        """The footnotes, then the notes."""
        return [f"{mark} {reason}" for mark, reason in self.footnotes.items()] + self.notes

    def print(self, file: TextIO | None = None) -> None:
        """Print the table, its footnotes and notes to C{file} (default: stdout; plain text off a terminal)."""
        file = sys.stdout if file is None else file
        # Wide enough for every column on one line: a narrow terminal wraps the lines, rich would cut the cells.
        console = Console(file=file, width=max(250, self.rich().__rich_measure__(Console(width=10_000), Console(
            width=10_000).options).maximum + 1), highlight=False)
        console.print(self.rich())
        for line in self.lines_under():
            console.print(line, markup=False, highlight=False)

    def text(self) -> str:
        """The table as it prints off a terminal."""
        out = io.StringIO()
        self.print(out)
        return out.getvalue()
