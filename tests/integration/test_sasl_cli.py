"""The twlog commands with authentication: twlog users add/list/delete against the suite's ZooKeeper, and produce,
consume and topics as a user (--user/--password-file, or a Kafka-style --client-config) against a broker that
requires it; each refusal in one line."""

from __future__ import annotations

import base64
import hashlib
import json
import os

from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker, wait_until
from tests.integration.test_cli import one_line, twlog
from tests.integration.zookeeper import connect, fresh_connect_string
from twlog.coord.zkauth import read_credentials_file
from twlog.coord.zksecure import digest_path

TOPIC = "private"


class UsersCommandTests(TestCase):
    timeout = 120

    def setUp(self):
        self.zookeeper = fresh_connect_string()
        self.directory = self.mktemp()
        os.makedirs(self.directory)
        self.password_file = self.write("bob.password", "bob's secret\n")

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    async def test_users_and_authenticated_commands(self):
        """users add, then produce as bob with flags and consume as bob with a client config; a wrong password,
        no credentials and a deleted user are refused in one line."""
        code, out, err = await twlog("users", "add", "--zookeeper", self.zookeeper, "--user", "bob",
                                     "--password-file", self.password_file)
        self.assertEqual(code, 0, err)
        self.assertIn(b"added user bob (SCRAM-SHA-256, SCRAM-SHA-512, 4096 iterations)", out)
        code, out, err = await twlog("users", "list", "--zookeeper", self.zookeeper, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out), [{"user": "bob", "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}])
        service = await start_broker(self, zookeeper=self.zookeeper, sasl_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                                     require_auth=True, flush_interval_ms=20)
        broker = f"127.0.0.1:{service.broker.port}"
        lines = [b"line %d" % i for i in range(10)]
        code, out, err = await twlog("produce", "--broker", broker, "--topic", TOPIC, "--user", "bob",
                                     "--password-file", self.password_file, stdin=b"\n".join(lines) + b"\n")
        self.assertEqual(code, 0, err)
        config = self.write("client.properties", "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                                                 "sasl.username=bob\nsasl.password=bob's secret\n")
        code, out, err = await twlog("consume", "--broker", broker, "--topic", TOPIC, "--client-config", config)
        self.assertEqual(code, 0, err)
        self.assertEqual(out.splitlines(), lines)
        wrong = self.write("wrong.password", "guess\n")
        for flags, expected in (
            (["--user", "bob", "--password-file", wrong], b"authentication failed for user bob (SCRAM-SHA-512)"),
            ([], b"SaslAuthenticationFailed"),
            (["--user", "bob"], b"--user bob needs --password-file FILE"),
            (["--user", "bob", "--sasl-mechanism", "PLAIN", "--password-file", self.password_file],
             b"PLAIN sends the password in the clear"),
        ):
            code, out, err = await twlog("topics", "--broker", broker, *flags)
            self.assertNotEqual(code, 0, flags)
            one_line(self, err)
            self.assertIn(expected, err)
        code, out, err = await twlog("produce", "--broker", broker, "--topic", TOPIC, "--user", "bob",
                                     "--password-file", wrong, stdin=b"never stored\n")
        self.assertEqual(code, 1)
        one_line(self, err)
        self.assertIn(b"authentication failed for user bob (SCRAM-SHA-512)", err)
        code, out, err = await twlog("users", "delete", "--zookeeper", self.zookeeper, "--user", "bob")
        self.assertEqual(code, 0, err)
        await wait_until(lambda: service.users.lookup("bob") is None)
        code, out, err = await twlog("topics", "--broker", broker, "--user", "bob", "--password-file",
                                     self.password_file)
        self.assertEqual(code, 1)
        one_line(self, err)
        self.assertIn(b"authentication failed for user bob", err)

    async def test_users_refusals(self):
        """No password on a pipe, a bad name, too few iterations, deleting a user that is not there: one line each;
        list shows mechanisms only, never a key."""
        for argv, expected in (
            (["add", "--user", "bob"], b"no password: give --password-file FILE"),
            (["add", "--user", "bob/x", "--password-file", self.password_file], b"is not 1 to 255 of"),
            (["add", "--user", "bob", "--password-file", self.password_file, "--iterations", "1000"],
             b"outside [4096, 16384]"),
            (["delete", "--user", "nobody"], b"no user nobody"),
        ):
            code, out, err = await twlog("users", *argv, "--zookeeper", self.zookeeper)
            self.assertEqual(code, 1, err)
            one_line(self, err)
            self.assertIn(expected, err)
        code, out, err = await twlog("users", "add", "--zookeeper", self.zookeeper, "--user", "carol",
                                     "--password-file", self.password_file, "--mechanism", "SCRAM-SHA-256",
                                     "--iterations", "8192")
        self.assertEqual(code, 0, err)
        code, out, err = await twlog("users", "--zookeeper", self.zookeeper)
        self.assertEqual(code, 0, err)
        self.assertIn(b"carol", out)
        self.assertIn(b"SCRAM-SHA-256", out)
        self.assertNotIn(b"SCRAM-SHA-512", out)
        self.assertNotIn(b"stored_key", out)

    async def test_users_in_a_secured_zookeeper(self):
        """With the cluster's ZooKeeper credentials (docs/security.md, "ZooKeeper"), twlog users writes
        /config/users, which only the cluster may read: the broker (same identity) authenticates bob, and
        twlog users without the credentials is refused in one line."""
        cluster = self.write("cluster.credentials", "twlog-cluster:cluster-secret\n")
        os.chmod(cluster, 0o600)
        code, out, err = await twlog("users", "add", "--zookeeper", self.zookeeper, "--zookeeper-credentials-file",
                                     cluster, "--user", "bob", "--password-file", self.password_file)
        self.assertEqual(code, 0, err)
        service = await start_broker(self, zookeeper=self.zookeeper, zookeeper_credentials_file=cluster,
                                     sasl_mechanisms=("SCRAM-SHA-512",), require_auth=True)
        self.assertIsNotNone(service.users.lookup("bob"))
        code, out, err = await twlog("topics", "--broker", f"127.0.0.1:{service.broker.port}", "--user", "bob",
                                     "--password-file", self.password_file)
        self.assertEqual(code, 0, err)
        code, out, err = await twlog("users", "--zookeeper", self.zookeeper)
        self.assertEqual(code, 1)
        one_line(self, err)
        self.assertIn(b"/config/users", err)
        # bob's ZooKeeper identity was recorded beside his credentials (for his groups' znode ACLs), readable by
        # the cluster alone, and goes with him.
        admin = await connect(self, self.zookeeper, credentials=read_credentials_file(cluster))
        value, _ = await admin.get(digest_path("bob"))
        password = open(self.password_file).read().strip()  # (ZooKeeper's DigestAuthenticationProvider's form)
        self.assertEqual(value.decode(), "bob:" + base64.b64encode(hashlib.sha1(f"bob:{password}".encode()).digest())
                         .decode())
        code, out, err = await twlog("users", "delete", "--zookeeper", self.zookeeper, "--zookeeper-credentials-file",
                                     cluster, "--user", "bob")
        self.assertEqual(code, 0, err)
        self.assertIsNone(await admin.exists(digest_path("bob")))
