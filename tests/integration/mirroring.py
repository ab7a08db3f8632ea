"""Helpers of the mirror and audit tests: `twlog local` clusters and `twlog mirror` processes, as a user runs them."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import time

from twisted.internet import reactor
from twisted.internet.defer import Deferred, TimeoutError, succeed
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.shared_local import shared_local
from tests.integration.test_cli import twlog
from tests.integration.test_local import start_local
from twlog.coord.zkserver import free_port, free_ports


async def local_cluster(testcase: TestCase, name: str, processes: list | None = None) -> str:
    """A `twlog local` cluster (one broker, its own ports and data directory); its ZooKeeper connect string.

    C{processes} receives C{(process protocol, transport, args)}, to stop it and start it again.
    """
    data = os.path.abspath(testcase.mktemp() + "-" + name)
    args = ("--data", data, "--port", str(free_ports(1)), "--zookeeper-port", str(free_port()), "--no-metrics",
            "--flush-interval-ms", "50")
    local, transport = start_local(testcase, *args)
    banner = await local.ready
    if processes is not None:
        processes.append((local, transport, args))
    return re.search(r"ZooKeeper at (127\.0\.0\.1:\d+)", banner).group(1)


async def shared_local_cluster(name: str) -> str:
    """The run's `twlog local` cluster C{name} (one broker; L{shared_local}); its ZooKeeper connect string."""
    banner = await shared_local(name, 1, "--flush-interval-ms", "50")
    return re.search(r"ZooKeeper at (127\.0\.0\.1:\d+)", banner).group(1)


class MirrorProcess(ProcessProtocol):
    """A `twlog mirror` process: its stderr lines, and Deferreds waiting for a line matching a pattern."""

    def __init__(self) -> None:
        self.output = b""
        self.waiting: list[tuple[re.Pattern, Deferred]] = []
        self.ended: Deferred = Deferred()
        self.transport = None

    def outReceived(self, data: bytes) -> None:
        self.output += data
        text = self.output.decode(errors="replace")
        for pattern, d in list(self.waiting):
            match = pattern.search(text)
            if match:
                self.waiting.remove((pattern, d))
                d.callback(match)

    errReceived = outReceived

    def processEnded(self, reason) -> None:
        for pattern, d in self.waiting:
            d.errback(AssertionError(f"twlog mirror ended before printing {pattern.pattern!r}:\n"
                                     + self.output.decode(errors="replace")))
        self.waiting = []
        self.ended.callback(reason.value.exitCode)

    def said(self, pattern: str, timeout_s: float = 60.0) -> Deferred:
        """Fire with the first match of C{pattern} in the output (now or later); fail after C{timeout_s}."""
        compiled = re.compile(pattern)
        found = compiled.search(self.output.decode(errors="replace"))
        if found:
            return succeed(found)
        d: Deferred = Deferred()
        self.waiting.append((compiled, d))

        def timed_out(failure):
            failure.trap(TimeoutError)
            raise AssertionError(f"twlog mirror did not print {pattern!r} within {timeout_s:g} s:\n"
                                 + _ends(self.output.decode(errors="replace")))

        return d.addTimeout(timeout_s, reactor).addErrback(timed_out)

    def kill(self, signal: str = "KILL") -> Deferred:
        if not self.ended.called:
            self.transport.signalProcess(signal)
        return self.ended


def _ends(text: str) -> str:
    """The start and the end of a long output."""
    return text if len(text) < 6000 else text[:3000] + "\n...\n" + text[-3000:]


def start_mirror(testcase: TestCase, *args: str) -> MirrorProcess:
    """Run `twlog mirror ARGS` in its own process, killed (by pid) at the end of the test if still running."""
    mirror = MirrorProcess()
    argv = [sys.executable, "-m", "twlog.cli", "mirror", *args]
    mirror.transport = reactor.spawnProcess(mirror, sys.executable, argv, env=os.environ.copy())
    testcase.addCleanup(mirror.kill)
    return mirror


async def produce(zookeeper: str, topic: str, lines: list[bytes], *extra: str) -> None:
    status, _, err = await twlog("produce", "--zookeeper", zookeeper, "--topic", topic, *extra,
                                 stdin=b"".join(line + b"\n" for line in lines))
    assert status == 0, err


async def audit_json(zookeeper: str, topic: str, *extra: str) -> tuple[int, list[dict], bytes]:
    """`twlog audit --json`: its exit status, the window objects, its stderr."""
    status, out, err = await twlog("audit", "--zookeeper", zookeeper, "--topic", topic, "--json", *extra)
    return status, [json.loads(line) for line in out.splitlines() if line.strip()], err


async def until(check, timeout_s: float = 90.0, pause_s: float = 0.5):
    """Call the coroutine function C{check} until it returns something true (returned), at most C{timeout_s}."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s:g} s: {check.__doc__ or check}")
        await deferLater(reactor, pause_s, lambda: None)


async def topic_values(zookeeper: str, topic: str) -> list[bytes]:
    """Every stored message of C{topic} (raw payloads), by `twlog consume --json`."""
    status, out, err = await twlog("consume", "--zookeeper", zookeeper, "--topic", topic, "--json")
    if status != 0:
        return []
    values = []
    for line in out.splitlines():
        message = json.loads(line)
        value = message["value"]
        values.append(base64.b64decode(value) if message.get("encoding") == "base64"
                      else value.encode("utf-8"))
    return values
