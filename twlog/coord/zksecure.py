# -*- test-case-name: tests.coord.test_zksecure,tests.integration.test_zk_acls -*-
"""Securing znodes after the fact: users' digest identities, a consumer group's ACL, and a whole tree's.

A consumer authenticates to ZooKeeper as C{digest <user>:<password>}, with the
user and password it uses for SASL.  L{record_user_digest} (called by C{twlog
users add}) keeps the user's digest identity in a sensitive node, so that
L{set_group_acl} (called by C{twlog acls add --group}) can give the principals
with Read on a group, and nobody else but the cluster, the right to write the
group's nodes.  L{secure_tree} is C{twlog zookeeper secure}: Kafka's
zookeeper-security-migration, the ACLs of L{twlog.coord.zkauth}'s policy set on
nodes created before the cluster had credentials (or open again, C{unsecure}).
"""

from __future__ import annotations

from collections.abc import Iterable

from twlog.coord.paths import CONSUMERS, group_path
from twlog.coord.zk import IZooKeeper, NodeExistsError, NoNodeError, split_chroot
from twlog.coord.zkauth import (
    DIGESTS,
    WORLD_ALL,
    ZooKeeperCredentials,
    digest_id,
    group_acl,
    group_root,
    node_acl,
    read_credentials_file,
)
from twlog.coord.zkretry import retried_after_connection_loss
from twlog.errors import TwlogError

#: Principals that stand for every client, authenticated or not: their Read on a group opens its nodes to everyone.
EVERYONE = ("User:*", "User:ANONYMOUS")


class ZooKeeperSecurityError(TwlogError):
    """A ZooKeeper ACL that cannot be set as asked."""


def digest_path(user: str) -> str:
    """C{/twlog/zookeeper-digests/<user>}: sensitive, the user's ZooKeeper digest identity."""
    return f"{DIGESTS}/{user}"


def _cluster_id(zk: IZooKeeper, what: str) -> str:
    credentials: ZooKeeperCredentials | None = zk.credentials
    if credentials is None:
        raise ZooKeeperSecurityError(f"{what} needs the cluster's ZooKeeper credentials (--zookeeper-credentials-file)")
    return credentials.digest_id


async def record_user_digest(zk: IZooKeeper, user: str, password: str) -> str:
    """Keep C{user}'s ZooKeeper digest identity (for L{set_group_acl}); return it.  C{zk} has the cluster's
    credentials, so the node is readable by the cluster alone."""
    _cluster_id(zk, "recording a user's ZooKeeper identity")
    identity = digest_id(user, password)
    await zk.set_or_create(digest_path(user), identity.encode())
    return identity


async def forget_user_digest(zk: IZooKeeper, user: str) -> bool:
    """Remove C{user}'s digest identity (C{twlog users delete}); whether there was one."""
    try:
        await zk.delete(digest_path(user))
    except NoNodeError:
        return False
    return True


async def user_digest_ids(zk: IZooKeeper, users: Iterable[str]) -> dict[str, str]:
    """Each user's recorded digest identity; a user without one is refused in one line."""
    found = {}
    for user in users:
        try:
            value, _ = await zk.get(digest_path(user))
        except NoNodeError:
            raise ZooKeeperSecurityError(f"user {user} has no ZooKeeper identity recorded (twlog users add records "
                                         "it with the user's password)") from None
        found[user] = value.decode()
    return found


async def set_group_acl(zk: IZooKeeper, group: str, principals: Iterable[str]) -> int:
    """Make C{/consumers/<group>} and every node under it writable by the cluster's identity (C{zk}'s) and by
    C{principals} (C{User:<name>}: those with Read on the group; C{User:*} or C{User:ANONYMOUS}: everyone),
    readable by everyone.  The group root is created if missing (so no one else can take the name with an ACL
    of their own).  Members create their nodes with the root's ACL.  Returns how many nodes were set.
    """
    cluster = _cluster_id(zk, "setting a group's ZooKeeper ACL")
    principals = list(principals)
    users = sorted({p.partition(":")[2] for p in principals if p.startswith("User:") and p not in EVERYONE})
    if any(not p.startswith("User:") for p in principals):
        raise ZooKeeperSecurityError(f"group {group}: only User: principals have ZooKeeper identities, not "
                                     f"{', '.join(p for p in principals if not p.startswith('User:'))}")
    ids = await user_digest_ids(zk, users)
    acl = group_acl(cluster, [ids[u] for u in users], everyone=any(p in EVERYONE for p in principals))
    root = group_path(group)
    try:
        await zk.create(root, makepath=True)
    except NodeExistsError:
        pass
    return await _set_subtree(zk, root, lambda path: acl)


async def _set_subtree(zk: IZooKeeper, path: str, acl_of) -> int:
    """Set C{acl_of(path)} on C{path}, then on its children, depth first; how many nodes were set (a node gone
    meanwhile is skipped)."""
    try:
        await zk.set_acls(path, acl_of(path))
        children = await zk.children(path)
    except NoNodeError:
        return 0
    count = 1
    for child in children:
        count += await _set_subtree(zk, f"{path.rstrip('/')}/{child}", acl_of)
    return count


def zookeeper_credentials(config) -> ZooKeeperCredentials | None:
    """A broker's ZooKeeper credentials: those of its C{zookeeper_credentials_file} (L{BrokerConfig}), or None."""
    path = config.zookeeper_credentials_file
    return read_credentials_file(path) if path else None


async def start_session(zk: IZooKeeper, clock, timeout_s: float) -> None:
    """Start a broker's session C{zk}; with credentials, make sure C{/consumers} exists with the cluster's ACL, so
    that only the cluster creates groups (L{set_group_acl}), not whoever comes first (again after a dropped
    connection, within C{timeout_s}: L{retried_after_connection_loss})."""
    await zk.start()
    if zk.credentials is not None:
        await retried_after_connection_loss(zk, lambda: zk.ensure_path(CONSUMERS), clock, timeout_s)


async def secure_tree(zk: IZooKeeper, unsecure: bool = False) -> int:
    """Set the policy's ACLs on every node of C{zk}'s tree (its chroot's, or twlog's top-level nodes without a
    chroot; ZooKeeper's own C{/zookeeper} is left alone), with C{zk}'s identity as the cluster's; with
    C{unsecure}, make every node open again.  A group keeps the members its root's ACL lists.  Returns how many
    nodes were set."""
    cluster = _cluster_id(zk, "twlog zookeeper secure")
    groups: dict[str, list] = {}

    def acl_of(path: str) -> list:
        if unsecure:
            return [WORLD_ALL]
        root = group_root(path)
        return groups[root] if root is not None else node_acl(path, cluster)

    async def remember_groups() -> None:
        try:
            names = await zk.children(CONSUMERS)
        except NoNodeError:
            return
        for name in names:
            root = group_path(name)
            try:
                current = await zk.get_acls(root)
            except NoNodeError:
                continue
            members = [a.id for a in current if a.scheme == "digest"]
            # Open to everyone by set_group_acl (User:*) only if it names identities too: a group made before the
            # cluster had credentials is open to everyone by default, and is closed here.
            groups[root] = group_acl(cluster, members, everyone=bool(members) and WORLD_ALL in current)

    await remember_groups()
    count = 0
    if split_chroot(zk.hosts)[1]:  # a chroot: the chroot's own node is twlog's
        await zk.set_acls("/", [WORLD_ALL] if unsecure else node_acl("/", cluster))
        count += 1
    for child in await zk.children("/"):
        if child != "zookeeper":
            count += await _set_subtree(zk, f"/{child}", acl_of)
    return count


__all__ = ["EVERYONE", "ZooKeeperSecurityError", "digest_path", "forget_user_digest", "record_user_digest",
           "start_session", "secure_tree", "set_group_acl", "user_digest_ids", "zookeeper_credentials"]
