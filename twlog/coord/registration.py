# -*- test-case-name: tests.coord.test_registration,tests.integration.test_registration -*-
"""A broker's registration in ZooKeeper: its address and its topics, kept across session expiry.

Kafka 0.7's broker registry (shared/DESIGN.md, "ZooKeeper layout"): the
ephemeral node C{/brokers/ids/<id>} holds the broker's address in 0.7's form,
C{<host>-<ms since the epoch>:<host>:<port>} (L{broker_value}; 0.7 clients
C{split(":")} it), read back by L{twlog.coord.cluster.parse_broker_address}; the
ephemeral node C{/brokers/topics/<topic>/<id>} its partition count of the topic
(ASCII decimal), one per topic the broker holds.  Producers and consumers
watch both (L{twlog.coord.cluster.ClusterView}).

Ephemeral nodes belong to the session that created them and go with it.  So:

  - On start, an id already registered by another live session is refused
    (L{BrokerIdInUse}): two brokers with one id would split a partition's
    name between two logs.  One exception: a registration with this
    broker's own address is its previous life (it crashed or was killed, and
    the server has not yet expired that session), so the broker waits for it
    to expire, up to C{stale_wait_s}.  Only the host and port are compared: the
    creator id's timestamp differs from run to run.
  - When the session expires (LOST, then CONNECTED on a new session), every
    node is gone, and the broker registers again: its id, then each topic.
    After a lost connection (SUSPENDED, then CONNECTED on the same session)
    the nodes are still there, but a write may have failed meanwhile, so the
    broker checks them the same way (registering is idempotent).
  - On stop, the nodes this session owns are deleted (the session may be
    shared; when it is closed they would go anyway).

L{BrokerNodes} writes and deletes the nodes; L{BrokerRegistration} decides when.
L{BrokerRegistration.state} says where it is (L{RegistrationState}), and decides
what a session event or a finished attempt does; it moves only along
L{REGISTRATION_MOVES} (L{twlog.statemachine}).
"""

from __future__ import annotations

import enum
from collections.abc import Coroutine
from typing import Any

from twisted.application.internet import backoffPolicy
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from twlog.config import BrokerConfig
from twlog.coord.endpoints import endpoints_value
from twlog.coord.nodes import BrokerIdInUse, BrokerNodes, broker_address, broker_value
from twlog.coord.zk import CONNECTED, LOST, SUSPENDED, IZooKeeper
from twlog.errors import TwlogError
from twlog.statemachine import StateMachine, logged_by
from twlog.storage.manager import LogManager


class RegistrationState(enum.Enum):
    """Where a L{BrokerRegistration} is.  Transitions::

        STOPPED        --start()-----------------------------------------------> REGISTERING
        REGISTERING    --id and topics registered----------------------------> REGISTERED
        REGISTERING    --id held by another live broker (BrokerIdInUse)-------> STOPPED
        REGISTERED     --connection lost (SUSPENDED)--------------------------> SUSPENDED
        any running    --session expired (LOST): every node is gone-----------> EXPIRED
        SUSPENDED      --reconnected: check the nodes-------------------------> RE_REGISTERING
        EXPIRED        --new session: register the id and every topic again---> RE_REGISTERING
        RE_REGISTERING --done--------------------------------------------------> REGISTERED
        RE_REGISTERING --failed: retried after a back-off (stays)-------------> RE_REGISTERING
        RE_REGISTERING --the id is held by another live broker now------------> FAILED
        FAILED         --connection lost, or session expired------------------> SUSPENDED, EXPIRED
        any            --stop()------------------------------------------------> STOPPED

    The table is L{REGISTRATION_MOVES}.
    """

    STOPPED = "stopped"
    REGISTERING = "registering"
    REGISTERED = "registered"
    SUSPENDED = "suspended"
    EXPIRED = "expired"
    RE_REGISTERING = "re-registering"
    FAILED = "failed"


_S = RegistrationState

#: Where each L{RegistrationState} may move; any other move raises L{twlog.statemachine.IllegalTransition}.
REGISTRATION_MOVES: dict[RegistrationState, set[RegistrationState]] = {
    _S.STOPPED: {_S.REGISTERING, _S.STOPPED},
    _S.REGISTERING: {_S.REGISTERED, _S.SUSPENDED, _S.EXPIRED, _S.STOPPED},
    _S.REGISTERED: {_S.SUSPENDED, _S.EXPIRED, _S.STOPPED},
    _S.SUSPENDED: {_S.EXPIRED, _S.RE_REGISTERING, _S.STOPPED},
    _S.EXPIRED: {_S.RE_REGISTERING, _S.STOPPED},
    _S.RE_REGISTERING: {_S.REGISTERED, _S.SUSPENDED, _S.EXPIRED, _S.FAILED, _S.STOPPED},
    _S.FAILED: {_S.SUSPENDED, _S.EXPIRED, _S.STOPPED},
}

#: Out of touch with ZooKeeper: check (or register) everything again once CONNECTED.
_DISCONNECTED = (_S.SUSPENDED, _S.EXPIRED)
#: The states in which the id may be held in the current session (then new topics are registered at once).
_HOLDING = (_S.REGISTERING, _S.REGISTERED, _S.SUSPENDED, _S.RE_REGISTERING)


class BrokerRegistration:
    """Registers one broker (id, address, topics) in ZooKeeper, and again after each session expiry.

    @param zk: a started session; L{stop} leaves it open.
    @param port: the port the broker actually listens on (the config's may be 0).
    @param stale_wait_s: how long to wait for a registration of this broker's
        own address, left by a session of a previous run, to expire.
    """

    _log = Logger()

    def __init__(self, zk: IZooKeeper, config: BrokerConfig, logs: LogManager, port: int, *, clock=None,
                 stale_wait_s: float = 15.0, tls_port: int | None = None, metrics_url: str | None = None) -> None:
        if clock is None:
            from twisted.internet import reactor as clock
        self._zk = zk
        self._logs = logs
        self._clock = clock
        self.broker_id = config.broker_id
        port = config.advertised_port or port
        #: This broker's address, C{host:port}.
        self.address = broker_address(config.advertised_host, port)
        #: What this broker writes to C{/brokers/ids/<id>} (0.7's form; the creator id dates from now).
        self.value = broker_value(config.advertised_host, port, int(clock.seconds() * 1000))
        self.stale_wait_s = stale_wait_s
        #: Its listeners (C{/twlog/brokers/endpoints/<id>}): the plaintext port as above, C{tls_port}, and where it
        #: serves its metrics.
        endpoints = endpoints_value(config.advertised_host, port, tls_port, metrics_url)
        self._nodes = BrokerNodes(zk, self.broker_id, self.value, clock, endpoints)
        self._machine = StateMachine(f"broker {self.broker_id} registration", _S.STOPPED, REGISTRATION_MOVES,
                                     logged_by(self._log))
        #: The session that holds the id node (None: not claimed since the last start).
        self._id_session: int | None = None
        #: Bumped when the session is lost or the registration stops: older work is stale.
        self._generation = 0
        #: The last session in which the id was claimed (for L{registrations}).
        self._registered_session: int | None = None
        #: The re-registration running now, if any.
        self._attempt: Deferred | None = None
        self._retry_policy = backoffPolicy(initialDelay=0.5, maxDelay=30.0)
        self._retry_attempt = 0
        self._retry_call = None
        self._pending: set[Deferred] = set()
        self._listening_to_logs = False
        #: In how many sessions the broker registered (1 after start; +1 per session expiry).
        self.registrations = 0

    @property
    def state(self) -> RegistrationState:
        """Where the registration is (L{RegistrationState})."""
        return self._machine.state

    def _holds_id(self) -> bool:
        """Whether the id is claimed in the current session: topics created now are registered at once."""
        return self.state in _HOLDING and self._id_session is not None and self._id_session == self._zk.session_id

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> Deferred[None]:
        """Register the id and every topic the logs hold; then keep them registered.

        @raise BrokerIdInUse: another live broker holds the id.
        """
        return Deferred.fromCoroutine(self._start())

    def stop(self, timeout_s: float = 5.0) -> Deferred[None]:
        """Stop re-registering, and delete the nodes this session owns (giving up after C{timeout_s})."""
        d = Deferred.fromCoroutine(self._stop())
        d.addTimeout(timeout_s, self._clock)
        return d.addErrback(
            lambda f: self._log.warn("broker {id}: could not deregister from ZooKeeper: {error}",
                                     id=self.broker_id, error=f.getErrorMessage())
        )

    async def _start(self) -> None:
        self._machine.move(_S.REGISTERING)
        if not self._listening_to_logs:
            self._listening_to_logs = True
            self._logs.add_topic_listener(self._topic_created)
            self._logs.add_delete_listener(self._topic_deleted)
        self._zk.add_state_listener(self._session_changed)
        try:
            count, _ = await self._register_all(self._generation)
        except BaseException:
            self._machine.move(_S.STOPPED)
            self._zk.remove_state_listener(self._session_changed)
            raise
        if self.state is _S.REGISTERING:  # (else disconnected meanwhile, or re-registering after it)
            self._machine.move(_S.REGISTERED)
        self._log.info(
            "broker {id} registered in ZooKeeper at {hosts} as {address} ({count} topics)",
            id=self.broker_id, hosts=self._zk.hosts, address=self.address, count=count,
        )

    async def _stop(self) -> None:
        self._machine.move(_S.STOPPED)
        self._id_session = None
        self._generation += 1
        self._zk.remove_state_listener(self._session_changed)
        if self._retry_call is not None and self._retry_call.active():
            self._retry_call.cancel()
        if self._pending:
            await DeferredList(list(self._pending), consumeErrors=True)
        if not self._zk.connected:
            return  # the session closes (or has expired) without us: its nodes go with it
        await self._nodes.delete_owned(sorted(self._logs.topics()))
        self._log.info("broker {id} deregistered from ZooKeeper", id=self.broker_id)

    # -- registering -------------------------------------------------------------------

    async def _register_all(self, generation: int) -> tuple[int, bool]:
        """Claim the id, then register every topic; return the number of topics, and whether the id
        was claimed in a session it had not been claimed in before."""
        await self._nodes.claim_id(self.stale_wait_s)
        self._check(generation)
        await self._nodes.write_endpoints()
        self._check(generation)
        self._id_session = session = self._zk.session_id
        new_session = session != self._registered_session
        if new_session:
            self._registered_session = session
            self.registrations += 1
        topics = self._logs.topics()  # topics created from now on come through _topic_created
        await DeferredList(
            [self._track(self._register_topic(topic, count, generation)) for topic, count in sorted(topics.items())],
            fireOnOneErrback=True, consumeErrors=True,
        ).addErrback(lambda f: f.value.subFailure)  # the first failure, not FirstError
        return len(topics), new_session

    def _check(self, generation: int) -> None:
        """@raise _Stale: C{generation} is over (the session was lost, or the registration stopped)."""
        if generation != self._generation:
            raise _Stale()

    def _register_topic(self, topic: str, count: int, generation: int) -> Coroutine[Any, Any, bool]:
        return self._nodes.register_topic(topic, count, lambda: self._check(generation))

    def _topic_created(self, topic: str, count: int) -> None:
        if not self._holds_id():
            return  # registered with the others once the id is claimed
        d = self._track(self._register_topic(topic, count, self._generation))
        d.addCallback(lambda registered: registered and self._log.info(
            "broker {id} registered topic {topic} ({count} partitions)", id=self.broker_id, topic=topic, count=count))
        d.addErrback(self._failed, f"registering topic {topic}")

    def _topic_deleted(self, topic: str) -> None:
        if self.state is _S.STOPPED or not self._zk.connected:
            return  # (disconnected: a lost session takes the node with it; see docs/operations.md)
        d = self._track(self._nodes.deregister_topic(topic))
        d.addCallback(lambda _: self._log.info("broker {id} deregistered deleted topic {topic}",
                                               id=self.broker_id, topic=topic))
        d.addErrback(self._failed, f"deregistering deleted topic {topic}")

    def _track(self, coroutine) -> Deferred:
        d = Deferred.fromCoroutine(coroutine)
        if not d.called:
            self._pending.add(d)
            d.addBoth(lambda result: (self._pending.discard(d), result)[1])
        return d

    def _failed(self, failure, what: str) -> None:
        if failure.check(_Stale) or self.state in _DISCONNECTED:
            return  # the connection or session was lost meanwhile: registering again once connected covers it
        self._log.error("broker {id}: {what} in ZooKeeper failed: {error}", id=self.broker_id, what=what,
                        error=failure.getErrorMessage())

    # -- sessions ------------------------------------------------------------------------

    def _session_changed(self, state: str) -> None:
        if self.state is _S.STOPPED:
            return
        if state == LOST:
            self._generation += 1
            if self.state is not _S.EXPIRED:
                self._machine.move(_S.EXPIRED)
                self._log.warn("broker {id}: the ZooKeeper session expired, and its registration with it; "
                               "registering again once connected", id=self.broker_id)
        elif state == SUSPENDED:
            if self.state not in _DISCONNECTED:  # the nodes stay while the session lives, but a write may fail
                self._machine.move(_S.SUSPENDED)
        elif state == CONNECTED and self.state in _DISCONNECTED:
            self._machine.move(_S.RE_REGISTERING)
            self._register_again()

    def _register_again(self) -> None:
        """While RE_REGISTERING: register everything in the current session (after an expiry), or check
        that it still is (after a lost connection); retried after a back-off until done."""
        self._retry_call = None
        if self.state is not _S.RE_REGISTERING or self._attempt is not None:
            return  # (an attempt running now ends in REGISTERED, or retries)
        d = self._attempt = self._track(self._register_all(self._generation))

        def done(result: tuple[int, bool]) -> None:
            count, new_session = result
            self._attempt = None
            self._retry_attempt = 0
            if self.state is _S.RE_REGISTERING:
                self._machine.move(_S.REGISTERED)
            if new_session:
                self._log.info("broker {id} registered again in ZooKeeper as {address} after the session expired "
                               "({count} topics)", id=self.broker_id, address=self.address, count=count)

        def failed(failure) -> None:
            self._attempt = None
            if failure.check(_Stale):
                self._register_again()  # a new session came while this attempt ran (no-op while disconnected)
                return
            if self.state is not _S.RE_REGISTERING:
                return  # stopped, or disconnected meanwhile: registering again once connected
            if failure.check(BrokerIdInUse):
                self._machine.move(_S.FAILED)
                self._log.critical("broker {id} is no longer registered in ZooKeeper: {error}",
                                   id=self.broker_id, error=failure.getErrorMessage())
                return
            self._retry_attempt += 1
            delay_s = self._retry_policy(self._retry_attempt)
            self._log.warn("broker {id}: registering again in ZooKeeper failed ({error}); retrying in {delay:.1f} s",
                           id=self.broker_id, error=failure.getErrorMessage(), delay=delay_s)
            self._retry_call = self._clock.callLater(delay_s, self._register_again)

        d.addCallbacks(done, failed)


class _Stale(TwlogError):
    """The session this work was for is gone (or the registration stopped)."""

    def __init__(self) -> None:
        super().__init__("the ZooKeeper session expired (or the registration stopped) while registering")


__all__ = ["BrokerIdInUse", "BrokerNodes", "BrokerRegistration", "RegistrationState", "broker_address", "broker_value"]
