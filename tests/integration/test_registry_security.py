"""`twlog registry` over HTTPS with basic auth, as Confluent's registry serves it, spoken to by Confluent's own
Python client (its `basic.auth.user.info` and `ssl.*` settings), by twlog's clients and by the CLI; and the
broker's metrics over HTTPS, scraped as Prometheus scrapes them. Certificates from a trustme test CA."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import pickle
import ssl
import urllib.error
import urllib.request

from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SkipTest, TestCase

from tests.integration.broker import start_broker
from tests.integration.test_cli import one_line, twlog
from tests.integration.test_schema_registry import USER_V1, USER_V2, start_registry
from tests.integration.test_tls import Certificates
from twlog.avro import RegistryClient, RegistryError, SyncRegistryClient
from twlog.client.tls import TLSSettings

ADMIN_PASSWORD = "adm1n-secret"
READER_PASSWORD = "r3ader-secret"


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class SecureRegistryTests(TestCase):
    timeout = 120

    async def setUp(self) -> None:
        self.certs = Certificates(self.mktemp())
        directory = self.certs.directory
        self.passwords = _write(directory, "passwords.properties",
                                f"# user: password[,role...]\nadmin: {ADMIN_PASSWORD},admin\n"
                                f"reader: MD5:{hashlib.md5(READER_PASSWORD.encode()).hexdigest()},reader\n")
        self.broker = await start_broker(self)
        self.brokers = f"127.0.0.1:{self.broker.port.getHost().port}"
        self.process, _, http_url = await start_registry(
            self, "--broker", self.brokers, "--tls-cert", self.certs.broker_cert, "--tls-key", self.certs.broker_key,
            "--basic-auth-file", self.passwords)
        self.url = "https://" + http_url.split("://", 1)[1]

    def confluent(self, **conf):
        try:
            from confluent_kafka.schema_registry import SchemaRegistryClient
        except ImportError:
            raise SkipTest("confluent-kafka[schemaregistry] (the tests extra) is not installed") from None
        return SchemaRegistryClient({"url": self.url, "ssl.ca.location": self.certs.ca_file, **conf})

    async def test_confluent_client(self) -> None:
        """Confluent's client with its own basic.auth.user.info and ssl.ca.location: register, look up, get by id;
        a wrong password and no credentials are 401 in Confluent's body; an untrusted CA fails the handshake."""
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        def use() -> None:
            client = self.confluent(**{"basic.auth.user.info": f"admin:{ADMIN_PASSWORD}"})
            first = client.register_schema("users-value", Schema(json.dumps(USER_V1), "AVRO"))
            second = client.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO"))
            found = client.lookup_schema("users-value", Schema(json.dumps(USER_V1), "AVRO"))
            self.assertEqual((found.version, found.schema_id), (1, first))
            self.assertEqual(json.loads(client.get_schema(second).schema_str), USER_V2)
            self.assertEqual(client.get_latest_version("users-value").version, 2)
            for conf in ({"basic.auth.user.info": f"admin:{READER_PASSWORD}"},
                         {"basic.auth.user.info": f"nobody:{ADMIN_PASSWORD}"},
                         {}):
                with self.assertRaises(SchemaRegistryError) as refused:
                    self.confluent(**conf).get_subjects()
                self.assertEqual((refused.exception.http_status_code, refused.exception.error_code,
                                  refused.exception.error_message), (401, 401, "Unauthorized"), conf)
            reader = self.confluent(**{"basic.auth.user.info": f"reader:{READER_PASSWORD}"})
            self.assertEqual(reader.get_subjects(), ["users-value"])  # an MD5: password
            untrusted = self.confluent(**{"ssl.ca.location": self.certs.other_ca_file,
                                          "basic.auth.user.info": f"admin:{ADMIN_PASSWORD}"})
            with self.assertRaises(Exception) as failed:
                untrusted.get_subjects()
            self.assertIn("CERTIFICATE_VERIFY_FAILED", str(failed.exception))

        await deferToThread(use)
        output = self.process.output.decode()
        self.assertIn("refused GET /subjects from 127.0.0.1: wrong password for user 'admin'", output)
        self.assertIn("refused GET /subjects from 127.0.0.1: unknown user 'nobody'", output)
        self.assertNotIn(READER_PASSWORD, output)
        self.assertNotIn(ADMIN_PASSWORD, output)

    async def test_twlog_clients(self) -> None:
        """twlog's Twisted and blocking clients: TLS settings and user info, or user:password@ in the URL."""
        tls = TLSSettings(ca_file=self.certs.ca_file)
        client = RegistryClient(self.url, tls=tls, user_info=f"admin:{ADMIN_PASSWORD}")
        schema_id = await client.register("users-value", json.dumps(USER_V1))
        self.assertEqual(json.loads(await client.schema(schema_id)), USER_V1)
        await client.close()
        in_url = self.url.replace("https://", f"https://reader:{READER_PASSWORD}@")
        blocking = SyncRegistryClient(in_url, tls=tls)
        self.assertEqual(blocking.url, self.url)  # (the credentials are not kept in the URL)
        latest = await deferToThread(blocking.latest, "users-value")
        self.assertEqual(latest["id"], schema_id)
        wrong = RegistryClient(self.url, tls=tls, user_info="admin:wrong")
        with self.assertRaises(RegistryError) as refused:
            await wrong.schema(schema_id)
        self.assertEqual((refused.exception.status, refused.exception.error_code), (401, 401))
        self.assertNotIn("wrong", str(refused.exception))
        await wrong.close()
        for untrusted in (RegistryClient(self.url, tls=TLSSettings(ca_file=self.certs.other_ca_file),
                                         user_info=f"admin:{ADMIN_PASSWORD}"),):
            with self.assertRaises(RegistryError) as failed:
                await untrusted.schema(schema_id)
            self.assertIn("certificate verify failed", str(failed.exception))
            await untrusted.close()
        with self.assertRaises(RegistryError) as failed:
            await deferToThread(SyncRegistryClient(self.url, tls=TLSSettings(ca_file=self.certs.other_ca_file)).latest,
                                "users-value")
        self.assertIn("certificate verify failed", str(failed.exception))
        self.assertIn("--registry-ca", str(failed.exception))

    async def test_spark_source_settings(self) -> None:
        """The Spark source's decoder (driver and executor side, without Spark): the latest schema and a writer
        schema by id, over HTTPS with basic auth from its schema.registry.* options."""
        from twlog.spark.avro import AvroValues

        client = SyncRegistryClient(self.url, tls=TLSSettings(ca_file=self.certs.ca_file),
                                    user_info=f"admin:{ADMIN_PASSWORD}")
        first = await deferToThread(client.register, "users-value", json.dumps(USER_V1))
        await deferToThread(client.register, "users-value", json.dumps(USER_V2))
        options = {"valueformat": "avro", "schemaregistryurl": self.url,
                   "schema.registry.ssl.ca.location": self.certs.ca_file,
                   "schema.registry.basic.auth.user.info": f"reader:{READER_PASSWORD}"}
        values = await deferToThread(AvroValues.for_options, options, ["users"], True)
        self.assertEqual(values.version, 2)
        executor = pickle.loads(pickle.dumps(values))
        writer = await deferToThread(executor._writer, first)
        self.assertEqual(json.loads(writer.text), USER_V1)
        with self.assertRaises(ValueError) as refused:
            await deferToThread(AvroValues.for_options, {**options, "schema.registry.basic.auth.user.info": "reader:x"},
                                ["users"], True)
        self.assertIn("Unauthorized (error 401)", str(refused.exception))

    async def test_cli(self) -> None:
        """twlog produce --avro-schema and consume --registry over HTTPS with basic auth, the password in a file or
        a client config file, never on the command line."""
        directory = self.certs.directory
        schema = _write(directory, "user.avsc", json.dumps(USER_V1))
        config = _write(directory, "client.properties", f"schema.registry.ssl.ca.location={self.certs.ca_file}\n"
                        f"basic.auth.credentials.source=USER_INFO\nbasic.auth.user.info=admin:{ADMIN_PASSWORD}\n")
        status, out, err = await twlog("produce", "--broker", self.brokers, "--topic", "users", "--avro-schema",
                                       schema, "--registry", self.url, "--client-config", config,
                                       stdin=b'{"name": "ann"}\n{"name": "bob"}\n')
        self.assertEqual(status, 0, err)
        password = _write(directory, "reader.password", READER_PASSWORD + "\n")
        status, out, err = await twlog("consume", "--broker", self.brokers, "--topic", "users", "--registry",
                                       self.url, "--registry-ca", self.certs.ca_file, "--registry-user", "reader",
                                       "--registry-password-file", password)
        self.assertEqual((status, [json.loads(line) for line in out.splitlines()]),
                         (0, [{"name": "ann"}, {"name": "bob"}]), err)
        status, out, err = await twlog("consume", "--broker", self.brokers, "--topic", "users", "--registry",
                                       self.url, "--registry-ca", self.certs.ca_file)
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(b"Unauthorized (error 401)", err)
        status, out, err = await twlog("consume", "--broker", self.brokers, "--topic", "users", "--registry",
                                       self.url.replace("https://", "https://admin:pw@"))
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(b"--registry-password-file", err)


class MutualTLSRegistryTests(TestCase):
    timeout = 120

    async def test_client_certificate_required(self) -> None:
        """--tls-client-ca (Confluent's ssl.client.authentication=REQUIRED): a client without a certificate the CA
        signed fails the handshake; Confluent's client with ssl.certificate.location gets in."""
        certs = Certificates(self.mktemp())
        broker = await start_broker(self)
        _, _, http_url = await start_registry(
            self, "--broker", f"127.0.0.1:{broker.port.getHost().port}", "--tls-cert", certs.broker_cert,
            "--tls-key", certs.broker_key, "--tls-client-ca", certs.ca_file)
        url = "https://" + http_url.split("://", 1)[1]
        try:
            from confluent_kafka.schema_registry import SchemaRegistryClient
        except ImportError:
            raise SkipTest("confluent-kafka[schemaregistry] (the tests extra) is not installed") from None

        def use() -> None:
            client = SchemaRegistryClient({"url": url, "ssl.ca.location": certs.ca_file,
                                           "ssl.certificate.location": certs.client_cert,
                                           "ssl.key.location": certs.client_key})
            self.assertEqual(client.get_subjects(), [])
            for conf, alert in [({}, "CERTIFICATE_REQUIRED"),
                                ({"ssl.certificate.location": certs.stranger_cert,
                                  "ssl.key.location": certs.stranger_key}, "UNKNOWN_CA")]:
                with self.assertRaises(Exception) as refused:
                    SchemaRegistryClient({"url": url, "ssl.ca.location": certs.ca_file, **conf}).get_subjects()
                self.assertIn(alert, str(refused.exception))

        await deferToThread(use)
        mutual = SyncRegistryClient(url, tls=TLSSettings(ca_file=certs.ca_file, cert_file=certs.client_cert,
                                                         key_file=certs.client_key))
        self.assertEqual(await deferToThread(mutual._request, "GET", "/subjects"), [])


class StartFailureTests(TestCase):
    timeout = 60

    async def test_bad_files_one_line(self) -> None:
        """A TLS or password file that cannot be used stops `twlog registry` at start: exit 1, one line."""
        certs = Certificates(self.mktemp())
        bad_line = _write(certs.directory, "passwords", "fret: OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v\n")
        for args, expected in [
            (("--tls-cert", certs.broker_cert, "--tls-key", "/nonexistent.key"),
             "twlog registry: cannot serve HTTPS: cannot read the registry's --tls-cert key /nonexistent.key: "
             "No such file or directory"),
            (("--tls-cert", certs.broker_cert, "--tls-key", certs.client_key),
             f"twlog registry: cannot serve HTTPS: cannot load the registry's --tls-cert certificate "
             f"{certs.broker_cert} with the key {certs.client_key}"),
            (("--basic-auth-file", bad_line),
             f"twlog registry: --basic-auth-file {bad_line} line 1: user 'fret' has a OBF: password"),
        ]:
            status, out, err = await twlog("registry", "--broker", "127.0.0.1:1", "--port", "0", *args)
            self.assertEqual((status, out), (1, b""), err)
            one_line(self, err)
            self.assertTrue(err.decode().startswith(expected), err)


class MetricsOverHTTPSTests(TestCase):
    timeout = 60

    async def test_scrape(self) -> None:
        """--metrics-tls-cert/--metrics-tls-key: Prometheus scrapes https://.../metrics, trusting the CA; plain HTTP
        to that port gets no metrics."""
        certs = Certificates(self.mktemp())
        broker = await start_broker(self, metrics_port=0, metrics_cert=certs.broker_cert,
                                    metrics_key=certs.broker_key)
        self.assertTrue(broker.metrics_url.startswith("https://127.0.0.1:"), broker.metrics_url)

        def scrape(context) -> tuple[int, str, bytes]:
            request = urllib.request.Request(broker.metrics_url, headers={
                "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4"})
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return response.status, response.headers["Content-Type"], response.read()

        status, content_type, body = await deferToThread(scrape, ssl.create_default_context(cafile=certs.ca_file))
        self.assertEqual(status, 200)
        self.assertIn("application/openmetrics-text", content_type)
        self.assertIn(b"twlog_", body)
        with self.assertRaises(urllib.error.URLError) as failed:
            await deferToThread(scrape, ssl.create_default_context(cafile=certs.other_ca_file))
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(failed.exception))

        def plain() -> bytes:
            with urllib.request.urlopen(broker.metrics_url.replace("https://", "http://"), timeout=10) as response:
                return response.read()

        with self.assertRaises((OSError, http.client.HTTPException)):  # (the TLS port closes on a plaintext request)
            await deferToThread(plain)
