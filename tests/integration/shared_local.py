"""One `twlog local` cluster shared by the tests of a module whose tests each use topics (and groups) of their own.

Starting a cluster costs seconds (ZooKeeper's JVM, a Python process per broker), so such a module starts one, on
first use, in a process outside trial's reactor (a reactor process still running when a test ends makes the reactor
unclean).  It is stopped by its pid (SIGTERM: twlog local stops its brokers and ZooKeeper, as on Ctrl-C) when the
test run ends, as the suite's ZooKeeper is, and by Linux's parent-death signal if the run is killed.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from twisted.internet import reactor
from twisted.internet.task import deferLater

from twlog.coord.zkserver import free_port, free_ports

_banners: dict[str, str] = {}


async def shared_local(name: str, brokers: int = 1, *options: str, timeout_s: float = 120.0) -> str:
    """The banner of the run's cluster C{name} (C{twlog local --brokers N OPTIONS} on free ports), started if it
    is not running yet."""
    if name in _banners:
        return _banners[name]
    data = tempfile.mkdtemp(prefix=f"twlog-test-{name}-")
    argv = [sys.executable, "-m", "twlog.cli", "local", "--brokers", str(brokers),
            "--data", os.path.join(data, "local"), "--port", str(free_ports(brokers)),
            "--zookeeper-port", str(free_port()), "--no-metrics", *options]
    output = os.path.join(data, "local.out")
    with open(output, "wb") as out:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=_die_with_parent)
    atexit.register(_stop, process, data)
    deadline = time.monotonic() + timeout_s
    while True:
        with open(output, "rb") as f:
            banner = f.read().decode(errors="replace")
        if "Ctrl-C stops everything" in banner:
            _banners[name] = banner
            return banner
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"twlog local ({name}) not ready, exit status {process.poll()}:\n{banner[-3000:]}")
        await deferLater(reactor, 0.1, lambda: None)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the test run's process dies (PR_SET_PDEATHSIG)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _stop(process: subprocess.Popen, data: str) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(data, ignore_errors=True)
