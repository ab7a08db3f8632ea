"""Kafka client security settings -> TLSSettings/SASLSettings (twlog.client.kafka_settings), from the names
Kafka's Java client (ssl.truststore.*, ssl.keystore.* with PEM, sasl.jaas.config) and librdkafka
(ssl.ca.location, sasl.username) document."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.client.kafka_settings import parse_security, read_settings_file, security_settings
from twlog.client.sasl import SASLSettings
from twlog.client.tls import TLSSettings
from twlog.errors import TwlogError

SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="b\\"s;cret";'
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required username=alice password='x' ;"


class KafkaSettingsTests(SynchronousTestCase):
    def refused(self, config: dict[str, str], expected: str, prefix: str = "") -> None:
        with self.assertRaises(TwlogError) as raised:
            security_settings(config, "where", prefix)
        self.assertIn(expected, str(raised.exception))
        self.assertTrue(str(raised.exception).startswith("where: "))
        self.assertNotIn("\n", str(raised.exception))

    def test_plaintext_by_default(self) -> None:
        self.assertEqual(security_settings({}, "w"), (None, None))
        self.assertEqual(security_settings({"security.protocol": "plaintext"}, "w"), (None, None))
        # Kafka's PLAINTEXT default leaves ssl.* unused
        self.assertEqual(security_settings({"ssl.ca.location": "ca.pem"}, "w"), (None, None))

    def test_librdkafka_names(self) -> None:
        tls, sasl = security_settings({"security.protocol": "SASL_SSL", "ssl.ca.location": "ca.pem",
                                       "ssl.certificate.location": "c.pem", "ssl.key.location": "c.key",
                                       "ssl.endpoint.identification.algorithm": "none",
                                       "sasl.mechanism": "scram-sha-256", "sasl.username": "bob",
                                       "sasl.password": "pw"}, "w")
        self.assertEqual(tls, TLSSettings("ca.pem", "c.pem", "c.key", check_hostname=False))
        self.assertEqual(sasl, SASLSettings("SCRAM-SHA-256", "bob", "pw"))

    def test_java_pem_stores(self) -> None:
        """Kafka 2.7's PEM stores: the truststore is the CA file, the keystore holds key and chain in one."""
        tls, sasl = security_settings({"security.protocol": "SSL", "ssl.truststore.location": "ca.pem",
                                       "ssl.truststore.type": "PEM", "ssl.keystore.location": "me.pem",
                                       "ssl.keystore.type": "pem"}, "w")
        self.assertEqual((tls, sasl), (TLSSettings("ca.pem", "me.pem", "me.pem", check_hostname=True), None))

    def test_jaas_config(self) -> None:
        """ScramLoginModule (with Java's escapes in quotes) and PlainLoginModule, the mechanism from the module."""
        _, sasl = security_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                                     "sasl.jaas.config": SCRAM}, "w")
        self.assertEqual(sasl, SASLSettings("SCRAM-SHA-512", "bob", 'b"s;cret'))
        security = parse_security({"sasl.jaas.config": PLAIN.replace("'x'", '"x"')}, "w")
        self.assertEqual((security.mechanism, security.user, security.password), ("PLAIN", "alice", "x"))

    def test_refusals(self) -> None:
        self.refused({"security.protocol": "SASL_SCRAM"}, "kafka.security.protocol=SASL_SCRAM is not one of",
                     "kafka.")
        self.refused({"security.protocol": "SSL", "ssl.truststore.location": "t.jks"},
                     "ssl.truststore.location is a JKS (the default) store: twlog reads PEM files only")
        self.refused({"security.protocol": "SSL", "ssl.keystore.location": "k.p12", "ssl.keystore.type": "PKCS12"},
                     "is a PKCS12 store")
        self.refused({"security.protocol": "SSL", "ssl.truststore.location": "t.pem", "ssl.truststore.type": "PEM",
                      "ssl.ca.location": "ca.pem"}, "both given")
        self.refused({"security.protocol": "SASL_SSL"}, "security.protocol=SASL_SSL needs sasl.jaas.config")
        self.refused({"security.protocol": "SASL_SSL", "sasl.username": "bob"}, "sasl.username=bob needs")
        self.refused({"sasl.username": "bob", "sasl.password": "x"}, "SASL credentials need")
        self.refused({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a",
                      "sasl.password": "b"}, "PLAIN sends the password in the clear")
        self.refused({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "a",
                      "sasl.password": "b"}, "sasl.mechanism=GSSAPI is not one of")
        self.refused({"security.protocol": "PLAINTEXT", "ssl.ca.location": "ca.pem"}, "ssl.* settings with")
        self.refused({"ssl.key.location": "k.pem"}, "ssl.key.location needs security.protocol=SSL or SASL_SSL")
        for jaas in ("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
                     'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob";',
                     'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="x" '
                     'tokenauth="true";',
                     'org.apache.kafka.common.security.scram.ScramLoginModule username="bob" password="x";'):
            self.refused({"security.protocol": "SASL_SSL", "sasl.jaas.config": jaas}, "sasl.jaas.config: twlog takes")
        self.refused({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": SCRAM},
                     "sasl.mechanism=PLAIN does not go with")

    def test_file(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("# a comment\n! another\n\nsecurity.protocol = SSL\nssl.ca.location=ca.pem\n")
        self.assertEqual(read_settings_file(path), {"security.protocol": "SSL", "ssl.ca.location": "ca.pem"})
        with open(path, "a") as f:
            f.write("bootstrap.servers=x:9092\n")
        with self.assertRaises(TwlogError) as raised:
            read_settings_file(path, "--from-client-config")
        self.assertIn(f"--from-client-config {path} line 6: unknown setting 'bootstrap.servers'",
                      str(raised.exception))
