# -*- test-case-name: tests.integration.test_local -*-
"""C{twlog local}: a whole cluster on this machine, for development: ZooKeeper and N brokers on loopback.

Everything lives under one directory (C{--data}): C{zookeeper/} for the
ZooKeeper server (its own process, stopped by pid) and C{broker-<id>/} for each
broker's partitions.  The brokers run in this process, one Twisted service
each, registered in ZooKeeper like any other broker.  Ctrl-C (or SIGTERM)
stops the brokers cleanly (flush, clean-shutdown marker, deregistration),
then ZooKeeper.
"""

from __future__ import annotations

import os
import socket
import sys

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)

from twlog.broker.service import BrokerService
from twlog.config import BrokerConfig, LogConfig
from twlog.coord.zkserver import ZooKeeperServer, free_port


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def broker_ports(first: int, count: int) -> list[int]:
    """C{count} ports from C{first} upward that are free now (skipping taken ones)."""
    ports, port = [], first
    while len(ports) < count:
        if port > 65535:
            raise OSError(f"no {count} free ports from {first}")
        if _port_free(port):
            ports.append(port)
        port += 1
    return ports


def usage_text(zookeeper: str, ports: list[int], data: str) -> str:
    """What to tell the user once the cluster is up."""
    brokers = ",".join(f"localhost:{p}" for p in ports)
    return "\n".join([
        f"twlog local: ZooKeeper at {zookeeper}, {len(ports)} broker(s) at {brokers}; data under {data}",
        "",
        "produce:  seq 1 100 | twlog produce --zookeeper " + zookeeper + " --topic clicks",
        "consume:  twlog consume --zookeeper " + zookeeper + " --group demo --topic clicks",
        "inspect:  twlog topics --broker " + brokers + "   |   twlog groups --zookeeper " + zookeeper,
        "",
        "Ctrl-C stops everything cleanly.",
    ])


async def run_local(reactor, args) -> None:
    """Start ZooKeeper and the brokers, print how to use them, and run until the reactor stops."""
    data = os.path.abspath(args.data)
    os.makedirs(data, exist_ok=True)
    # The brokers' log lines (topics created, recovery, bad clients) go to stderr.
    globalLogBeginner.beginLoggingTo(
        [FilteringLogObserver(textFileLogObserver(sys.stderr), [LogLevelFilterPredicate(LogLevel.info)])],
        redirectStandardIO=False,
    )
    print(f"starting ZooKeeper under {os.path.join(data, 'zookeeper')} ...", file=sys.stderr)
    zk_port = args.zookeeper_port if _port_free(args.zookeeper_port) else free_port()
    zookeeper = ZooKeeperServer(os.path.join(data, "zookeeper"), port=zk_port)
    zookeeper.start()
    top = MultiService()
    services = []
    try:
        for broker_id, port in enumerate(broker_ports(args.port, args.brokers)):
            config = BrokerConfig(
                log=LogConfig(os.path.join(data, f"broker-{broker_id}"), num_partitions=args.num_partitions,
                              flush_interval_ms=args.flush_interval_ms),
                broker_id=broker_id,
                port=port,
                zookeeper=zookeeper.connect_string,
            )
            service = BrokerService(config, reactor)
            service.setServiceParent(top)
            services.append(service)
        top.startService()
        await DeferredList([s.listening for s in services], fireOnOneErrback=True, consumeErrors=True)
    except BaseException:
        await top.stopService()
        zookeeper.stop()
        raise

    stopped: Deferred = Deferred()

    def shutdown() -> Deferred:
        d = top.stopService()

        def zookeeper_down(_: object) -> None:
            zookeeper.stop()
            print("twlog local: stopped", file=sys.stderr)
            if not stopped.called:
                stopped.callback(None)

        return d.addBoth(zookeeper_down)

    reactor.addSystemEventTrigger("before", "shutdown", shutdown)
    print(usage_text(zookeeper.connect_string, [s.broker.port for s in services], data))
    sys.stdout.flush()
    await stopped
