# -*- test-case-name: tests.bench.test_replication,tests.integration.test_bench_replication -*-
"""C{twlog bench replication} (issue 22): what replication costs and how fast it recovers, in one run.

It starts a local ZooKeeper and C{--brokers} C{twlog broker} processes (L{ReplicationCluster}; each
broker with C{--zookeeper-session-timeout-s}), then measures, C{--rounds} times each, in turns
(L{twlog.bench.replication_runs}):

1. produce throughput of a real L{twlog.producer.Producer} in batches of C{--batch}, at most C{--waiting}
   of them unacknowledged per partition (by default what the async Producer's queue holds), for each replication
   factor (1 to 3) with C{ack} appended and all, each on a fresh topic of C{--partitions} partitions; the
   table gives medians and ratios to replication factor 1 with C{ack=appended}, and whether replication
   factor 3 with C{ack=all} reaches issue 22's 40% of it;
2. failover: a leader of a replication-factor-3 partition is sent kill -9, then SIGTERM, under C{ack=all}
   load, and the time to the first acknowledgement by the new leader is set against issue 22's targets
   (the session timeout plus 2 s; 1 s and no producer error);
3. a follower's catch-up speed after C{--catch-up-mb} MB were produced while it was stopped.

C{--parts} picks some of the three.

Everything runs on 127.0.0.1 under a temporary directory (removed afterwards unless C{--dir} is given);
every broker and the ZooKeeper server are stopped by process id at the end, and die with the bench.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from statistics import median

from twlog.bench.common import BenchProgress, BenchTable, Column, react_with_progress
from twlog.bench.replication_cluster import ClusterError, ReplicationCluster
from twlog.bench.replication_runs import (
    CatchUpRun,
    FailoverRun,
    ThroughputRun,
    measure_catch_up,
    measure_failover,
    measure_throughput,
)
from twlog.errors import TwlogError

#: Issue 22's targets.
THROUGHPUT_TARGET = 0.40
#: The async Producer's default queue bound (C{max_queued_messages}): the default window is what it holds.
DEFAULT_QUEUED_MESSAGES = 10_000
KILL_MARGIN_S = 2.0
SIGTERM_TARGET_S = 1.0
ACKS = ("appended", "all")
HOW = ("kill -9", "SIGTERM")


def _pct(value: float) -> str:
    return f"{100 * value:.0f}"


def throughput_ratio(runs: Sequence[ThroughputRun], factor: int, ack: str) -> float:
    """The median msg/s of C{(factor, ack)} over that of replication factor 1 with C{ack=appended}."""
    return _median_rate(runs, factor, ack) / _median_rate(runs, 1, "appended")


def _median_rate(runs: Sequence[ThroughputRun], factor: int, ack: str) -> float:
    return median(r.msg_s for r in runs if (r.replication_factor, r.ack) == (factor, ack))


def throughput_table(runs: Sequence[ThroughputRun], batch: int, size: int, partitions: int, waiting: int = 4
                     ) -> BenchTable:
    """One row per replication factor and ack: medians over the rounds, and the ratios."""
    table = BenchTable(f"replication: produce throughput, batch {batch}, {size}-byte messages, {partitions} "
                       f"partition{'s' if partitions != 1 else ''} (medians over the rounds)", [
        Column.label("replication factor"), Column.label("ack"), Column("rounds", "runs"),
        Column("throughput", "msg/s"), Column("throughput", "MB/s"), Column("slowest round", "msg/s"),
        Column("of RF 1 ack=appended", "%"), Column("of ack=appended at this RF", "%")])
    factors = sorted({r.replication_factor for r in runs})
    for factor in factors:
        for ack in ACKS:
            mine = [r for r in runs if (r.replication_factor, r.ack) == (factor, ack)]
            if not mine:
                continue
            table.add_row(str(factor), ack, str(len(mine)), f"{_median_rate(runs, factor, ack):,.0f}",
                          f"{median(r.mb_s for r in mine):.2f}", f"{min(r.msg_s for r in mine):,.0f}",
                          _pct(throughput_ratio(runs, factor, ack)),
                          _pct(_median_rate(runs, factor, ack) / _median_rate(runs, factor, "appended")))
    if 3 in factors:
        ratio = throughput_ratio(runs, 3, "all")
        verdict = "meets" if ratio >= THROUGHPUT_TARGET else "does NOT meet"
        table.note(f"RF 3 with ack=all reaches {_pct(ratio)}% of RF 1 with ack=appended: {verdict} issue 22's "
                   f"target of {_pct(THROUGHPUT_TARGET)}%.")
    table.note(f"(one Producer with ZooKeeper, one send per batch, at most {waiting} per partition waiting; a "
               "replicated partition has one request out at a time, carrying the batches that waited for it; each "
               "run on a fresh topic, min.insync.replicas min(2, RF); "
               f"{os.cpu_count()} CPUs shared by every broker, ZooKeeper and the producer)")
    return table


def failover_table(runs: Sequence[FailoverRun], session_timeout_s: float) -> BenchTable:
    """One row per way of stopping the leader: medians and the worst round, against issue 22's targets."""
    table = BenchTable(f"replication: failover of a leader under ack=all load (RF 3, min.insync.replicas 2, brokers' "
                       f"ZooKeeper session {session_timeout_s:g} s)", [
        Column.label("leader stopped by"), Column("rounds", "runs"), Column("to first ack=all success", "s"),
        Column("worst round", "s"), Column("new leader in ZooKeeper", "s"), Column("longest pause", "s"),
        Column("producer errors", "sends"), Column("target", "s"), Column.label("verdict"),
        Column("leader was controller", "runs")])
    for how in HOW:
        mine = [r for r in runs if r.how == how]
        if not mine:
            continue
        target = session_timeout_s + KILL_MARGIN_S if how == "kill -9" else SIGTERM_TARGET_S
        worst = max(r.seconds for r in mine)
        errors = sum(r.errors for r in mine)
        met = worst <= target and (how == "kill -9" or errors == 0)
        table.add_row(how, str(len(mine)), f"{median(r.seconds for r in mine):.3f}", f"{worst:.3f}",
                      f"{median(r.elected_s for r in mine):.3f}", f"{median(r.longest_pause_s for r in mine):.3f}",
                      str(errors), f"{target:g}", "meets" if met else "does NOT meet",
                      str(sum(r.leader_was_controller for r in mine)))
        first_error = next((r.first_error for r in mine if r.first_error), None)
        if first_error:
            table.note(f"{how}: the first producer error: {first_error}")
    table.note("(a Producer with default retries sends ack=all batches one after another; the time runs from the "
               "signal to the first batch acknowledged by the new leader, at or past the offset its leader epoch "
               "began at; targets: kill -9 within the session timeout + 2 s; SIGTERM within 1 s, no producer error; "
               "a verdict holds for the worst round)")
    return table


def catch_up_table(runs: Sequence[CatchUpRun], catch_up_mb: float) -> BenchTable:
    table = BenchTable(f"replication: a follower catching up {catch_up_mb:g} MB (medians over the rounds)", [
        Column.label("follower"), Column("rounds", "runs"), Column("behind", "MB"), Column("catch-up speed", "MB/s"),
        Column("slowest round", "MB/s"), Column("start to caught up", "s"), Column("start to back in ISR", "s")])
    table.add_row("restarted after SIGTERM", str(len(runs)), f"{median(r.behind for r in runs) / 1e6:.1f}",
                  f"{median(r.mb_s for r in runs):.1f}", f"{min(r.mb_s for r in runs):.1f}",
                  f"{median(r.from_start_s for r in runs):.3f}", f"{median(r.rejoin_s for r in runs):.3f}")
    table.note("(speed: the bytes it lacked over the time from its first fetched byte to its end reaching the "
               "leader's, read from its segment files; the start counts from its process's start: Python, ZooKeeper "
               "registration and the controller's word come first; it left the ISR before it was started again)")
    return table


async def run_bench(reactor, progress: BenchProgress, args, root: str) -> list[BenchTable]:
    """Every measurement against one cluster; the three tables."""
    cluster = ReplicationCluster(reactor, os.path.join(root, "cluster"), args.brokers, args.session_timeout_s)
    progress.step(f"starting ZooKeeper and {args.brokers} broker processes")
    load = os.getloadavg()[0]
    try:
        await cluster.start()
        throughput: list[ThroughputRun] = []
        factors = [f for f in (1, 2, 3) if f <= args.brokers]
        parts = getattr(args, "parts", ("throughput", "failover", "catch-up"))
        args.waiting = getattr(args, "waiting", None) or max(1, DEFAULT_QUEUED_MESSAGES // args.batch)
        for round_ in range(1, args.rounds + 1 if "throughput" in parts else 1):
            for factor in factors:
                for ack in ACKS:
                    progress.step(f"round {round_}/{args.rounds}: produce, RF {factor}, ack={ack}",
                                  total=args.messages, unit="msg")
                    done = [0]

                    def advance(n: int, done=done) -> None:
                        done[0] += n
                        progress.update(done[0])

                    throughput.append(await measure_throughput(
                        cluster, f"bench-r{round_}-rf{factor}-{ack}", factor, ack, args.messages, args.batch,
                        args.size, args.partitions, args.waiting, advance))
        failovers: list[FailoverRun] = []
        if "failover" in parts:
            await cluster.create_topic("bench-failover", 1, 3, 2)
        for round_ in range(1, args.rounds + 1 if "failover" in parts else 1):
            for how in HOW:
                progress.step(f"round {round_}/{args.rounds}: failover, the leader stopped by {how}")
                failovers.append(await measure_failover(cluster, "bench-failover", how, args.batch, args.size))
                progress.log(f"  {how}: broker {failovers[-1].leader} -> {failovers[-1].new_leader}, first ack=all "
                             f"success after {failovers[-1].seconds:.2f} s")
        catch_ups: list[CatchUpRun] = []
        if "catch-up" in parts:
            await cluster.create_topic("bench-catch-up", 1, 3, 1)
        for round_ in range(1, args.rounds + 1 if "catch-up" in parts else 1):
            progress.step(f"round {round_}/{args.rounds}: a follower stopped, {args.catch_up_mb:g} MB produced, "
                          "started again")
            catch_ups.append(await measure_catch_up(cluster, "bench-catch-up", args.catch_up_mb, args.batch, args.size))
    finally:
        progress.step("stopping the brokers and ZooKeeper")
        await cluster.stop()
    tables = []
    if throughput:
        tables.append(throughput_table(throughput, args.batch, args.size, args.partitions, args.waiting))
    if failovers:
        tables.append(failover_table(failovers, args.session_timeout_s))
    if catch_ups:
        tables.append(catch_up_table(catch_ups, args.catch_up_mb))
    tables[-1].note(f"(the machine's 1-minute load average: {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the "
                    "end; above the CPU count, other work shared the CPUs)")
    return tables


def main_replication(args) -> int:
    """Entry point of C{twlog bench replication}."""
    if args.brokers < 3:
        print("twlog bench replication: --brokers must be at least 3 (failover runs with replication factor 3)",
              file=sys.stderr)
        return 2
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-replication-")
    os.makedirs(root, exist_ok=True)
    tables: list[BenchTable] = []
    problems: list[str] = []

    async def run(reactor, progress: BenchProgress) -> None:
        try:
            tables.extend(await run_bench(reactor, progress, args, root))
        except (ClusterError, TwlogError) as e:
            problems.append(str(e))

    try:
        status = react_with_progress(run)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if problems:
        print(f"twlog bench replication: {problems[0]}", file=sys.stderr)
        return 1
    if status or not tables:
        return status or 1
    for table in tables:
        table.print()
        print()
    return 0
