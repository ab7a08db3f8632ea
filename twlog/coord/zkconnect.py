# -*- test-case-name: tests.coord.test_zk -*-
"""ZooKeeper connect strings (C{host:port[,...][/chroot]}) and the errors of connecting (re-exported by
L{twlog.coord.zk})."""

from __future__ import annotations

from twlog.errors import TwlogError


class ZooKeeperUnavailable(TwlogError):
    """ZooKeeper could not be reached within the timeout."""


class MissingChroot(ZooKeeperUnavailable):
    """The connect string names a chroot (C{host:port/twlog}) that does not exist on the server."""


def split_chroot(hosts: str) -> tuple[str, str]:
    """A connect string C{host:port[,host:port...][/chroot]} as C{(servers, chroot)}; chroot C{""} when none."""
    servers, slash, chroot = hosts.partition("/")
    return servers, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


def missing_chroot(hosts: str) -> MissingChroot:
    """The one-line error for a chroot that does not exist, with the connect string meant most often."""
    servers, chroot = split_chroot(hosts)
    return MissingChroot(
        f"ZooKeeper at {servers} has no {chroot}: did you mean {servers} (no chroot)? "
        f"(a broker started with --zookeeper {hosts} creates {chroot}; twlog local uses no chroot)"
    )


__all__ = ["MissingChroot", "ZooKeeperUnavailable", "missing_chroot", "split_chroot"]
