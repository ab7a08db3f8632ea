"""The client commands' TLS settings: --tls-* options, --client-config files of Kafka client settings."""

from __future__ import annotations

import argparse

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.common import client_options
from twlog.cli.main import build_parser
from twlog.cli.tls_options import tls_settings
from twlog.client.tls import TLSSettings, TLSSetupError, describe_tls_failure
from twlog.errors import TwlogError


def args(**values) -> argparse.Namespace:
    base = {"tls_ca": None, "tls_cert": None, "tls_key": None, "client_config": None, "zookeeper": None}
    base.update(values)
    return argparse.Namespace(**base)


class TLSOptionsTests(SynchronousTestCase):
    def config(self, *lines: str) -> str:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def test_every_client_command_takes_them(self) -> None:
        """produce, consume and topics parse --tls-ca, --tls-cert, --tls-key and --client-config."""
        parser = build_parser()
        for command in (["produce", "-t", "x"], ["consume", "-t", "x"], ["topics"]):
            parsed = parser.parse_args([*command, "--tls-ca", "ca", "--tls-cert", "c", "--tls-key", "k",
                                        "--client-config", "f"])
            self.assertEqual((parsed.tls_ca, parsed.tls_cert, parsed.tls_key, parsed.client_config),
                             ("ca", "c", "k", "f"))

    def test_no_tls_by_default(self) -> None:
        self.assertIsNone(tls_settings(args()))
        self.assertIsNone(client_options(args()).tls)

    def test_flags(self) -> None:
        self.assertEqual(tls_settings(args(tls_ca="ca.pem", tls_cert="c.pem", tls_key="c.key")),
                         TLSSettings("ca.pem", "c.pem", "c.key", True))

    def test_client_config_file(self) -> None:
        """Kafka's key names; comments and blank lines skipped; a flag wins over the file."""
        path = self.config("# a comment", "", "security.protocol=SSL", "ssl.ca.location = ca.pem",
                           "ssl.certificate.location=c.pem", "ssl.key.location=c.key",
                           "ssl.endpoint.identification.algorithm=none")
        self.assertEqual(tls_settings(args(client_config=path)), TLSSettings("ca.pem", "c.pem", "c.key", False))
        self.assertEqual(tls_settings(args(client_config=path, tls_ca="other.pem")).ca_file, "other.pem")
        self.assertIsNone(tls_settings(args(client_config=self.config("security.protocol=PLAINTEXT"))))

    def test_refusals(self) -> None:
        """Unknown keys, SASL, a line without '=', a key without its certificate: one line each."""
        cases = {
            self.config("sasl.kerberos.service.name=kafka"): "unknown setting 'sasl.kerberos.service.name'",
            self.config("security.protocol=SASL_SCRAM"): "security.protocol=SASL_SCRAM is not one of",
            self.config("ssl.ca.location"): "line 1: 'ssl.ca.location' is not key=value",
            self.config("security.protocol=SSL", "ssl.endpoint.identification.algorithm=dns"): "is not https or none",
        }
        for path, expected in cases.items():
            with self.assertRaises(TwlogError) as raised:
                tls_settings(args(client_config=path))
            self.assertIn(expected, str(raised.exception))
            self.assertNotIn("\n", str(raised.exception))
        with self.assertRaises(TLSSetupError):
            tls_settings(args(tls_ca="ca.pem", tls_cert="c.pem"))
        with self.assertRaises(TwlogError):
            tls_settings(args(client_config=self.mktemp()))

    def test_with_zookeeper_the_tls_listeners(self) -> None:
        """TLS and --zookeeper: the brokers are located at the SSL listeners they register (twlog.coord.endpoints)."""
        self.assertEqual(client_options(args(tls_ca="ca.pem", zookeeper="localhost:2181")).listener, "SSL")
        self.assertEqual(client_options(args(zookeeper="localhost:2181")).listener, "PLAINTEXT")

    def test_tls_failures_in_words(self) -> None:
        """OpenSSL's reasons, as pyOpenSSL and the standard library word them, with what they most likely mean."""
        self.assertEqual(describe_tls_failure("[('SSL routines', '', 'wrong version number')]"),
                         "TLS failed: wrong version number (the port does not speak TLS: TLS goes to a broker's "
                         "--tls-port)")
        self.assertIn("requires a client certificate",
                      describe_tls_failure("[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate "
                                           "required (_ssl.c:2580)"))
        self.assertIn("does not name the host",
                      describe_tls_failure("certificate verify failed: IP address mismatch, certificate is not "
                                           "valid for '127.0.0.1'."))
        self.assertEqual(describe_tls_failure("something else."), "TLS failed: something else")
