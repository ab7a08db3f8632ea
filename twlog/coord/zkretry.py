# -*- test-case-name: tests.coord.test_zkretry -*-
"""A step of a start that meets a dropped ZooKeeper connection: run again once the session is back.

A request in flight when the connection drops fails with C{ConnectionLoss}, though the session lives on and
kazoo reconnects within moments (a server slow to answer a ping, a leader election).  A broker that is
starting (L{twlog.broker.service.BrokerService}) retries its steps after such a loss, for as long as it waits
for ZooKeeper at all (its connect timeout), rather than fail to start; each step is idempotent (a node it
made before the loss is found, or adopted).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from twisted.internet.defer import Deferred, TimeoutError

from twlog.coord.zk import CONNECTED, LOST, ConnectionLoss, IZooKeeper

T = TypeVar("T")


async def retried_after_connection_loss(zk: IZooKeeper, step: Callable[[], Awaitable[T]], clock,
                                        timeout_s: float) -> T:
    """C{step()}'s result; after each C{ConnectionLoss}, C{step()} again once C{zk} is connected again (or its
    session was lost: a new one, or a closed session that fails the step at once), for up to C{timeout_s} from
    the first attempt.  Then the last C{ConnectionLoss} is raised."""
    deadline = clock.seconds() + timeout_s
    while True:
        try:
            return await step()
        except ConnectionLoss:
            remaining = deadline - clock.seconds()
            if remaining <= 0 or not await _back(zk, clock, remaining):
                raise


async def _back(zk: IZooKeeper, clock, timeout_s: float) -> bool:
    """Whether C{zk} is connected (or heard of its session's loss) within C{timeout_s}."""
    if zk.connected:
        return True
    changed: Deferred[bool] = Deferred()

    def listener(state: str) -> None:
        if state in (CONNECTED, LOST) and not changed.called:
            changed.callback(True)

    zk.add_state_listener(listener)
    changed.addTimeout(timeout_s, clock)
    try:
        return await changed
    except TimeoutError:  # (addTimeout's: not back in time)
        return False
    finally:
        zk.remove_state_listener(listener)


__all__ = ["retried_after_connection_loss"]
