"""Authentication against real brokers and the suite's real ZooKeeper: SCRAM-SHA-256/512 and PLAIN (over TLS
only), mutual-TLS principals, --require-auth, users added and deleted in ZooKeeper while the broker runs, and
the handshake's bounds (a stalled one, a fuzzed one)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct

from cryptography import x509
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.integration.broker import raw_connect, start_broker, wait_until
from tests.integration.test_replication_control import run
from tests.integration.test_tls import Certificates
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.cli.inspect import create_topic
from twlog.client.connection import BrokerConnection
from twlog.client.options import ClientOptions
from twlog.client.sasl import SASLSettings
from twlog.client.sync import SyncConnection
from twlog.coord.acls import change_acls
from twlog.coord.users import UserStore, user_path
from twlog.errors import (
    ConnectionFailed,
    SaslAuthenticationFailed,
    TopicAuthorizationFailed,
)
from twlog.producer import Producer
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, MetadataRequest, ProduceRequest
from twlog.protocol.sasl_codec import (
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    decode_handshake_response,
)
from twlog.security.acls import AccessControlEntry, Operation, Permission, ResourcePattern, ResourceType
from twlog.security.credentials import SCRAM_MECHANISMS, make_credential
from twlog.storage.message import encode_message_set

ALL = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


def rfc5802_keys(mechanism: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """StoredKey and ServerKey by RFC 5802's formulas, computed here (not by the code under test)."""
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest(), hmac.new(salted, b"Server Key", name).digest()


def sync_metadata(service, settings: SASLSettings):
    """METADATA through the blocking client (run it in a thread: the broker is in this process's reactor)."""
    with SyncConnection("127.0.0.1", service.broker.port, sasl=settings, timeout_s=10) as connection:
        return connection.metadata()


class SaslTests(TestCase):
    timeout = 120

    async def setUp(self):
        self.zookeeper = fresh_connect_string()
        self.zk = await connect(self, self.zookeeper)
        self.users = UserStore(self.zk)
        await self.users.add("bob", {m: make_credential(m, "bob-secret") for m in SCRAM_MECHANISMS})

    async def broker(self, **settings):
        settings.setdefault("sasl_mechanisms", ALL)
        settings.setdefault("require_auth", True)
        return await start_broker(self, zookeeper=self.zookeeper, **settings)

    async def metadata(self, service, sasl=None, tls=None, port=None):
        connection = BrokerConnection("127.0.0.1", port or service.broker.port, reactor=reactor,
                                      options=ClientOptions(timeout_s=10, connect_timeout_s=5, connect_attempts=1,
                                                            sasl=sasl, tls=tls))
        try:
            return await connection.request(MetadataRequest())
        finally:
            await connection.close()

    def principals(self, service) -> list[str]:
        return [protocol.principal for protocol in service.factory.connections]

    async def test_stored_credential_is_rfc5802s(self):
        """The credential in ZooKeeper is Kafka's JSON, and its keys are RFC 5802's of the password."""
        value, _ = await self.zk.get(user_path("bob"))
        config = json.loads(value)
        self.assertEqual(config["version"], 1)
        self.assertEqual(sorted(config["config"]), list(SCRAM_MECHANISMS))
        for mechanism, text in config["config"].items():
            fields = dict(part.split("=", 1) for part in text.split(","))
            self.assertEqual(list(fields), ["salt", "stored_key", "server_key", "iterations"])
            stored, server = rfc5802_keys(mechanism, "bob-secret", base64.b64decode(fields["salt"]),
                                          int(fields["iterations"]))
            self.assertEqual((base64.b64decode(fields["stored_key"]), base64.b64decode(fields["server_key"])),
                             (stored, server))
            self.assertEqual(fields["iterations"], "4096")

    async def test_scram_256_and_512(self):
        """bob authenticates with either SCRAM, on the Twisted and the blocking client; his connection is User:bob."""
        service = await self.broker()
        for mechanism in SCRAM_MECHANISMS:
            connection = BrokerConnection("127.0.0.1", service.broker.port, reactor=reactor, options=ClientOptions(
                timeout_s=10, sasl=SASLSettings(mechanism, "bob", "bob-secret")))
            response = await connection.request(MetadataRequest())
            self.assertEqual(response.error, 0)
            self.assertEqual(self.principals(service), ["User:bob"])
            await connection.close()
            await wait_until(lambda: not service.factory.connections)
            response = await deferToThread(sync_metadata, service, SASLSettings(mechanism, "bob", "bob-secret"))
            self.assertEqual(response.error, 0)
        self.assertEqual(service.factory.authentication.successes, {m: 2 for m in SCRAM_MECHANISMS})

    async def test_wrong_password_and_unknown_user(self):
        """A wrong password and an unknown user fail alike, in one line, and are counted."""
        service = await self.broker()
        messages = []
        for user, password in (("bob", "not-bobs"), ("mallory", "bob-secret")):
            with self.assertRaises(SaslAuthenticationFailed) as raised:
                await self.metadata(service, SASLSettings("SCRAM-SHA-256", user, password))
            text = str(raised.exception)
            self.assertNotIn("\n", text)
            self.assertIn(f"authentication failed for user {user} (SCRAM-SHA-256)", text)
            messages.append(text.replace(user, "U"))
            with self.assertRaises(SaslAuthenticationFailed):
                await deferToThread(sync_metadata, service, SASLSettings("SCRAM-SHA-512", user, password))
        self.assertEqual(messages[0], messages[1])
        self.assertEqual(service.factory.authentication.failures, {"SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2})
        self.assertEqual(service.factory.authentication.successes, {})

    async def test_requests_before_authentication_close_the_connection(self):
        """With --require-auth a request before authenticating gets SaslAuthenticationFailed and the connection
        closes; without a client's credentials the command fails in one line."""
        service = await self.broker()
        client = await raw_connect(self, service)
        client.send(MetadataRequest())
        [frame] = await client.responses(1)
        self.assertEqual(struct.unpack(">h", frame), (SaslAuthenticationFailed.code,))
        await client.closed
        self.assertEqual(service.factory.authentication.refused.total, 1)
        with self.assertRaises(SaslAuthenticationFailed):
            await self.metadata(service)

    async def test_without_require_auth_anonymous_clients_are_served(self):
        """Without --require-auth an anonymous client is served (User:ANONYMOUS) beside authenticated ones."""
        service = await self.broker(require_auth=False)
        self.assertEqual((await self.metadata(service)).error, 0)
        self.assertEqual((await self.metadata(service, SASLSettings("SCRAM-SHA-512", "bob", "bob-secret"))).error, 0)

    async def test_plain_over_plaintext_is_refused(self):
        """PLAIN is not offered on the plaintext port: the broker leaves it out, and the client will not send it."""
        service = await self.broker()
        client = await raw_connect(self, service)
        client.send(SaslHandshakeRequest("PLAIN"))
        [frame] = await client.responses(1)
        answer = decode_handshake_response(frame)
        self.assertEqual((answer.error, answer.mechanisms), (33, SCRAM_MECHANISMS))
        await client.closed
        with self.assertRaises(SaslAuthenticationFailed) as raised:
            await self.metadata(service, SASLSettings("PLAIN", "bob", "bob-secret"))
        self.assertIn("PLAIN sends the password in the clear: it needs TLS", str(raised.exception))

    async def test_plain_over_tls(self):
        """PLAIN over TLS is checked against the stored SCRAM credential; a wrong password fails."""
        certs = Certificates(self.mktemp())
        service = await self.broker(**certs.broker(mutual=False))
        tls_port = service.tls_port.getHost().port
        tls = certs.client(cert_file=None, key_file=None)
        self.assertEqual((await self.metadata(service, SASLSettings("PLAIN", "bob", "bob-secret"), tls,
                                              tls_port)).error, 0)
        with self.assertRaises(SaslAuthenticationFailed):
            await self.metadata(service, SASLSettings("PLAIN", "bob", "wrong"), tls, tls_port)
        self.assertEqual(service.factory.authentication.successes, {"PLAIN": 1})

    async def test_mutual_tls_principal(self):
        """A client certificate the broker's CA signed authenticates as User:<its subject DN, RFC 2253>; one
        another CA signed is refused in the handshake."""
        certs = Certificates(self.mktemp())
        service = await self.broker(**certs.broker(mutual=True))
        tls_port = service.tls_port.getHost().port
        issued = certs.ca.issue_cert("client.example", common_name="client")
        cert_file = certs._write("cn-client.pem", b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        key_file = certs._write("cn-client.key", issued.private_key_pem.bytes())
        connection = BrokerConnection("127.0.0.1", tls_port, reactor=reactor,
                                      options=ClientOptions(timeout_s=10, tls=certs.client(cert_file=cert_file,
                                                                                           key_file=key_file)))
        self.addCleanup(connection.close)
        self.assertEqual((await connection.request(MetadataRequest())).error, 0)
        subject = x509.load_pem_x509_certificate(issued.cert_chain_pems[0].bytes()).subject
        value = {a.oid: a.value for a in subject}
        # RFC 2253: the most specific attribute first (the certificate lists O, OU, CN)
        dn = (f"CN=client,OU={value[x509.NameOID.ORGANIZATIONAL_UNIT_NAME]},"
              f"O={value[x509.NameOID.ORGANIZATION_NAME]}")
        self.assertEqual([a.oid for a in subject][-1], x509.NameOID.COMMON_NAME)
        self.assertEqual(self.principals(service), [f"User:{dn}"])
        self.assertEqual(service.factory.authentication.successes, {"TLS": 1})
        with self.assertRaises(ConnectionFailed):
            await self.metadata(service, tls=certs.client(cert_file=certs.stranger_cert, key_file=certs.stranger_key),
                                port=tls_port)

    async def test_stalled_handshakes_are_closed(self):
        """A connection that sends nothing, or stops after SASL_HANDSHAKE, is closed after request_timeout_s."""
        service = await self.broker(request_timeout_s=0.5)
        silent = await raw_connect(self, service)
        halfway = await raw_connect(self, service)
        halfway.send(SaslHandshakeRequest("SCRAM-SHA-256"))
        [frame] = await halfway.responses(1)
        self.assertEqual(decode_handshake_response(frame).error, 0)
        await silent.closed
        await halfway.closed
        self.assertEqual(service.factory.authentication.late.total, 2)

    async def test_fuzzed_handshakes_are_closed(self):
        """Garbage in the exchange is answered with an error and closed, each connection holding little; the
        broker goes on authenticating others."""
        service = await self.broker()
        cases = [
            [SaslAuthenticateRequest(b"n,,n=bob,r=abc")],  # no handshake first
            [SaslHandshakeRequest("SCRAM-SHA-1")],  # not enabled
            [SaslHandshakeRequest("SCRAM-SHA-256"), SaslAuthenticateRequest(b"\xff\xfe garbage")],
            [SaslHandshakeRequest("SCRAM-SHA-256"), SaslAuthenticateRequest(b"n,,n=bob")],  # no nonce
            [SaslHandshakeRequest("SCRAM-SHA-512"), SaslAuthenticateRequest(b"p=tls-unique,,n=bob,r=x")],
            [SaslHandshakeRequest("SCRAM-SHA-256"), SaslHandshakeRequest("SCRAM-SHA-256")],  # twice
            [struct.pack(">ih", 6, 17) + struct.pack(">i", 1 << 30)],  # a token length past the frame
            [struct.pack(">ih", 8, 16) + b"\x7f\xff\x00\x00"],  # a mechanism string past the frame
            [struct.pack(">i", 100 * 1024 * 1024) + b"\x00\x10"],  # a 100 MiB frame before authenticating
        ]
        for requests in cases:
            client = await raw_connect(self, service)
            client.send(*requests)
            await client.closed
            self.assertLessEqual(service.factory.budget.total, 1024)
        self.assertEqual((await self.metadata(service, SASLSettings("SCRAM-SHA-256", "bob", "bob-secret"))).error, 0)

    async def test_users_deleted_and_added_while_the_broker_runs(self):
        """A user added after the broker started authenticates; once deleted, its next connection is refused."""
        service = await self.broker()
        alice = SASLSettings("SCRAM-SHA-256", "alice", "alice-secret")
        await self.users.add("alice", {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "alice-secret")})
        await wait_until(lambda: service.users.lookup("alice") is not None)
        self.assertEqual((await self.metadata(service, alice)).error, 0)
        salt = service.users.lookup("alice")["SCRAM-SHA-256"].salt
        await self.users.add("alice", {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "rotated")})
        await wait_until(lambda: service.users.lookup("alice")["SCRAM-SHA-256"].salt != salt)
        with self.assertRaises(SaslAuthenticationFailed):
            await self.metadata(service, alice)
        self.assertEqual((await self.metadata(service, SASLSettings("SCRAM-SHA-256", "alice", "rotated"))).error, 0)
        self.assertTrue(await self.users.delete("alice"))
        await wait_until(lambda: service.users.lookup("alice") is None)
        with self.assertRaises(SaslAuthenticationFailed):
            await self.metadata(service, SASLSettings("SCRAM-SHA-256", "alice", "rotated"))



class InterBrokerTests(TestCase):
    timeout = 120

    async def test_replication_on_a_cluster_that_requires_authentication(self):
        """Followers authenticate to their leaders as --inter-broker-user: an ack=all produce (every in-sync
        replica holds it) succeeds on a --require-auth cluster, and the follower's log has the messages."""
        hosts = fresh_connect_string()
        zk = await connect(self, hosts)
        await UserStore(zk).add("broker", {m: make_credential(m, "broker-secret") for m in SCRAM_MECHANISMS})
        await UserStore(zk).add("bob", {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "bob-secret")})
        password_file = self.mktemp()
        with open(password_file, "w") as f:
            f.write("broker-secret\n")
        brokers = {b: await start_broker(self, broker_id=b, zookeeper=hosts, flush_interval_ms=5,
                                         sasl_mechanisms=SCRAM_MECHANISMS, require_auth=True,
                                         inter_broker_user="broker", inter_broker_password_file=password_file)
                   for b in (1, 2)}
        await run(create_topic, "create", "-z", hosts, "-t", "orders", "-n", "1", "--replication-factor", "2",
                  "--min-insync-replicas", "2")

        def roles():
            leaders = [b for b, s in brokers.items() if ("orders", 0) in s.replicas.manager.leaders]
            followers = [b for b, s in brokers.items() if ("orders", 0) in s.replicas.manager.followers]
            return leaders, followers

        await wait_until(lambda: [len(x) for x in roles()] == [1, 1], timeout_s=20)
        producer = Producer(zookeeper=hosts, ack="all", ack_timeout_ms=10_000, leader_wait_s=20,
                            options=ClientOptions(sasl=SASLSettings("SCRAM-SHA-512", "bob", "bob-secret")))
        self.addCleanup(producer.close)
        for n in range(5):
            await producer.send("orders", b"%d" % n)
        [leader], [follower] = roles()
        leader_log, follower_log = (brokers[b].logs.get_log("orders", 0) for b in (leader, follower))
        self.assertGreater(leader_log.end_offset, 0)
        self.assertEqual(follower_log.end_offset, leader_log.end_offset)  # ack=all: the follower holds it all
        principals = [p.principal for p in brokers[leader].factory.connections]
        self.assertIn("User:broker", principals)


class AuthorizedTests(TestCase):
    timeout = 120

    async def test_acls_name_the_authenticated_principal(self):
        """With --acls, a produce is allowed to the user its ACL names (authenticated with SASL) and refused to
        another authenticated user: the ACLs see the connections' principals."""
        hosts = fresh_connect_string()
        zk = await connect(self, hosts)
        for user in ("bob", "eve"):
            await UserStore(zk).add(user, {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", f"{user}-secret")})
        topic = ResourcePattern(ResourceType.TOPIC, "clicks")
        await change_acls(zk, topic, add=[AccessControlEntry("User:bob", Permission.ALLOW, operation)
                                          for operation in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)])
        service = await start_broker(self, zookeeper=hosts, sasl_mechanisms=("SCRAM-SHA-512",), require_auth=True,
                                     acls=True, flush_interval_ms=5)
        await wait_until(lambda: service.broker.guard.acls.authorize("User:bob", "127.0.0.1", Operation.WRITE,
                                                                     ResourceType.TOPIC, "clicks"))
        request = AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest("clicks", 0, encode_message_set([b"m"])),))
        connections = {user: BrokerConnection("127.0.0.1", service.broker.port, reactor=reactor, options=ClientOptions(
            timeout_s=10, sasl=SASLSettings("SCRAM-SHA-512", user, f"{user}-secret"))) for user in ("bob", "eve")}
        for connection in connections.values():
            self.addCleanup(connection.close)
        response = await connections["bob"].request(request)
        self.assertEqual(response.results[0].error, 0)
        with self.assertRaises(TopicAuthorizationFailed):
            await connections["eve"].request(request)
        self.assertEqual(sorted(p.principal for p in service.factory.connections), ["User:bob", "User:eve"])
        self.assertEqual(sum(service.broker.guard.refusals.values()), 1)
