"""Tests for L{twlog.bench.common.stop_process}: a process stopped by its signal, or killed when it ignores it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.common import stop_process


class StopProcessTests(SynchronousTestCase):
    def start(self, code: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        self.addCleanup(process.stdout.close)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        self.assertEqual(process.stdout.readline(), b"ready\n")
        return process

    def test_signal(self) -> None:
        """A process that ends on the signal is stopped by it."""
        process = self.start("import time; print('ready', flush=True); time.sleep(60)")
        stop_process(process, signal.SIGTERM, 30)
        self.assertEqual(process.returncode, -signal.SIGTERM)  # ended by the signal, not killed

    def test_killed_after_timeout(self) -> None:
        """A process that ignores the signal is killed once the timeout has passed."""
        process = self.start("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ready', flush=True); time.sleep(60)")
        started = time.monotonic()
        stop_process(process, signal.SIGTERM, 0.2)
        self.assertEqual(process.returncode, -signal.SIGKILL)
        self.assertLess(time.monotonic() - started, 10)

    def test_already_ended(self) -> None:
        """A process that has ended is left as it is."""
        process = self.start("print('ready', flush=True)")
        process.wait()
        stop_process(process, signal.SIGTERM, 1)
        self.assertEqual(process.returncode, 0)
