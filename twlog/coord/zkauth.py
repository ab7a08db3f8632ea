# -*- test-case-name: tests.coord.test_zkauth,tests.integration.test_zk_acls -*-
"""ZooKeeper credentials and the znode ACL policy of a secured cluster (docs/security.md, "ZooKeeper").

A session given L{ZooKeeperCredentials} authenticates with ZooKeeper's
C{digest} scheme (C{addauth digest user:password}), and every znode it creates
carries an ACL chosen here from the node's path (Kafka's C{zookeeper.set.acl}):

  - sensitive paths (L{SENSITIVE}: credentials), the creator's identity only;
  - a node under a group's root C{/consumers/<group>}, the root's ACL as it is when the node is made
    (L{twlog.coord.zksecure.set_group_acl} makes the root and sets it from the principals with Read on the group);
  - everything else (a group's root too), the creator's identity, and read for everyone.

So only the cluster creates groups (C{/consumers} is the cluster's): a group's members write its nodes once the
cluster has made its root with an ACL that names them.  (A digest identity is a hash of the password: ZooKeeper
shows it as C{user:x} to a session without the ADMIN permission on the node, so a member could not copy the
cluster's identity from C{/consumers} into a group root of its own.)

The brokers and the admin tools share one identity, the cluster's, so what one broker creates the others (and
C{twlog} with the same credentials file) may change, and nobody else may.  A session without credentials
creates open nodes, as before.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from dataclasses import dataclass, field
from typing import NamedTuple

from twlog.coord.paths import CONSUMERS, ZOOKEEPER_DIGESTS
from twlog.errors import TwlogError


class Permissions:
    """ZooKeeper's permission bits (C{ZooDefs.Perms})."""

    READ, WRITE, CREATE, DELETE, ADMIN = 1, 2, 4, 8, 16
    ALL = 31


class ACL(NamedTuple):
    """One entry of a znode's ACL: C{scheme} (C{world}, C{digest}), C{id} and the L{Permissions} bits."""

    scheme: str
    id: str
    perms: int


#: Znodes only their creator (the cluster) may read: credentials (Kafka's SCRAM credentials, the users' digests).
CONFIG_USERS = "/config/users"
#: Persistent, sensitive: C{<user>} -> the user's ZooKeeper digest identity (C{user:base64(sha1(user:password))}).
DIGESTS = ZOOKEEPER_DIGESTS
SENSITIVE = (CONFIG_USERS, DIGESTS)

WORLD_READ = ACL("world", "anyone", Permissions.READ)
WORLD_ALL = ACL("world", "anyone", Permissions.ALL)


def digest_id(user: str, password: str) -> str:
    """ZooKeeper's digest identity of a user (its DigestAuthenticationProvider.generateDigest):
    C{user:base64(sha1(user:password))}."""
    digest = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(digest).decode()}"


class ZooKeeperCredentialsError(TwlogError):
    """A ZooKeeper credentials file that cannot be read or used."""


@dataclass(frozen=True)
class ZooKeeperCredentials:
    """A ZooKeeper digest user and password (the password is left out of the repr)."""

    user: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.user or ":" in self.user or any(c.isspace() for c in self.user):
            raise ZooKeeperCredentialsError(f"ZooKeeper user {self.user!r}: not empty, no ':' and no spaces")
        if not self.password:
            raise ZooKeeperCredentialsError(f"ZooKeeper user {self.user!r} has an empty password")

    @property
    def digest_id(self) -> str:
        """ZooKeeper's id of this user in ACLs (DigestAuthenticationProvider): C{user:base64(sha1(user:password))}."""
        return digest_id(self.user, self.password)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's C{auth_data}: C{[("digest", "user:password")]}."""
        return [("digest", f"{self.user}:{self.password}")]


def parse_credentials(text: str, source: str = "the credentials") -> ZooKeeperCredentials:
    """Credentials from a file's text: one line C{user:password}, or C{username=} and C{password=} lines.

    Blank lines and C{#} comments are skipped; a password is everything after the first C{:} or C{=}.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if lines and lines[0].partition("=")[0].strip() in ("username", "password"):
        settings = {}
        for line in lines:
            key, equals, value = line.partition("=")
            if not equals or key.strip() not in ("username", "password"):
                raise ZooKeeperCredentialsError(f"{source}: {key.strip()!r} is not username= or password=")
            settings[key.strip()] = value.strip()
        if set(settings) != {"username", "password"}:
            raise ZooKeeperCredentialsError(f"{source} needs both username= and password=")
        return ZooKeeperCredentials(settings["username"], settings["password"])
    if len(lines) != 1 or ":" not in lines[0]:
        raise ZooKeeperCredentialsError(f"{source} must hold one line user:password (or username= and password= "
                                        "lines)")
    user, _, password = lines[0].partition(":")
    return ZooKeeperCredentials(user, password)


def read_credentials_file(path: str) -> ZooKeeperCredentials:
    """The credentials in the file at C{path} (L{parse_credentials}); one line naming the file on failure."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(65536)
    except (OSError, UnicodeDecodeError) as e:
        raise ZooKeeperCredentialsError(f"cannot read the ZooKeeper credentials file {path}: "
                                        f"{getattr(e, 'strerror', None) or e}") from None
    return parse_credentials(text, f"the ZooKeeper credentials file {path}")


def ensure_credentials_file(path: str, user: str = "twlog-cluster") -> ZooKeeperCredentials:
    """The credentials in the file at C{path}; if there is none, new ones for C{user} with a random password,
    written there first (mode 0600): for a cluster made on one machine (C{twlog local --secure})."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_credentials_file(path)
    credentials = ZooKeeperCredentials(user, secrets.token_urlsafe(24))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"# ZooKeeper credentials of the twlog cluster (docs/security.md, ZooKeeper)\n"
                f"username={credentials.user}\npassword={credentials.password}\n")
    return credentials


def credentials_file(path: str | None) -> ZooKeeperCredentials | None:
    """The credentials in the file at C{path} (C{~} expanded), or None without a path."""
    return read_credentials_file(os.path.expanduser(path)) if path else None


# -- the policy --------------------------------------------------------------------------------------------------


def is_sensitive(path: str) -> bool:
    """Whether C{path} holds credentials (readable by the cluster's identity only)."""
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE)


def group_root(path: str) -> str | None:
    """C{/consumers/<group>} for C{path} at or under a group's root, else None."""
    if not path.startswith(CONSUMERS + "/"):
        return None
    group = path[len(CONSUMERS) + 1:].split("/", 1)[0]
    return f"{CONSUMERS}/{group}" if group else None


def identity_acl(identity: str) -> ACL:
    """All permissions for the digest identity C{identity}."""
    return ACL("digest", identity, Permissions.ALL)


def node_acl(path: str, creator: str) -> list[ACL]:
    """The ACL of a node outside the groups, created by the digest identity C{creator}."""
    own = identity_acl(creator)
    if is_sensitive(path):
        return [own]
    return [own, WORLD_READ]


def group_acl(cluster_id: str, member_ids: list[str], everyone: bool = False) -> list[ACL]:
    """A group subtree's ACL: all permissions for the cluster's identity and each member digest identity, read
    for everyone (or everything for everyone, with C{everyone}: C{User:*} has Read on the group)."""
    ids = [cluster_id] + [i for i in dict.fromkeys(member_ids) if i != cluster_id]
    return [identity_acl(i) for i in ids] + [WORLD_ALL if everyone else WORLD_READ]


async def acl_for(read_acl, path: str, creator: str) -> list[ACL]:
    """The ACL a session authenticated as the digest identity C{creator} gives the node it creates at C{path}.

    @param read_acl: C{read_acl(path)} fires with a node's ACL, or None when there is no such node: a node under
        a group's root takes the root's ACL (which its writers may read whole: they have the ADMIN permission).
    """
    root = group_root(path)
    if root is None or path == root:
        return node_acl(path, creator)
    acl = await read_acl(root)
    return list(acl) if acl is not None else node_acl(root, creator)


__all__ = [
    "ACL", "CONFIG_USERS", "DIGESTS", "SENSITIVE", "WORLD_ALL", "WORLD_READ", "Permissions",
    "ZooKeeperCredentials", "ZooKeeperCredentialsError", "acl_for", "credentials_file", "ensure_credentials_file",
    "digest_id", "group_acl", "group_root", "identity_acl", "is_sensitive", "node_acl",
    "parse_credentials", "read_credentials_file",
]
