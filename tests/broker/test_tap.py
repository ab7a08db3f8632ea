"""Tests for C{twistd twlog}'s options and service tree (no reactor, no sockets)."""

from __future__ import annotations

from twisted.application.service import MultiService
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.broker.service import BrokerService
from twlog.broker.tap import Options, makeService, parse_topic_partitions
from twlog.config import HOUR_MS, BrokerConfig, LogConfig


def parse(*argv: str) -> Options:
    options = Options()
    options.parseOptions(list(argv))
    return options


class OptionsTests(SynchronousTestCase):
    def test_defaults(self) -> None:
        """With no options, the config is the documented defaults: port 9092 on loopback, standalone."""
        config = parse().config
        self.assertEqual(config, BrokerConfig(log=LogConfig("twlog-data", retention_ms=168 * HOUR_MS)))
        self.assertEqual((config.port, config.interface, config.zookeeper, config.sendfile),
                         (9092, "127.0.0.1", None, True))

    def test_advertised_port(self) -> None:
        """--advertised-port (a proxy in front of the broker) reaches the config; 0 or a word is refused."""
        self.assertEqual(parse("--advertised-port", "19092").config.advertised_port, 19092)
        self.assertIsNone(parse().config.advertised_port)
        for bad in ("0", "port"):
            with self.assertRaises(usage.UsageError):
                parse("--advertised-port", bad)

    def test_every_option_reaches_the_config(self) -> None:
        """Each option lands in its BrokerConfig or LogConfig field; underscores in numbers are allowed."""
        config = parse(
            "--port", "0", "--interface", "::", "--host", "b1.example", "--log-dir", "/data", "--broker-id", "3",
            "--num-partitions", "4", "--topic-partitions", "clicks:8, views:2", "--segment-bytes", "1_048_576",
            "--flush-messages", "5", "--flush-interval-ms", "0", "--retention-hours", "2",
            "--retention-bytes", "10000", "--retention-check-interval-ms", "60000", "--max-message-bytes", "512",
            "--max-request-bytes", "4096", "--zookeeper", "zk1:2181/twlog", "--no-sendfile", "--allow-anonymous",
        ).config
        self.assertEqual(
            (config.port, config.interface, config.host, config.broker_id, config.max_request_bytes,
             config.zookeeper, config.sendfile),
            (0, "::", "b1.example", 3, 4096, "zk1:2181/twlog", False),
        )
        log = config.log
        self.assertEqual(
            (log.log_dir, log.num_partitions, dict(log.topic_partitions), log.segment_bytes, log.flush_messages,
             log.flush_interval_ms, log.retention_ms, log.retention_bytes, log.retention_check_interval_ms,
             log.max_message_bytes),
            ("/data", 4, {"clicks": 8, "views": 2}, 1_048_576, 5, 0, 2 * HOUR_MS, 10000, 60000, 512),
        )
        self.assertEqual(log.partitions_for("clicks"), 8)
        self.assertEqual(log.partitions_for("other"), 4)

    def test_replication_options(self) -> None:
        """--unclean-leader-election (off), --min-insync-replicas (1), --controlled-shutdown-timeout-s (5)."""
        config = parse().config
        self.assertEqual((config.unclean_leader_election, config.min_insync_replicas,
                          config.controlled_shutdown_timeout_s), (False, 1, 5.0))
        config = parse("--unclean-leader-election", "--min-insync-replicas", "2",
                       "--controlled-shutdown-timeout-s", "1.5").config
        self.assertEqual((config.unclean_leader_election, config.min_insync_replicas,
                          config.controlled_shutdown_timeout_s), (True, 2, 1.5))
        for option, value in (("--min-insync-replicas", "0"), ("--controlled-shutdown-timeout-s", "0")):
            e = self.assertRaises(usage.UsageError, parse, option, value)
            self.assertIn(option, str(e))

    def test_zookeeper_session_timeout(self) -> None:
        """--zookeeper-session-timeout-s is 6 s by default (issue 22: a killed leader's partitions move after about
        that long) and reaches the config; a value that is not above 0 seconds is one line."""
        self.assertEqual(parse()["zookeeper-session-timeout-s"], 6.0)
        self.assertEqual(parse("--zookeeper-session-timeout-s", "2.5")["zookeeper-session-timeout-s"], 2.5)
        self.assertEqual(parse("--zookeeper-session-timeout-s", "2.5").config.zookeeper_session_timeout_s, 2.5)
        for bad in ("0", "-1", "soon"):
            e = self.assertRaises(usage.UsageError, parse, "--zookeeper-session-timeout-s", bad)
            self.assertEqual(str(e), f"--zookeeper-session-timeout-s must be a number of seconds above 0, not {bad!r}")

    def test_not_a_number(self) -> None:
        """A value that is not a whole number is a usage error naming the option."""
        e = self.assertRaises(usage.UsageError, parse, "--num-partitions", "zero")
        self.assertEqual(str(e), "--num-partitions must be a whole number, not 'zero'")

    def test_below_minimum(self) -> None:
        """A number under the option's minimum is a usage error saying the minimum."""
        for option, value, minimum in [("--num-partitions", "0", 1), ("--port", "-1", 0),
                                       ("--segment-bytes", "1000", 1024), ("--retention-bytes", "-2", -1),
                                       ("--max-message-bytes", "8", 9)]:
            e = self.assertRaises(usage.UsageError, parse, option, value)
            self.assertEqual(str(e), f"{option} must be at least {minimum}")

    def test_storage_retry_s(self) -> None:
        """--storage-retry-s (default 10) reaches the log config; a value that is not 0-86400 seconds is one line."""
        self.assertEqual(parse().config.log.storage_retry_s, 10.0)
        self.assertEqual(parse("--storage-retry-s", "2.5").config.log.storage_retry_s, 2.5)
        for bad in ("-1", "soon", "100000"):
            e = self.assertRaises(usage.UsageError, parse, "--storage-retry-s", bad)
            self.assertEqual(str(e), f"--storage-retry-s must be a number of seconds from 0 to 86400, not {bad!r}")

    def test_config_errors_are_usage_errors(self) -> None:
        """What only the config checks (a port above 65535) is a usage error too, not a ValueError."""
        e = self.assertRaises(usage.UsageError, parse, "--port", "70000")
        self.assertIn("port must be between 0 and 65535", str(e))

    def test_topic_partitions(self) -> None:
        """TOPIC:COUNT items, empty items ignored; a bad item, count or topic name is a usage error."""
        self.assertEqual(parse_topic_partitions(""), {})
        self.assertEqual(parse_topic_partitions("a:1,,b:2 ,"), {"a": 1, "b": 2})
        for text, message in [("clicks", "wants TOPIC:COUNT items, not 'clicks'"),
                              ("clicks:0", "--topic-partitions must be at least 1"),
                              ("clicks:x", "--topic-partitions must be a whole number, not 'x'"),
                              ("../etc:1", "--topic-partitions: ")]:
            e = self.assertRaises(usage.UsageError, parse_topic_partitions, text)
            self.assertIn(message, str(e), text)


class MakeServiceTests(SynchronousTestCase):
    def test_one_broker_service(self) -> None:
        """makeService gives twistd a MultiService holding one BrokerService with the parsed config."""
        options = parse("--log-dir", self.mktemp(), "--broker-id", "7")
        top = makeService(options)
        self.assertIsInstance(top, MultiService)
        (service,) = list(top)
        self.assertIsInstance(service, BrokerService)
        self.assertEqual(service.config, options.config)
        self.assertEqual(service.zookeeper_session_timeout_s, 6.0)
        self.assertFalse(service.running)
        (service,) = list(makeService(parse("--log-dir", self.mktemp(), "--zookeeper-session-timeout-s", "9")))
        self.assertEqual(service.zookeeper_session_timeout_s, 9.0)


class ZooKeeperCredentialsOptionTests(SynchronousTestCase):
    def test_credentials_file(self) -> None:
        """--zookeeper-credentials-file reaches the config; without --zookeeper, or unreadable, it is refused."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("twlog:secret\n")
        config = parse("--zookeeper", "zk:2181", "--zookeeper-credentials-file", path).config
        self.assertEqual(config.zookeeper_credentials_file, path)
        e = self.assertRaises(usage.UsageError, parse, "--zookeeper-credentials-file", path)
        self.assertIn("--zookeeper-credentials-file needs --zookeeper", str(e))
        e = self.assertRaises(usage.UsageError, parse, "-z", "zk:2181", "--zookeeper-credentials-file", path + "x")
        self.assertEqual(str(e), f"cannot read the ZooKeeper credentials file {path}x: No such file or directory")



class AnonymousOptionTests(SynchronousTestCase):
    """A broker that serves unauthenticated clients beyond loopback starts only with --allow-anonymous."""

    def test_beyond_loopback_without_authentication_is_refused(self) -> None:
        for interface in ("0.0.0.0", "::", "10.1.2.3", "broker1.example"):
            with self.assertRaises(usage.UsageError) as raised:
                parse("--interface", interface, "--log-dir", "/data")
            message = str(raised.exception)
            self.assertIn(f"--interface {interface} lets other machines connect", message)
            self.assertIn("--allow-anonymous", message)
            self.assertNotIn("\n", message)
            config = parse("--interface", interface, "--log-dir", "/data", "--allow-anonymous").config
            self.assertTrue(config.anonymous_beyond_loopback)

    def test_loopback_or_authenticated_needs_no_leave(self) -> None:
        for interface in ("127.0.0.1", "127.1.2.3", "::1", "localhost"):
            self.assertFalse(parse("--interface", interface, "--log-dir", "/data").config.anonymous_beyond_loopback)
        config = parse("--interface", "0.0.0.0", "--log-dir", "/data", "--zookeeper", "zk:2181",
                       "--sasl-mechanisms", "SCRAM-SHA-512", "--require-auth").config
        self.assertFalse(config.anonymous_beyond_loopback)
        config = parse("--interface", "0.0.0.0", "--log-dir", "/data", "--no-plaintext", "--tls-port", "9093",
                       "--tls-cert", "b.pem", "--tls-key", "b.key", "--tls-client-ca", "ca.pem").config
        self.assertFalse(config.anonymous_beyond_loopback)  # (every client presents a certificate the CA signed)
