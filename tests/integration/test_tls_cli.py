"""The twlog commands over TLS: --tls-ca/--tls-cert/--tls-key and --client-config against a broker's mutual-TLS
port, and the one-line refusals (an unknown client setting, plaintext to the TLS port)."""

from __future__ import annotations

import os

from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_cli import one_line, twlog
from tests.integration.test_tls import Certificates

TOPIC = "secure"


class TLSCommandTests(TestCase):
    timeout = 120

    async def setUp(self):
        self.certs = Certificates(self.mktemp())
        self.service = await start_broker(self, **self.certs.broker(mutual=True))
        self.address = f"127.0.0.1:{self.service.tls_port.getHost().port}"
        self.flags = ["--tls-ca", self.certs.ca_file, "--tls-cert", self.certs.client_cert,
                      "--tls-key", self.certs.client_key]

    def config_file(self, *lines: str) -> str:
        path = os.path.join(self.certs.directory, "client.properties")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    async def test_produce_with_flags_consume_with_client_config(self):
        """produce with the --tls-* flags, topics and consume with a Kafka-style client config file."""
        lines = [b"line %d" % i for i in range(25)]
        code, out, err = await twlog("produce", "--broker", self.address, "--topic", TOPIC, *self.flags,
                                     stdin=b"\n".join(lines) + b"\n")
        self.assertEqual(code, 0, err)
        config = self.config_file("# twlog over TLS", "security.protocol=SSL",
                                  f"ssl.ca.location={self.certs.ca_file}",
                                  f"ssl.certificate.location={self.certs.client_cert}",
                                  f"ssl.key.location={self.certs.client_key}")
        code, out, err = await twlog("consume", "--broker", self.address, "--topic", TOPIC,
                                     "--client-config", config)
        self.assertEqual(code, 0, err)
        self.assertEqual(out.splitlines(), lines)
        code, out, err = await twlog("topics", "--broker", self.address, "--client-config", config)
        self.assertEqual(code, 0, err)
        self.assertIn(TOPIC.encode(), out)

    async def test_refusals_are_one_line(self):
        """An unknown client setting, a missing client certificate and plaintext to the TLS port: each one line
        on stderr, exit status 1."""
        config = self.config_file("security.protocol=SSL", "sasl.kerberos.service.name=kafka")
        code, out, err = await twlog("topics", "--broker", self.address, "--client-config", config)
        self.assertEqual(code, 1)
        one_line(self, err)
        self.assertIn(b"unknown setting 'sasl.kerberos.service.name'", err)
        code, out, err = await twlog("topics", "--broker", self.address, "--tls-ca", self.certs.ca_file)
        self.assertEqual(code, 1)
        one_line(self, err)
        self.assertIn(self.address.encode(), err)
        code, out, err = await twlog("topics", "--broker", self.address)
        self.assertEqual(code, 1)
        one_line(self, err)
        self.assertIn(b"TLS", err)
