# -*- test-case-name: tests.integration.test_admin -*-
"""C{twlog bench rebalance}: how long a consumer group takes to rebalance (local ZooKeeper, in-process brokers).

L{rebalance_benchmark} starts brokers in this process, registers them in a
fresh chroot of a ZooKeeper, and times group consumers settling (every one
STABLE, each partition owned by exactly one); L{main_rebalance} runs it
against a ZooKeeper of its own and prints the table.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Sequence
from statistics import median

from twisted.internet.defer import DeferredList
from twisted.internet.task import deferLater

from twlog.bench.common import BenchProgress, BenchTable, Column, react_with_progress
from twlog.broker.service import BrokerService
from twlog.config import BrokerConfig, LogConfig
from twlog.consumer.group import GroupConsumer, GroupState
from twlog.consumer.membership import sorted_children
from twlog.coord import paths
from twlog.coord.registration import BrokerRegistration
from twlog.coord.zk import ZooKeeper
from twlog.coord.zkserver import ZooKeeperServer
from twlog.partition import TopicPartition


async def rebalance_benchmark(reactor, zookeeper: str, consumers: int = 10, partitions: int = 40, *,
                              brokers: int = 4, scenario: str = "start", rebalance_backoff_ms: int = 500,
                              log_dir: str | None = None, timeout_s: float = 120.0) -> tuple[float, int]:
    """Time a rebalance of C{consumers} group consumers over C{partitions} partitions; return (seconds, retries).

    C{brokers} in-process brokers on 127.0.0.1 hold C{partitions // brokers}
    partitions each of one topic, registered in a fresh chroot under
    C{zookeeper}.  Every consumer has its session open before the clock starts.

      - C{scenario="start"}: all consumers join at once; the time runs until
        every one is STABLE and each partition is owned by exactly one of them.
      - C{scenario="join"}: C{consumers - 1} are stable first; the time runs from
        the last one joining until the group is settled again.

    C{retries} is the number of failed rebalance attempts that were retried
    (almost always an owner node still held by another consumer), summed over
    the consumers.
    """
    if scenario not in ("start", "join"):
        raise ValueError("scenario must be 'start' or 'join'")
    if partitions % brokers:
        raise ValueError("partitions must be a multiple of brokers")
    chroot = f"/twlog-bench-{uuid.uuid4().hex[:8]}"
    admin = ZooKeeper(zookeeper, reactor=reactor)
    await admin.start()
    await admin.ensure_path(chroot)
    hosts = zookeeper.rstrip("/") + chroot
    directory = log_dir or tempfile.mkdtemp(prefix="twlog-rebalance-bench-")
    services, sessions, registrations, group = [], [], [], []
    try:
        for broker_id in range(brokers):
            config = BrokerConfig(log=LogConfig(f"{directory}/broker-{broker_id}",
                                                num_partitions=partitions // brokers),
                                  port=0, interface="127.0.0.1", broker_id=broker_id)
            service = BrokerService(config, reactor)
            service.startService()
            services.append(service)
            await service.listening
            session = ZooKeeper(hosts, reactor=reactor)
            await session.start()
            sessions.append(session)
            registration = BrokerRegistration(session, config, service.logs, service.broker.port, clock=reactor)
            await registration.start()
            registrations.append(registration)
            service.logs.get_or_create_log("bench", 0)  # creates (and registers) the topic
        expected = {TopicPartition.on_broker("bench", b, p).name
                    for b in range(brokers) for p in range(partitions // brokers)}
        group = [GroupConsumer(hosts, "bench", reactor=reactor, consumer_id=f"bench-{i:03d}",
                               rebalance_backoff_ms=rebalance_backoff_ms, rebalance_max_retries=20)
                 for i in range(consumers)]
        await DeferredList([c.start() for c in group], fireOnOneErrback=True, consumeErrors=True)
        while len(await sorted_children(admin, f"{chroot}{paths.broker_topic_path('bench')}")) < brokers:
            await deferLater(reactor, 0.01, lambda: None)

        def settled(members) -> bool:
            if any(c.state is not GroupState.STABLE or c.rebalancing for c in members):
                return False
            owned = [name for c in members for name in c.owned().get("bench", {})]
            return len(owned) == len(set(owned)) and set(owned) == expected

        first = group if scenario == "start" else group[:-1]
        if scenario == "join":
            await DeferredList([c.create_message_streams({"bench": 1}) for c in first], consumeErrors=True)
            await _until(reactor, lambda: settled(first), timeout_s)
            first = group[-1:]
        retries_before = sum(c.retries for c in group)
        started = reactor.seconds()
        await DeferredList([c.create_message_streams({"bench": 1}) for c in first], consumeErrors=True)
        await _until(reactor, lambda: settled(group), timeout_s)
        return reactor.seconds() - started, sum(c.retries for c in group) - retries_before
    finally:
        await DeferredList([c.close() for c in group], consumeErrors=True)
        await DeferredList([r.stop() for r in registrations], consumeErrors=True)
        await DeferredList([s.stop() for s in sessions], consumeErrors=True)
        await DeferredList([s.stopService() for s in services if s.running], consumeErrors=True)
        await admin.stop()


async def _until(reactor, predicate, timeout_s: float, step_s: float = 0.002) -> None:
    """Let the reactor run until C{predicate()} holds, checking every C{step_s}; TimeoutError after C{timeout_s}."""
    deadline = reactor.seconds() + timeout_s
    while not predicate():
        if reactor.seconds() > deadline:
            raise TimeoutError(f"not settled within {timeout_s:g} s")
        await deferLater(reactor, step_s, lambda: None)


def main_rebalance(args) -> int:
    """Entry point of C{twlog bench rebalance}: a local ZooKeeper, in-process brokers, N group consumers."""
    root = tempfile.mkdtemp(prefix="twlog-bench-rebalance-")
    print(f"starting ZooKeeper under {root}", file=sys.stderr)
    zookeeper = ZooKeeperServer(os.path.join(root, "zookeeper")).start()
    rows: list[tuple[str, float, int]] = []
    try:
        async def run_all(reactor, progress: BenchProgress) -> None:
            progress.step("rebalancing", total=len(args.scenario) * args.runs, unit="runs")
            for scenario in args.scenario:
                for run in range(args.runs):
                    progress.update(len(rows), f"{SCENARIOS[scenario]}: run {run + 1} of {args.runs}")
                    seconds, retries = await rebalance_benchmark(
                        reactor, zookeeper.connect_string, args.consumers, args.partitions, brokers=args.brokers,
                        scenario=scenario, rebalance_backoff_ms=args.backoff_ms,
                        log_dir=os.path.join(root, f"{scenario}-{run}"),
                    )
                    progress.log(f"  {scenario} run {run + 1}: {seconds:.2f} s, {retries} retries")
                    rows.append((scenario, seconds, retries))
                    progress.update(len(rows))

        status = react_with_progress(run_all)
        if status:
            return status
    finally:
        zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    rebalance_table(rows, args).print()
    return 0


#: The scenarios, as the table names them.
SCENARIOS = {"start": "all join at once", "join": "one joins a stable group"}


def rebalance_table(rows: Sequence[tuple[str, float, int]], args) -> BenchTable:
    """The table of (scenario, seconds, retries) runs: per scenario, the median, least and most time."""
    table = BenchTable(
        f"twlog rebalance benchmark: {args.consumers} consumers, {args.partitions} partitions on {args.brokers} "
        f"brokers, backoff {args.backoff_ms} ms, {args.runs} runs per scenario",
        [Column.label("scenario"), Column("median", "s"), Column("min", "s"), Column("max", "s"),
         Column("retries per run", "count")])
    for scenario in args.scenario:
        times = [s for name, s, _ in rows if name == scenario]
        retries = [r for name, _, r in rows if name == scenario]
        table.add_row(SCENARIOS[scenario], f"{median(times):.2f}", f"{min(times):.2f}", f"{max(times):.2f}",
                      ",".join(map(str, retries)))
    table.note("(retries: failed rebalance attempts that were retried, summed over the consumers, one number a run)")
    return table
