# -*- test-case-name: tests.cli.test_users,tests.integration.test_sasl -*-
"""C{twlog users}, C{twlog users add}, C{twlog users delete}: the SASL users in ZooKeeper (L{twlog.coord.users}).

Kafka's C{kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users}, with the
password from a file or a prompt instead of the command line.  docs/operations.md, "Users".
"""

from __future__ import annotations

from twlog.cli.output import print_json, print_table
from twlog.cli.passwords import prompt_password, read_password_file
from twlog.cli.zk_session import zookeeper_session
from twlog.coord.users import UserStore, user_path
from twlog.coord.zk import ZooKeeper
from twlog.coord.zksecure import forget_user_digest, record_user_digest
from twlog.errors import TwlogError
from twlog.security.credentials import SCRAM_MECHANISMS, make_credential, validate_user_name


async def _store(reactor, args) -> tuple[ZooKeeper, UserStore]:
    zk = await zookeeper_session(reactor, args)  # (a secured ZooKeeper: only the cluster reads them)
    return zk, UserStore(zk)


async def list_users(reactor, args) -> None:
    """Print each user and the mechanisms it has credentials for."""
    zk, store = await _store(reactor, args)
    try:
        users = await store.list()
    finally:
        await zk.stop()
    if args.json:
        print_json([{"user": name, "mechanisms": list(mechanisms) if mechanisms is not None else None}
                    for name, mechanisms in users])
        return
    if not users:
        print("(no users)")
        return
    print_table(["user", "mechanisms"], [(name, ", ".join(mechanisms) if mechanisms is not None else
                                          "(not in Kafka's format)") for name, mechanisms in users])


async def add_user(reactor, args) -> None:
    """Store a user's SCRAM credentials (a new user, or a new password)."""
    user = validate_user_name(args.user)
    mechanisms = tuple(dict.fromkeys(args.mechanism or SCRAM_MECHANISMS))
    password = read_password_file(args.password_file) if args.password_file else prompt_password(user)
    credentials = {mechanism: make_credential(mechanism, password, args.iterations) for mechanism in mechanisms}
    zk, store = await _store(reactor, args)
    try:
        existed = await store.add(user, credentials)
        if zk.credentials is not None:  # a secured ZooKeeper: the user's identity there too (group znode ACLs)
            await record_user_digest(zk, user, password)
    finally:
        await zk.stop()
    print(f"{'updated' if existed else 'added'} user {user} ({', '.join(mechanisms)}, {args.iterations} iterations) "
          f"at {user_path(user)}")


async def delete_user(reactor, args) -> None:
    """Delete a user's credentials."""
    validate_user_name(args.user)
    zk, store = await _store(reactor, args)
    try:
        existed = await store.delete(args.user)
        if zk.credentials is not None:
            await forget_user_digest(zk, args.user)
    finally:
        await zk.stop()
    if not existed:
        raise TwlogError(f"no user {args.user} in ZooKeeper ({user_path(args.user)}): nothing deleted")
    print(f"deleted user {args.user}: its next authentication fails")
