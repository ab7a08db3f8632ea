"""The Spark source's options, without Spark: names checked in any case, aliases, offsets JSON keys."""

from __future__ import annotations

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from twlog.coord.layout import PartitionLocation
from twlog.errors import PartitionsOffline
from twlog.partition import TopicPartition
from twlog.spark.options import OPTIONS, SourceOptions, check_options

#: clicks on brokers 0 (two partitions) and 1 (one).
FOUND = [PartitionLocation(TopicPartition.on_broker("clicks", b, p), b, "h", 9092 + b)
         for b, p in [(0, 0), (0, 1), (1, 0)]]


def source(stream: bool = False, **options) -> SourceOptions:
    """The options of a source reading C{clicks} whose discovery finds L{FOUND}."""
    options.setdefault("brokers", "h:9092")
    options.setdefault("subscribe", "clicks")
    return SourceOptions(options, stream=stream, find=lambda *a, **k: list(FOUND))


class CheckOptionsTests(SynchronousTestCase):
    def test_known_options_in_any_case(self) -> None:
        """Every documented option is known, in any case (Spark passes them lower-cased)."""
        given = {name.upper(): "x" for name in OPTIONS}
        self.assertEqual(check_options(given), {name.lower(): "x" for name in OPTIONS})

    def test_unknown_options_are_named_with_the_known_ones(self) -> None:
        """A misspelled option names itself, the nearest known option, and the whole list."""
        with self.assertRaises(ValueError) as caught:
            check_options({"startingoffset": "earliest", "brokers": "h:1", "groupid": "g"})
        self.assertEqual(
            str(caught.exception),
            "unknown options 'groupid', 'startingoffset' (did you mean startingOffsets?) for the twlog source; "
            "the options are: " + ", ".join(OPTIONS),
        )


class SourceOptionsTests(SynchronousTestCase):
    def test_bootstrap_servers_alias(self) -> None:
        """kafka.bootstrap.servers is brokers; both given must agree."""
        self.assertEqual(SourceOptions({"kafka.bootstrap.servers": "a:1", "subscribe": "t"}, False).brokers, "a:1")
        self.assertEqual(source(**{"kafka.bootstrap.servers": "h:9092"}).brokers, "h:9092")
        self.assertRaises(ValueError, source, **{"kafka.bootstrap.servers": "other:1"})

    def test_where_is_required_once(self) -> None:
        """Exactly one of brokers (or its alias) and zookeeper."""
        with self.assertRaises(ValueError) as caught:
            SourceOptions({"subscribe": "t"}, False)
        self.assertIn('"kafka.bootstrap.servers"', str(caught.exception))
        self.assertRaises(ValueError, source, zookeeper="z:2181")

    def test_zookeeper_credentials_file(self) -> None:
        """zookeeper.credentials.file: the client options carry it to the driver's ZooKeeper sessions and, in the
        input partitions, to the executors'; a file that cannot be read fails the query in one line."""
        from twlog.coord.zkauth import ZooKeeperCredentials, ZooKeeperCredentialsError
        from twlog.spark.source import _split

        path = self.mktemp()
        with open(path, "w") as f:
            f.write("username=twlog\npassword=secret\n")
        o = SourceOptions({"zookeeper": "z:2181/c", "subscribe": "t", "zookeeper.credentials.file": path}, False)
        self.assertEqual(o.zookeeper_credentials, ZooKeeperCredentials("twlog", "secret"))
        self.assertEqual(o.client.zookeeper_credentials, o.zookeeper_credentials)
        tp = PartitionLocation(TopicPartition("t", "0-0"), 0, "h", 1)
        (part,) = _split(o, [(tp, 0, 10)])
        self.assertEqual((part.zookeeper, part.options.zookeeper_credentials), ("z:2181/c", o.zookeeper_credentials))
        with self.assertRaises(ZooKeeperCredentialsError) as caught:
            SourceOptions({"zookeeper": "z:2181", "subscribe": "t", "zookeeper.credentials.file": path + "x"}, False)
        self.assertEqual(str(caught.exception),
                         f"cannot read the ZooKeeper credentials file {path}x: No such file or directory")

    def test_kafka_security_options(self) -> None:
        """Spark's Kafka source's kafka.security.protocol, kafka.ssl.* and kafka.sasl.* (any case, as Spark passes
        them) become the client options the driver uses and the input partitions carry to the executors."""
        import pickle

        from twlog.client.sasl import SASLSettings
        from twlog.client.tls import TLSSettings
        from twlog.spark.source import _split

        jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="pw";'
        o = source(**{"kafka.security.protocol": "SASL_SSL", "kafka.ssl.truststore.location": "/ca.pem",
                      "kafka.ssl.truststore.type": "PEM", "KAFKA.SASL.MECHANISM": "SCRAM-SHA-256",
                      "kafka.sasl.jaas.config": jaas})
        self.assertEqual((o.client.tls, o.client.sasl), (TLSSettings("/ca.pem"), SASLSettings("SCRAM-SHA-256", "bob",
                                                                                              "pw")))
        (part,) = _split(o, [(FOUND[0], 0, 10)])
        shipped = pickle.loads(pickle.dumps(part))
        self.assertEqual((shipped.options.tls, shipped.options.sasl), (o.client.tls, o.client.sasl))
        self.assertEqual(source().client.listener, "PLAINTEXT")
        self.assertEqual(o.client.listener, "SSL")
        with self.assertRaises(ValueError) as caught:
            source(**{"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/t.jks"})
        self.assertEqual(str(caught.exception), "the twlog source: kafka.ssl.truststore.location is a JKS (the "
                         "default) store: twlog reads PEM files only: set kafka.ssl.truststore.type=PEM with a PEM "
                         "file (or kafka.ssl.ca.location)")

    def test_numbers(self) -> None:
        """Whole-number options say which option is not a number."""
        with self.assertRaises(ValueError) as caught:
            source(fetchSize="1MB")
        self.assertEqual(str(caught.exception), "fetchSize must be a whole number, not '1MB'")

    def test_min_partitions(self) -> None:
        """minPartitions (Spark's Kafka name, any case) is a positive whole number; unset, None."""
        self.assertIsNone(source().min_partitions)
        self.assertEqual(source(MINPARTITIONS="8").min_partitions, 8)
        for bad, message in (("0", "minPartitions must be a positive whole number, not 0"),
                             ("eight", "minPartitions must be a whole number, not 'eight'")):
            with self.assertRaises(ValueError) as caught:
                source(minPartitions=bad)
            self.assertEqual(str(caught.exception), message)


class OffsetKeysTests(SynchronousTestCase):
    def test_names_and_indexes(self) -> None:
        """Keys are partition names or cluster-wide indexes; they are stored as names."""
        o = source(startingOffsets='{"clicks": {"0-1": 5, "2": 7}}', endingOffsets='{"clicks": {"0": 9}}')
        self.assertEqual(o.partitions(), FOUND)
        self.assertEqual(o.starting, {"clicks": {"0-1": 5, "1-0": 7}})
        self.assertEqual(o.ending, {"clicks": {"0-0": 9}})

    def test_key_naming_no_partition(self) -> None:
        """A key naming no partition lists the valid names (the old {"clicks": {"5": 5}} was silently ignored)."""
        o = source(startingOffsets='{"clicks": {"5": 5}}')
        with self.assertRaises(ValueError) as caught:
            o.partitions()
        self.assertEqual(
            str(caught.exception),
            "startingOffsets: topic 'clicks' has no partition '5': give a name <broker id>-<partition> "
            "(0-0, 0-1, 1-0) or an index 0-2",
        )

    def test_topic_not_read(self) -> None:
        """A topic the query does not read is an error naming the topics it reads."""
        with self.assertRaises(ValueError) as caught:
            source(endingOffsets='{"clicks2": {"0-0": 1}}').partitions()
        self.assertEqual(str(caught.exception),
                         "endingOffsets names topic 'clicks2', which this query does not read (it reads 'clicks')")

    def test_one_partition_twice(self) -> None:
        """A name and an index of the same partition is an error."""
        with self.assertRaises(ValueError) as caught:
            source(startingOffsets='{"clicks": {"0-0": 1, "0": 2}}').partitions()
        self.assertIn("gives partition 0-0 of topic 'clicks' twice", str(caught.exception))

    def test_assign_by_index(self) -> None:
        """assign accepts names and indexes too."""
        o = SourceOptions({"brokers": "h:1", "assign": '{"clicks": ["2", "0-1"]}'}, False,
                          find=lambda *a, **k: list(FOUND))
        self.assertEqual([p.name for p in o.partitions()], ["0-1", "1-0"])


def _broker_1_down(*args, **kwargs):
    """A discovery whose broker 1 is down: its partitions are known and offline."""
    offline = [TopicPartition.on_broker("clicks", 1, 0), TopicPartition.on_broker("clicks", 1, 1)]
    raise PartitionsOffline("broker 1, which holds clicks:1-0..1-1, is not registered: down?", offline, FOUND[:2])


class OfflinePartitionsTests(SynchronousTestCase):
    """A partition whose broker is down is never left out in silence (failOnDataLoss decides)."""

    def test_fails_by_default(self) -> None:
        o = SourceOptions({"brokers": "h:1", "subscribe": "clicks"}, False, find=_broker_1_down)
        with self.assertRaises(PartitionsOffline) as caught:
            o.partitions()
        self.assertEqual(str(caught.exception), "broker 1, which holds clicks:1-0..1-1, is not registered: down? "
                         "(set failOnDataLoss=false to read the partitions that can be reached)")

    def test_fail_on_data_loss_false_reads_the_rest_and_says_so(self) -> None:
        o = SourceOptions({"brokers": "h:1", "subscribe": "clicks", "failOnDataLoss": "false"}, False,
                          find=_broker_1_down)
        with self.assertLogs("twlog.spark.options", "WARNING") as logged:
            self.assertEqual([p.name for p in o.partitions()], ["0-0", "0-1"])
        self.assertIn("leaving out 2 partitions that cannot be read (failOnDataLoss=false): broker 1, which holds "
                      "clicks:1-0..1-1", logged.output[0])

    def test_said_once_while_the_same_and_when_back(self) -> None:
        """A streaming query discovers at every trigger: the same offline partitions are said once, and their
        return once."""
        down = [True]

        def find(*args, **kwargs):
            if down[0]:
                return _broker_1_down()
            return list(FOUND)

        o = SourceOptions({"brokers": "h:1", "subscribe": "clicks", "failOnDataLoss": "false"}, True, find=find)
        with self.assertLogs("twlog.spark.options", "WARNING") as logged:
            for _ in range(3):
                o.partitions()
            down[0] = False
            o.partitions()
            o.partitions()
        self.assertEqual([line.split(":", 2)[2] for line in logged.output], [
            "twlog: leaving out 2 partitions that cannot be read (failOnDataLoss=false): broker 1, which holds "
            "clicks:1-0..1-1, is not registered: down?",
            "twlog: every partition can be read again",
        ])

    def test_assign_counts_only_the_assigned(self) -> None:
        """Assigned partitions all readable: no error; one assigned offline: the error names it alone."""
        o = SourceOptions({"brokers": "h:1", "assign": '{"clicks": ["0-1"]}'}, False, find=_broker_1_down)
        self.assertEqual([p.name for p in o.partitions()], ["0-1"])
        o = SourceOptions({"brokers": "h:1", "assign": '{"clicks": ["0-0", "1-1"]}'}, False, find=_broker_1_down)
        with self.assertRaises(PartitionsOffline) as caught:
            o.partitions()
        self.assertIn("broker 1, which holds clicks:1-1, is not registered", str(caught.exception))
        # An index counts over every partition of the topic, readable or not (2 is 1-0).
        o = SourceOptions({"brokers": "h:1", "assign": '{"clicks": ["2"]}'}, False, find=_broker_1_down)
        self.assertRaises(PartitionsOffline, o.partitions)


class OfflineStreamingTests(SynchronousTestCase):
    def test_offsets_of_offline_partitions_are_kept(self) -> None:
        """failOnDataLoss=false: a micro-batch reads the readable partitions and keeps the offsets of the offline
        ones where they were, so they are read from there once their broker is back."""
        try:
            from twlog.spark.source import TwlogStreamReader
        except ImportError as e:  # pragma: no cover - the tests extra installs pyspark
            raise SkipTest(f"pyspark is not installed: {e}") from None
        o = SourceOptions({"brokers": "h:1", "subscribe": "clicks", "failOnDataLoss": "false"}, True,
                          find=_broker_1_down)
        o.bounds = lambda tp: (0, 100)
        reader = TwlogStreamReader(o)
        start = {"clicks": {"0-0": 10, "0-1": 100, "1-0": 5, "1-1": 7}}
        with self.assertLogs("twlog.spark.options", "WARNING"):
            end = reader.latestOffset(start)
        self.assertEqual(end, {"clicks": {"0-0": 100, "0-1": 100, "1-0": 5, "1-1": 7}})
        with self.assertNoLogs("twlog.spark.options", "WARNING"):  # (said once, at latestOffset)
            planned = reader.partitions(start, end)
        self.assertEqual([(p.tp.name, p.start, p.end) for p in planned], [("0-0", 10, 100)])


class _Leader:
    """A connection to C{port}: it leads partition 0 of C{orders} only if C{port} is in C{leads}, else it answers
    NotLeader (or refuses the connection, if C{port} is in C{down})."""

    def __init__(self, port: int, leads: set[int], down: set[int], asked: list[int]) -> None:
        self.port, self.leads, self.down = port, leads, down
        asked.append(port)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def offset(self, topic: str, number: int, time: int) -> int:
        from twlog.errors import ConnectionFailed, NotLeader

        if self.port in self.down:
            raise ConnectionFailed(f"h:{self.port} refused the connection")
        if self.port not in self.leads:
            raise NotLeader(f"broker at h:{self.port} does not lead {topic} {number}")
        return 0 if time == -2 else 100


def scripted(answers: list):
    """A discovery that gives (or raises) C{answers} in turn."""

    def find(*args, **kwargs):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return find


class OnLeaderTests(SynchronousTestCase):
    """Driver requests (bounds, boundaries) follow a replicated partition's leader when it moves."""

    def options(self, ports: list[int], leads: set[int], down: set[int] = frozenset()) -> SourceOptions:
        """A source of C{orders} whose discoveries find partition 0 at each of C{ports} in turn (the last one
        from then on)."""
        self.asked: list[int] = []
        self.slept: list[float] = []

        def find(*args, **kwargs) -> list[PartitionLocation]:
            port = ports.pop(0) if len(ports) > 1 else ports[0]
            return [PartitionLocation(TopicPartition("orders", "0"), port - 9090, "h", port)]

        return SourceOptions({"zookeeper": "z:2181", "subscribe": "orders"}, False, find=find,
                             connect=lambda host, port, o: _Leader(port, leads, down, self.asked),
                             sleep=self.slept.append)

    def test_leader_moved(self) -> None:
        """The leader found answers NotLeader; found again, the next refuses connections (it is stopping); found
        again, the third answers: LEADER_WAIT_S before each new discovery."""
        from twlog.spark.options import LEADER_WAIT_S

        o = self.options([9091, 9092, 9093], leads={9093}, down={9092})
        (tp,) = o.partitions()
        self.assertEqual(o.bounds(tp), (0, 100))
        self.assertEqual(self.asked, [9091, 9092, 9093])
        self.assertEqual(self.slept, [LEADER_WAIT_S, LEADER_WAIT_S])

    def test_gives_up(self) -> None:
        """A leader that never comes: the last error, after LEADER_RETRIES tries more."""
        from twlog.errors import NotLeader
        from twlog.spark.options import LEADER_RETRIES

        o = self.options([9091], leads=set())
        (tp,) = o.partitions()
        self.assertRaises(NotLeader, o.bounds, tp)
        self.assertEqual(len(self.asked), LEADER_RETRIES + 1)

    def test_07_partition_not_retried(self) -> None:
        """A 0.7 partition never moves: its broker's refusal is raised at once."""
        from twlog.errors import ConnectionFailed

        asked: list[int] = []
        o = SourceOptions({"brokers": "h:9092", "subscribe": "clicks"}, False, find=lambda *a, **k: list(FOUND),
                          connect=lambda host, port, opts: _Leader(port, set(), {port}, asked), sleep=self.fail)
        self.assertRaises(ConnectionFailed, o.bounds, FOUND[0])
        self.assertEqual(asked, [9092])

    def test_waits_for_a_replicated_partitions_leader(self) -> None:
        """A replicated partition with no leader (an election under way) is discovered again, LEADER_WAIT_S
        apart, until it has one; a 0.7 partition's broker down fails at once (above)."""
        from twlog.spark import options as module

        replicated = [PartitionLocation(TopicPartition("orders", str(n)), 1, "h", 9092) for n in (0, 1)]
        answers: list = [PartitionsOffline("orders:0 has no live leader", [TopicPartition("orders", "0")],
                                           replicated[1:])] * 2 + [replicated]
        slept: list[float] = []
        o = SourceOptions({"brokers": "h:1", "subscribe": "orders"}, False, find=scripted(answers),
                          sleep=slept.append)
        self.assertEqual([p.name for p in o.partitions()], ["0", "1"])
        self.assertEqual(slept, [module.LEADER_WAIT_S] * 2)

    def test_waits_while_a_killed_leader_is_still_registered(self) -> None:
        """A replicated partition's leader killed (kill -9) stays registered until its session expires: its
        refused connection (BrokerUnreachable) is discovered again, LEADER_WAIT_S apart, until another leads; a
        0.7 partition's unreachable broker is raised at once."""
        from twlog.errors import BrokerUnreachable
        from twlog.spark import options as module

        replicated = [PartitionLocation(TopicPartition("orders", str(n)), 2, "h", 9093) for n in (0, 1)]
        refused = BrokerUnreachable("broker 1 at h:9092 holds orders:0, orders:1 but cannot be reached: refused",
                                    [tp.tp for tp in replicated])
        answers: list = [refused, refused, replicated]
        slept: list[float] = []
        o = SourceOptions({"brokers": "h:1", "subscribe": "orders"}, False, find=scripted(answers),
                          sleep=slept.append)
        self.assertEqual([p.name for p in o.partitions()], ["0", "1"])
        self.assertEqual(slept, [module.LEADER_WAIT_S] * 2)

        old = BrokerUnreachable("broker 1 at h:9092 holds clicks:1-0 but cannot be reached: refused",
                                [TopicPartition("clicks", "1-0")])

        def find_old(*args, **kwargs):
            raise old

        o = SourceOptions({"brokers": "h:1", "subscribe": "clicks"}, False, find=find_old, sleep=self.fail)
        self.assertRaises(BrokerUnreachable, o.partitions)
