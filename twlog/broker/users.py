# -*- test-case-name: tests.broker.test_users,tests.integration.test_sasl -*-
"""The broker's side of authentication: L{BrokerUsers} (docs/security.md, "Authentication").

With C{--sasl-mechanisms}, C{--require-auth} or C{--tls-client-ca} the broker's connections are told who their
clients are (L{twlog.protocol.authentication.Authentication}); with C{--sasl-mechanisms} the users' credentials
come from ZooKeeper (L{twlog.coord.users.UserCache}), read once the broker joins it, before it registers.
"""

from __future__ import annotations

from collections.abc import Mapping

from twlog.config import BrokerConfig
from twlog.coord.users import UserCache
from twlog.coord.zk import IZooKeeper
from twlog.protocol.authentication import Authentication
from twlog.protocol.factory import BrokerFactory
from twlog.security.credentials import ScramCredential

__all__ = ["BrokerUsers"]


class BrokerUsers:
    """Who may authenticate to a broker: its L{Authentication} (set on its factory) and its users' cache."""

    def __init__(self, config: BrokerConfig, clock, factory: BrokerFactory) -> None:
        self._config = config
        #: The users' credentials, once read from ZooKeeper (with --sasl-mechanisms).
        self.cache: UserCache | None = None
        self.authentication: Authentication | None = None
        if config.sasl_mechanisms or config.require_auth or config.tls_client_ca:
            self.authentication = factory.authentication = Authentication(
                clock, config.sasl_mechanisms, config.require_auth, self.lookup, config.request_timeout_s)

    def lookup(self, user: str) -> Mapping[str, ScramCredential] | None:
        """C{user}'s credentials, or None (no such user, or not read yet)."""
        return self.cache.lookup(user) if self.cache is not None else None

    async def start(self, zk: IZooKeeper) -> None:
        """Read the users from C{zk} and follow their changes (with --sasl-mechanisms; otherwise nothing)."""
        if self._config.sasl_mechanisms:
            cache = UserCache(zk)
            await cache.start()
            self.cache = cache

    def stop(self) -> None:
        """Stop following the users (the cache is kept: connections still open may finish authenticating)."""
        if self.cache is not None:
            self.cache.stop()
