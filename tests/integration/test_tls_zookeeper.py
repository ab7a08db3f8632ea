"""TLS clients that find the brokers in ZooKeeper: each broker registers its listeners, and a TLS client reaches
every broker at its TLS port (never its plaintext one); a broker without a TLS port is offline to it, said so."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.groups import FAST
from tests.integration.test_cli import twlog
from tests.integration.test_tls import Certificates, payloads
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.client.async_discovery import cluster_layout_async
from twlog.client.connection import BrokerConnection
from twlog.client.discovery import discover
from twlog.client.options import ClientOptions
from twlog.consumer.group import GroupConsumer
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.endpoints import SSL, parse_endpoints
from twlog.producer import Producer
from twlog.protocol.replication_codec import ClusterMetadataV2Request

TOPIC = "secure"


class ZooKeeperTLSTests(TestCase):
    timeout = 90

    async def cluster(self):
        """Broker 0 with a TLS port, broker 1 without, both registered in a fresh chroot."""
        self.hosts = fresh_connect_string()
        self.certs = Certificates(self.mktemp())
        self.tls = await start_broker(self, zookeeper=self.hosts, broker_id=0, num_partitions=2, flush_messages=1,
                                      **self.certs.broker(mutual=True))
        self.plain = await start_broker(self, zookeeper=self.hosts, broker_id=1, num_partitions=2, flush_messages=1)
        self.zk = await connect(self, self.hosts)
        await wait_until(lambda: self.tls.registration is not None and self.plain.registration is not None)
        return self.tls.tls_port.getHost().port

    def options(self) -> ClientOptions:
        return ClientOptions(timeout_s=10, connect_timeout_s=5, connect_attempts=2, tls=self.certs.client())

    async def test_each_broker_registers_its_listeners(self):
        tls_port = await self.cluster()
        value, _ = await self.zk.get(paths.broker_endpoints_path(0))
        self.assertEqual(parse_endpoints(value), {"PLAINTEXT": ("127.0.0.1", self.tls.broker.port),
                                                  "SSL": ("127.0.0.1", tls_port)})
        value, _ = await self.zk.get(paths.broker_endpoints_path(1))
        self.assertEqual(parse_endpoints(value), {"PLAINTEXT": ("127.0.0.1", self.plain.broker.port)})
        # (ephemeral: it goes with the broker)
        await self.plain.stopService()
        self.assertIsNone(await self.zk.exists(paths.broker_endpoints_path(1)))

    async def test_tls_clients_through_zookeeper(self):
        """A producer and a group consumer given TLS settings and ZooKeeper: every message written to broker 0
        goes and comes back over TLS (nothing through sendfile); broker 1 is offline to them, said once."""
        tls_port = await self.cluster()
        view = ClusterView(self.zk, (TOPIC,), listener=SSL)
        await view.start()
        self.addCleanup(view.stop)
        self.assertEqual(view.brokers, {0: ("127.0.0.1", tls_port)})
        producer = Producer(zookeeper=self.hosts, reactor=reactor, ack="flushed", options=self.options())
        self.addCleanup(producer.close)
        sent = payloads(200)
        for i in range(0, len(sent), 20):
            await producer.send(TOPIC, sent[i:i + 20])
        consumer = GroupConsumer(self.hosts, "g", reactor=reactor, auto_offset_reset="smallest",
                                 options=self.options(), **FAST)
        self.addCleanup(consumer.close)
        streams = (await consumer.create_message_streams({TOPIC: 1}))[TOPIC]
        got = [(await streams[0].__anext__()).payload for _ in sent]
        self.assertEqual(sorted(got), sorted(sent))
        self.assertEqual(self.tls.factory.sendfile_bytes, 0)
        self.assertGreater(self.tls.factory.sent_bytes, sum(map(len, sent)))
        self.assertEqual(self.plain.factory.received_bytes, 0)  # nothing reached broker 1, in plaintext or not

        # The blocking discovery and the layout commands read the same way.
        found = await reactor_thread(discover, [TOPIC], zookeeper=self.hosts, options=self.options())
        self.assertEqual({(loc.host, loc.port) for loc in found}, {("127.0.0.1", tls_port)})
        layout, problems = await cluster_layout_async(zookeeper=self.hosts, options=self.options(), reactor=reactor)
        self.assertEqual(dict(layout.brokers), {0: ("127.0.0.1", tls_port)})
        self.assertTrue(any("broker 1 has no SSL listener" in p for p in problems), problems)

    async def test_commands_with_tls_and_zookeeper(self):
        """produce, consume and topics given --zookeeper and the --tls-* flags go to the TLS port."""
        await self.cluster()
        flags = ["--zookeeper", self.hosts, "--tls-ca", self.certs.ca_file, "--tls-cert", self.certs.client_cert,
                 "--tls-key", self.certs.client_key]
        lines = [b"line %d" % i for i in range(10)]
        code, out, err = await twlog("produce", "--topic", TOPIC, "--partition", "0-0", *flags,
                                     stdin=b"\n".join(lines) + b"\n")
        self.assertEqual(code, 0, err)
        code, out, err = await twlog("consume", "--topic", TOPIC, "--partition", "0-0", *flags)
        self.assertEqual(code, 0, err)
        self.assertEqual(out.splitlines(), lines)
        self.assertEqual(self.tls.factory.sendfile_bytes, 0)
        self.assertEqual(self.plain.factory.received_bytes, 0)

    async def test_metadata_over_tls_names_tls_listeners(self):
        """CLUSTER_METADATA asked over TLS names the TLS listeners of the other brokers too (those without one
        are not listed as live)."""
        tls_port = await self.cluster()
        # (the broker answers from its view once that has read ZooKeeper through: ready, and both brokers in it)
        await wait_until(lambda: self.tls.cluster is not None and self.tls.cluster.ready
                         and 0 in self.tls.cluster.tls_brokers and 1 in self.tls.cluster.brokers)
        connection = BrokerConnection("127.0.0.1", tls_port, reactor=reactor, options=self.options())
        self.addCleanup(connection.close)
        answer = await connection.request(ClusterMetadataV2Request(()))
        self.assertEqual({(b.broker_id, b.port) for b in answer.brokers}, {(0, tls_port)})
        plain = BrokerConnection("127.0.0.1", self.tls.broker.port, reactor=reactor)
        self.addCleanup(plain.close)
        answer = await plain.request(ClusterMetadataV2Request(()))
        self.assertEqual({(b.broker_id, b.port) for b in answer.brokers},
                         {(0, self.tls.broker.port), (1, self.plain.broker.port)})


def reactor_thread(f, *args, **kwargs):
    from twisted.internet.threads import deferToThread
    return deferToThread(f, *args, **kwargs)
