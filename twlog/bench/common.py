# -*- test-case-name: tests.bench.test_crc -*-
"""What the benchmarks share: payloads that do not compress, and running a coroutine under C{task.react}."""

from __future__ import annotations

import os
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
