# -*- test-case-name: tests.broker.test_limits -*-
"""The broker's share of the process's file descriptors: the RLIMIT_NOFILE it raises, the connections it allows.

Every connection and every open segment file takes a descriptor.  At start
the broker raises its soft RLIMIT_NOFILE to the hard limit (the soft default
of 1,024 is what made 2,000 idle connections refuse every new one), then
caps client connections (C{--max-connections}) below that limit, keeping a
reserve for segment files, so that a flood of connections leaves segment
rolls their descriptors.  Descriptors that still run out (many partitions)
give producers the retriable L{twlog.errors.TooManyOpenFiles}.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

from twisted.logger import Logger

_log = Logger()

#: Descriptors kept back beyond the open segments: the listening socket, stdio, the
#: lock file, the thread pool's and ZooKeeper's sockets, and directories opened to fsync.
BASE_RESERVE = 64
#: The share of the limit kept for segment files still to come (new partitions, rolls).
SEGMENT_SHARE = 4


def raise_open_files_limit(getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
                           setrlimit: Callable[[int, tuple[int, int]], None] = resource.setrlimit) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (where allowed); return the soft limit now in force.

    @param getrlimit: L{resource.getrlimit}, or a stand-in (tests).
    @param setrlimit: L{resource.setrlimit}, or a stand-in.
    """
    soft, hard = getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            _log.warn("could not raise the open-files limit from {soft} to {hard}: {error}",
                      soft=soft, hard=hard, error=e)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def default_max_connections(open_files_limit: int, open_segments: int) -> int:
    """The connection cap when none is configured: the descriptor limit less the open segments,
    a quarter of the limit for segments to come, and L{BASE_RESERVE}; at least 1."""
    reserve = open_segments + open_files_limit // SEGMENT_SHARE + BASE_RESERVE
    return max(1, open_files_limit - reserve)
