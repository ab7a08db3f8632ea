"""TLS end to end on 127.0.0.1: a broker's --tls-port beside its plaintext port, with a test CA from trustme.

Produce and consume over TLS (the Twisted and the blocking clients), mutual TLS (a client certificate required
and verified), each kind of mismatch refused in one line while the broker keeps serving, and the fetch path's
copying fallback on a real TLS socket.
"""

from __future__ import annotations

import datetime
import os

import trustme
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from twlog.broker.service import BrokerService
from twlog.client.options import ClientOptions
from twlog.client.sync import SyncConnection
from twlog.client.tls import TLSSettings
from twlog.config import BrokerConfig, LogConfig
from twlog.consumer import EARLIEST, SimpleConsumer
from twlog.errors import ConnectionFailed, TwlogError
from twlog.producer import Producer

TOPIC = "secure"
#: When the expired certificates of the tests stopped being valid.
PAST = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)


class Certificates:
    """A test CA, the broker's certificate for 127.0.0.1 and localhost, and a client certificate, as PEM files
    under C{directory}; and a second, untrusted CA with its own client certificate."""

    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.ca = trustme.CA()
        self.other_ca = trustme.CA()
        broker = self.ca.issue_cert("127.0.0.1", "localhost")
        client = self.ca.issue_cert("client@example.com")
        stranger = self.other_ca.issue_cert("stranger@example.com")
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        self.other_ca_file = self._write("other-ca.pem", self.other_ca.cert_pem.bytes())
        self.broker_cert = self._write("broker.pem", b"".join(blob.bytes() for blob in broker.cert_chain_pems))
        self.broker_key = self._write("broker.key", broker.private_key_pem.bytes())
        self.client_cert = self._write("client.pem", b"".join(blob.bytes() for blob in client.cert_chain_pems))
        self.client_key = self._write("client.key", client.private_key_pem.bytes())
        self.stranger_cert = self._write("stranger.pem",
                                         b"".join(blob.bytes() for blob in stranger.cert_chain_pems))
        self.stranger_key = self._write("stranger.key", stranger.private_key_pem.bytes())

    def _write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.directory, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def broker_named(self, name: str) -> tuple[str, str]:
        """A broker certificate (and key) of this CA naming only C{name}."""
        issued = self.ca.issue_cert(name)
        return (self._write(f"{name}.pem", b"".join(blob.bytes() for blob in issued.cert_chain_pems)),
                self._write(f"{name}.key", issued.private_key_pem.bytes()))

    def client(self, **changes) -> TLSSettings:
        """The client's settings: this CA, and (mutual TLS) the client's certificate and key."""
        settings = {"ca_file": self.ca_file, "cert_file": self.client_cert, "key_file": self.client_key}
        settings.update(changes)
        return TLSSettings(**settings)

    def broker(self, mutual: bool = True) -> dict:
        """The BrokerConfig fields of a TLS port on any free port."""
        fields = {"tls_port": 0, "tls_cert": self.broker_cert, "tls_key": self.broker_key}
        if mutual:
            fields["tls_client_ca"] = self.ca_file
        return fields


def payloads(n: int) -> list[bytes]:
    return [b"%05d:" % i + b"x" * (i % 200) for i in range(n)]


class TLSTests(TestCase):
    timeout = 60

    async def broker(self, mutual: bool = True, **overrides):
        self.certs = Certificates(self.mktemp())
        service = await start_broker(self, **self.certs.broker(mutual), **overrides)
        return service

    def options(self, **changes) -> ClientOptions:
        return ClientOptions(timeout_s=10, connect_timeout_s=5, connect_attempts=2, tls=self.certs.client(**changes))

    async def test_produce_and_consume_over_mutual_tls(self):
        """The Twisted producer and consumer over TLS, the client certificate verified: every message back, and
        the fetches went through the copying path (no sendfile through TLS)."""
        service = await self.broker()
        tls_port = service.tls_port.getHost().port
        self.assertNotEqual(tls_port, service.broker.port)
        producer = Producer(f"127.0.0.1:{tls_port}", reactor=reactor, ack="flushed", options=self.options())
        self.addCleanup(producer.close)
        sent = payloads(300)
        for i in range(0, len(sent), 50):
            await producer.send(TOPIC, sent[i:i + 50])
        consumer = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor, options=self.options())
        self.addCleanup(consumer.close)
        got: list[bytes] = []
        offset = (await consumer.offsets(TOPIC, 0, EARLIEST))[0]
        while len(got) < len(sent):
            batch = await consumer.fetch(TOPIC, 0, offset, max_bytes=4096)
            self.assertTrue(batch, "a fetch over TLS came back empty before the end")
            got.extend(m.payload for m in batch)
            offset = batch.next_offset
        self.assertEqual(got, sent)
        self.assertEqual(service.factory.sendfile_bytes, 0)
        self.assertGreater(service.factory.sent_bytes, sum(map(len, sent)))
        # The same fetch in plaintext goes out with sendfile: the TLS one copied because of its transport.
        plain = SimpleConsumer("127.0.0.1", service.broker.port, reactor=reactor, timeout_s=10)
        self.addCleanup(plain.close)
        self.assertEqual(len(await plain.fetch(TOPIC, 0, 0, max_bytes=1 << 20)), len(sent))
        self.assertGreater(service.factory.sendfile_bytes, sum(map(len, sent)))

    async def test_metadata_over_tls_names_the_tls_port(self):
        """A client asking over TLS is told the TLS port (METADATA, CLUSTER_METADATA and its V2); one asking in
        plaintext, the plaintext port."""
        service = await self.broker()
        tls_port, plain_port = service.tls_port.getHost().port, service.broker.port

        def ask() -> list[int]:
            with SyncConnection("127.0.0.1", tls_port, self.options()) as over_tls, \
                    SyncConnection("127.0.0.1", plain_port, timeout_s=10) as plain:
                return [answer for connection in (over_tls, plain) for answer in (
                    connection.metadata([TOPIC]).port, connection.cluster_metadata([TOPIC]).addresses[0][1],
                    connection.cluster_metadata_v2([TOPIC]).addresses[0][1])]

        self.assertEqual(await deferToThread(ask), [tls_port] * 3 + [plain_port] * 3)

    async def test_blocking_client_over_tls(self):
        """The blocking SyncConnection (the standard library's ssl) reads what the Twisted producer wrote."""
        service = await self.broker()
        tls_port = service.tls_port.getHost().port
        producer = Producer(f"127.0.0.1:{tls_port}", reactor=reactor, ack="flushed", options=self.options())
        self.addCleanup(producer.close)
        sent = payloads(40)
        await producer.send(TOPIC, sent)

        def read() -> list[bytes]:
            with SyncConnection("127.0.0.1", tls_port, self.options()) as connection:
                return [m.payload for m in connection.fetch_batch(TOPIC, 0, 0, 1 << 20)]

        self.assertEqual(await deferToThread(read), sent)

    async def test_client_without_certificate_is_refused(self):
        """Mutual TLS: no client certificate, or one from an untrusted CA, fails the handshake in one line, and
        the broker keeps serving a client with a good certificate."""
        service = await self.broker()
        tls_port = service.tls_port.getHost().port
        for settings in ({"cert_file": None, "key_file": None},
                         {"cert_file": self.certs.stranger_cert, "key_file": self.certs.stranger_key}):
            consumer = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor, options=self.options(**settings))
            self.addCleanup(consumer.close)
            error = await self.assertFailure(consumer.offsets(TOPIC, 0, EARLIEST), ConnectionFailed)
            self.assertIn(f"127.0.0.1:{tls_port}", str(error))
            self.assertNotIn("\n", str(error))

            def blocking(settings=settings) -> None:
                with SyncConnection("127.0.0.1", tls_port, self.options(**settings)) as connection:
                    connection.metadata([TOPIC])

            error = await self.assertFailure(deferToThread(blocking), ConnectionFailed)
            self.assertIn("over TLS", str(error))
        good = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor, options=self.options())
        self.addCleanup(good.close)
        self.assertEqual(await good.offsets(TOPIC, 0, EARLIEST), [0])

    async def test_expired_certificates_are_refused(self):
        """An expired client certificate fails mutual TLS, and a broker whose certificate has expired is refused by
        the clients, each in one line; a good client still gets in."""
        service = await self.broker()
        tls_port = service.tls_port.getHost().port
        expired = self.certs.ca.issue_cert("old-client@example.com", not_before=PAST - datetime.timedelta(days=30),
                                           not_after=PAST)
        cert = self.certs._write("old-client.pem", b"".join(blob.bytes() for blob in expired.cert_chain_pems))
        key = self.certs._write("old-client.key", expired.private_key_pem.bytes())
        consumer = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor,
                                  options=self.options(cert_file=cert, key_file=key))
        self.addCleanup(consumer.close)
        error = await self.assertFailure(consumer.offsets(TOPIC, 0, EARLIEST), ConnectionFailed)
        self.assertIn(f"127.0.0.1:{tls_port}", str(error))
        self.assertNotIn("\n", str(error))
        good = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor, options=self.options())
        self.addCleanup(good.close)
        self.assertEqual(await good.offsets(TOPIC, 0, EARLIEST), [0])

        old = self.certs.ca.issue_cert("127.0.0.1", not_before=PAST - datetime.timedelta(days=30), not_after=PAST)
        old_service = await start_broker(
            self, tls_port=0, tls_key=self.certs._write("old-broker.key", old.private_key_pem.bytes()),
            tls_cert=self.certs._write("old-broker.pem", b"".join(blob.bytes() for blob in old.cert_chain_pems)))
        old_port = old_service.tls_port.getHost().port
        stale = SimpleConsumer("127.0.0.1", old_port, reactor=reactor, options=self.options())
        self.addCleanup(stale.close)
        error = await self.assertFailure(stale.offsets(TOPIC, 0, EARLIEST), ConnectionFailed)
        self.assertIn("has expired", str(error))
        self.assertNotIn("\n", str(error))

        def blocking() -> None:
            with SyncConnection("127.0.0.1", old_port, self.options()) as connection:
                connection.metadata([TOPIC])

        error = await self.assertFailure(deferToThread(blocking), ConnectionFailed)
        self.assertIn("expired", str(error))

    async def test_wrong_hostname_is_refused(self):
        """A broker whose certificate names broker.example only: a client that reached it as 127.0.0.1 refuses
        it (hostname check on by default), and accepts it once the check is turned off."""
        self.certs = Certificates(self.mktemp())
        cert, key = self.certs.broker_named("broker.example")
        service = await start_broker(self, tls_port=0, tls_cert=cert, tls_key=key)
        tls_port = service.tls_port.getHost().port
        consumer = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor, options=self.options())
        self.addCleanup(consumer.close)
        error = await self.assertFailure(consumer.offsets(TOPIC, 0, EARLIEST), ConnectionFailed)
        self.assertIn("does not name the host", str(error))

        def blocking(check: bool) -> int:
            with SyncConnection("127.0.0.1", tls_port, self.options(check_hostname=check)) as connection:
                return connection.metadata([TOPIC]).broker_id

        error = await self.assertFailure(deferToThread(blocking, True), ConnectionFailed)
        self.assertIn("127.0.0.1", str(error))
        self.assertIn("does not name the host", str(error))
        self.assertEqual(await deferToThread(blocking, False), 0)
        unchecked = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor,
                                   options=self.options(check_hostname=False))
        self.addCleanup(unchecked.close)
        self.assertEqual(await unchecked.offsets(TOPIC, 0, EARLIEST), [0])

    async def test_plaintext_to_tls_port_and_tls_to_plain_port(self):
        """Each mismatch is one line on the client, and the broker goes on serving both ports."""
        service = await self.broker(mutual=False)
        tls_port, plain_port = service.tls_port.getHost().port, service.broker.port

        def plain_to_tls() -> None:
            with SyncConnection("127.0.0.1", tls_port, timeout_s=10) as connection:
                connection.metadata([TOPIC])

        def tls_to_plain() -> None:
            with SyncConnection("127.0.0.1", plain_port, self.options()) as connection:
                connection.metadata([TOPIC])

        error = await self.assertFailure(deferToThread(plain_to_tls), TwlogError)
        self.assertIn("TLS", str(error))
        self.assertNotIn("\n", str(error))
        error = await self.assertFailure(deferToThread(tls_to_plain), ConnectionFailed)
        self.assertIn("over TLS", str(error))
        self.assertNotIn("\n", str(error))
        plain = SimpleConsumer("127.0.0.1", tls_port, reactor=reactor, timeout_s=10, connect_attempts=1)
        self.addCleanup(plain.close)
        error = await self.assertFailure(plain.offsets(TOPIC, 0, EARLIEST), TwlogError)
        self.assertIn("TLS", str(error))
        over_tls = SimpleConsumer("127.0.0.1", plain_port, reactor=reactor, options=self.options())
        self.addCleanup(over_tls.close)
        await self.assertFailure(over_tls.offsets(TOPIC, 0, EARLIEST), ConnectionFailed)
        # The broker counted (and logged) the plaintext clients on its TLS port as TLS failures.
        self.assertGreaterEqual(service.factory.tls_failures.total, 2)
        for port, options in ((tls_port, self.options()), (plain_port, ClientOptions(timeout_s=10))):
            consumer = SimpleConsumer("127.0.0.1", port, reactor=reactor, options=options)
            self.addCleanup(consumer.close)
            self.assertEqual(await consumer.offsets(TOPIC, 0, EARLIEST), [0])

    async def test_tls_only(self):
        """With plaintext off, the plaintext port is not listened on and the TLS port serves."""
        service = await self.broker(mutual=False, plaintext=False)
        self.assertIsNone(service.port)
        tls_port = service.tls_port.getHost().port
        self.assertEqual(service.broker.port, tls_port)

        def ask() -> int:
            with SyncConnection("127.0.0.1", tls_port, self.options()) as connection:
                return connection.metadata([TOPIC]).port

        self.assertEqual(await deferToThread(ask), tls_port)

    async def test_unusable_certificate_files(self):
        """A key file that is not there, a key of another certificate, a file that is no key, a client CA file
        that holds no certificate: each stops the broker from starting, in one line naming the file."""
        certs = Certificates(self.mktemp())
        cases = [({"tls_key": certs.broker_key + ".missing"}, "broker.key.missing: No such file"),
                 ({"tls_key": certs.client_key}, "keys do not match"),
                 ({"tls_key": certs.ca_file}, "ca.pem holds no PEM private key"),
                 ({"tls_client_ca": certs.client_key}, "client.key holds no PEM certificate")]
        for changes, expected in cases:
            fields = {"tls_port": 0, "tls_cert": certs.broker_cert, "tls_key": certs.broker_key, **changes}
            service = BrokerService(BrokerConfig(LogConfig(self.mktemp()), port=0, **fields), reactor,
                                    stop_reactor_on_error=False)
            service.startService()
            self.addCleanup(lambda service=service: service.stopService() if service.running else None)
            error = await self.assertFailure(service.listening, TwlogError)
            self.assertIn("cannot serve TLS", str(error))
            self.assertIn(expected, str(error))
            self.assertNotIn("\n", str(error))
            self.assertIsNone(service.port)
