# -*- test-case-name: tests.client.test_options -*-
"""L{ClientOptions}: the one frozen object of connection settings every client is built with.

The producer, the consumers, the fetch loops and the blocking facades take
C{options=ClientOptions(...)} (and, for convenience, its fields as keyword
arguments: C{SimpleConsumer(host, port, timeout_s=5)}) and hand the same value
to each L{BrokerConnection} they open.  The reactor (clock) is not in it: it is
passed beside it, as Twisted's style has it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs
from twisted.application.internet import backoffPolicy

from twlog.client.sasl import SASLSettings
from twlog.client.tls import TLSSettings
from twlog.coord.endpoints import PLAINTEXT, SSL
from twlog.coord.zkauth import ZooKeeperCredentials
from twlog.storage.compression import DEFAULT_MAX_DECOMPRESSED_BYTES

#: The largest response frame a client accepts by default: room for big fetches.
DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024

#: A retry policy: attempt number (1, 2, ...) -> seconds to wait before it.
RetryPolicy = Callable[[int], float]


def default_retry_policy() -> RetryPolicy:
    """Reconnect backoff: 0.1 s doubling up to 5 s, plus up to 0.1 s of jitter."""
    return backoffPolicy(initialDelay=0.1, maxDelay=5.0, factor=2.0, jitter=lambda: random.random() * 0.1)


@attrs.frozen
class ClientOptions:
    """How a client talks to brokers: timeouts, limits and the reconnect policy.

    @ivar timeout_s: how long a request waits for its answer (L{BrokerTimeout} after).
    @ivar connect_timeout_s: how long a request waits for a connection (L{ConnectionFailed} after) ...
    @ivar connect_attempts: ... or for this many failed attempts.
    @ivar max_response_bytes: the largest response frame accepted (L{ProtocolViolation} above).
    @ivar retry_policy: reconnect and refetch backoff; None: L{default_retry_policy}.
    @ivar max_decompressed_bytes: the most a compressed message may decompress to when read
        (a bigger one is a L{twlog.storage.message.CorruptMessage}); the broker's default bound.
    @ivar tls: speak TLS to the brokers (their C{--tls-port}) with these settings; None: plaintext.
    @ivar sasl: authenticate to each broker right after connecting (after TLS), before any request, with these
        settings (L{twlog.client.sasl}); None: no authentication.
    @ivar zookeeper_credentials: authenticate the ZooKeeper sessions the client opens (digest; docs/security.md,
        "ZooKeeper"), whose nodes then carry ACLs; None: anonymous.
    """

    timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    connect_attempts: int = 3
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    retry_policy: RetryPolicy | None = None
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    tls: TLSSettings | None = None
    sasl: SASLSettings | None = None
    zookeeper_credentials: ZooKeeperCredentials | None = attrs.field(default=None, repr=False)

    @property
    def listener(self) -> str:
        """The brokers' listener this client reaches (L{twlog.coord.endpoints}): C{SSL} with L{tls}, else
        C{PLAINTEXT}; ZooKeeper-mode discovery locates the brokers at that listener's address."""
        return SSL if self.tls is not None else PLAINTEXT

    @classmethod
    def build(cls, options: ClientOptions | None = None, **overrides: Any) -> ClientOptions:
        """C{options} (default: the defaults) with the fields given as keywords replaced.

        @raise TypeError: a keyword that is not a field of L{ClientOptions}.
        """
        base = options if options is not None else cls()
        return attrs.evolve(base, **overrides) if overrides else base

    def backoff(self) -> RetryPolicy:
        """The retry policy to use: C{retry_policy}, or a new L{default_retry_policy}."""
        return self.retry_policy or default_retry_policy()

    def for_fetches(self, max_bytes: int) -> ClientOptions:
        """These options with room for fetch responses of C{max_bytes} (and their framing) at least."""
        if self.max_response_bytes >= 2 * max_bytes:
            return self
        return attrs.evolve(self, max_response_bytes=2 * max_bytes)
