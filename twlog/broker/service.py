# -*- test-case-name: tests.integration.test_twistd,tests.integration.test_broker -*-
"""The broker as a service: its logs, its TCP listener and its registration in ZooKeeper.

L{BrokerService} opens the log directory (recovering it after an unclean
shutdown), listens, and with C{config.zookeeper} registers the broker and runs
for controller (L{twlog.broker.control.BrokerControl}).  It starts in that
order and stops in reverse, each step waiting for the one before: on SIGTERM
the broker first runs a controlled shutdown if it is the controller (its
leaderships move to other in-sync replicas, bounded in time), then leaves
ZooKeeper (producers and consumers stop sending to it), then stops accepting, then flushes every log and leaves
the clean-shutdown marker.  When that final flush fails, the stop is logged
as unclean, and a process run by twistd exits with status 1.

A broker that cannot start logs one critical line naming the option to
change (C{port 9092 is in use (another broker?): choose another with --port},
C{--log-dir d is a file, not a directory}) and stops the reactor; under
twistd the process then exits with status 1, as it does after an unclean stop.
"""

from __future__ import annotations

import atexit
import errno
import os
from collections.abc import Callable

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.logger import Logger
from typing_extensions import override

from twlog.broker.authorization import follow_acls
from twlog.broker.control import BrokerControl
from twlog.broker.limits import default_max_connections, raise_open_files_limit
from twlog.broker.listeners import Listeners, listen, listen_error
from twlog.broker.listeners import tcp_endpoint as _endpoint  # noqa: F401 (tests/broker/test_limits.py)
from twlog.broker.metrics import BrokerMetrics, advertised_metrics_url, metrics_url, serve_metrics
from twlog.broker.replicas import BrokerReplicas
from twlog.broker.users import BrokerUsers
from twlog.config import BrokerConfig
from twlog.coord.cluster import ClusterView
from twlog.coord.registration import BrokerRegistration
from twlog.coord.zk import KazooException, ZooKeeper
from twlog.coord.zkretry import retried_after_connection_loss
from twlog.coord.zksecure import start_session, zookeeper_credentials
from twlog.errors import TwlogError
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.server import Broker
from twlog.protocol.twisted_internals import exit_now, forget_exit_signal
from twlog.storage.directory import LogDirectoryInUse
from twlog.storage.manager import LogManager, thread_pool_runner


class BrokerService(Service):
    """The broker: opens the log directory, listens, registers in ZooKeeper; on stop undoes all three.

    @param stop_reactor_on_error: when the broker cannot start (log directory in use, port taken, id registered by
        another broker, ZooKeeper unreachable), log one critical line and stop the reactor, as a process should.
        Embedders and tests turn it off and see the error on L{listening}.
    @param zookeeper_session_timeout_s: how long ZooKeeper keeps this broker registered after losing touch with it.
    @param zookeeper_connect_timeout_s: how long to wait for ZooKeeper at start.
    @param unclean_exit_code: when set (C{twistd twlog} sets 1), a stop whose final flush failed makes the process
        exit with this status once the reactor has stopped (instead of twistd's clean exit, or its re-raised
        SIGTERM).  Embedders and tests leave it None and read L{stopped_cleanly}.
    @param cannot_start_exit_code: when set (C{twistd twlog} sets 1) with C{stop_reactor_on_error}, a broker that
        cannot start makes the process exit with this status once the reactor has stopped (twistd itself would exit
        0).  Embedders and tests leave it None and read L{listening}.
    """

    _log = Logger()

    def __init__(
        self,
        config: BrokerConfig,
        reactor=None,
        *,
        stop_reactor_on_error: bool = True,
        zookeeper_session_timeout_s: float | None = None,
        zookeeper_connect_timeout_s: float = 15.0,
        unclean_exit_code: int | None = None,
        cannot_start_exit_code: int | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        self.config = config
        self.logs = LogManager(config.log, reactor, thread_pool_runner(reactor))
        self.broker = Broker(self.logs, config, reactor)
        self.factory = BrokerFactory(self.broker)
        self.users = BrokerUsers(config, reactor, self.factory)  # who clients are (docs/security.md)
        #: Once listening: the plaintext port (None with C{--no-plaintext}) and the TLS port (with C{--tls-port}).
        self.listeners = Listeners()
        self.port = self.tls_port = None
        self.stop_reactor_on_error = stop_reactor_on_error
        self.zookeeper_session_timeout_s = (config.zookeeper_session_timeout_s if zookeeper_session_timeout_s is None
                                            else zookeeper_session_timeout_s)
        self.zookeeper_connect_timeout_s = zookeeper_connect_timeout_s
        self.unclean_exit_code = unclean_exit_code
        self.cannot_start_exit_code = cannot_start_exit_code
        #: Once stopped: whether every log was flushed and the clean-shutdown marker left.
        self.stopped_cleanly: bool | None = None
        #: The ZooKeeper session, while the broker runs with C{config.zookeeper}.
        self.zookeeper: ZooKeeper | None = None
        #: The broker's registration in ZooKeeper, once made.
        self.registration: BrokerRegistration | None = None
        #: With ZooKeeper, once registered: the broker's candidacy for controller (replication).
        self.control: BrokerControl | None = None
        #: With ZooKeeper, once registered: its leaders and followers of replicated partitions.
        self.replicas: BrokerReplicas | None = None
        #: With ZooKeeper, the cluster this broker describes in CLUSTER_METADATA (read after registering,
        #: in the background: until it is read, the broker answers for itself and says so).
        self.cluster: ClusterView | None = None
        #: With C{config.metrics_port}: the metrics, and once listening, the port serving them over HTTP.  Their
        #: replication families read the replicas and the controller (made once ZooKeeper is joined) when scraped.
        self.metrics = BrokerMetrics(
            self.broker, self.factory, self.logs,
            replicas=lambda: self.replicas.manager if self.replicas is not None else None,
            controller=lambda: self.control.controller if self.control is not None else None,
        ) if config.metrics_port is not None else None
        self.metrics_port = None
        #: Fires with the listening port once the broker accepts connections (and, with
        #: ZooKeeper, is registered); fails if it cannot start.
        self.listening: Deferred = Deferred()

    @override
    def startService(self) -> None:
        super().startService()
        try:
            self.logs.start()
        except LogDirectoryInUse as e:
            error = TwlogError(f"{e}: choose another with --log-dir")
            self._cannot_start("cannot start the broker: {error}", error=error)
            return
        except TwlogError as e:
            self._cannot_start("cannot start the broker: {error}", error=e)
            return
        except OSError as e:
            error = TwlogError(log_dir_error(self.config.log.log_dir, e))
            self._cannot_start("cannot start the broker: {error}", error=error)
            return
        open_files = raise_open_files_limit()
        if self.factory.max_connections is None:
            segments = sum(len(log.segments) for log in self.logs.logs().values())
            self.factory.max_connections = default_max_connections(open_files, segments)
        config = self.config
        self._log.info(
            "broker {id}: at most {cap} client connections (open-files limit {limit}), {per_ip} per address; "
            "{idle}", id=config.broker_id, cap=self.factory.max_connections,
            limit=open_files, per_ip=config.max_connections_per_ip or "any number",
            idle=f"idle ones closed after {config.idle_timeout_s:g} s" if config.idle_timeout_s else "idle ones kept",
        )
        self._log.info(
            "broker {id}: {count} partitions under {log_dir}{recovered}",
            id=self.config.broker_id, count=len(self.logs.logs()), log_dir=self.config.log.log_dir,
            recovered=" (recovered after an unclean shutdown)" if self.logs.recovered and self.logs.logs() else "",
        )
        d = self._serve_metrics()
        d.addCallbacks(lambda _: self._listen(), self._cannot_serve_metrics)

    def _listen(self) -> None:
        d = Deferred.fromCoroutine(listen(self._reactor, self.config, self.factory))
        d.addCallbacks(self._listening, self._cannot_listen)

    def _serve_metrics(self) -> Deferred:
        if self.metrics is None:
            return succeed(None)
        d = Deferred.fromCoroutine(serve_metrics(self._reactor, self.config, self.metrics.site()))
        return d.addCallback(self._serving_metrics)

    def _serving_metrics(self, port) -> None:
        self.metrics_port = port
        self._log.info("broker {id}: metrics at {url}", id=self.config.broker_id, url=self.metrics_url)

    def _cannot_serve_metrics(self, failure) -> None:
        error = failure.value if failure.check(TwlogError) else TwlogError(failure.getErrorMessage())
        self._cannot_start("{error}", error=error)

    @property
    def metrics_url(self) -> str | None:
        """Where the metrics are served (C{http://HOST:PORT/metrics}, or https), once they are."""
        return metrics_url(self.config, self.metrics_port) if self.metrics_port is not None else None

    def _listening(self, listeners: Listeners) -> None:
        self.listeners = listeners
        self.port, self.tls_port = listeners.plain, listeners.tls
        port = listeners.plain or listeners.tls
        self.broker.port, self.broker.tls_port = port.getHost().port, listeners.tls and listeners.tls.getHost().port
        self._log.info("broker {id} listening on {where}", id=self.config.broker_id,
                       where=listeners.describe(self.config.interface))
        if self.config.anonymous_beyond_loopback:  # (allowed by --allow-anonymous, or the config was refused)
            self._log.warn("broker {id} serves anyone who can reach {interface} without authentication "
                           "(--allow-anonymous)", id=self.config.broker_id, interface=self.config.interface)
        if self.config.zookeeper is None:
            self.listening.callback(port)
            return
        d = Deferred.fromCoroutine(self._register(self.broker.port))
        d.addCallbacks(lambda _: self.listening.callback(port), self._cannot_register)

    def _cannot_listen(self, failure) -> None:
        error = (failure.value if failure.check(TwlogError)
                 else TwlogError(listen_error(self.config.interface, self.config.port, failure.value)))
        self._cannot_start("cannot start the broker: {error}", error=error)

    async def _register(self, port: int) -> None:
        zk = self.zookeeper = ZooKeeper(
            self.config.zookeeper, reactor=self._reactor, session_timeout_s=self.zookeeper_session_timeout_s,
            connect_timeout_s=self.zookeeper_connect_timeout_s, create_chroot=True,
            credentials=zookeeper_credentials(self.config))

        def retried(step):  # (after a dropped connection: again once reconnected, within the connect timeout)
            return retried_after_connection_loss(zk, step, self._reactor, self.zookeeper_connect_timeout_s)
        try:
            await start_session(zk, self._reactor, self.zookeeper_connect_timeout_s)
            _check_running(self, zk)
            await retried(lambda: self.users.start(zk))  # (before registering: clients find brokers knowing them)
            _check_running(self, zk)
            registration = BrokerRegistration(
                zk, self.config, self.logs, port, clock=self._reactor,
                stale_wait_s=self.zookeeper_session_timeout_s + 5, tls_port=self.broker.tls_port,
                metrics_url=advertised_metrics_url(self.config, self.metrics_port),
            )
            await retried(registration.start)
            _check_running(self, zk)  # (stopped meanwhile: its session is closed, the nodes went with it)
            self.registration = registration
            self._follow_cluster(zk)
            follow_acls(zk, self.broker, self._log)  # (with --acls; until read, only super users are allowed)
            self._start_control(zk)
            self._start_replicas(zk)
        except BaseException:
            if self.zookeeper is zk:
                self.zookeeper = None
                await zk.stop()
            raise

    def _follow_cluster(self, zk: ZooKeeper) -> None:
        """Start reading the cluster for CLUSTER_METADATA without waiting for it (ZooKeeper may be slow)."""
        view = self.cluster = self.broker.cluster = ClusterView(zk, all_topics=True)
        Deferred.fromCoroutine(view.start()).addErrback(
            lambda f: view is self.cluster and self._log.warn(
                "broker {id}: reading the cluster from ZooKeeper failed ({error}); CLUSTER_METADATA answers "
                "for this broker alone until the session reconnects", id=self.config.broker_id,
                error=f.getErrorMessage() or f.type.__name__)
        )

    def _start_control(self, zk: ZooKeeper) -> None:
        """Run for controller (replicated topics' leaders and ISRs), as every broker with ZooKeeper does."""
        control = self.control = BrokerControl(
            zk, self.config.broker_id, clock=self._reactor, unclean=self.config.unclean_leader_election,
            shutdown_timeout_s=self.config.controlled_shutdown_timeout_s,
            preferred_delay_s=self.config.preferred_leader_delay_s)
        self.broker.controller_id = control.controller_id
        control.start()

    def _start_replicas(self, zk: ZooKeeper) -> None:
        """Lead and follow replicated partitions as the controller's states say (the view watches them)."""
        assert self.cluster is not None
        replicas = self.replicas = BrokerReplicas(self.config, self.broker, self.logs, zk, self.cluster, self._reactor)
        replicas.start()

    def _cannot_register(self, failure) -> None:
        if not self.running or failure.check(_Stopped):
            # Stopped while registering (SIGTERM): its session closed under it (ConnectionLoss): not a failure.
            self.listening.errback(_Stopped(f"broker {self.config.broker_id} was stopped while it was starting"))
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
            if self.cannot_start_exit_code is not None:
                self._reactor.addSystemEventTrigger("after", "shutdown", self._exit_with,
                                                    self.cannot_start_exit_code)

    @override
    def stopService(self) -> Deferred:
        super().stopService()
        d = self._leave_zookeeper()
        d.addCallback(lambda _: self._stop_serving())
        return d

    def _leave_zookeeper(self) -> Deferred:
        """Controlled shutdown first (L{BrokerControl.stop}: a controller moves this broker's leaderships
        away, bounded by C{controlled_shutdown_timeout_s}, and resigns), then deregister, so that producers and
        consumers stop using this broker, then close the session."""
        zk, self.zookeeper = self.zookeeper, None
        registration, self.registration = self.registration, None
        view, self.cluster = self.cluster, None
        self.users.stop()
        control, self.control = self.control, None
        replicas, self.replicas = self.replicas, None
        self.broker.controller_id = None
        if zk is None:
            return succeed(None)
        # A controller first moves this broker's leaderships away (bounded), and resigns; its leaders and
        # followers follow the states it writes meanwhile (the view still watches them), then stop.
        if replicas is not None:
            replicas.shut_down()
        d = control.stop() if control is not None else succeed(None)
        d.addCallback(lambda _: replicas.stop() if replicas is not None else None)
        d.addBoth(lambda result: (view.stop() if view is not None else None, result)[1])
        d.addCallback(lambda _: setattr(self.broker, "cluster", None))
        d.addCallback(lambda _: registration.stop() if registration is not None else None)
        d.addCallback(lambda _: zk.stop())
        return d.addErrback(lambda f: self._log.warn("closing the ZooKeeper session failed: {error}",
                                                     error=f.getErrorMessage()))

    def _stop_serving(self) -> Deferred:
        stops = [port.stopListening() for port in (self.port, self.tls_port) if port is not None]
        self.port = self.tls_port = None
        if self.metrics_port is not None:
            stops.append(self.metrics_port.stopListening())
            self.metrics_port = None
        # No request may reach the logs once they start closing: a write after the
        # clean-shutdown marker would escape the next start's recovery.
        self.factory.disconnect_all()
        d = DeferredList(stops)
        if self.logs.running:
            d.addCallback(lambda _: self.logs.stop())
            d.addCallback(self._stopped)
        return d

    def _stopped(self, clean: bool) -> None:
        self.stopped_cleanly = clean
        if clean:
            self._log.info("broker {id} stopped cleanly", id=self.config.broker_id)
            return
        self._log.critical(
            "broker {id} stopped uncleanly: the final flush failed, so no clean-shutdown marker was left; "
            "the next start recovers every log", id=self.config.broker_id,
        )
        if self.unclean_exit_code is not None:
            self._reactor.addSystemEventTrigger("after", "shutdown", self._exit_with, self.unclean_exit_code)

    def _exit_with(self, code: int, at_exit: Callable[..., object] = atexit.register) -> None:
        """Make the process exit with C{code} once twistd is done (its pid file removed, its log closed).

        twistd ends a process stopped by a signal with that signal again (it
        reads the reactor's C{_exitSignal} when the reactor returns) and
        otherwise exits 0; it has no exit status of its own to set.  So: no
        signal, and an exit handler that ends the process with C{code}.
        """
        forget_exit_signal(self._reactor)
        at_exit(exit_now, code)


def log_dir_error(log_dir: str, error: OSError) -> str:
    """Why the log directory C{log_dir} could not be opened, in one line naming C{--log-dir}."""
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        # makedirs met a file: log_dir itself (EEXIST) or one of its parents (ENOTDIR).
        path = log_dir
        while path and not os.path.isdir(path):
            if os.path.lexists(path):
                if path == log_dir:
                    return f"--log-dir {log_dir} is a file, not a directory"
                return f"--log-dir {log_dir}: {path} is a file, not a directory"
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        where = f" ({error.filename})" if error.filename and error.filename != log_dir else ""
        return f"--log-dir {log_dir}: {error.strerror}{where}: choose one this user can write"
    where = f": {error.filename}" if error.filename and error.filename != log_dir else ""
    return f"cannot open --log-dir {log_dir}{where}: {error.strerror or error}"


class _Stopped(TwlogError):
    """The broker was stopped while it was starting."""


def _check_running(service: BrokerService, zk: ZooKeeper) -> None:
    """@raise _Stopped: C{service} was stopped (its session C{zk} closed) while it was starting."""
    if not service.running or service.zookeeper is not zk:
        raise _Stopped()
