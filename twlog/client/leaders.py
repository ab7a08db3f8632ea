# -*- test-case-name: tests.client.test_leaders -*-
"""Where a replicated partition's leader is, for the Twisted simple consumer (L{LeaderFinder}).

The consumer is given one broker; a replicated topic's partition (C{0} to C{P-1}) is read from its
leader, which any broker that follows ZooKeeper names in its CLUSTER_METADATA_V2 answer (type 14), read
by the one layout (L{ClusterLayout.from_metadata}).  The finder asks the consumer's broker, or, when it
cannot be reached (it may be the leader that died), the other live brokers the last answer named.  The
reader (L{twlog.client.reader}) says when to ask again: L{NotLeader}, L{LeaderNotAvailable} or a lost
connection; the finder waits a backoff (the options' retry policy, at most L{MAX_BACKOFF_S}) first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import deferLater
from twisted.logger import Logger

from twlog.client.bootstrap import OLDER_BROKER
from twlog.client.connection import IBrokerConnection
from twlog.client.options import ClientOptions
from twlog.client.reader import REFRESH_ON, Refresh
from twlog.coord.layout import ClusterLayout
from twlog.errors import BrokerTimeout, ConnectionFailed, raise_for
from twlog.partition import TopicPartition, address_text
from twlog.protocol.replication_codec import ClusterMetadataV2Request

__all__ = ["FOLLOW_REFRESHES", "MAX_BACKOFF_S", "LeaderFinder"]

#: How many refresh-and-retry answers in a row a replicated partition's reader takes before raising.
FOLLOW_REFRESHES = 10

#: The longest wait before asking where a moving leader is.
MAX_BACKOFF_S = 1.0


class LeaderFinder:
    """Replicated partitions' leaders, asked of C{bootstrap}'s broker, and a shared connection to each leader.

    @param connect: C{(host, port) -> IBrokerConnection}.
    """

    _log = Logger()

    def __init__(self, bootstrap: IBrokerConnection, connect: Callable[[str, int], IBrokerConnection], clock,
                 options: ClientOptions) -> None:
        self._bootstrap = bootstrap
        self.connect = connect
        self._clock = clock
        self._policy = options.backoff()
        self._located: dict[TopicPartition, tuple[str, int]] = {}
        self._shared: dict[tuple[str, int], IBrokerConnection] = {}
        #: The live brokers the last answer named (asked when the consumer's broker cannot answer).
        self._brokers: list[tuple[str, int]] = []

    async def address(self, tp: TopicPartition, *, fresh: bool = False) -> tuple[str, int]:
        """C{tp}'s leader's (host, port): known, or asked (always, with C{fresh}).

        @raise LeaderNotAvailable: it has no live leader now.
        @raise ConnectionFailed: no broker could be asked.
        """
        if not fresh and tp in self._located:
            return self._located[tp]
        layout = await self._ask(tp.topic)
        if layout is None or not any(p.fixed_leader is None for p in layout.partitions.get(tp.topic, ())):
            # Not a replicated topic there (or an older broker, which has none): a partition of the consumer's broker.
            self._located[tp] = (self._bootstrap.host, self._bootstrap.port)
        else:
            location = layout.locate(tp)
            self._located[tp] = (location.host, location.port)
        return self._located[tp]

    async def connection(self, tp: TopicPartition) -> IBrokerConnection:
        """The shared connection to C{tp}'s leader (for one-off fetches and OFFSETS)."""
        return self.shared(*await self.address(tp))

    def shared(self, host: str, port: int) -> IBrokerConnection:
        """The one connection to C{(host, port)} for one-off requests (the consumer's own, to its broker)."""
        if (host, port) == (self._bootstrap.host, self._bootstrap.port):
            return self._bootstrap
        if (host, port) not in self._shared:
            self._shared[(host, port)] = self.connect(host, port)
        return self._shared[(host, port)]

    def follow_for(self, tp: TopicPartition) -> Callable[[Refresh], Deferred]:
        """A reader's C{on_refresh} for one-off fetches of C{tp}: the shared connection to its leader now."""
        return lambda refresh: Deferred.fromCoroutine(self._refreshed(tp, refresh))

    async def moved(self, tp: TopicPartition, refresh: Refresh, current: IBrokerConnection) -> IBrokerConnection:
        """After C{refresh}, the connection to read C{tp} on: C{current} if its leader is still there (or cannot
        be learnt now: it reconnects), else a new one to the new leader (C{current} is closed)."""
        await self._backoff(refresh.attempt)
        try:
            host, port = await self.address(tp, fresh=True)
        except (*REFRESH_ON, ConnectionFailed, BrokerTimeout) as e:
            self._log.info("{tp}: cannot learn its leader now ({error})", tp=str(tp), error=str(e))
            return current
        if (host, port) == (current.host, current.port):
            return current
        self._log.info("{tp}: its leader is now at {address}", tp=str(tp), address=address_text(host, port))
        current.close()
        return self.connect(host, port)

    async def request(self, tp: TopicPartition, request: Any) -> Any:
        """C{request}'s answer from C{tp}'s leader, following it up to L{FOLLOW_REFRESHES} times."""
        attempt = 0
        while True:
            try:
                return await (await self.connection(tp)).request(request)
            except (*REFRESH_ON, ConnectionFailed) as e:
                attempt += 1
                if attempt > FOLLOW_REFRESHES:
                    raise
                await self._refreshed(tp, Refresh(e, attempt))

    def close(self) -> Deferred[None]:
        closing = [c.close() for c in self._shared.values()]
        self._shared = {}
        return DeferredList(closing, consumeErrors=True).addCallback(lambda _: None)

    async def _refreshed(self, tp: TopicPartition, refresh: Refresh) -> IBrokerConnection | None:
        await self._backoff(refresh.attempt)
        try:
            return self.shared(*await self.address(tp, fresh=True))
        except (*REFRESH_ON, ConnectionFailed, BrokerTimeout) as e:
            self._log.info("{tp}: cannot learn its leader now ({error})", tp=str(tp), error=str(e))
            return None

    async def _backoff(self, attempt: int) -> None:
        await deferLater(self._clock, min(self._policy(attempt), MAX_BACKOFF_S), lambda: None)

    async def _ask(self, topic: str) -> ClusterLayout | None:
        """The layout the first broker that answers CLUSTER_METADATA_V2 describes (the consumer's broker first);
        None from an older broker, which does not know type 14 (and has no replicated topic).

        @raise BrokerError: the broker refuses C{topic}.
        @raise ConnectionFailed: none answered.
        """
        errors = []
        mine = (self._bootstrap.host, self._bootstrap.port)
        for address in [mine, *(a for a in self._brokers if a != mine)]:
            connection = self.shared(*address)  # (opened only when the ones before could not answer)
            try:
                answer = await connection.request(ClusterMetadataV2Request((topic,)))
            except OLDER_BROKER[0]:  # InvalidRequest: type 14 unknown (its ConnectionLost is a ConnectionFailed)
                return None
            except (ConnectionFailed, BrokerTimeout) as e:
                errors.append(f"{connection.address}: {e}")
                continue
            described = answer.layout(topic)
            if described is not None:
                raise_for(described.error, f"broker {answer.broker_id} refuses topic {topic!r}")
            layout = ClusterLayout.from_metadata(answer).layout
            self._brokers = sorted(layout.brokers.values())
            return layout
        raise ConnectionFailed(f"cannot learn where topic {topic!r}'s leaders are: " + "; ".join(errors))
