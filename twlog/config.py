# -*- test-case-name: tests.storage.test_manager -*-
"""Configuration objects: frozen, built once (by twistd's Options or a command), passed down."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from types import MappingProxyType

import attrs

HOUR_MS = 3600 * 1000

#: When a log's appends are fsynced (twlog.storage.flush): "group" starts the next fsync as soon as the
#: previous one returns while data waits; "timer" waits for flush_messages or flush_interval_ms (the paper's).
FLUSH_POLICIES = ("group", "timer")
#: The SASL mechanisms a broker may serve (twlog.security.credentials.SASL_MECHANISMS).
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


def _frozen_mapping(value: Mapping[str, int] | None) -> Mapping[str, int]:
    return MappingProxyType(dict(value or {}))


@attrs.frozen
class LogConfig:
    """How a broker stores partitions: where, how big the segments, when to flush and delete."""

    #: The directory holding one sub-directory per partition, C{<topic>-<partition>}.
    log_dir: str
    #: Partitions of a new topic on this broker ...
    num_partitions: int = 1
    #: ... unless the topic is named here.
    topic_partitions: Mapping[str, int] = attrs.field(factory=dict, converter=_frozen_mapping)
    #: A segment rolls when an append would take it past this size.
    segment_bytes: int = 1024**3
    #: fsync after this many messages have been appended since the last flush ...
    flush_messages: int = 10_000
    #: ... or this long after the first unflushed append, whichever comes first.
    flush_interval_ms: int = 1_000
    #: One of FLUSH_POLICIES; with "group", the two settings above stay upper bounds.
    flush_policy: str = "group"
    #: A flush nobody waits for starts no sooner than this after the log's previous fsync started
    #: (group commit's batching floor; 0: back to back).
    flush_min_gap_ms: float = 2.0
    #: After a write or a roll failed (disk full, no inodes, quota, read-only, I/O error), a partition refuses
    #: appends for this many seconds, then tries the disk again.
    storage_retry_s: float = 10.0
    #: Segments last modified longer ago than this are deleted.
    retention_ms: int = 168 * HOUR_MS
    #: Oldest segments are deleted while a partition is larger than this (-1: no cap).
    retention_bytes: int = -1
    #: How often retention runs.
    retention_check_interval_ms: int = 5 * 60 * 1000
    #: The largest single message (entry) accepted, compressed wrappers included
    #: (never more than a segment holds).
    max_message_bytes: int = 1_000_000
    #: The most a compressed message may decompress to when the broker validates it on append
    #: (default: 10x max_message_bytes).
    max_decompressed_bytes: int = attrs.field(
        default=attrs.Factory(lambda self: 10 * self.max_message_bytes, takes_self=True)
    )

    def __attrs_post_init__(self) -> None:
        problems = []
        if self.num_partitions < 1:
            problems.append("num_partitions must be at least 1")
        if any(n < 1 for n in self.topic_partitions.values()):
            problems.append("every per-topic partition count must be at least 1")
        if self.segment_bytes < 1024:
            problems.append("segment_bytes must be at least 1024")
        if self.flush_messages < 1:
            problems.append("flush_messages must be at least 1")
        if self.flush_interval_ms < 0:
            problems.append("flush_interval_ms must not be negative")
        if not 0 <= self.flush_min_gap_ms <= 1000:
            problems.append("flush_min_gap_ms must be between 0 and 1000")
        if self.flush_policy not in FLUSH_POLICIES:
            problems.append(f"flush_policy must be one of {', '.join(FLUSH_POLICIES)}, not {self.flush_policy!r}")
        if not 0 <= self.storage_retry_s <= 86_400:
            problems.append("storage_retry_s must be between 0 and 86400")
        if self.retention_ms < 0:
            problems.append("retention_ms must not be negative")
        if self.retention_check_interval_ms <= 0:
            problems.append("retention_check_interval_ms must be positive")
        if self.max_message_bytes < 9:
            problems.append("max_message_bytes must be at least 9")
        if self.max_decompressed_bytes < 9:
            problems.append("max_decompressed_bytes must be at least 9")
        if problems:
            raise ValueError("; ".join(problems))

    def partitions_for(self, topic: str) -> int:
        """The partition count a new C{topic} gets on this broker."""
        return self.topic_partitions.get(topic, self.num_partitions)


@attrs.frozen
class BrokerConfig:
    """A broker: its identity and address, its storage, and the limits it puts on clients."""

    log: LogConfig
    broker_id: int = 0
    #: TCP port to listen on (0: any free port).
    port: int = 9092
    #: Whether to listen on C{port} at all (False: TLS only, on C{tls_port}).
    plaintext: bool = True
    #: TCP port of the TLS listener (0: any free port; None: no TLS), served by the same broker as C{port}.
    tls_port: int | None = None
    #: PEM files of the broker's certificate (then its chain, if any) and private key, for C{tls_port}.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: PEM file of the CAs whose client certificates the TLS port accepts: mutual TLS, a client without a
    #: certificate signed by one of them is refused in the handshake (None: no client certificate asked for).
    tls_client_ca: str | None = None
    #: Interface to listen on; "0.0.0.0" (or "::") for every interface.
    interface: str = "127.0.0.1"
    #: The host name clients should use to reach this broker (default: the interface, or the
    #: machine's name when listening on every interface).
    host: str | None = None
    #: The port clients and followers should use to reach this broker when it is not C{port} (a proxy or a NAT in
    #: front of it: Kafka 0.8's C{advertised.port}); None: the port it listens on.
    advertised_port: int | None = None
    #: Frames larger than this are refused before they are buffered.
    max_request_bytes: int = 100 * 1024 * 1024
    #: Bytes of requests all connections together may buffer (partial frames, and frames waiting behind
    #: max_inflight_per_connection): past it, the connections with the largest frames still to come stop reading.
    max_buffered_request_bytes: int = 256 * 1024 * 1024
    #: Open client connections past which a new one is closed at once (None: derived at start from the
    #: descriptor limit, less a reserve for segment files).
    max_connections: int | None = None
    #: Open client connections one address may hold; past it, a new one from that address replaces that
    #: address's longest-idle connection or is refused (None: no cap but max_connections).
    max_connections_per_ip: int | None = 1024
    #: A connection that has sent no whole request frame for this long is closed (0: never).
    idle_timeout_s: float = 600.0
    #: At a connection cap, a new connection replaces the longest-idle one (no whole request frame, and no
    #: request in progress, for at least this long); when none has been idle so long, it is refused.
    reap_idle_s: float = 10.0
    #: The listening socket's backlog: connections the kernel completes before the broker accepts them.
    listen_backlog: int = 1024
    #: Requests awaiting their response on one connection before the broker stops reading from it (Kafka's
    #: queued.max.requests, per connection); it reads again once half of them are answered.
    max_inflight_per_connection: int = 64
    #: A request frame must arrive whole within this many seconds of its first byte, counted while the
    #: broker reads the connection; otherwise the connection is closed and its buffered bytes are freed.
    request_timeout_s: float = 30.0
    #: The longest a waiting fetch is held, whatever the client asks.
    max_fetch_wait_ms: int = 30_000
    #: A follower not caught up with its leader for this long leaves the partition's ISR (Kafka's
    #: replica.lag.time.max.ms); it rejoins once it holds everything acknowledged.
    replica_lag_time_ms: int = 10_000
    #: ZooKeeper connect string ("host:port[,host:port...]"), or None to run on its own.
    zookeeper: str | None = None
    #: How long ZooKeeper keeps the broker's session (its registration, its leaderships) once it stops hearing
    #: from it: a killed leader's partitions move to another replica after about this long.
    zookeeper_session_timeout_s: float = 6.0
    #: A file of the cluster's ZooKeeper credentials (digest; docs/security.md, "ZooKeeper"): authenticate, and
    #: create znodes with ACLs only the cluster may write.  None: anonymous, open znodes.
    zookeeper_credentials_file: str | None = None
    #: Send log bytes with sendfile(2) where the transport allows (off: read and write, to compare).
    sendfile: bool = True
    #: TCP port of the HTTP server serving Prometheus metrics at /metrics (0: any free port; None: no metrics).
    metrics_port: int | None = None
    #: Interface the metrics server listens on.
    metrics_interface: str = "127.0.0.1"
    #: Serve the metrics over HTTPS with this PEM certificate (then its chain) and the key of C{metrics_key}.
    metrics_cert: str | None = None
    metrics_key: str | None = None
    #: With HTTPS: require a scraper's client certificate signed by a CA of this PEM file (mutual TLS).
    metrics_client_ca: str | None = None
    #: Replication (with ZooKeeper): let a replica outside the ISR lead when no ISR member is live
    #: (acknowledged messages may be lost; each such election is logged as a warning).
    unclean_leader_election: bool = False
    #: Replication: the ISR size an ack="all" produce needs, for a replicated topic whose config has no
    #: min.insync.replicas of its own (Kafka's broker-level default).
    min_insync_replicas: int = 1
    #: Replication: how long a stopping broker that is the controller waits for its leaderships to move.
    controlled_shutdown_timeout_s: float = 5.0
    #: Replication: how long a partition's preferred replica (its first) must have been in the ISR before the
    #: controller gives it the lead back (Kafka's auto.leader.rebalance, per partition).
    preferred_leader_delay_s: float = 30.0
    #: Replication (with ZooKeeper): a topic first written to is created replicated on this many brokers
    #: (Kafka's default.replication.factor), with --num-partitions partitions per live broker in all; 1: a
    #: 0.7 topic, as without replication.
    default_replication_factor: int = 1
    # -- authentication (SASL, issue 23; docs/security.md, "Authentication") --
    #: The SASL mechanisms served (Kafka's sasl.enabled.mechanisms: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN; PLAIN over
    #: TLS only); empty: no SASL.  The credentials are in ZooKeeper, so it needs C{zookeeper}.
    sasl_mechanisms: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: Every connection, on both ports, must authenticate (SASL, or a verified mutual-TLS certificate) before
    #: anything but SASL_HANDSHAKE and SASL_AUTHENTICATE is answered.
    require_auth: bool = False
    #: Replication on a cluster that requires authentication: the user this broker's followers authenticate to
    #: their leaders as, the file whose first line is its password, and the SCRAM mechanism.
    inter_broker_user: str | None = None
    inter_broker_password_file: str | None = None
    inter_broker_mechanism: str = "SCRAM-SHA-512"
    #: Authorization (docs/security.md): check every request against the ACLs in ZooKeeper (needs C{zookeeper}),
    #: and the principals allowed everything whatever the ACLs say (Kafka's super.users).
    acls: bool = False
    super_users: tuple[str, ...] = ()
    #: Serve clients that do not authenticate on an interface others can reach (a loopback interface needs no
    #: leave); without it such a broker refuses to start (docs/security.md, "Defaults").
    allow_anonymous: bool = False

    def __attrs_post_init__(self) -> None:
        problems = []
        if self.anonymous_beyond_loopback and not self.allow_anonymous:
            problems.append(f"--interface {self.interface} lets other machines connect, and clients need not "
                            "authenticate: add --require-auth (with --sasl-mechanisms or --tls-client-ca), or "
                            "--allow-anonymous to serve anyone who can reach it")
        if self.acls and self.zookeeper is None:
            problems.append("--acls needs --zookeeper (the ACLs are kept there)")
        if self.super_users and not self.acls:
            problems.append("--super-users needs --acls")
        if self.broker_id < 0:
            problems.append("broker_id must not be negative")
        if self.advertised_port is not None and not 1 <= self.advertised_port <= 65535:
            problems.append("advertised_port must be between 1 and 65535")
        if not 0 <= self.port <= 65535:
            problems.append("port must be between 0 and 65535")
        problems.extend(self._tls_problems())
        problems.extend(self._sasl_problems())
        problems.extend(self._metrics_tls_problems())
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            problems.append("metrics_port must be between 0 and 65535")
        if self.max_request_bytes < 1024:
            problems.append("max_request_bytes must be at least 1024")
        if self.max_inflight_per_connection < 1:
            problems.append("max_inflight_per_connection must be at least 1")
        if not self.request_timeout_s > 0:
            problems.append("request_timeout_s must be positive")
        if self.max_buffered_request_bytes < self.max_request_bytes:
            problems.append("max_buffered_request_bytes must be at least max_request_bytes (the largest request fits)")
        if self.max_connections is not None and self.max_connections < 1:
            problems.append("max_connections must be at least 1")
        if self.max_connections_per_ip is not None and self.max_connections_per_ip < 1:
            problems.append("max_connections_per_ip must be at least 1")
        if self.idle_timeout_s < 0:
            problems.append("idle_timeout_s must not be negative")
        if self.reap_idle_s < 0:
            problems.append("reap_idle_s must not be negative")
        if self.listen_backlog < 1:
            problems.append("listen_backlog must be at least 1")
        if self.replica_lag_time_ms < 1:
            problems.append("replica_lag_time_ms must be at least 1")
        if not self.zookeeper_session_timeout_s > 0:
            problems.append("zookeeper_session_timeout_s must be positive")
        if self.zookeeper_credentials_file and self.zookeeper is None:
            problems.append("zookeeper_credentials_file needs zookeeper")
        if self.preferred_leader_delay_s < 0:
            problems.append("preferred_leader_delay_s must not be negative")
        if self.default_replication_factor < 1:
            problems.append("default_replication_factor must be at least 1")
        if self.min_insync_replicas < 1:
            problems.append("min_insync_replicas must be at least 1")
        if not self.controlled_shutdown_timeout_s > 0:
            problems.append("controlled_shutdown_timeout_s must be positive")
        if problems:
            raise ValueError("; ".join(problems))

    def _tls_problems(self) -> list[str]:
        if self.tls_port is None:
            named = [name for name in ("tls_cert", "tls_key", "tls_client_ca") if getattr(self, name)]
            problems = [f"{', '.join(named)} need tls_port"] if named else []
            return problems + ([] if self.plaintext else ["a broker without its plaintext port needs tls_port"])
        problems = []
        if not 0 <= self.tls_port <= 65535:
            problems.append("tls_port must be between 0 and 65535")
        if not (self.tls_cert and self.tls_key):
            problems.append("tls_port needs tls_cert and tls_key")
        if self.plaintext and self.tls_port == self.port and self.port != 0:
            problems.append("tls_port must differ from port")
        if not self.plaintext and self.zookeeper is not None:
            problems.append("a broker registered in ZooKeeper keeps its plaintext port (other brokers and "
                            "ZooKeeper-mode clients use it)")
        return problems

    def _sasl_problems(self) -> list[str]:
        unknown = [m for m in self.sasl_mechanisms if m not in SASL_MECHANISMS]
        problems = [f"sasl_mechanisms: unknown {', '.join(unknown)} (of {', '.join(SASL_MECHANISMS)})"] * bool(unknown)
        if self.sasl_mechanisms and self.zookeeper is None:
            problems.append("sasl_mechanisms need zookeeper (the users' credentials are in ZooKeeper)")
        if self.require_auth and not (self.sasl_mechanisms or self.tls_client_ca):
            problems.append("require_auth needs sasl_mechanisms or tls_client_ca (a way to authenticate)")
        if (self.inter_broker_user is None) != (self.inter_broker_password_file is None):
            problems.append("inter_broker_user and inter_broker_password_file go together")
        if self.inter_broker_mechanism not in SASL_MECHANISMS[:2]:
            problems.append(f"inter_broker_mechanism {self.inter_broker_mechanism} is not SCRAM-SHA-256 or "
                            "SCRAM-SHA-512 (followers fetch over plaintext: no PLAIN)")
        if self.inter_broker_user is not None and self.zookeeper is None:
            problems.append("inter_broker_user needs zookeeper (replication)")
        return problems
    def _metrics_tls_problems(self) -> list[str]:
        named = [name for name in ("metrics_cert", "metrics_key", "metrics_client_ca") if getattr(self, name)]
        if named and self.metrics_port is None:
            return [f"{', '.join(named)} need metrics_port"]
        if (self.metrics_cert is None) != (self.metrics_key is None):
            return ["metrics_cert and metrics_key go together"]
        if self.metrics_client_ca is not None and self.metrics_cert is None:
            return ["metrics_client_ca needs metrics_cert and metrics_key"]
        return []

    @property
    def anonymous_beyond_loopback(self) -> bool:
        """Whether clients that do not authenticate are served on an interface other machines can reach: not
        loopback, and neither C{require_auth} nor a TLS-only port that requires a client certificate."""
        authenticated = self.require_auth or (not self.plaintext and self.tls_client_ca is not None)
        return not authenticated and not is_loopback(self.interface)

    @property
    def advertised_host(self) -> str:
        """The host name this broker tells clients to connect to."""
        if self.host:
            return self.host
        if self.interface in ("", "0.0.0.0", "::"):
            return socket.getfqdn()
        return self.interface


def is_loopback(interface: str) -> bool:
    """Whether C{interface} (an address or a host name) is this machine's alone: C{localhost} or a loopback
    address (C{127.0.0.0/8}, C{::1}).  Every other name or address, and C{0.0.0.0} or C{::}, is not."""
    if interface.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(interface.strip("[]")).is_loopback
    except ValueError:
        return False
