# -*- test-case-name: tests.client.test_leader -*-
"""A blocking connection to one partition's leader that finds the leader again when its reader asks.

The partition reader (L{twlog.client.reader}) decides when the layout must be
read again: the broker said it does not lead the partition (L{NotLeader}), the
partition has no leader (L{LeaderNotAvailable}), or the connection broke.
L{LeaderConnection} is what the blocking paths (the Spark workers, the audit)
do then: discover the partition's location again, from the same brokers or
ZooKeeper the query started from, and reconnect there if it moved (or to the
same address if it did not: a restarted broker).  The reader bounds how many
times in a row this happens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from twlog.client.discovery import discover
from twlog.client.options import ClientOptions
from twlog.client.reader import REFRESH_ON, PartitionReader, Refresh
from twlog.client.sync import SyncConnection, read
from twlog.coord.layout import PartitionLocation
from twlog.errors import BrokerTimeout, ConnectionFailed, UnknownTopic

__all__ = ["LeaderConnection"]

_logger = logging.getLogger(__name__)


class LeaderConnection:
    """A L{SyncConnection} to C{location}'s broker, moved to the partition's current leader on a refresh.

    @param brokers: the broker addresses the location was discovered from, or None.
    @param zookeeper: the ZooKeeper connect string it was discovered from, or None.  With neither, a refresh
        reconnects to the same address.
    @param find: L{discover} (tests pass a stand-in).
    @param connect: C{connect(host, port, options)} gives a L{SyncConnection} (or one like it).
    """

    def __init__(self, location: PartitionLocation, *, brokers: str | Sequence[tuple[str, int]] | None = None,
                 zookeeper: str | None = None, options: ClientOptions | None = None,
                 find: Callable[..., list[PartitionLocation]] = discover,
                 connect: Callable[..., SyncConnection] = SyncConnection, wait_s: float = 0.0,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        """@param wait_s: how long a refresh that finds the leader where it was (a killed broker whose session
            has not expired yet, or no leader elected yet) waits before the request is sent again."""
        self.location = location
        self.wait_s, self._sleep = wait_s, sleep
        self._brokers = brokers
        self._zookeeper = zookeeper
        self._options = ClientOptions.build(options)
        self._find = find
        self._connect = connect
        self.connection = connect(location.host, location.port, self._options)

    def __enter__(self) -> LeaderConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.connection.close()

    def read(self, reader: PartitionReader) -> Any:
        """One fetch's worth of C{reader} (L{twlog.client.sync.read}), following the leader on its refreshes."""
        return read(self.connection, reader, self.refresh)

    def offset(self, time: int, max_refreshes: int = 3) -> int:
        """The partition's offset for C{time} (C{EARLIEST}, C{LATEST} or a time in ms), asked of its leader: found
        again (L{refresh}) when the answer is NotLeader or LeaderNotAvailable or the broker cannot be reached, at
        most C{max_refreshes} times in a row (the reader's bound); then the error is raised."""
        for attempt in range(1, max_refreshes + 2):
            try:
                return self.connection.offset(self.location.topic, self.location.number, time)
            except (*REFRESH_ON, ConnectionFailed) as e:
                if attempt > max_refreshes:
                    raise
                self.refresh(Refresh(e, attempt))
        raise AssertionError("unreachable")

    def refresh(self, event: Refresh) -> SyncConnection:
        """Find the partition's leader again (after C{event}); reconnect there if it moved."""
        found = self._locate()
        if found is not None and (found.host, found.port) != (self.location.host, self.location.port):
            _logger.info("partition %s: %s; its leader is now broker %s at %s", found.tp, event.error, found.leader,
                         found.address)
            self.connection.close()
            self.connection = self._connect(found.host, found.port, self._options)
        elif self.wait_s:  # the same leader (or none learnt): give the election time
            self._sleep(self.wait_s)
        if found is not None:
            self.location = found
        return self.connection

    def _locate(self) -> PartitionLocation | None:
        """The partition's location now, or None when it cannot be learnt (then the same address is tried)."""
        if self._brokers is None and self._zookeeper is None:
            return None
        tp = self.location.tp
        try:
            found = self._find([tp.topic], brokers=self._brokers, zookeeper=self._zookeeper, options=self._options,
                               check_reachable=False)
        except (ConnectionFailed, BrokerTimeout, UnknownTopic) as e:
            _logger.warning("partition %s: cannot learn its leader again (%s); trying %s again", tp, e,
                            self.location.address)
            return None
        return next((location for location in found if location.tp == tp), None)
