# -*- test-case-name: tests.cli.test_zk_options -*-
"""The ZooKeeper credentials options of the C{twlog} commands (docs/security.md, "ZooKeeper").

Every command given C{--zookeeper} also takes C{--zookeeper-credentials-file}
(L{twlog.cli.parsing.Parser} adds it beside C{--zookeeper}, so a new command
gets it too); C{twlog mirror} takes one file for its sources and one for its
target.  L{use_zookeeper_credentials} reads them before the command runs, and
every ZooKeeper session the command opens on those connect strings
authenticates with them.  A password is never given on the command line.
"""

from __future__ import annotations

import argparse

from twlog.coord.zkauth import credentials_from_options  # (light: no kazoo)

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


def zookeeper_credential_files(args) -> list[tuple[str, str]]:
    """The (connect string, credentials file) pairs C{args} names."""
    pairs = []
    if getattr(args, "zookeeper_credentials_file", None) and getattr(args, "zookeeper", None):
        pairs.append((args.zookeeper, args.zookeeper_credentials_file))
    if getattr(args, "from_zookeeper_credentials_file", None):
        pairs += [(source, args.from_zookeeper_credentials_file) for source in args.sources]
    if getattr(args, "to_zookeeper_credentials_file", None):
        pairs.append((args.target, args.to_zookeeper_credentials_file))
    return pairs


def use_zookeeper_credentials(args) -> None:
    """Read the credentials files C{args} names, and use each for its connect string in this process.

    @raise twlog.coord.zkauth.ZooKeeperCredentialsError: a file that cannot be read or used (one line).
    """
    for hosts, path in zookeeper_credential_files(args):
        credentials_from_options(hosts, path)
