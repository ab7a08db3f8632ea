# -*- test-case-name: tests.integration.test_zk_session -*-
"""L{zookeeper_session}: the ZooKeeper session of a C{twlog} command given C{--zookeeper}.

It authenticates with C{--zookeeper-credentials-file} (L{twlog.cli.zk_options}), and a ZooKeeper that cannot be
reached within the timeout is the command's one-line error (L{TwlogError}, exit 1), not a traceback.
"""

from __future__ import annotations

from twlog.cli.zk_options import zookeeper_credentials
from twlog.coord.zk import ZooKeeper, ZooKeeperUnavailable
from twlog.errors import TwlogError

__all__ = ["TIMEOUT_S", "zookeeper_session"]

#: How long a command waits for ZooKeeper.
TIMEOUT_S = 5.0


async def zookeeper_session(reactor, args, timeout_s: float = TIMEOUT_S) -> ZooKeeper:
    """A started session with C{args.zookeeper}, as C{args}' credentials; the caller stops it.

    @raise TwlogError: ZooKeeper did not answer within C{timeout_s}.
    """
    zk = ZooKeeper(args.zookeeper, reactor=reactor, connect_timeout_s=timeout_s,
                   credentials=zookeeper_credentials(args))
    try:
        await zk.start()
    except ZooKeeperUnavailable as e:
        raise TwlogError(str(e)) from None
    return zk
