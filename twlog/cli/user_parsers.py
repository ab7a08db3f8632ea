# -*- test-case-name: tests.cli.test_users -*-
"""C{twlog users add/delete/list}'s parsers (light: argparse only, for C{twlog --help}); run by L{twlog.cli.users}."""

from __future__ import annotations

from twlog.cli.options import zookeeper_address
from twlog.cli.parsing import Parser, positive_int, subcommand

__all__ = ["add_user_commands"]

#: The SCRAM mechanisms C{users add} makes credentials for (twlog.security.credentials.SCRAM_MECHANISMS).
_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_user_commands(commands, debug_option, json_option) -> None:
    """C{twlog users} and its actions."""
    users = subcommand(
        commands, "users", "twlog.cli.users:list_users",
        "manage the users that authenticate to the brokers (SASL SCRAM and PLAIN), stored in ZooKeeper",
        "List (the default), add or delete the users whose SCRAM credentials brokers started with --sasl-mechanisms "
        "check, stored in ZooKeeper at /config/users/<user> as Kafka stores them; brokers see a change at once, "
        "without a restart. A password is never given on the command line: --password-file, or a prompt.",
        react=True,
    )

    def common(command) -> None:
        command.add_argument("--zookeeper", "-z", default="localhost:2181", type=zookeeper_address,
                             metavar="HOST:PORT[/chroot]", help="ZooKeeper (default: localhost:2181)")
        debug_option(command)

    common(users)
    json_option(users)
    actions = users.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    listing = subcommand(actions, "list", "twlog.cli.users:list_users", "list the users and their mechanisms",
                         "Print each user with the SCRAM mechanisms it has credentials for (never a key).",
                         react=True)
    common(listing)
    json_option(listing)
    add = subcommand(
        actions, "add", "twlog.cli.users:add_user", "add a user, or set a user's password",
        "Store the user's SCRAM credentials (salt, stored key, server key, iterations; never the password), "
        "replacing any it had: this is also how a password is changed. The password comes from --password-file "
        "(its first line), or is asked twice on the terminal.", react=True,
    )
    common(add)
    add.add_argument("--user", required=True, help="the user name (A-Z a-z 0-9 . _ @ -)")
    add.add_argument("--password-file", metavar="FILE", default=None,
                     help="read the password from the first line of FILE (default: ask on the terminal)")
    add.add_argument("--mechanism", choices=_MECHANISMS, action="append", default=None,
                     help="make credentials for this mechanism only (repeatable; default: both)")
    add.add_argument("--iterations", type=positive_int, default=4096, metavar="N",
                     help="PBKDF2 iterations of the credentials, 4096 to 16384 (default: 4096)")
    delete = subcommand(actions, "delete", "twlog.cli.users:delete_user", "delete a user",
                        "Delete the user's credentials: its next authentication fails (connections already "
                        "authenticated stay open until they close).", react=True)
    common(delete)
    delete.add_argument("--user", required=True, help="the user name")
