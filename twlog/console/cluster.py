# -*- test-case-name: tests.console.test_cluster -*-
"""The console's view of the cluster: its ZooKeeper session, made and kept, and what ZooKeeper says.

L{ClusterReader} makes the session in the background (again every few seconds while ZooKeeper cannot be reached:
the console serves meanwhile, its API answering 503 naming ZooKeeper), then follows every topic and broker with a
L{ClusterView} (as a broker does), so a request reads the layout from memory.  Everything that still waits on
ZooKeeper or a broker waits at most C{context.timeout_s} (L{bounded}).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from twlog.console.context import ConsoleContext
from twlog.console.http import ApiError
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.endpoints import metrics_url_of, parse_endpoints
from twlog.coord.zk import (
    ConnectionLoss,
    KazooException,
    MissingChroot,
    NoNodeError,
    ZooKeeperUnavailable,
)

__all__ = ["ClusterReader", "bounded", "parse_endpoint_node", "reader_of", "zookeeper_down"]

#: Seconds before the second attempt to make the session while ZooKeeper cannot be reached, doubled at each
#: attempt up to L{MAX_RETRY_S}.
RETRY_S = 3.0
MAX_RETRY_S = 30.0

_log = Logger(namespace="twlog.console")


def zookeeper_down(context: ConsoleContext, why: str = "") -> ApiError:
    """503 naming ZooKeeper."""
    return ApiError(503, f"cannot reach ZooKeeper at {context.zookeeper}{': ' + why if why else ''}",
                    [context.zk_unreachable()])


async def bounded(context: ConsoleContext, waiting: Any, what: str | None = None) -> Any:
    """Wait for C{waiting} (a Deferred or coroutine) at most C{context.timeout_s}.

    @param what: names what is waited for (C{broker 1 (127.0.0.1:9092)}); None: ZooKeeper.
    @raise ApiError: 503 naming C{what} (or ZooKeeper) when it takes longer or its connection is lost.
    """
    d = waiting if isinstance(waiting, defer.Deferred) else defer.ensureDeferred(waiting)
    d.addTimeout(context.timeout_s, context.reactor)
    try:
        return await d
    except defer.TimeoutError:
        if what is None:
            raise zookeeper_down(context, f"no answer within {context.timeout_s:g} s") from None
        raise ApiError(503, f"{what} did not answer within {context.timeout_s:g} s", [what]) from None
    except (ConnectionLoss, ZooKeeperUnavailable) as e:
        if what is None:
            raise zookeeper_down(context, str(e) or type(e).__name__) from None
        raise


class ClusterReader:
    """The console's ZooKeeper session and the L{ClusterView} on it (C{context.parts["cluster"]}).

    @param make_zk: makes a new (unstarted) session; one is made per attempt, the first at once into C{context.zk}.
    @param on_session: called with the session once it is made (the login module's start, say).
    """

    def __init__(self, context: ConsoleContext, make_zk: Callable[[], Any],
                 on_session: Callable[[Any], Any] | None = None) -> None:
        self.context = context
        self._make_zk = make_zk
        self._on_session = on_session
        self.view: ClusterView | None = None
        #: Called once the view has read the cluster (the sampler takes its first sample then).
        self.on_ready: list[Callable[[], Any]] = []
        self._running = False
        self._wait = None
        self._attempt: defer.Deferred | None = None
        self._said: str | None = None
        context.parts["cluster"] = self

    def start(self) -> None:
        self._running = True
        self._attempt = defer.ensureDeferred(self._connect())
        self._attempt.addErrback(lambda f: None if not self._running else _log.failure("console: ZooKeeper", f))

    async def _connect(self) -> None:
        delay = RETRY_S
        while self._running:
            zk = self.context.zk
            try:
                await zk.start()
                break
            except (ZooKeeperUnavailable, MissingChroot, KazooException) as e:
                if str(e) != self._said:
                    self._said = str(e)
                    _log.warn("console: {error}; trying again (every {retry:g} s at most)", error=e, retry=MAX_RETRY_S)
            if not self._running:
                return
            self._wait = defer.Deferred()
            call = self.context.reactor.callLater(delay, self._wait.callback, None)
            delay = min(delay * 2, MAX_RETRY_S)
            self._wait.addErrback(lambda f: call.active() and call.cancel())
            await self._wait
            self._wait = None
            if self._running:
                self.context.zk = self._make_zk()
        if not self._running:
            await zk.stop()
            return
        _log.info("console: connected to ZooKeeper at {hosts}", hosts=self.context.zookeeper)
        if self._on_session is not None:
            self._on_session(zk)
        view = ClusterView(zk, all_topics=True, listener=self.context.options.listener)
        self.view = view
        await view.start()
        for ready in self.on_ready:
            ready()

    async def stop(self) -> None:
        self._running = False
        if self._wait is not None and not self._wait.called:
            self._wait.cancel()
        if self.view is not None:
            self.view.stop()
        if self.context.zk.connected:
            await self.context.zk.stop()

    def ready_view(self) -> ClusterView:
        """The view, once ZooKeeper is connected and it has read the cluster.

        @raise ApiError: 503 naming ZooKeeper otherwise.
        """
        if not self.context.zk.connected:
            raise zookeeper_down(self.context, "not connected (the console keeps trying)")
        if self.view is None or not self.view.ready:
            raise ApiError(503, "the console is still reading the cluster from ZooKeeper: try again in a moment")
        return self.view

    async def controller(self) -> int | None:
        """The active controller's broker id (C{/twlog/controller}), or None (none elected: an unreplicated
        cluster)."""
        try:
            value, _ = await bounded(self.context, self.context.zk.get(paths.CONTROLLER))
        except NoNodeError:
            return None
        try:
            return int(json.loads(value)["brokerid"])
        except (ValueError, KeyError, TypeError):
            return None

    async def endpoints(self) -> dict[int, dict]:
        """Each live broker's endpoints node (C{/twlog/brokers/endpoints/<id>}), parsed: C{{"listeners":
        {protocol: (host, port)}, "metrics_url": str or None}}; a broker without one (or a bad one) is left out."""
        zk = self.context.zk
        try:
            names = await bounded(self.context, zk.children(paths.BROKER_ENDPOINTS))
        except NoNodeError:
            return {}
        found: dict[int, dict] = {}
        values = await bounded(self.context, defer.DeferredList(
            [zk.get(paths.BROKER_ENDPOINTS + "/" + name) for name in names], consumeErrors=True))
        for name, (ok, result) in zip(names, values):
            if not ok or not name.isdigit():
                continue
            try:
                found[int(name)] = parse_endpoint_node(result[0])
            except ValueError:
                continue
        return found


def parse_endpoint_node(value: bytes) -> dict:
    """An endpoints node's listeners and metrics URL (L{twlog.coord.endpoints})."""
    return {"listeners": parse_endpoints(value), "metrics_url": metrics_url_of(value)}


def reader_of(context: ConsoleContext) -> ClusterReader:
    """The context's L{ClusterReader}.  @raise ApiError: 503 when the console has none (it is not started)."""
    reader = context.parts.get("cluster")
    if reader is None:
        raise ApiError(503, "the console has no ZooKeeper session yet", [context.zk_unreachable()])
    return reader

