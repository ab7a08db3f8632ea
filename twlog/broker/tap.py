# -*- test-case-name: tests.integration.test_twistd -*-
"""C{twistd twlog}: the broker's command-line options and service tree.

The service tree is a MultiService holding L{BrokerService}: the log directory
(opened, recovered, flushed and closed cleanly), the TCP listener and, with
C{--zookeeper}, the broker's registration in ZooKeeper.  It starts in that
order and stops in reverse, so on SIGTERM the broker first leaves ZooKeeper
(producers and consumers stop sending to it), then stops accepting, then
flushes every log and leaves the clean-shutdown marker.
"""

from __future__ import annotations

from twisted.application.service import MultiService, Service
from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.logger import Logger
from twisted.python import usage
from typing_extensions import override

from twlog.config import HOUR_MS, BrokerConfig, LogConfig
from twlog.coord.registry import BrokerRegistration
from twlog.coord.zk import KazooException, ZooKeeper
from twlog.errors import TwlogError
from twlog.protocol.server import Broker, BrokerFactory
from twlog.storage.manager import LogManager, thread_pool_runner, validate_topic


def _int(name: str, minimum: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(str(text).replace("_", ""))
        except ValueError:
            raise usage.UsageError(f"--{name} must be a whole number, not {text!r}") from None
        if minimum is not None and value < minimum:
            raise usage.UsageError(f"--{name} must be at least {minimum}")
        return value

    return parse


def parse_topic_partitions(text: str) -> dict[str, int]:
    """C{"clicks:8,views:4"} as C{{"clicks": 8, "views": 4}}."""
    result = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        topic, sep, count = item.rpartition(":")
        if not sep:
            raise usage.UsageError(f"--topic-partitions wants TOPIC:COUNT items, not {item!r}")
        try:
            validate_topic(topic)
        except TwlogError as e:
            raise usage.UsageError(f"--topic-partitions: {e}") from None
        result[topic] = _int("topic-partitions", 1)(count)
    return result


class Options(usage.Options):
    """Options of C{twistd twlog}."""

    synopsis = "[options]"
    longdesc = (
        "Run a twlog broker: topics split into partitions, each an append-only log of segment files "
        "under --log-dir, served over twlog's binary protocol (Kafka 0.7 compatible) on --port."
    )
    optFlags = [
        ["no-sendfile", None, "Copy log bytes through the process instead of sendfile(2) (to measure the difference)."],
    ]
    optParameters = [
        ["port", "p", 9092, "TCP port to listen on (0: any free port).", _int("port", 0)],
        ["interface", None, "127.0.0.1", "Interface to listen on; 0.0.0.0 for every IPv4 interface."],
        ["host", None, None, "Host name clients should use to reach this broker (default: the interface)."],
        ["log-dir", "d", "twlog-data", "Directory for the partition logs (created if missing)."],
        ["broker-id", "b", 0, "This broker's id, unique in its cluster.", _int("broker-id", 0)],
        ["num-partitions", "n", 1, "Partitions of a new topic on this broker.", _int("num-partitions", 1)],
        ["topic-partitions", None, "", "Per-topic partition counts, e.g. clicks:8,views:4.", parse_topic_partitions],
        ["segment-bytes", None, 1024**3, "Roll a segment file at this size.", _int("segment-bytes", 1024)],
        ["flush-messages", None, 10_000, "fsync after this many messages...", _int("flush-messages", 1)],
        ["flush-interval-ms", None, 1000, "...or this long after the first unflushed one.",
         _int("flush-interval-ms", 0)],
        ["retention-hours", None, 168, "Delete segments last modified longer ago than this.",
         _int("retention-hours", 0)],
        ["retention-bytes", None, -1, "Delete the oldest segments while a partition is larger (-1: no cap).",
         _int("retention-bytes", -1)],
        ["retention-check-interval-ms", None, 300_000, "How often retention runs.",
         _int("retention-check-interval-ms", 1)],
        ["max-message-bytes", None, 1_000_000, "Largest message accepted.", _int("max-message-bytes", 9)],
        ["max-request-bytes", None, 100 * 1024 * 1024, "Largest request frame accepted.",
         _int("max-request-bytes", 1024)],
        ["zookeeper", "z", None,
         "ZooKeeper connect string host:port[,host:port...][/chroot]: register this broker (its --broker-id, "
         "address and topics) for producers and consumers to find (default: run standalone)."],
    ]

    @override
    def postOptions(self) -> None:
        try:
            log = LogConfig(
                log_dir=self["log-dir"],
                num_partitions=self["num-partitions"],
                topic_partitions=self["topic-partitions"] or {},
                segment_bytes=self["segment-bytes"],
                flush_messages=self["flush-messages"],
                flush_interval_ms=self["flush-interval-ms"],
                retention_ms=self["retention-hours"] * HOUR_MS,
                retention_bytes=self["retention-bytes"],
                retention_check_interval_ms=self["retention-check-interval-ms"],
                max_message_bytes=self["max-message-bytes"],
            )
            self.config = BrokerConfig(
                log=log,
                broker_id=self["broker-id"],
                port=self["port"],
                interface=self["interface"],
                host=self["host"],
                max_request_bytes=self["max-request-bytes"],
                zookeeper=self["zookeeper"],
                sendfile=not self["no-sendfile"],
            )
        except ValueError as e:
            raise usage.UsageError(str(e)) from None


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


def makeService(options: Options) -> MultiService:
    """The service tree twistd runs for C{twistd twlog}."""
    top = MultiService()
    BrokerService(options.config).setServiceParent(top)
    return top
