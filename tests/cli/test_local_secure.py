"""twlog local --secure's files (twlog.cli.local_secure): a CA and a broker certificate that verify, secrets
readable by their owner alone, kept across runs and made again when they expire."""

from __future__ import annotations

import datetime
import os
import ssl
import stat

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.local_secure import prepare_secure, write_client_properties


def handshake(ca_file: str, cert: str, key: str, host: str) -> None:
    """A TLS handshake in memory: a server with C{cert}, a client trusting C{ca_file} and checking C{host}."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    client_context = ssl.create_default_context(cafile=ca_file)
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(to_client, to_server, server_hostname=host)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(to_server.read())
        to_client.write(server_out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


class PrepareSecureTests(SynchronousTestCase):
    def test_files_verify_and_are_private(self) -> None:
        files = prepare_secure(self.mktemp())
        for host in ("127.0.0.1", "localhost"):
            handshake(files.ca_file, files.broker_cert, files.broker_key, host)
        with self.assertRaises(ssl.SSLCertVerificationError):
            handshake(files.ca_file, files.broker_cert, files.broker_key, "example.com")
        self.assertEqual(stat.S_IMODE(os.stat(files.directory).st_mode), 0o700)
        for secret in (files.broker_key, files.path("ca.key"), files.admin_password_file,
                       files.zookeeper_credentials_file):
            self.assertEqual(stat.S_IMODE(os.stat(secret).st_mode), 0o600, secret)
        self.assertGreaterEqual(len(files.admin_password()), 24)
        user, _, password = open(files.zookeeper_credentials_file).read().strip().partition(":")
        self.assertEqual(user, "twlog-cluster")
        self.assertGreaterEqual(len(password), 24)

    def test_kept_across_runs_and_renewed_when_expiring(self) -> None:
        data = self.mktemp()
        files = prepare_secure(data)
        before = {name: open(files.path(name), "rb").read() for name in os.listdir(files.directory)}
        prepare_secure(data)
        self.assertEqual({name: open(files.path(name), "rb").read() for name in os.listdir(files.directory)}, before)
        later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=360)
        prepare_secure(data, now=later)
        self.assertNotEqual(open(files.ca_file, "rb").read(), before["ca.pem"])
        self.assertEqual(open(files.admin_password_file, "rb").read(), before["admin.password"])  # (kept)

    def test_client_properties(self) -> None:
        files = prepare_secure(self.mktemp())
        path = os.path.join(files.directory, "client.properties")
        write_client_properties(path, files, ["127.0.0.1:9093"], "SCRAM-SHA-512")
        settings = dict(line.split("=", 1) for line in open(path).read().splitlines() if not line.startswith("#"))
        self.assertEqual(settings, {"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SASL_SSL",
                                    "ssl.ca.location": files.ca_file, "sasl.mechanism": "SCRAM-SHA-512",
                                    "sasl.username": "admin", "sasl.password": files.admin_password()})
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
