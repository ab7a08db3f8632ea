"""The client commands' SASL settings (--user, --password-file, --sasl-mechanism, the sasl.* keys of
--client-config) and passwords that never come from the command line."""

from __future__ import annotations

import argparse

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.common import client_options
from twlog.cli.main import build_parser
from twlog.cli.passwords import prompt_password, read_password_file
from twlog.cli.sasl_options import sasl_settings
from twlog.client.sasl import SASLSettings
from twlog.errors import TwlogError


def args(**values) -> argparse.Namespace:
    base = {"tls_ca": None, "tls_cert": None, "tls_key": None, "client_config": None, "zookeeper": None,
            "user": None, "password_file": None, "sasl_mechanism": None}
    base.update(values)
    return argparse.Namespace(**base)


class Terminal:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class SaslOptionsTests(SynchronousTestCase):
    def file(self, *lines: str) -> str:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def test_every_client_command_takes_them(self) -> None:
        parser = build_parser()
        for command in (["produce", "-t", "x"], ["consume", "-t", "x"], ["topics"], ["offsets", "-t", "x"]):
            parsed = parser.parse_args([*command, "--user", "bob", "--password-file", "f", "--sasl-mechanism",
                                        "scram-sha-256"])
            self.assertEqual((parsed.user, parsed.password_file, parsed.sasl_mechanism),
                             ("bob", "f", "SCRAM-SHA-256"))

    def test_flags_and_client_config(self) -> None:
        """Flags, the file's sasl.* keys (the flags win), SCRAM-SHA-512 by default, none without a user."""
        password = self.file("s3cret")
        self.assertIsNone(client_options(args()).sasl)
        self.assertEqual(client_options(args(user="bob", password_file=password)).sasl,
                         SASLSettings("SCRAM-SHA-512", "bob", "s3cret"))
        config = self.file("security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256", "sasl.username=amy",
                           "sasl.password=from file")
        self.assertEqual(client_options(args(client_config=config)).sasl,
                         SASLSettings("SCRAM-SHA-256", "amy", "from file"))
        self.assertEqual(client_options(args(client_config=config, user="bob", password_file=password)).sasl,
                         SASLSettings("SCRAM-SHA-256", "bob", "s3cret"))
        ssl = self.file("security.protocol=SASL_SSL", "ssl.ca.location=ca.pem", "sasl.mechanism=PLAIN",
                        "sasl.username=amy", "sasl.password=pw")
        options = client_options(args(client_config=ssl))
        self.assertEqual((options.tls.ca_file, options.sasl), ("ca.pem", SASLSettings("PLAIN", "amy", "pw")))

    def test_refusals(self) -> None:
        """One line each: a password without a user, SASL_* without a user, PLAIN without TLS, no password."""
        password = self.file("pw")
        cases = [
            (args(password_file=password), "--password-file and --sasl-mechanism need --user"),
            (args(client_config=self.file("security.protocol=SASL_SSL")), "needs sasl.username"),
            (args(user="bob", password_file=password, sasl_mechanism="PLAIN"), "PLAIN sends the password in the clear"),
            (args(user="bob", password_file=self.file("")), "its first line (the password) is empty"),
            (args(user="bob", password_file=self.mktemp()), "cannot read --password-file"),
        ]
        for namespace, expected in cases:
            with self.assertRaises(TwlogError) as raised:
                client_options(namespace)
            self.assertIn(expected, str(raised.exception))
            self.assertNotIn("\n", str(raised.exception))
        with self.assertRaises(TwlogError):
            sasl_settings(args(user="bob"), {}, False, prompt=lambda user: (_ for _ in ()).throw(TwlogError("no tty")))
        self.assertEqual(sasl_settings(args(user="bob"), {}, False, prompt=lambda user: "typed").password, "typed")


class PasswordTests(SynchronousTestCase):
    def test_file_first_line_only(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("pass word \r\nsecond line\n")
        self.assertEqual(read_password_file(path), "pass word ")

    def test_prompt_twice_on_a_terminal_only(self) -> None:
        answers = iter(["one", "one"])
        self.assertEqual(prompt_password("bob", Terminal(True), lambda prompt: next(answers)), "one")
        answers = iter(["one", "two"])
        with self.assertRaises(TwlogError) as raised:
            prompt_password("bob", Terminal(True), lambda prompt: next(answers))
        self.assertIn("differ", str(raised.exception))
        with self.assertRaises(TwlogError) as raised:
            prompt_password("bob", Terminal(False), lambda prompt: "never asked")
        self.assertIn("no password: give --password-file FILE", str(raised.exception))
