# -*- test-case-name: tests.console.test_http -*-
"""L{ConsoleContext}: what every API handler reads from: the cluster's ZooKeeper session, the client settings
for its brokers, the registry's address, the samples of the last hour, and the console's mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from twlog.client.options import ClientOptions
from twlog.console.history import History
from twlog.coord.zk import IZooKeeper

#: How long the console waits for ZooKeeper and for each broker before naming it unreachable.
DEFAULT_TIMEOUT_S = 5.0


def _nobody(request) -> str | None:
    return None


@attrs.define
class ConsoleContext:
    """The console's shared state.

    @ivar zk: the session to the cluster's ZooKeeper (started by the service; while it is not connected,
        handlers answer 503 naming it: L{zk_unreachable}).
    @ivar zookeeper: its connect string, as given (for messages).
    @ivar options: the settings for talking to the brokers (listener, TLS, SASL: C{--client-config}).
    @ivar registry_url: the schema registry's base URL, or None (the schemas page then says how to give it).
    @ivar read_only: refuse every change (C{--read-only}).
    @ivar login_required: every API request but C{/api/session} and C{/api/login} needs a logged-in user.
    @ivar user_of: who made a request (None: not logged in); set by the login module.
    @ivar history: the samples of the last hour the charts draw.
    @ivar reactor: the reactor (a L{twisted.internet.task.Clock} in tests) for timeouts and samplers.
    """

    zk: IZooKeeper
    zookeeper: str
    reactor: Any
    options: ClientOptions = attrs.field(factory=ClientOptions)
    registry_url: str | None = None
    read_only: bool = False
    login_required: bool = False
    user_of: Callable[[Any], str | None] = _nobody
    history: History = attrs.field(factory=History)
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: Extra things the API modules keep (a sampler, a cache), by name.
    parts: dict[str, Any] = attrs.field(factory=dict)

    def zk_unreachable(self) -> str:
        """The banner's name for ZooKeeper: C{zookeeper 127.0.0.1:2181}."""
        return f"zookeeper {self.zookeeper}"

    def now(self) -> float:
        return self.reactor.seconds()
