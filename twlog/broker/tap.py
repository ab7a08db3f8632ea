# -*- test-case-name: tests.broker.test_tap,tests.integration.test_twistd -*-
"""C{twistd twlog}: the broker's command-line options and service tree.

L{Options} turns the command line into a L{BrokerConfig}; L{makeService}
returns a MultiService holding one L{twlog.broker.service.BrokerService}.
"""

from __future__ import annotations

from twisted.application.service import MultiService
from twisted.python import usage
from typing_extensions import override

from twlog.broker.service import BrokerService
from twlog.config import FLUSH_POLICIES, HOUR_MS, BrokerConfig, LogConfig
from twlog.coord.zkauth import read_credentials_file
from twlog.errors import TwlogError
from twlog.security.acls import AclError, parse_super_users
from twlog.storage.manager import validate_topic
from twlog.usage_values import seconds, whole_number

__all__ = ["BrokerService", "Options", "makeService", "parse_topic_partitions"]


def _per_ip_cap(text: str) -> int | None:
    if str(text).strip().lower() in ("none", "off"):
        return None
    return whole_number("max-connections-per-ip", 1)(text)


def _gap_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1000:
        raise usage.UsageError(f"--flush-min-gap-ms must be a number of milliseconds from 0 to 1000, not {text!r}")
    return value


def _flush_policy(text: str) -> str:
    if text not in FLUSH_POLICIES:
        raise usage.UsageError(f"--flush-policy must be one of {', '.join(FLUSH_POLICIES)}, not {text!r}")
    return text


def _super_users(text: str) -> tuple[str, ...]:
    """C{--super-users}: principals separated by C{;} (L{twlog.security.acls.parse_super_users})."""
    try:
        return tuple(sorted(parse_super_users(text)))
    except AclError as e:
        raise ValueError(f"--super-users: {e}") from None


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
        result[topic] = whole_number("topic-partitions", 1)(count)
    return result


class Options(usage.Options):
    """Options of C{twistd twlog}."""

    synopsis = "[options]"
    longdesc = (
        "Run a twlog broker: topics split into partitions, each an append-only log of segment files "
        "under --log-dir, served over twlog's binary protocol (Kafka 0.7 compatible) on --port."
    )
    optFlags = [
        ["no-plaintext", None,
         "Do not listen on --port: serve TLS only, on --tls-port (not with --zookeeper: other brokers and "
         "ZooKeeper-mode clients reach a registered broker on its plaintext port)."],
        ["require-auth", None,
         "Every connection, on both ports, must authenticate (SASL with --sasl-mechanisms, or a client certificate "
         "with --tls-client-ca) before any request but SASL's is answered; others are closed."],
        ["no-sendfile", None, "Copy log bytes through the process instead of sendfile(2) (to measure the difference)."],
        ["unclean-leader-election", None,
         "With --zookeeper, when no in-sync replica of a replicated partition is live, let another replica lead: "
         "the partition comes back sooner, and acknowledged messages it lacks are lost (each such election is "
         "logged as a warning). Off by default."],
        ["allow-anonymous", None,
         "Serve clients that do not authenticate on an --interface other machines can reach (refused without it "
         "unless --require-auth is given); a warning is logged at start."],
        ["acls", None,
         "Authorize every request against the ACLs in ZooKeeper (twlog acls; docs/security.md): a principal no ACL "
         "allows is refused. Needs --zookeeper."],
    ]
    optParameters = [
        ["port", "p", 9092, "TCP port to listen on (0: any free port).", whole_number("port", 0)],
        ["interface", None, "127.0.0.1", "Interface to listen on; 0.0.0.0 for every IPv4 interface."],
        ["tls-port", None, None,
         "Also listen for TLS connections on this port, on the same interface (0: any free port); the same "
         "protocol, the same partitions (docs/security.md). Needs --tls-cert and --tls-key.",
         whole_number("tls-port", 0)],
        ["tls-cert", None, None, "PEM file of this broker's certificate (then its chain, if any), for --tls-port."],
        ["tls-key", None, None, "PEM file of the private key of --tls-cert."],
        ["tls-client-ca", None, None,
         "PEM file of CAs: mutual TLS, --tls-port accepts only clients presenting a certificate one of them "
         "signed (default: no client certificate asked for)."],
        ["sasl-mechanisms", None, "",
         "SASL mechanisms to serve, comma-separated: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN (over TLS only); users are "
         "in ZooKeeper (twlog users), so it needs --zookeeper (default: none, no SASL)."],
        ["inter-broker-user", None, None,
         "Replication on a --require-auth cluster: the user this broker's followers authenticate to their leaders "
         "as (SASL SCRAM); needs --inter-broker-password-file."],
        ["inter-broker-password-file", None, None, "File whose first line is --inter-broker-user's password."],
        ["inter-broker-mechanism", None, "SCRAM-SHA-512", "SCRAM-SHA-256 or SCRAM-SHA-512 (default)."],
        ["host", None, None, "Host name clients should use to reach this broker (default: the interface)."],
        ["advertised-port", None, None,
         "Port clients and followers should use to reach this broker, when a proxy or NAT in front of it listens "
         "elsewhere (default: --port).", whole_number("advertised-port", 1)],
        ["log-dir", "d", "twlog-data", "Directory for the partition logs (created if missing)."],
        ["broker-id", "b", 0, "This broker's id, unique in its cluster.", whole_number("broker-id", 0)],
        ["num-partitions", "n", 1, "Partitions of a new topic on this broker.", whole_number("num-partitions", 1)],
        ["topic-partitions", None, "", "Per-topic partition counts, e.g. clicks:8,views:4.", parse_topic_partitions],
        ["segment-bytes", None, 1024**3, "Roll a segment file at this size.", whole_number("segment-bytes", 1024)],
        ["flush-messages", None, 10_000, "fsync after this many messages...", whole_number("flush-messages", 1)],
        ["flush-interval-ms", None, 1000, "...or this long after the first unflushed one.",
         whole_number("flush-interval-ms", 0)],
        ["flush-policy", None, "group",
         "group: fsync again as soon as the last fsync returns while data waits (visible within about one fsync; "
         "the two settings above stay upper bounds); timer: wait for them (the paper's policy).", _flush_policy],
        ["flush-min-gap-ms", None, 2.0,
         "Start no fsync nobody waits for sooner than this after the partition's previous one (group commit's "
         "batching floor: fewer fsyncs, less CPU, at most this much more latency; 0: back to back).", _gap_ms],
        ["storage-retry-s", None, 10.0,
         "After a write or a segment roll fails (disk full, no inodes, quota, read-only), refuse the partition's "
         "writes for this many seconds, then try the disk again (a failed fsync needs a restart).",
         seconds("storage-retry-s", most=86_400)],
        ["retention-hours", None, 168, "Delete segments last modified longer ago than this.",
         whole_number("retention-hours", 0)],
        ["retention-bytes", None, -1, "Delete the oldest segments while a partition is larger (-1: no cap).",
         whole_number("retention-bytes", -1)],
        ["retention-check-interval-ms", None, 300_000, "How often retention runs.",
         whole_number("retention-check-interval-ms", 1)],
        ["max-message-bytes", None, 1_000_000, "Largest message accepted.", whole_number("max-message-bytes", 9)],
        ["max-decompressed-bytes", None, None,
         "Most a compressed message may decompress to when validated on append (default: 10x --max-message-bytes).",
         whole_number("max-decompressed-bytes", 9)],
        ["max-request-bytes", None, 100 * 1024 * 1024, "Largest request frame accepted.",
         whole_number("max-request-bytes", 1024)],
        ["max-buffered-request-bytes", None, 256 * 1024 * 1024,
         "Bytes of requests all connections together may buffer (at least --max-request-bytes); past it, the "
         "connections with the largest frames still to come stop reading until space frees.",
         whole_number("max-buffered-request-bytes", 1024)],
        ["request-timeout-s", None, 30.0,
         "A request frame must arrive whole within this many seconds of its first byte (counted while the broker "
         "reads the connection), or the connection is closed and the bytes it buffered are freed.",
         seconds("request-timeout-s", above=True)],
        ["max-inflight-per-connection", None, 64,
         "Requests awaiting their answer on one connection past which the broker stops reading from it, until "
         "half of them are answered.", whole_number("max-inflight-per-connection", 1)],
        ["max-connections", None, None,
         "Client connections the broker holds (default: the open-files limit, raised to its hard limit at start, "
         "less a reserve for segment files); past it, a new one replaces the longest-idle connection, or is "
         "refused with TooManyConnections (19, retriable).", whole_number("max-connections", 1)],
        ["max-connections-per-ip", None, 1024,
         "Client connections one address may hold (\"none\": no cap but --max-connections); past it, a new one "
         "from that address replaces its longest-idle connection, or is refused with TooManyConnectionsFromAddress "
         "(20, retriable).", _per_ip_cap],
        ["idle-timeout-s", None, 600.0,
         "Close a connection that has sent no whole request for this many seconds (0: never).",
         seconds("idle-timeout-s")],
        ["reap-idle-s", None, 10.0,
         "At a connection cap, a new connection replaces the longest-idle one if it has sent no whole request, "
         "and has none in progress, for this many seconds; else the new one is refused.", seconds("reap-idle-s")],
        ["listen-backlog", None, 1024,
         "Backlog of the listening socket: connections the kernel completes before the broker accepts them "
         "(the kernel caps it at net.core.somaxconn).", whole_number("listen-backlog", 1)],
        ["replica-lag-time-ms", None, 10_000,
         "A follower not caught up with its leader for this many milliseconds leaves the partition's in-sync "
         "replicas (ISR); it rejoins once it holds every acknowledged message.",
         whole_number("replica-lag-time-ms", 1)],
        ["zookeeper", "z", None,
         "ZooKeeper connect string host:port[,host:port...][/chroot]: register this broker (its --broker-id, "
         "address and topics) for producers and consumers to find (default: run standalone)."],
        ["zookeeper-credentials-file", None, None,
         "With --zookeeper: a file holding the cluster's ZooKeeper credentials, one line user:password (or "
         "username= and password= lines): authenticate to ZooKeeper (digest), and create znodes that only this "
         "identity may write (docs/security.md, ZooKeeper)."],
        ["zookeeper-session-timeout-s", None, 6.0,
         "How long ZooKeeper keeps this broker's session once it stops hearing from it: a killed broker's "
         "leaderships move after about this long.", seconds("zookeeper-session-timeout-s", above=True)],
        ["metrics-port", None, None,
         "Serve Prometheus metrics over HTTP at http://INTERFACE:PORT/metrics (0: any free port, printed in the "
         "log; default: no metrics).", whole_number("metrics-port", 0)],
        ["metrics-interface", None, "127.0.0.1",
         "Interface the metrics server listens on; 0.0.0.0 for every IPv4 interface."],
        ["metrics-tls-cert", None, None,
         "Serve the metrics over HTTPS (https://INTERFACE:PORT/metrics) with this PEM certificate (then its chain); "
         "it may be the --tls-cert file.", None],
        ["metrics-tls-key", None, None, "The PEM private key of --metrics-tls-cert.", None],
        ["metrics-tls-client-ca", None, None,
         "Require a scraper's client certificate signed by a CA of this PEM file (mutual TLS).", None],
        ["min-insync-replicas", None, 1,
         "In-sync replicas an ack=all produce needs, for a replicated topic created without its own "
         "--min-insync-replicas.", whole_number("min-insync-replicas", 1)],
        ["preferred-leader-delay-s", None, 30.0,
         "A returned broker that is a partition's preferred replica (its first) leads it again once it has been in "
         "the ISR this long.", seconds("preferred-leader-delay-s")],
        ["default-replication-factor", None, 1,
         "With --zookeeper: a topic first written to is created replicated on this many brokers, with "
         "--num-partitions partitions per live broker in all (1: an unreplicated 0.7 topic).",
         whole_number("default-replication-factor", 1)],
        ["super-users", None, None,
         "With --acls: principals allowed everything whatever the ACLs say, separated by ';' as Kafka's "
         "super.users (\"User:admin;User:CN=broker,O=x\").", _super_users],
        ["controlled-shutdown-timeout-s", None, 5.0,
         "On SIGTERM, a broker that is the controller first moves its leaderships to other in-sync replicas, "
         "waiting at most this long.", seconds("controlled-shutdown-timeout-s", above=True)],
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
                flush_policy=self["flush-policy"],
                flush_min_gap_ms=self["flush-min-gap-ms"],
                storage_retry_s=self["storage-retry-s"],
                retention_ms=self["retention-hours"] * HOUR_MS,
                retention_bytes=self["retention-bytes"],
                retention_check_interval_ms=self["retention-check-interval-ms"],
                max_message_bytes=self["max-message-bytes"],
                **({} if self["max-decompressed-bytes"] is None
                   else {"max_decompressed_bytes": self["max-decompressed-bytes"]}),
            )
            self.config = BrokerConfig(
                log=log,
                broker_id=self["broker-id"],
                port=self["port"],
                plaintext=not self["no-plaintext"],
                tls_port=self["tls-port"],
                tls_cert=self["tls-cert"],
                tls_key=self["tls-key"],
                tls_client_ca=self["tls-client-ca"],
                interface=self["interface"],
                host=self["host"],
                advertised_port=self["advertised-port"],
                max_request_bytes=self["max-request-bytes"],
                max_buffered_request_bytes=self["max-buffered-request-bytes"],
                request_timeout_s=self["request-timeout-s"],
                max_inflight_per_connection=self["max-inflight-per-connection"],
                max_connections=self["max-connections"],
                max_connections_per_ip=self["max-connections-per-ip"],
                idle_timeout_s=self["idle-timeout-s"],
                reap_idle_s=self["reap-idle-s"],
                listen_backlog=self["listen-backlog"],
                replica_lag_time_ms=self["replica-lag-time-ms"],
                zookeeper=self["zookeeper"],
                zookeeper_session_timeout_s=self["zookeeper-session-timeout-s"],
                zookeeper_credentials_file=self["zookeeper-credentials-file"],
                sendfile=not self["no-sendfile"],
                metrics_port=self["metrics-port"],
                metrics_interface=self["metrics-interface"],
                metrics_cert=self["metrics-tls-cert"],
                metrics_key=self["metrics-tls-key"],
                metrics_client_ca=self["metrics-tls-client-ca"],
                unclean_leader_election=bool(self["unclean-leader-election"]),
                min_insync_replicas=self["min-insync-replicas"],
                controlled_shutdown_timeout_s=self["controlled-shutdown-timeout-s"],
                default_replication_factor=self["default-replication-factor"],
                preferred_leader_delay_s=self["preferred-leader-delay-s"],
                sasl_mechanisms=[m.strip().upper() for m in self["sasl-mechanisms"].split(",") if m.strip()],
                require_auth=bool(self["require-auth"]),
                inter_broker_user=self["inter-broker-user"],
                inter_broker_password_file=self["inter-broker-password-file"],
                inter_broker_mechanism=self["inter-broker-mechanism"].upper(),
                acls=bool(self["acls"]),
                super_users=self["super-users"] or (),
                allow_anonymous=bool(self["allow-anonymous"]),
            )
        except ValueError as e:
            raise usage.UsageError(_option_names(str(e))) from None
        if self.config.zookeeper_credentials_file:  # a file that cannot be used stops the broker before it starts
            try:
                read_credentials_file(self.config.zookeeper_credentials_file)
            except TwlogError as e:
                raise usage.UsageError(str(e)) from None


_OPTION_NAMES = {"zookeeper_credentials_file needs zookeeper": "--zookeeper-credentials-file needs --zookeeper",
                 "sasl_mechanisms": "--sasl-mechanisms", "require_auth": "--require-auth",
                 "inter_broker_user": "--inter-broker-user", "inter_broker_mechanism": "--inter-broker-mechanism",
                 "inter_broker_password_file": "--inter-broker-password-file",
                 "need zookeeper": "need --zookeeper",
                 "tls_port": "--tls-port", "tls_cert": "--tls-cert", "tls_key": "--tls-key",
                 "tls_client_ca": "--tls-client-ca", "a broker without its plaintext port": "--no-plaintext",
                 "a broker registered in ZooKeeper": "--zookeeper with --no-plaintext: a broker registered in "
                 "ZooKeeper"}


# The metrics' HTTPS fields (their names hold no other field's name, so the order of the replacements is free).
_OPTION_NAMES.update({"metrics_cert": "--metrics-tls-cert", "metrics_key": "--metrics-tls-key",
                      "metrics_client_ca": "--metrics-tls-client-ca", "metrics_port": "--metrics-port"})


def _option_names(message: str) -> str:
    """A configuration problem with the TLS fields named as the command line names them."""
    for field, option in _OPTION_NAMES.items():
        message = message.replace(field, option)
    return message


def makeService(options: Options) -> MultiService:
    """The service tree twistd runs for C{twistd twlog}."""
    top = MultiService()
    BrokerService(options.config, unclean_exit_code=1, cannot_start_exit_code=1).setServiceParent(top)
    return top
