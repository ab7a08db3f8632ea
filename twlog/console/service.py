# -*- test-case-name: tests.console.test_service -*-
"""L{ConsoleService}: the console process: the HTTP listener, the ZooKeeper session, the samplers.

It listens at once and makes its ZooKeeper session in the background (L{twlog.console.cluster.ClusterReader}):
while ZooKeeper cannot be reached the pages load and the API answers 503 naming it.
"""

from __future__ import annotations

import atexit

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.client.options import ClientOptions
from twlog.console import api_groups, app, auth
from twlog.console.cluster import ClusterReader
from twlog.console.context import DEFAULT_TIMEOUT_S, ConsoleContext
from twlog.console.sampler import Sampler
from twlog.coord.zk import ZooKeeper
from twlog.protocol.twisted_internals import exit_now, forget_exit_signal
from twlog.schema_registry.service import RegistryTLS, listen_error


class ConsoleService(Service):
    """Serves the console of the cluster at C{zookeeper} on C{interface:port}."""

    _log = Logger()

    def __init__(self, *, zookeeper: str, port: int = 8080, interface: str = "127.0.0.1", reactor=None,
                 read_only: bool = False, registry_url: str | None = None, options: ClientOptions | None = None,
                 sample_interval_s: float = 10.0, timeout_s: float = DEFAULT_TIMEOUT_S,
                 tls: RegistryTLS | None = None, login: bool = False, super_users: tuple[str, ...] = (),
                 cannot_start_exit_code: int | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        self.port = port
        self.interface = interface
        self.tls = tls
        self.login = login
        self.super_users = super_users
        self.cannot_start_exit_code = cannot_start_exit_code
        options = ClientOptions.build(options, timeout_s=timeout_s, connect_timeout_s=timeout_s,
                                      connect_attempts=1)
        self.context = ConsoleContext(zk=self._make_zk(zookeeper, options, timeout_s), zookeeper=zookeeper,
                                      reactor=reactor, options=options, registry_url=registry_url,
                                      read_only=read_only, timeout_s=timeout_s)
        self.reader = ClusterReader(self.context, lambda: self._make_zk(zookeeper, options, timeout_s),
                                    self._session_made)
        self.sampler = Sampler(self.context, sample_interval_s)
        self.reader.on_ready.append(self.sampler.tick)
        self.site = app.make_site(self.context)
        self._listener = None
        self._group_sampling = None
        #: Fires with the listening port once the HTTP listener is up (or errbacks if it cannot be).
        self.listening: Deferred = Deferred()

    def _make_zk(self, zookeeper: str, options: ClientOptions, timeout_s: float) -> ZooKeeper:
        return ZooKeeper(zookeeper, reactor=self._reactor, connect_timeout_s=timeout_s,
                         credentials=options.zookeeper_credentials)

    def _session_made(self, zk) -> None:
        if self.login:
            auth.enable_login(self.context, self.super_users)

    @property
    def url(self) -> str | None:
        if self._listener is None:
            return None
        address = self._listener.getHost()
        return f"{'http' if self.tls is None else 'https'}://{address.host}:{address.port}/"

    def startService(self) -> None:
        super().startService()
        try:
            if self.tls is None:
                self._listener = self._reactor.listenTCP(self.port, self.site, interface=self.interface)
            else:
                self._listener = self._reactor.listenSSL(self.port, self.site, self.tls.options(),
                                                         interface=self.interface)
        except Exception as e:  # (CannotListenError: the port is taken; TwlogError: a TLS file)
            if self.cannot_start_exit_code is not None:
                self._log.critical("cannot start the console: {error}", error=cannot_listen(self, e))
                self._reactor.callWhenRunning(self._reactor.stop)
                forget_exit_signal(self._reactor)
                atexit.register(exit_now, self.cannot_start_exit_code)
            self.listening.errback(e)
            return
        self._log.info("twlog console on {url} for the cluster of ZooKeeper {zookeeper}{mode}", url=self.url,
                       zookeeper=self.context.zookeeper, mode=" (read-only)" if self.context.read_only else "")
        self.reader.start()
        self.sampler.start()
        # (the groups' lag sampler: console-groups' api_groups.start_sampling; absent before that branch lands)
        start_sampling = getattr(api_groups, "start_sampling", None)
        self._group_sampling = start_sampling(self.context) if start_sampling is not None else None
        self.listening.callback(self._listener.getHost().port)

    def stopService(self) -> Deferred | None:
        super().stopService()
        sampled = self.sampler.stop()
        if self._group_sampling is not None:
            self._group_sampling.stop()
            self._group_sampling = None
        listener, self._listener = self._listener, None
        stopped = listener.stopListening() if listener is not None else None

        async def stop() -> None:
            if stopped is not None:
                await stopped
            if sampled is not None:
                await sampled
            await self.reader.stop()

        return Deferred.fromCoroutine(stop())


def cannot_listen(service: ConsoleService, error: BaseException | None, text: str = "") -> str:
    """Why the console cannot listen, as one line naming the option to change (C{--port}, C{--interface})."""
    line = listen_error(service.interface, service.port, error, text or str(error))
    return line.replace("(another registry?)", "(another console?)")
