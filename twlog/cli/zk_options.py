# -*- test-case-name: tests.cli.test_zk_options -*-
"""The ZooKeeper credentials options of the C{twlog} commands (docs/security.md, "ZooKeeper").

Every command given C{--zookeeper} also takes C{--zookeeper-credentials-file}
(L{twlog.cli.parsing.Parser} adds it beside C{--zookeeper}, so a new command
gets it too); C{twlog mirror} takes one file for its sources and one for its
target.  L{read_zookeeper_credentials} reads them before the command runs;
every ZooKeeper session the command opens authenticates with them (and its
client options carry them to the clients it builds).  A password is never
given on the command line.
"""

from __future__ import annotations

import argparse

from twlog.coord.zkauth import ZooKeeperCredentials, credentials_file  # (light: no kazoo)

HELP = ("a file holding the ZooKeeper credentials to authenticate with (digest), one line user:password or "
        "username= and password= lines; the nodes the command creates are writable by that identity alone")


def add_zookeeper_credentials_option(command, inherit: bool = False) -> None:
    """Add C{--zookeeper-credentials-file} to C{command} (with C{inherit}, an action's: left out, the command's
    value stays)."""
    command.add_argument("--zookeeper-credentials-file", default=argparse.SUPPRESS if inherit else None,
                         metavar="FILE", help=HELP)


def add_mirror_credentials_options(command) -> None:
    """C{twlog mirror}'s: one file for every C{--from} cluster, one for the C{--to} cluster."""
    command.add_argument("--from-zookeeper-credentials-file", default=None, metavar="FILE",
                         help="the source clusters' ZooKeeper credentials (as --zookeeper-credentials-file)")
    command.add_argument("--to-zookeeper-credentials-file", default=None, metavar="FILE",
                         help="the target cluster's ZooKeeper credentials (as --zookeeper-credentials-file)")
    command.add_argument("--from-client-config", default=None, metavar="FILE",
                         help="Kafka client settings (security.protocol, ssl.*, sasl.*; as --client-config) of the "
                         "consumers of every source cluster")
    command.add_argument("--to-client-config", default=None, metavar="FILE",
                         help="Kafka client settings (as --from-client-config) of the producer to the target")


#: Each credentials file option, and the attribute its credentials are kept in.
_FILES = {"zookeeper_credentials_file": "zookeeper_credentials",
          "from_zookeeper_credentials_file": "from_zookeeper_credentials",
          "to_zookeeper_credentials_file": "to_zookeeper_credentials"}


def read_zookeeper_credentials(args) -> None:
    """Read the credentials files C{args} names, before the command runs: C{args.zookeeper_credentials} (and the
    mirror's C{from_} and C{to_zookeeper_credentials}) are L{ZooKeeperCredentials}, or None.

    @raise twlog.coord.zkauth.ZooKeeperCredentialsError: a file that cannot be read or used (one line).
    """
    for option, attribute in _FILES.items():
        setattr(args, attribute, credentials_file(getattr(args, option, None)))


def zookeeper_credentials(args) -> ZooKeeperCredentials | None:
    """The command's ZooKeeper credentials (L{read_zookeeper_credentials}), or None."""
    return getattr(args, "zookeeper_credentials", None)
