# -*- test-case-name: tests.integration.test_twistd,tests.integration.test_broker -*-
"""The broker as a service: its logs, its TCP listener and its registration in ZooKeeper.

L{BrokerService} opens the log directory (recovering it after an unclean
shutdown), listens, and with C{config.zookeeper} registers the broker.  It
starts in that order and stops in reverse, each step waiting for the one
before: on SIGTERM the broker first leaves ZooKeeper (producers and consumers
stop sending to it), then stops accepting, then flushes every log and leaves
the clean-shutdown marker.
"""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.logger import Logger
from typing_extensions import override

from twlog.config import BrokerConfig
from twlog.coord.registry import BrokerRegistration
from twlog.coord.zk import KazooException, ZooKeeper
from twlog.errors import TwlogError
from twlog.protocol.server import Broker, BrokerFactory
from twlog.storage.manager import LogManager, thread_pool_runner


class BrokerService(Service):
    """The broker: opens the log directory, listens, registers in ZooKeeper; on stop undoes all three.

    @param stop_reactor_on_error: when the broker cannot start (log directory
        in use, port taken, id registered by another broker, ZooKeeper
        unreachable), log one critical line and stop the reactor, as a
        process should.  Embedders and tests turn it off and see the error
        on L{listening}.
    @param zookeeper_session_timeout_s: how long ZooKeeper keeps this broker
        registered after losing touch with it.
    @param zookeeper_connect_timeout_s: how long to wait for ZooKeeper at start.
    """

    _log = Logger()

    def __init__(
        self,
        config: BrokerConfig,
        reactor=None,
        *,
        stop_reactor_on_error: bool = True,
        zookeeper_session_timeout_s: float = 10.0,
        zookeeper_connect_timeout_s: float = 15.0,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        self.config = config
        self.logs = LogManager(config.log, reactor, thread_pool_runner(reactor))
        self.broker = Broker(self.logs, config, reactor)
        self.factory = BrokerFactory(self.broker)
        self.port = None
        self.stop_reactor_on_error = stop_reactor_on_error
        self.zookeeper_session_timeout_s = zookeeper_session_timeout_s
        self.zookeeper_connect_timeout_s = zookeeper_connect_timeout_s
        #: The ZooKeeper session, while the broker runs with C{config.zookeeper}.
        self.zookeeper: ZooKeeper | None = None
        #: The broker's registration in ZooKeeper, once made.
        self.registration: BrokerRegistration | None = None
        #: Fires with the listening port once the broker accepts connections (and, with
        #: ZooKeeper, is registered); fails if it cannot start.
        self.listening: Deferred = Deferred()

    @override
    def startService(self) -> None:
        super().startService()
        try:
            self.logs.start()
        except (TwlogError, OSError) as e:
            self._cannot_start("cannot start the broker: {error}", error=e)
            return
        self._log.info(
            "broker {id}: {count} partitions under {log_dir}{recovered}",
            id=self.config.broker_id, count=len(self.logs.logs()), log_dir=self.config.log.log_dir,
            recovered=" (recovered after an unclean shutdown)" if self.logs.recovered and self.logs.logs() else "",
        )
        endpoint_class = TCP6ServerEndpoint if ":" in self.config.interface else TCP4ServerEndpoint
        endpoint = endpoint_class(self._reactor, self.config.port, interface=self.config.interface)
        d = endpoint.listen(self.factory)
        d.addCallbacks(self._listening, self._cannot_listen)

    def _listening(self, port) -> None:
        self.port = port
        self.broker.port = port.getHost().port
        self._log.info("broker {id} listening on {host}:{port}", id=self.config.broker_id,
                       host=self.config.interface, port=self.broker.port)
        if self.config.zookeeper is None:
            self.listening.callback(port)
            return
        d = Deferred.fromCoroutine(self._register(self.broker.port))
        d.addCallbacks(lambda _: self.listening.callback(port), self._cannot_register)

    def _cannot_listen(self, failure) -> None:
        self._cannot_start("cannot listen on {interface}:{port}: {error}", interface=self.config.interface,
                           port=self.config.port, error=failure.getErrorMessage(), failure=failure)

    async def _register(self, port: int) -> None:
        zk = self.zookeeper = ZooKeeper(
            self.config.zookeeper, reactor=self._reactor, session_timeout_s=self.zookeeper_session_timeout_s,
            connect_timeout_s=self.zookeeper_connect_timeout_s,
        )
        try:
            await zk.start()
            if not self.running:
                raise _Stopped()
            registration = BrokerRegistration(
                zk, self.config, self.logs, port, clock=self._reactor,
                stale_wait_s=self.zookeeper_session_timeout_s + 5,
            )
            await registration.start()
            self.registration = registration
        except BaseException:
            if self.zookeeper is zk:
                self.zookeeper = None
                await zk.stop()
            raise

    def _cannot_register(self, failure) -> None:
        if not self.running or failure.check(_Stopped):
            self.listening.errback(failure)  # stopped while registering: nothing to report
            return
        if failure.check(TwlogError, KazooException):
            self._cannot_start("cannot register broker {id} in ZooKeeper: {error}", id=self.config.broker_id,
                               error=failure.getErrorMessage() or failure.type.__name__, failure=failure)
        else:
            self._log.failure("cannot register broker {id} in ZooKeeper", failure, id=self.config.broker_id)
            self._cannot_start("cannot register broker {id} in ZooKeeper: {error}", id=self.config.broker_id,
                               error=failure.getErrorMessage(), failure=failure)

    def _cannot_start(self, message: str, failure=None, **fields) -> None:
        """Log C{message} as one critical line, fail L{listening}, and stop the reactor (if asked to)."""
        self._log.critical(message, **fields)
        self.listening.errback(failure if failure is not None else fields["error"])
        if self.stop_reactor_on_error:
            self._reactor.callWhenRunning(self._reactor.stop)

    @override
    def stopService(self) -> Deferred:
        super().stopService()
        d = self._leave_zookeeper()
        d.addCallback(lambda _: self._stop_serving())
        return d

    def _leave_zookeeper(self) -> Deferred:
        """Deregister first, so that producers and consumers stop using this broker, then close the session."""
        zk, self.zookeeper = self.zookeeper, None
        registration, self.registration = self.registration, None
        if zk is None:
            return succeed(None)
        d = registration.stop() if registration is not None else succeed(None)
        d.addCallback(lambda _: zk.stop())
        return d.addErrback(lambda f: self._log.warn("closing the ZooKeeper session failed: {error}",
                                                     error=f.getErrorMessage()))

    def _stop_serving(self) -> Deferred:
        stops = []
        if self.port is not None:
            stops.append(self.port.stopListening())
            self.port = None
        # No request may reach the logs once they start closing: a write after the
        # clean-shutdown marker would escape the next start's recovery.
        self.factory.disconnect_all()
        d = DeferredList(stops)
        if self.logs.running:
            d.addCallback(lambda _: self.logs.stop())
            d.addCallback(lambda _: self._log.info("broker {id} stopped cleanly", id=self.config.broker_id))
        return d


class _Stopped(TwlogError):
    """The broker was stopped while it was starting."""
