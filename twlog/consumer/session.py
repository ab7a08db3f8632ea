# -*- test-case-name: tests.consumer.test_group -*-
"""L{SessionEvents}: what a group member does when its ZooKeeper session is lost, expires, or is back.

Disconnected, the member hands nothing out (it could not commit it) but goes on fetching; out of touch
for the session timeout, it stops fetching and drops what it fetched (others may own its partitions by
then).  When the session is back it first commits, then hands messages out again; after an expiry it
commits nothing of the old session and rejoins the group (docs/coordination.md).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from twlog.consumer.rebalancer import GroupState
from twlog.coord.zk import CONNECTED, LOST, SUSPENDED
from twlog.errors import RebalanceFailed

__all__ = ["SessionEvents"]


class SessionEvents:
    """Acts on one L{twlog.consumer.group.GroupConsumer}'s session changes (it passes itself)."""

    def __init__(self, consumer) -> None:
        self._consumer = consumer
        #: The timer that declares the session out of touch, while disconnected.
        self._suspicion = None

    def cancel(self) -> None:
        """Stop the out-of-touch timer (closing)."""
        if self._suspicion is not None and self._suspicion.active():
            self._suspicion.cancel()
        self._suspicion = None

    def changed(self, state: str) -> None:
        """Act on the session's new C{state} (the adapter's SUSPENDED, LOST or CONNECTED)."""
        consumer = self._consumer
        if consumer.state in (GroupState.NEW, GroupState.CLOSED):
            return
        self.cancel()
        if state == SUSPENDED:
            # Hand nothing out while disconnected: what is handed out now cannot be committed, and if the session
            # expires before it is back, the next owner delivers it again.  Fetching goes on (as Kafka's
            # high-level consumer kept fetching), so the queued messages are handed out at once if it is back.
            consumer.rebalancer.consumption.pause()
            # The server expires the session after its timeout without contact: stop fetching and drop what was
            # fetched by then, since other members may own our partitions once it has.
            self._suspicion = consumer._reactor.callLater(consumer.session_timeout_s, self._lose_session, False)
        elif state == LOST:
            self._lose_session(True)
        elif state == CONNECTED:
            consumer._logged(Deferred.fromCoroutine(self._reconnected()), "resuming after a lost connection")

    async def _reconnected(self) -> None:
        """The session is connected again.  First commit what was consumed and not committed before the loss: in
        the same session the partitions are still this member's (after an expiry it has forgotten them, and
        commits nothing).  Then hand messages out again, and watch the group again, rejoin it, or retry a
        failed rebalance."""
        consumer = self._consumer
        consumption = consumer.rebalancer.consumption
        if consumption.uncommitted():
            await consumption.commit()
        if not consumer.zookeeper.connected:
            return  # lost again meanwhile: the next reconnection goes on from here
        consumption.resume()
        if consumer.state is GroupState.FAILED:
            consumer.rebalancer.request()  # a rebalance may have failed for want of a connection
        elif consumer.state is GroupState.STABLE:
            await consumer.rebalancer.rewatch()  # the watch went with the connection
        elif consumer.state is GroupState.SESSION_LOST:
            await self._rejoin()

    def _lose_session(self, expired: bool) -> None:
        """Stop delivering: the session expired (C{expired}; its owner nodes are gone), or may have."""
        consumer = self._consumer
        self._suspicion = None
        if consumer.rebalancer.lose_session(expired):
            consumer._log.warn("consumer {consumer}: ZooKeeper session {what}; stopped consuming until it rejoins "
                               "group {group}", consumer=consumer.consumer_id, group=consumer.group,
                               what="expired" if expired else f"out of touch for {consumer.session_timeout_s:g} s")

    async def _rejoin(self) -> None:
        consumer = self._consumer
        try:
            await consumer._register()
            await consumer.rebalancer.ownership.delete_strays(list(consumer._subscription))
        except Exception as e:
            if consumer.state is GroupState.SESSION_LOST:
                consumer.rebalancer.rejoin_failed(RebalanceFailed(
                    f"consumer {consumer.consumer_id} could not rejoin group {consumer.group} after its session "
                    f"expired: {e}"))
            raise
        if consumer.state is GroupState.SESSION_LOST:
            consumer.rebalancer.rejoined()
