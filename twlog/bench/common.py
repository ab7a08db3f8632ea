# -*- test-case-name: tests.bench.test_crc,tests.bench.test_progress,tests.integration.test_bench_common -*-
"""What the benchmarks share: payloads that do not compress, blocking reads, running under C{task.react}, stopping
the processes they start, and their progress on a terminal (L{BenchProgress})."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
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


class _RateColumn(ProgressColumn):
    """Items per second of the step under way (rich's own speed columns count bytes)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:,.0f}/s" if task.speed else "", style="progress.data.speed")


class BenchProgress:
    """A benchmark's progress: on a terminal, a rich bar for the step under way above the lines it logs.

    Off a terminal (piped, in tests, under CI) only the logged lines are written, as plain text, so the output
    stays what it was. It has the C{write} of a text stream: code that wrote progress lines to C{sys.stderr}
    can take it instead. On a terminal a line written so is logged and also starts an open-ended step named by
    it (a spinner and the time it has taken); a line ending in C{"\\r"} renames the step under way, and is not
    logged off a terminal. Safe to call from threads (a benchmark's client may run in one).

        with BenchProgress() as progress:
            progress.step("producing 1,000,000 messages", total=1_000_000)
            progress.update(500_000)
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
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                _RateColumn(), TimeElapsedColumn(), console=Console(file=self.stream), transient=True,
                redirect_stdout=False,  # tables go to stdout, which may be a file while the bar is drawn
            )

    def __enter__(self) -> BenchProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def step(self, description: str, total: int | None = None) -> None:
        """Start a step (logged as a line off a terminal); C{total} items, if known, for the bar."""
        with self._lock:
            if self._progress is None:
                self.stream.write(f"  {description}\n")
                self.stream.flush()
                return
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(description, total=total)

    def update(self, completed: int) -> None:
        """C{completed} items of the current step are done."""
        with self._lock:
            if self._progress is not None and self._task is not None:
                self._progress.update(self._task, completed=completed)

    def advance(self, items: int = 1) -> None:
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

    def write(self, text: str) -> int:
        """What a text stream's C{write} takes: finished lines are logged (and, on a terminal, each starts an
        open-ended step), a C{"\\r"}-ended one names the step under way."""
        if text.endswith("\r"):
            with self._lock:
                if self._progress is not None:
                    if self._task is None:
                        self._task = self._progress.add_task(text.strip(), total=None)
                    else:
                        self._progress.update(self._task, description=text.strip())
            return len(text)
        lines = [line.rstrip() for line in text.rstrip("\n").split("\n") if line.strip()]
        for line in lines:
            self.log(line)
        if lines and self._progress is not None:
            self.step(lines[-1].strip())
        return len(text)

    def flush(self) -> None:
        """Nothing to do: every line is written at once."""
