# -*- test-case-name: tests.cli.test_options -*-
"""The C{type=} functions of the C{twlog} command's options: each checks one kind of value.

Each raises C{argparse.ArgumentTypeError} with a message that names the bad
value and what is accepted; argparse prints it as one line and exits 2.  The
module stays light (no reactor, no client), so C{twlog --help} stays fast.
"""

from __future__ import annotations

import argparse
import re

from twlog.cli.parsing import type_checked
from twlog.client.times import parse_time  # noqa: F401  (the commands' rule, in the library for the console)
from twlog.errors import TwlogError
from twlog.storage.manager import MAX_PARTITIONS, validate_topic


class _DefaultBrokers(str):
    """The brokers a command uses when --broker is not given (a client config's bootstrap.servers may replace it)."""


#: C{--broker}'s default: told apart from the same address given on the command line by its identity.
DEFAULT_BROKERS = _DefaultBrokers("localhost:9092")


def broker_list(text: str) -> str:
    """C{HOST:PORT[,HOST:PORT...]} (C{--broker}), checked: every item has a host and a numeric port."""
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(
                f"broker address {item!r} is not HOST:PORT with a port from 1 to 65535 (e.g. localhost:9092)"
            )
    if not text.strip(" ,"):
        raise argparse.ArgumentTypeError("no broker address given: HOST:PORT[,HOST:PORT...]")
    return text


_CHROOT = re.compile(r"^(/[A-Za-z0-9._-]+)+$")


def zookeeper_address(text: str) -> str:
    """C{HOST:PORT[,HOST:PORT...][/chroot]} (C{--zookeeper}), checked."""
    hosts, slash, chroot = text.partition("/")
    try:
        broker_list(hosts)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"ZooKeeper address {text!r} is not HOST:PORT[,HOST:PORT...][/chroot] (e.g. localhost:2181)"
        ) from None
    if slash and not _CHROOT.match("/" + chroot):
        raise argparse.ArgumentTypeError(f"ZooKeeper chroot {'/' + chroot!r} is not a path like /twlog")
    return text


def topic_name(text: str) -> str:
    """A topic name, checked as the brokers check it (1 to 249 of letters, digits, '.', '_', '-')."""
    return type_checked(validate_topic, text, TwlogError)


def partition_count(text: str) -> int:
    """C{topics create --partitions}: a whole number from 1 to L{MAX_PARTITIONS}, the partitions on each broker."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_PARTITIONS:
        raise argparse.ArgumentTypeError(
            f"partition count {text!r} is not a whole number from 1 to {MAX_PARTITIONS} (partitions on each broker)"
        )
    return value


def offset_option(text: str) -> str | int:
    """C{earliest}, C{latest}, or a byte offset (a whole number from 0) printed by a previous run."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"offset {text!r} is not earliest, latest or a byte offset (a whole number from 0)"
        )
    return value


def time_option(text: str) -> int:
    """L{parse_time} as an argparse type."""
    return type_checked(parse_time, text)


def partition_option(text: str) -> str:
    """C{<broker id>-<partition>} (as C{twlog topics} shows it) or a cluster-wide index from 0."""
    broker, sep, partition = text.partition("-")
    if (sep and broker.isdigit() and partition.isdigit()) or (text.isdigit() and text.isascii()):
        return text
    raise argparse.ArgumentTypeError(
        f"partition {text!r} is not BROKER-PARTITION (e.g. 0-1) or a cluster-wide index (a whole number from 0)"
    )
