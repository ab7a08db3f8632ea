# -*- test-case-name: tests.integration.test_zk_acls -*-
"""C{twlog zookeeper secure}: give a cluster's existing znodes the ACLs of a secured cluster (docs/security.md).

Kafka's zookeeper-security-migration: the brokers, once they have the
cluster's credentials, create new znodes with ACLs; the nodes made before keep
theirs (open) until this command sets, recursively, the ACL the policy gives
each path (L{twlog.coord.zkauth}), with the credentials of
C{--zookeeper-credentials-file} as the cluster's identity.  C{--unsecure}
opens every node again.
"""

from __future__ import annotations

from twlog.cli.common import UsageError
from twlog.cli.zk_session import zookeeper_session
from twlog.coord.zksecure import secure_tree


async def secure(reactor, args) -> None:
    if not args.zookeeper_credentials_file:
        raise UsageError("twlog zookeeper secure needs the cluster's --zookeeper-credentials-file (the identity "
                         "that will own the znodes)")
    zk = await zookeeper_session(reactor, args)
    try:
        count = await secure_tree(zk, unsecure=args.unsecure)
    finally:
        await zk.stop()
    if args.unsecure:
        print(f"opened {count} znodes at {args.zookeeper}: anyone may read and write them")
    else:
        print(f"secured {count} znodes at {args.zookeeper}: only {zk.credentials.user} (the cluster) may write them, "
              "and a consumer group's members once `twlog acls add --group` names them; everyone may read them, "
              "except the credentials under /config/users and /twlog/zookeeper-digests")
