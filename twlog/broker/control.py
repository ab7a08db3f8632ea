# -*- test-case-name: tests.broker.test_control -*-
"""A broker's part in the control plane, with ZooKeeper: its candidacy for controller, and the controlled shutdown.

L{BrokerControl} runs the broker's L{Controller} (every broker is a candidate;
ZooKeeper elects one, docs/replication.md, "The controller") and, when the
broker stops, first moves its leaderships away (Kafka's controlled shutdown),
bounded by C{shutdown_timeout_s}, then stops the controller, which resigns if
it is the active one so another is elected at once.

A broker that is the active controller runs the controlled shutdown itself:
it marks itself as shutting down and runs a round, which gives each partition
it leads to another live ISR member (leader epoch +1).  There is no request by
which a broker asks another broker's controller to do so (Kafka 0.8's
ControlledShutdown request has no twlog counterpart yet), so a broker that is
not the controller relies on its deregistration, which the broker service does
next: its C{/brokers/ids/<id>} node is deleted at once (not after the session
timeout), the active controller's watch fires, and it moves the leaderships to
the first live ISR member, as after a loss.
"""

from __future__ import annotations

from twisted.internet.defer import CancelledError, Deferred, TimeoutError, succeed
from twisted.logger import Logger

from twlog.coord.replication.controller import Controller, Superseded
from twlog.coord.zk import IZooKeeper, KazooException

__all__ = ["CONTROLLED_SHUTDOWN_TIMEOUT_S", "BrokerControl"]

#: How long a stopping broker waits for its leaderships to move before it stops anyway.
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0


class BrokerControl:
    """The broker's controller candidacy, started with its ZooKeeper session and stopped before it leaves.

    @param unclean: allow unclean leader election (the broker's C{--unclean-leader-election}).
    @param shutdown_timeout_s: the bound on the controlled shutdown at stop.
    """

    _log = Logger()

    def __init__(self, zk: IZooKeeper, broker_id: int, *, clock, unclean: bool = False,
                 shutdown_timeout_s: float = CONTROLLED_SHUTDOWN_TIMEOUT_S, **controller_options) -> None:
        self.broker_id = broker_id
        self._clock = clock
        self.shutdown_timeout_s = shutdown_timeout_s
        self.controller = Controller(zk, broker_id, clock=clock, unclean=unclean, **controller_options)
        #: Once stopped: the partitions (topic, number) the broker still led after its controlled shutdown
        #: (None: it ran none, not being the controller, or it timed out).
        self.still_led: list[tuple[str, int]] | None = None

    def start(self) -> None:
        """Run for controller now and after every reconnection."""
        self.controller.start()

    def controller_id(self) -> int:
        """The active controller as this broker knows it (-1: none known)."""
        return self.controller.controller_id

    def stop(self) -> Deferred[None]:
        """Move this broker's leaderships away (bounded), then stop the controller (resigning if active)."""
        d = self._controlled_shutdown() if self.controller.active else succeed(None)
        d.addCallback(lambda _: self.controller.stop())
        d.addErrback(lambda f: self._log.warn("broker {id}: stopping the controller failed: {error}",
                                              id=self.broker_id, error=f.getErrorMessage()))
        return d

    def _controlled_shutdown(self) -> Deferred[None]:
        d = self.controller.controlled_shutdown(self.broker_id)
        d.addTimeout(self.shutdown_timeout_s, self._clock)

        def moved(still: list[tuple[str, int]]) -> None:
            self.still_led = still
            if still:
                self._log.warn("broker {id}: controlled shutdown: no other live in-sync replica for {parts}: they "
                               "are offline until a replica returns", id=self.broker_id,
                               parts=", ".join(f"{t}:{p}" for t, p in still))
            else:
                self._log.info("broker {id}: controlled shutdown: its leaderships moved to other replicas",
                               id=self.broker_id)

        def failed(failure) -> None:
            if failure.check(TimeoutError, CancelledError):
                why = f"not done within {self.shutdown_timeout_s:g} s"
            elif failure.check(Superseded):
                why = "this broker stopped being the controller meanwhile"
            elif failure.check(KazooException):
                why = f"ZooKeeper failed ({failure.getErrorMessage() or failure.type.__name__})"
            else:
                self._log.failure("broker {id}: controlled shutdown failed", failure, id=self.broker_id)
                return
            self._log.warn("broker {id}: controlled shutdown: {why}; stopping anyway (the next controller moves "
                           "its leaderships when it leaves)", id=self.broker_id, why=why)

        return d.addCallbacks(moved, failed)
