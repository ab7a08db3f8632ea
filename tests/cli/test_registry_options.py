"""The registry options of twlog produce and consume: --registry-ca/-cert/-key, --registry-user with
--registry-password-file, and Confluent's client settings in --client-config; a password never on the command
line."""

from __future__ import annotations

from argparse import Namespace

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.main import build_parser
from twlog.cli.registry_settings import RegistrySettings, registry_settings
from twlog.client.tls import TLSSettings
from twlog.errors import TwlogError

URL = "https://registry.example:8081"


def args(**given) -> Namespace:
    fields = {"registry": URL, "client_config": None, "registry_ca": None, "registry_cert": None,
              "registry_key": None, "registry_user": None, "registry_password_file": None}
    fields.update(given)
    return Namespace(**fields)


class RegistrySettingsTests(SynchronousTestCase):
    def write(self, text: str) -> str:
        path = self.mktemp()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def test_parsers(self) -> None:
        """produce and consume take the options."""
        parser = build_parser()
        for command in (["produce", "-t", "t"], ["consume", "-t", "t"]):
            parsed = parser.parse_args([*command, "--registry", URL, "--registry-ca", "ca.pem", "--registry-user",
                                        "bob", "--registry-password-file", "pw"])
            self.assertEqual((parsed.registry_ca, parsed.registry_user, parsed.registry_password_file),
                             ("ca.pem", "bob", "pw"))

    def test_none_without_registry(self) -> None:
        self.assertIsNone(registry_settings(args(registry=None)))
        self.assertEqual(registry_settings(args(registry="http://r:8081")), RegistrySettings("http://r:8081"))

    def test_options(self) -> None:
        password = self.write("s3cret\nignored\n")
        settings = registry_settings(args(registry_ca="ca.pem", registry_cert="c.pem", registry_key="c.key",
                                          registry_user="bob", registry_password_file=password))
        self.assertEqual(settings, RegistrySettings(URL, TLSSettings("ca.pem", "c.pem", "c.key"), "bob:s3cret"))
        self.assertNotIn("s3cret", repr(settings))

    def test_client_config(self) -> None:
        """Confluent's names: the serializers' schema.registry.* and the Python client's basic.auth.*."""
        for prefix in ("", "schema.registry."):
            config = self.write(f"schema.registry.ssl.ca.location=ca.pem\n{prefix}basic.auth.credentials.source="
                                f"USER_INFO\n{prefix}basic.auth.user.info=bob:pa:ss\n")
            self.assertEqual(registry_settings(args(client_config=config)),
                             RegistrySettings(URL, TLSSettings("ca.pem"), "bob:pa:ss"))
        implied = self.write("basic.auth.user.info=bob:pw\n")
        self.assertEqual(registry_settings(args(client_config=implied)).user_info, "bob:pw")
        password = self.write("other\n")
        wins = registry_settings(args(client_config=implied, registry_user="ann", registry_password_file=password))
        self.assertEqual(wins.user_info, "ann:other")  # the command line wins

    def test_refusals(self) -> None:
        password = self.write("pw\n")
        cases = [
            (args(registry="https://bob:pw@r:8081"), "not in the URL"),
            (args(registry_user="bob"), "--registry-user and --registry-password-file go together"),
            (args(registry_password_file=password), "--registry-user and --registry-password-file go together"),
            (args(registry_user="bob", registry_password_file="/nonexistent/pw"),
             "cannot read --registry-password-file /nonexistent/pw: No such file or directory"),
            (args(registry_user="bob", registry_password_file=self.write("")), "is empty"),
            (args(registry="http://r:8081", registry_ca="ca.pem"), "need an https:// registry"),
            (args(registry_cert="c.pem"), "--registry-cert and --registry-key go together"),
            (args(client_config=self.write("basic.auth.credentials.source=SASL_INHERIT\n")),
             "basic.auth.credentials.source=SASL_INHERIT is not supported"),
            (args(client_config=self.write("basic.auth.user.info=bob\n")), "must be user:password"),
            (args(client_config=self.write("schema.registry.password=x\n")),
             "unknown setting 'schema.registry.password'"),
        ]
        for given, why in cases:
            with self.assertRaises(TwlogError) as raised:
                registry_settings(given)
            self.assertIn(why, str(raised.exception))
            self.assertNotIn("\n", str(raised.exception))
