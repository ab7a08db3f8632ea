"""`twlog registry` as users run it: a subprocess on a `twlog local` cluster, spoken to over loopback HTTP
by our clients and by Confluent's own Python client (confluent-kafka's SchemaRegistryClient), with Avro
records produced under two schema versions and read back by the Twisted consumer, the CLI and Spark."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SkipTest, TestCase

from tests.integration.broker import start_broker
from tests.integration.test_cli import twlog
from tests.integration.test_kafka07 import start_local
from twlog.avro import AvroDeserializer, AvroSerializer, RegistryClient, SyncRegistryClient
from twlog.broker.service import BrokerService
from twlog.client.discovery import discover
from twlog.config import BrokerConfig, LogConfig
from twlog.consumer.simple import EARLIEST, SimpleConsumer
from twlog.coord.zkserver import free_port
from twlog.errors import UnknownTopic
from twlog.producer import Producer

USER_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
#: v1 and a field with a default: BACKWARD (and FULL) compatible.
USER_V2 = {"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": -1}]}
#: A new field without a default: a reader of it cannot read v2's data.
USER_BAD = {"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "email", "type": "string"}]}
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryProcess(ProcessProtocol):
    """A `twlog registry` subprocess: its output, when it listens, and its exit."""

    def __init__(self) -> None:
        self.output = b""
        self.ready: Deferred = Deferred()
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.output += data
        if b"schema registry on http" in self.output and not self.ready.called:
            self.ready.callback(None)

    errReceived = outReceived

    def processEnded(self, reason) -> None:
        if not self.ready.called:
            self.ready.errback(AssertionError("twlog registry ended:\n" + self.output.decode(errors="replace")))
        self.ended.callback(reason.value.exitCode)


async def start_registry(testcase: TestCase, *args: str) -> tuple[RegistryProcess, object, str]:
    """Run `twlog registry ARGS --port <free>`; killed (by pid) after the test if still running."""
    port = free_port()
    process = RegistryProcess()
    argv = [sys.executable, "-m", "twlog.cli", "registry", *args, "--port", str(port)]
    transport = reactor.spawnProcess(process, sys.executable, argv, env=os.environ.copy())

    def kill():
        if not process.ended.called:
            transport.signalProcess("KILL")
            return process.ended

    testcase.addCleanup(kill)
    timer = reactor.callLater(30, lambda: process.ready.called or process.ready.errback(
        AssertionError("twlog registry not listening in 30 s:\n" + process.output.decode(errors="replace"))))
    try:
        await process.ready
    finally:
        if timer.active():
            timer.cancel()
    return process, transport, f"http://127.0.0.1:{port}"


def http(method: str, url: str, body: bytes | None = None) -> tuple[int, str, object]:
    """(status, content type, JSON body) of one request (blocking: run it in a thread)."""
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], json.loads(e.read())


def schema_body(schema: dict) -> bytes:
    return json.dumps({"schema": json.dumps(schema)}).encode()


class SchemaRegistryTests(TestCase):
    timeout = 240

    async def setUp(self) -> None:
        self.cluster = await start_local(self, brokers=2)
        self.registry, self.transport, self.url = await start_registry(self, "--zookeeper", self.cluster.zookeeper)

    async def call(self, method: str, path: str, body: bytes | None = None, url: str | None = None):
        return await deferToThread(http, method, (url or self.url) + path, body)

    async def test_register_evolve_refuse_restart(self) -> None:
        """Register, evolve compatibly, get 409 for an incompatible schema; kill -9 and restart: ids unchanged.
        Bad input gets Confluent's status and error code, in its content type, and the service lives on."""
        status, content_type, answer = await self.call("POST", "/subjects/users-value/versions", schema_body(USER_V1))
        self.assertEqual((status, content_type), (200, CONTENT_TYPE))
        v1 = answer["id"]
        again = await self.call("POST", "/subjects/users-value/versions", schema_body(USER_V1))
        self.assertEqual(again[2], {"id": v1})  # the same schema gets the same id
        v2 = (await self.call("POST", "/subjects/users-value/versions", schema_body(USER_V2)))[2]["id"]
        self.assertNotEqual(v1, v2)
        status, _, error = await self.call("POST", "/subjects/users-value/versions", schema_body(USER_BAD))
        self.assertEqual((status, error["error_code"]), (409, 409), error)
        status, _, check = await self.call("POST", "/compatibility/subjects/users-value/versions/latest",
                                           schema_body(USER_BAD))
        self.assertEqual((status, check), (200, {"is_compatible": False}))

        for method, path, body, expected in [
            ("POST", "/subjects/users-value/versions", b"{not json", (400, 400)),
            ("POST", "/subjects/users-value/versions", b'{"schema": "{\\"type\\": \\"record\\"}"}', (422, 42201)),
            ("GET", "/subjects/nobody/versions", None, (404, 40401)),
            ("GET", "/subjects/users-value/versions/7", None, (404, 40402)),
            ("GET", "/schemas/ids/9999", None, (404, 40403)),
            ("GET", "/subjects/users-value/versions/x", None, (422, 42202)),
            ("PUT", "/config", b'{"compatibility": "SIDEWAYS"}', (422, 42203)),
            ("POST", "/subjects/users-value/versions", b"x" * (2 * 1024 * 1024), (413, 413)),
        ]:
            status, content_type, error = await self.call(method, path, body)
            self.assertEqual((status, error["error_code"]), expected, (method, path, error))
            self.assertEqual(content_type, CONTENT_TYPE)
            self.assertIsInstance(error["message"], str)

        os.kill(self.transport.pid, signal.SIGKILL)
        await self.registry.ended
        self.registry, self.transport, self.url = await start_registry(self, "--zookeeper", self.cluster.zookeeper)
        self.assertEqual((await self.call("GET", "/subjects/users-value/versions"))[2], [1, 2])
        latest = (await self.call("GET", "/subjects/users-value/versions/latest"))[2]
        self.assertEqual((latest["version"], latest["id"]), (2, v2))
        self.assertEqual(json.loads((await self.call("GET", f"/schemas/ids/{v1}"))[2]["schema"]), USER_V1)
        self.assertEqual((await self.call("POST", "/subjects/users-value/versions", schema_body(USER_V1)))[2],
                         {"id": v1})

    async def test_confluent_client(self) -> None:
        """Confluent's own Python client registers, looks up, checks compatibility and sets the level."""
        try:
            from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
            from confluent_kafka.schema_registry.error import SchemaRegistryError
        except ImportError:
            raise SkipTest("confluent-kafka[schemaregistry] (the tests extra) is not installed") from None

        def use() -> None:
            client = SchemaRegistryClient({"url": self.url})
            first = client.register_schema("orders-value", Schema(json.dumps(USER_V1), "AVRO"))
            self.assertEqual(client.register_schema("orders-value", Schema(json.dumps(USER_V1), "AVRO")), first)
            second = client.register_schema("orders-value", Schema(json.dumps(USER_V2), "AVRO"))
            latest = client.get_latest_version("orders-value")
            self.assertEqual((latest.version, latest.schema_id), (2, second))
            self.assertEqual(json.loads(client.get_schema(first).schema_str), USER_V1)
            self.assertEqual(client.get_subjects(), ["orders-value"])
            self.assertEqual(client.get_versions("orders-value"), [1, 2])
            found = client.lookup_schema("orders-value", Schema(json.dumps(USER_V1), "AVRO"))
            self.assertEqual((found.version, found.schema_id), (1, first))
            self.assertFalse(client.test_compatibility("orders-value", Schema(json.dumps(USER_BAD), "AVRO")))
            with self.assertRaises(SchemaRegistryError) as refused:
                client.register_schema("orders-value", Schema(json.dumps(USER_BAD), "AVRO"))
            self.assertEqual((refused.exception.http_status_code, refused.exception.error_code), (409, 409))
            client.set_compatibility("orders-value", "NONE")
            self.assertEqual(client.get_compatibility("orders-value"), "NONE")
            client.register_schema("orders-value", Schema(json.dumps(USER_BAD), "AVRO"))
            self.assertEqual(client.delete_subject("orders-value"), [1, 2, 3])
            self.assertEqual(client.get_subjects(), [])  # soft-deleted
            with self.assertRaises(SchemaRegistryError) as gone:
                client.get_versions("orders-value")
            self.assertEqual(gone.exception.error_code, 40401)

        await deferToThread(use)

    async def test_confluent_client_ids_rules_listings(self) -> None:
        """Confluent's Python client: one id for every form of a schema, metadata and rules kept for every reader,
        references resolved (and a referenced version kept), a malformed rule set refused (42210), listing
        parameters, and a hard-deleted id gone from every lookup."""
        try:
            from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
            from confluent_kafka.schema_registry.error import SchemaRegistryError
        except ImportError:
            raise SkipTest("confluent-kafka[schemaregistry] (the tests extra) is not installed") from None
        rules = {"domainRules": [{"name": "encryptPII", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "ENCRYPT",
                                  "tags": ["PII"], "params": {"encrypt.kek.name": "kek1"}}]}
        metadata = {"properties": {"owner": "Bob Jones"}}

        def use() -> None:
            client = SchemaRegistryClient({"url": self.url})
            short = client.register_schema("a-value", Schema('"string"', "AVRO"))
            self.assertEqual(client.register_schema("b-value", Schema('{ "type" : "string" }', "AVRO")), short)
            shuffled = {"fields": [{"type": "string", "name": "name"}], "name": "User", "type": "record"}
            user = client.register_schema("c-value", Schema(json.dumps(USER_V1, indent=2), "AVRO"))
            self.assertEqual(client.register_schema("d-value", Schema(json.dumps(shuffled), "AVRO")), user)
            self.assertEqual(SchemaRegistryClient({"url": self.url}).get_schema(short).schema_str, '"string"')

            ruled = Schema.from_dict({"schema": json.dumps(USER_V2), "schemaType": "AVRO", "ruleSet": rules,
                                      "metadata": metadata})
            ruled_id = client.register_schema("pii-value", ruled)
            reader = SchemaRegistryClient({"url": self.url})  # (nothing cached: what any other client sees)
            latest = reader.get_latest_version("pii-value")
            self.assertEqual((latest.schema_id, latest.schema.rule_set, latest.schema.metadata),
                             (ruled_id, ruled.rule_set, ruled.metadata))
            self.assertEqual(latest.schema.rule_set.domain_rules[0].params.params, {"encrypt.kek.name": "kek1"})
            self.assertEqual(reader.get_schema(ruled_id).rule_set, ruled.rule_set)
            with self.assertRaises(SchemaRegistryError) as refused:
                client.register_schema("bad-value", Schema.from_dict({"schema": '"string"', "ruleSet": {
                    "domainRules": [{"name": "r", "kind": "CONDITION", "mode": "UPGRADE", "type": "CEL"}]}}))
            self.assertEqual((refused.exception.error_code, refused.exception.error_message),
                             (42210, "Domain rules can only be WRITE, READ, WRITEREAD"))

            address = {"type": "record", "name": "Address", "namespace": "acme",
                       "fields": [{"name": "street", "type": "string"}]}
            person = {"type": "record", "name": "Person", "namespace": "acme", "fields": [
                {"name": "home", "type": "acme.Address"}]}
            client.register_schema("address-value", Schema(json.dumps(address), "AVRO"))
            references = [SchemaReference("acme.Address", "address-value", 1)]
            person_id = client.register_schema("person-value", Schema(json.dumps(person), "AVRO", references))
            fetched = SchemaRegistryClient({"url": self.url}).get_latest_version("person-value")
            self.assertEqual((fetched.schema_id, fetched.schema.references, fetched.schema.schema_str), (
                person_id, references,
                '{"type":"record","name":"Person","namespace":"acme","fields":[{"name":"home","type":"Address"}]}'))
            self.assertEqual(client.get_referenced_by("address-value", 1), [person_id])
            with self.assertRaises(SchemaRegistryError) as referenced:
                client.delete_version("address-value", 1)
            self.assertEqual(referenced.exception.error_code, 42206)

            self.assertEqual(client.get_subjects(subject_prefix="pii"), ["pii-value"])
            self.assertEqual(client.get_subjects(offset=2, limit=2), ["b-value", "c-value"])
            client.delete_subject("a-value")
            self.assertEqual(client.get_subjects(deleted=True, limit=1), ["a-value"])
            self.assertEqual([(v.subject, v.version) for v in client.get_schema_versions(short)], [("b-value", 1)])
            self.assertEqual(client.delete_subject("a-value", permanent=True), [1])
            self.assertEqual(SchemaRegistryClient({"url": self.url}).get_schema(short).schema_str, '"string"')
            client.delete_subject("b-value")
            client.delete_subject("b-value", permanent=True)
            with self.assertRaises(SchemaRegistryError) as gone:
                SchemaRegistryClient({"url": self.url}).get_schema(short)
            self.assertEqual((gone.exception.http_status_code, gone.exception.error_code), (404, 40403))

        await deferToThread(use)
        status, _, listed = await self.call("GET", "/schemas?subjectPrefix=c-&latestOnly=true")
        self.assertEqual([(s["subject"], s["version"], s["id"]) for s in listed], [("c-value", 1, 2)])
        status, _, cluster = await self.call("GET", "/v1/metadata/id")
        self.assertEqual(cluster["scope"]["clusters"]["kafka-cluster"], self.cluster.zookeeper)

    async def test_two_registries_agree_on_ids(self) -> None:
        """Two registry processes on one cluster, written to at once: every schema one id, the same in both."""
        _, _, other = await start_registry(self, "--zookeeper", self.cluster.zookeeper)
        await self.call("PUT", "/config", b'{"compatibility": "NONE"}')
        schemas = [{"type": "enum", "name": f"E{i}", "symbols": ["A"]} for i in range(12)]
        answers = await deferToThread(_register_in_parallel, [self.url, other], schemas)
        ids = [answer["id"] for answer in answers]
        self.assertEqual(len(set(ids)), len(schemas), answers)
        for url in (self.url, other):
            for schema, schema_id in zip(schemas, ids):
                self.assertEqual(json.loads((await self.call("GET", f"/schemas/ids/{schema_id}", url=url))[2]
                                            ["schema"]), schema)

    async def test_two_versions_read_back(self) -> None:
        """Records produced under v1 and v2 come back decoded: Twisted consumer, CLI, Spark batch and streaming."""
        registry = RegistryClient(self.url, reactor=reactor)
        producer = Producer(zookeeper=self.cluster.zookeeper, reactor=reactor, ack="flushed")
        producer.serializer = AvroSerializer(registry, USER_V1)
        await producer.send("users", [{"name": "ann"}, {"name": "bob"}], partition_index=0)
        producer.serializer = AvroSerializer(registry, USER_V2)
        await producer.send("users", {"name": "cy", "age": 7}, partition_index=0)
        await producer.close()

        # a broker registers a topic made by a produce in ZooKeeper after answering it (as Kafka 0.7's did)
        (location, *_) = await discovered(["users"], self.cluster.zookeeper)
        consumer = SimpleConsumer(location.host, location.port, reactor=reactor,
                                  deserializer=AvroDeserializer(registry, reader=USER_V2))
        self.addCleanup(consumer.close)
        (start,) = await consumer.offsets("users", location.partition, EARLIEST, 1)
        fetched = await consumer.fetch("users", location.partition, start)
        self.assertEqual([m.payload for m in fetched], [{"name": "ann", "age": -1}, {"name": "bob", "age": -1},
                                                        {"name": "cy", "age": 7}])

        status, out, err = await twlog("consume", "-z", self.cluster.zookeeper, "-t", "users", "--registry", self.url)
        self.assertEqual(status, 0, err)
        self.assertEqual([json.loads(line) for line in out.splitlines()],
                         [{"name": "ann"}, {"name": "bob"}, {"name": "cy", "age": 7}])  # each in its own schema

        schema_file = self.mktemp()
        with open(schema_file, "w") as f:
            json.dump(USER_V2, f)
        status, _, err = await twlog("produce", "-z", self.cluster.zookeeper, "-t", "users", "--avro-schema",
                                     schema_file, "--registry", self.url, stdin=b'{"name": "dee", "age": 9}\n')
        self.assertEqual(status, 0, err)
        status, _, err = await twlog("produce", "-z", self.cluster.zookeeper, "-t", "users", "--avro-schema",
                                     schema_file, "--registry", self.url, stdin=b'{"name": 5}\n')
        self.assertEqual(status, 1)
        self.assertIn(b"does not fit the Avro schema", err)
        self.assertNotIn(b"Traceback", err)

        try:
            from tests.integration.spark import spark_call, spark_session
            spark = spark_session()
        except ImportError:
            raise SkipTest("pyspark is not installed") from None
        rows = await spark_call(_spark_batch, spark, self.cluster.zookeeper, self.url)
        self.assertEqual(rows, [("ann", -1, "users"), ("bob", -1, "users"), ("cy", 7, "users"), ("dee", 9, "users")])
        streamed = await spark_call(_spark_stream, spark, self.cluster.zookeeper, self.url, self.mktemp())
        self.assertEqual(streamed, [("ann", -1), ("bob", -1), ("cy", 7), ("dee", 9)])

    async def test_cluster_down(self) -> None:
        """A registry whose twlog cluster never answered has nothing in memory: 500 (50001) at once, and lives."""
        _, transport, url = await start_registry(self, "--broker", f"127.0.0.1:{free_port()}")
        status, content_type, error = await self.call("POST", "/subjects/s/versions", schema_body(USER_V1), url=url)
        self.assertEqual((status, content_type), (500, CONTENT_TYPE))
        self.assertIn(error["error_code"], (50001, 50002))
        status, _, error = await self.call("GET", "/subjects", url=url)
        self.assertEqual((status, error["error_code"]), (500, 50001))
        self.assertIsNone(transport.pid and os.waitpid(transport.pid, os.WNOHANG)[0] or None)  # still running


class ClusterLostTests(TestCase):
    """The broker holding twlog-schemas stops under a running registry, and comes back."""

    timeout = 120

    async def test_reads_from_memory_writes_bounded_one_line_each_way(self) -> None:
        log_dir = self.mktemp()
        broker = await start_broker(self, log_dir)
        port = broker.broker.port
        process, _, url = await start_registry(self, "--broker", f"127.0.0.1:{port}", "--request-timeout", "2")
        status, _, answer = await deferToThread(http, "POST", url + "/subjects/users-value/versions",
                                                schema_body(USER_V1))
        self.assertEqual((status, answer), (200, {"id": 1}))

        await broker.stopService()  # the cluster is down: the registry's connection drops, new ones are refused
        await _wait_for(lambda: b"lost the twlog cluster" in process.output, 10, "the registry's lost line")
        for path in ("/subjects", "/schemas/ids/1", "/subjects/users-value/versions/latest", "/config"):
            started = time.monotonic()
            status, _, answer = await deferToThread(http, "GET", url + path)
            self.assertEqual(status, 200, (path, answer))
            self.assertLess(time.monotonic() - started, 0.5, path)  # from memory, at once
        started = time.monotonic()
        status, _, error = await deferToThread(http, "POST", url + "/subjects/users-value/versions",
                                               schema_body(USER_V2))
        self.assertLess(time.monotonic() - started, 2.5)  # within --request-timeout
        self.assertEqual((status, error["error_code"]), (500, 50001), error)
        self.assertIn(f"127.0.0.1:{port}", error["message"])
        await deferLater(reactor, 4, lambda: None)  # retries, quietly
        output = process.output.decode(errors="replace")
        self.assertEqual(output.count("lost the twlog cluster"), 1, output)
        for noise in ("Connection dropped", "Starting factory <twisted.internet.endpoints", "Traceback"):
            self.assertNotIn(noise, output)
        self.assertNotIn("Scheduling retry 2", output)  # (Twisted logs a first retry of each connection as it drops)

        again = BrokerService(BrokerConfig(log=LogConfig(log_dir), port=port, interface="127.0.0.1"), reactor)
        again.startService()
        await again.listening
        self.addCleanup(lambda: again.stopService() if again.running else None)
        await _wait_for(lambda: b"the twlog cluster is back" in process.output, 20, "the registry's back line")
        status, _, answer = await deferToThread(http, "POST", url + "/subjects/users-value/versions",
                                                schema_body(USER_V2))
        self.assertEqual((status, answer), (200, {"id": 2}))
        self.assertEqual(process.output.count(b"the twlog cluster is back"), 1)


class StartFailureTests(TestCase):
    async def test_port_taken(self) -> None:
        """`twlog registry` on a taken port: exit 1 and one line naming --port."""
        _, _, url = await start_registry(self, "--broker", f"127.0.0.1:{free_port()}")
        taken = url.rsplit(":", 1)[1]
        status, out, err = await twlog("registry", "--broker", "127.0.0.1:1", "--port", taken)
        self.assertEqual((status, out), (1, b""))
        self.assertEqual(err.decode(), f"twlog registry: cannot listen on 127.0.0.1:{taken}: the port is taken "
                                       "(another registry?): give another --port (0: any free one)\n")


async def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s")
        await deferLater(reactor, 0.05, lambda: None)


def _register_in_parallel(urls: list[str], schemas: list[dict]) -> list[dict]:
    with ThreadPoolExecutor(len(schemas)) as pool:
        futures = [pool.submit(SyncRegistryClient(urls[i % len(urls)]).register, f"s{i}", json.dumps(schema))
                   for i, schema in enumerate(schemas)]
        return [{"id": future.result()} for future in futures]


def _reader(spark, zookeeper: str, url: str, stream: bool = False):
    read = spark.readStream if stream else spark.read
    return (read.format("twlog").option("zookeeper", zookeeper).option("subscribe", "users")
            .option("startingOffsets", "earliest").option("valueFormat", "avro").option("schemaRegistryUrl", url)
            .load())


def _spark_batch(spark, zookeeper: str, url: str) -> list[tuple]:
    df = _reader(spark, zookeeper, url)
    return [(r["name"], r["age"], r["topic"]) for r in df.orderBy("name").collect()]  # (dee: another partition)


def _spark_stream(spark, zookeeper: str, url: str, checkpoint: str) -> list[tuple]:
    query = (_reader(spark, zookeeper, url, stream=True).writeStream.format("memory").queryName("avro_users")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    return [(r["name"], r["age"]) for r in spark.sql("select name, age from avro_users order by name").collect()]


class TwistdStartFailureTests(TestCase):
    timeout = 60

    async def test_twistd_port_taken_exits_non_zero(self) -> None:
        """`twistd -n twlog-registry` on a taken port: one critical line naming --port, exit status 1 (twistd alone
        would keep running with no listener, or exit 0)."""
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out, err, status = await getProcessOutputAndValue(
            sys.executable, ["-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=",
                             "twlog-registry", "--broker", "127.0.0.1:1", "--port", str(port)],
            env=os.environ.copy(), path=os.getcwd())
        output = out + err
        self.assertEqual(status, 1, output.decode())
        (line,) = [line for line in output.splitlines() if b"#critical]" in line]
        self.assertTrue(line.endswith(b"cannot start the schema registry: cannot listen on 127.0.0.1:%d: the port is "
                                      b"taken (another registry?): give another --port (0: any free one)" % port), line)
        self.assertNotIn(b"Traceback", output)


async def discovered(topics: list[str], zookeeper: str, timeout_s: float = 15.0):
    """C{discover}, once the topics' registrations have reached ZooKeeper (bounded by C{timeout_s})."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await deferToThread(discover, topics, zookeeper=zookeeper)
        except UnknownTopic:
            if time.monotonic() >= deadline:
                raise
            await deferLater(reactor, 0.05, lambda: None)
