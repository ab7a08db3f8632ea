"""The mirror and `twlog groups` against secured clusters: brokers with --require-auth, SASL SCRAM and TLS,
reached with Kafka client settings (--from-client-config/--to-client-config, --client-config)."""

from __future__ import annotations

import json
import os

from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_cli import twlog
from tests.integration.test_tls import Certificates
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.client.kafka_settings import security_settings
from twlog.client.options import ClientOptions
from twlog.consumer import SimpleConsumer
from twlog.coord.users import UserStore
from twlog.mirror.mirror import Mirror, MirrorSettings
from twlog.producer import Producer
from twlog.protocol.codec import EARLIEST
from twlog.security.credentials import SCRAM_MECHANISMS, make_credential

TOPIC = "secret"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def payloads(n: int) -> list[bytes]:
    return [b"%05d:" % i + b"s" * (i % 100) for i in range(n)]


class SecuredClientsTests(TestCase):
    timeout = 120

    async def cluster(self, user: str, password: str):
        """A broker requiring SASL over TLS (and plaintext), in a ZooKeeper of its own, knowing C{user}; the
        Kafka client settings of C{user}, as a dict and as a file."""
        zookeeper = fresh_connect_string()
        zk = await connect(self, zookeeper)
        await UserStore(zk).add(user, {m: make_credential(m, password) for m in SCRAM_MECHANISMS})
        service = await start_broker(self, zookeeper=zookeeper, require_auth=True, sasl_mechanisms=MECHANISMS,
                                     flush_interval_ms=20, **self.certs.broker(mutual=False))
        settings = {"security.protocol": "SASL_SSL", "ssl.truststore.location": self.certs.ca_file,
                    "ssl.truststore.type": "PEM", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                        f'username="{user}" password="{password}";'}
        path = os.path.join(self.directory, f"{user}.properties")
        with open(path, "w") as f:
            f.write("".join(f"{key}={value}\n" for key, value in settings.items()))
        return zookeeper, service, settings, path

    async def setUp(self):
        self.directory = self.mktemp()
        self.certs = Certificates(self.directory)
        self.source = await self.cluster("amy", "amy-secret")
        self.target = await self.cluster("bob", "bob-secret")

    def options(self, cluster) -> ClientOptions:
        tls, sasl = security_settings(cluster[2], "test")
        return ClientOptions(timeout_s=10, connect_timeout_s=5, tls=tls, sasl=sasl)

    async def read_all(self, cluster) -> list[bytes]:
        service = cluster[1]
        consumer = SimpleConsumer("127.0.0.1", service.tls_port.getHost().port, reactor=reactor,
                                  options=self.options(cluster))
        try:
            got: list[bytes] = []
            offset = (await consumer.offsets(TOPIC, 0, EARLIEST))[0]
            while batch := await consumer.fetch(TOPIC, 0, offset, max_bytes=64 * 1024):
                got.extend(m.payload for m in batch)
                offset = batch.next_offset
            return got
        finally:
            await consumer.close()

    async def test_mirror_then_groups(self):
        """The mirror copies everything between two secured clusters (the consumers authenticate as amy, the
        producer as bob); then `twlog groups` shows the mirror's group in the source with lag 0, which it can
        only know by asking the broker over SASL_SSL (without the settings, the lag is unknown)."""
        sent = payloads(400)
        producer = Producer(zookeeper=self.source[0], reactor=reactor, ack="flushed", options=self.options(self.source))
        try:
            for i in range(0, len(sent), 100):
                await producer.send(TOPIC, sent[i:i + 100])
        finally:
            await producer.close()
        (source_tls, source_sasl), (target_tls, target_sasl) = (security_settings(c[2], "t")
                                                                for c in (self.source, self.target))
        said: list[str] = []
        mirror = Mirror(MirrorSettings((self.source[0],), self.target[0], group="secure-mirror", status_s=0,
                                       source_tls=source_tls, source_sasl=source_sasl, target_tls=target_tls,
                                       target_sasl=target_sasl), reactor=reactor, say=said.append)
        await mirror.start()
        try:
            copied: list[bytes] = []

            async def poll() -> None:
                copied[:] = await self.read_all(self.target)

            for _ in range(100):  # (bounded: about 10 s of polls)
                await poll()
                if len(copied) >= len(sent):
                    break
                await deferLater(reactor, 0.1, lambda: None)
            self.assertEqual(copied, sent)
            self.assertGreater(self.target[1].factory.authentication.successes.get("SCRAM-SHA-512", 0), 0)
        finally:
            await mirror.stop()
        code, out, err = await twlog("groups", "--zookeeper", self.source[0], "--group", "secure-mirror", "--json",
                                     "--client-config", self.source[3])
        self.assertEqual(code, 0, err)
        (group,) = json.loads(out)
        self.assertEqual([(p["latest"], p["lag_bytes"]) for p in group["partitions"]],
                         [(group["partitions"][0]["offset"], 0)])
        self.assertGreater(group["partitions"][0]["latest"], 0)
        code, out, err = await twlog("groups", "--zookeeper", self.source[0], "--group", "secure-mirror", "--json")
        self.assertEqual(code, 0, err)
        self.assertIsNone(json.loads(out)[0]["partitions"][0]["lag_bytes"])
        code, out, err = await twlog("groups", "--zookeeper", self.source[0], "--client-config", self.target[3])
        self.assertIn(b"SaslAuthenticationFailed", out + err)
