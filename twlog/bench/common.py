# -*- test-case-name: tests.bench.test_crc -*-
"""What the benchmarks share: payloads that do not compress, blocking reads, and running under C{task.react}."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

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


def read_exactly(sock: socket.socket, n: int, who: str = "the broker") -> bytes:
    """Exactly C{n} bytes from C{sock}, blocking; RuntimeError naming C{who} if the connection closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RuntimeError(f"{who} closed the connection")
        buf += chunk
    return bytes(buf)
