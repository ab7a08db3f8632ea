# -*- test-case-name: tests.broker.test_users,tests.integration.test_sasl -*-
"""The broker's side of authentication: L{BrokerUsers} (docs/security.md, "Authentication").

With C{--sasl-mechanisms}, C{--require-auth} or C{--tls-client-ca} the broker's connections are told who their
clients are (L{twlog.protocol.authentication.Authentication}); with C{--sasl-mechanisms} the users' credentials
come from ZooKeeper (L{twlog.coord.users.UserCache}), read once the broker joins it, before it registers.
"""

from __future__ import annotations

from collections.abc import Mapping

from twlog.client.options import ClientOptions
from twlog.client.sasl import SASLSettings
from twlog.config import BrokerConfig
from twlog.coord.users import UserCache
from twlog.coord.zk import IZooKeeper
from twlog.errors import TwlogError
from twlog.protocol.authentication import Authentication
from twlog.protocol.factory import BrokerFactory
from twlog.security.credentials import ScramCredential

__all__ = ["BrokerUsers", "inter_broker_options"]


def inter_broker_options(config: BrokerConfig) -> ClientOptions | None:
    """The client options of this broker's followers' connections to their leaders: authenticated as
    C{--inter-broker-user} with the first line of C{--inter-broker-password-file}; None without.

    @raise TwlogError: the file cannot be read, or its first line is empty.
    """
    if config.inter_broker_user is None or config.inter_broker_password_file is None:
        return None
    path = config.inter_broker_password_file
    try:
        with open(path, encoding="utf-8") as f:
            password = f.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or e
        raise TwlogError(f"cannot read --inter-broker-password-file {path}: {reason}") from None
    if not password:
        raise TwlogError(f"--inter-broker-password-file {path}: its first line (the password) is empty")
    return ClientOptions(sasl=SASLSettings(config.inter_broker_mechanism, config.inter_broker_user, password))


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
        """Read the users from C{zk} and follow their changes (with --sasl-mechanisms), and check that the followers'
        password can be read (with --inter-broker-user).

        @raise TwlogError: the --inter-broker-password-file cannot be read (one line).
        """
        inter_broker_options(self._config)
        if self._config.sasl_mechanisms:
            cache = UserCache(zk)
            try:
                await cache.start()
            except BaseException:
                cache.stop()  # (the start may be retried, after a dropped connection: no second follower left)
                raise
            self.cache = cache

    def stop(self) -> None:
        """Stop following the users (the cache is kept: connections still open may finish authenticating)."""
        if self.cache is not None:
            self.cache.stop()
