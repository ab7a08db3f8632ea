"""Tests for the commands' ZooKeeper credentials options (twlog.cli.zk_options)."""

from __future__ import annotations

import argparse

from twisted.trial.unittest import SynchronousTestCase

from tests.cli.test_main import run_main
from twlog.cli.common import client_options
from twlog.cli.main import build_parser
from twlog.cli.mirror import settings_from
from twlog.cli.zk_options import read_zookeeper_credentials
from twlog.coord.zkauth import ZooKeeperCredentials


def parsers(parser: argparse.ArgumentParser, name: str = "twlog"):
    """C{(name, parser)} of C{parser} and every subcommand under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from parsers(subparser, f"{name} {sub}")


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


class OptionTests(SynchronousTestCase):
    def credentials_file(self, text: str) -> str:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_every_command_with_zookeeper_takes_credentials(self) -> None:
        """The option comes with --zookeeper (one place: the parser class), so a new command has it too."""
        with_zookeeper = [name for name, p in parsers(build_parser()) if "--zookeeper" in options(p)]
        self.assertIn("twlog groups reset", with_zookeeper)
        self.assertIn("twlog topics create", with_zookeeper)
        self.assertIn("twlog consume", with_zookeeper)
        for name, parser in parsers(build_parser()):
            if "--zookeeper" in options(parser):
                self.assertIn("--zookeeper-credentials-file", options(parser), name)

    def test_credentials_reach_the_client_options(self) -> None:
        path = self.credentials_file("username=twlog\npassword=secret\n")
        args = build_parser().parse_args(["groups", "reset", "-z", "zk:2181/c", "--zookeeper-credentials-file",
                                          path, "-g", "g", "-t", "t", "--to", "earliest"])
        read_zookeeper_credentials(args)
        self.assertEqual(args.zookeeper_credentials, ZooKeeperCredentials("twlog", "secret"))
        self.assertEqual(client_options(args).zookeeper_credentials, args.zookeeper_credentials)

    def test_an_action_inherits_the_commands_file(self) -> None:
        """twlog topics --zookeeper-credentials-file F create ...: the action keeps the command's value."""
        path = self.credentials_file("twlog:secret\n")
        args = build_parser().parse_args(["topics", "-z", "zk:2181", "--zookeeper-credentials-file", path,
                                          "create", "-t", "t", "-n", "1"])
        self.assertEqual(args.zookeeper_credentials_file, path)

    def test_mirror_sources_and_target(self) -> None:
        source, target = self.credentials_file("src:1\n"), self.credentials_file("dst:2\n")
        args = build_parser().parse_args(["mirror", "--from", "a:1", "--from", "b:1", "--to", "c:1",
                                          "--from-zookeeper-credentials-file", source,
                                          "--to-zookeeper-credentials-file", target])
        read_zookeeper_credentials(args)
        settings = settings_from(args)
        self.assertEqual((settings.source_credentials.user, settings.target_credentials.user), ("src", "dst"))
        self.assertNotIn("src", repr(settings))

    def test_a_bad_file_is_one_line(self) -> None:
        missing = self.mktemp()
        status, out, err = run_main("groups", "-z", "127.0.0.1:1", "--zookeeper-credentials-file", missing)
        self.assertEqual((status, out), (1, ""))
        self.assertEqual(err, f"twlog: cannot read the ZooKeeper credentials file {missing}: No such file or "
                              "directory\n")
