"""The Spark source against a secured broker (--require-auth, SASL SCRAM over TLS), with the option names of
Spark's Kafka source (kafka.security.protocol, kafka.ssl.truststore.*, kafka.sasl.jaas.config, ...)."""

from __future__ import annotations

from twisted.internet import reactor

from tests.integration.broker import start_broker
from tests.integration.spark import spark_call
from tests.integration.test_spark_source import SparkTestCase, collect, payloads
from tests.integration.test_tls import Certificates
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.client.options import ClientOptions
from twlog.client.sasl import SASLSettings
from twlog.coord.users import UserStore
from twlog.producer import Producer
from twlog.security.credentials import SCRAM_MECHANISMS, make_credential

TOPIC = "secured"


def jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


class SecuredSparkTests(SparkTestCase):
    async def setUp(self):
        await super().setUp()
        zookeeper = fresh_connect_string()
        zk = await connect(self, zookeeper)
        await UserStore(zk).add("bob", {m: make_credential(m, "bob-secret") for m in SCRAM_MECHANISMS})
        self.certs = Certificates(self.mktemp())
        self.service = await start_broker(self, zookeeper=zookeeper, require_auth=True,
                                          sasl_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                                          **self.certs.broker(mutual=False))
        self.brokers = f"127.0.0.1:{self.service.tls_port.getHost().port}"
        options = ClientOptions(timeout_s=10, tls=self.certs.client(cert_file=None, key_file=None),
                                sasl=SASLSettings("SCRAM-SHA-256", "bob", "bob-secret"))
        producer = Producer(self.brokers, reactor=reactor, ack="flushed", options=options)
        try:
            for prefix, n in (("a", 300), ("b", 200)):
                await producer.send(TOPIC, payloads(prefix, n), partition_index=0)
        finally:
            await producer.close()

    def secured(self, password: str = "bob-secret") -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.brokers, "subscribe": TOPIC, "startingOffsets": "earliest",
                "kafka.security.protocol": "SASL_SSL", "kafka.ssl.truststore.location": self.certs.ca_file,
                "kafka.ssl.truststore.type": "PEM", "kafka.sasl.mechanism": "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": jaas("bob", password), "timeoutMs": "10000"}

    async def test_batch_read_over_sasl_ssl(self):
        """A batch read (driver and executors over SASL_SSL) gets every message; librdkafka's names work too."""
        rows = await self.rows(**self.secured())
        by_partition: dict[str, list[bytes]] = {}
        for row in rows:
            by_partition.setdefault(row[1], []).append(row[3])
        self.assertEqual(by_partition, {"0-0": payloads("a", 300) + payloads("b", 200)})
        options = self.secured()
        for key in ("kafka.ssl.truststore.location", "kafka.ssl.truststore.type", "kafka.sasl.jaas.config"):
            del options[key]
        options.update({"kafka.ssl.ca.location": self.certs.ca_file, "kafka.sasl.username": "bob",
                        "kafka.sasl.password": "bob-secret", "minPartitions": "4"})
        self.assertEqual(sorted(r[3] for r in await self.rows(**options)),
                         sorted(payloads("a", 300) + payloads("b", 200)))

    async def test_short_stream_over_sasl_ssl(self):
        """A streaming query (availableNow) over SASL_SSL reads every message into a memory sink."""
        name = "secured_stream"

        def run() -> list[tuple]:
            reader = self.spark.readStream.format("twlog")
            for key, value in self.secured().items():
                reader = reader.option(key, value)
            query = (reader.load().writeStream.format("memory").queryName(name)
                     .trigger(availableNow=True).start())
            try:
                query.awaitTermination(120)
            finally:
                query.stop()
            return collect(self.spark.table(name))

        rows = await spark_call(run)
        self.assertEqual(sorted(r[3] for r in rows), sorted(payloads("a", 300) + payloads("b", 200)))

    async def test_wrong_password_and_no_credentials(self):
        """A wrong password fails the query with the one-line reason; so does reading without SASL (the broker
        answers SaslAuthenticationFailed)."""
        text = await self.error(**self.secured("not-bobs"))
        self.assertIn("authentication failed for user bob (SCRAM-SHA-256)", text)
        options = self.secured()
        del options["kafka.sasl.jaas.config"], options["kafka.sasl.mechanism"]
        options["kafka.security.protocol"] = "SSL"
        self.assertIn("refused CLUSTER_METADATA_V2 secured: SaslAuthenticationFailed", await self.error(**options))
