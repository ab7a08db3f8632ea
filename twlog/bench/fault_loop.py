# -*- test-case-name: tests.integration.test_fault_loop -*-
"""C{twlog bench faults}: a replicated topic under C{ack=all} load while brokers are killed, paused, restarted
and cut off from ZooKeeper, then the history checked as Jepsen's Kafka checker does.

A L{FaultCluster} runs three brokers; a topic of two partitions, replication factor 3 and
C{min.insync.replicas} 2, is written by one L{Producer} per partition with C{ack="all"} (L{WINDOW} sends
outstanding, unique values), and each send's outcome is recorded in a L{History}: acknowledged with its offset, or
unknown (any error: the producer's retries may have stored it).  Each cycle runs one fault case
(L{CASES}) against the current leader of partition 0, then heals everything and waits until every ISR is
full again.  At the end the load stops, each partition is read to its end from its leader, every replica's
log is read from disk, and L{twlog.bench.history_checks.check} looks for lost writes, two values at one
offset, reads that go backwards, skip or disappear, reordered partitions, and replicas whose bytes differ
below the high watermark.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import attrs
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import deferLater

from twlog.bench.common import BenchProgress, BenchTable, Column, react_with_progress
from twlog.bench.fault_cluster import FaultCluster
from twlog.bench.faultproxy import DROP, FROM_TARGET, HOLD, TO_TARGET
from twlog.bench.history import History
from twlog.bench.history_checks import CheckResult, check
from twlog.bench.replica_logs import compare_segment_files
from twlog.client.connection import BrokerConnection
from twlog.client.options import ClientOptions
from twlog.client.topics import create_replicated
from twlog.errors import TwlogError
from twlog.producer import Producer
from twlog.protocol.codec import LATEST, FetchRequest, OffsetsRequest
from twlog.storage.fetched import iter_messages

__all__ = ["CASES", "FaultRun", "fault_table", "main_faults", "run_faults"]

TOPIC = "faults"
PARTITIONS = (0, 1)
#: Sends each partition's writer keeps outstanding: those that wait while one request is out go together in the
#: next (the producer's L{twlog.producer.failover.PartitionQueue}), and the checker sees that their order holds.
WINDOW = 8

Case = Callable[["FaultRun"], Awaitable[None]]


@attrs.define
class FaultRun:
    """One run's cluster, history and load."""

    cluster: FaultCluster
    history: History
    reactor: object
    rng: random.Random
    running: bool = True
    cycles: list[str] = attrs.field(factory=list)

    async def pause(self, seconds: float) -> None:
        await deferLater(self.reactor, seconds, lambda: None)

    async def leader(self, partition: int = 0) -> int:
        state = await self.cluster.state(TOPIC, partition)
        if state is None or not state.online:
            raise RuntimeError(f"{TOPIC}-{partition} has no leader")
        return state.leader

    async def follower(self, partition: int = 0) -> int:
        leader = await self.leader(partition)
        return self.rng.choice([b for b in self.cluster.ids if b != leader])

    def expire_s(self) -> float:
        """Long enough for a cut-off broker's session to expire, and the controller to act."""
        return self.cluster.session_timeout_s + 2.0


# -- the fault cases (issue 22, "Integration") ----------------------------------------------


async def kill_leader(run: FaultRun) -> None:
    """The leader killed under ack=all load (SIGKILL), restarted a little later."""
    leader = await run.leader()
    run.cluster.kill(leader)
    await run.pause(run.expire_s())
    await run.cluster.restart(leader)


async def restart_follower(run: FaultRun) -> None:
    """A follower killed and restarted at once."""
    follower = await run.follower()
    run.cluster.kill(follower)
    await run.cluster.wait_exit(follower)
    await run.cluster.restart(follower)


async def slow_follower(run: FaultRun) -> None:
    """A follower paused (SIGSTOP) past the lag time: it leaves the ISR; resumed, it catches up and rejoins."""
    follower = await run.follower()
    run.cluster.kill(follower, signal.SIGSTOP)
    await run.pause(run.cluster.lag_time_ms / 1000 + 1.0)
    run.cluster.kill(follower, signal.SIGCONT)


async def zombie_leader(run: FaultRun) -> None:
    """The leader cut off from ZooKeeper (both ways) until its session expires: it must stop acknowledging;
    healed, it finds itself a follower and truncates what it alone holds."""
    leader = await run.leader()
    run.cluster.cut_zookeeper(leader)
    await run.pause(run.expire_s())
    run.cluster.heal_zookeeper(leader)


async def leader_cut_from_followers(run: FaultRun) -> None:
    """Jepsen 2013: the leader cut off from its followers (both ways) but not from ZooKeeper, past the lag time:
    it shrinks the ISR to itself and must refuse ack=all (min.insync.replicas 2); then cut off from ZooKeeper
    too, until its session expires: no ISR member is left live, so the partition goes offline rather than be led
    by a follower that lacks what was acknowledged; healed, it leads again and the followers catch up."""
    leader = await run.leader()
    run.cluster.cut_peers(leader)
    await run.pause(run.cluster.lag_time_ms / 1000 + 2.0)
    run.cluster.cut_zookeeper(leader)
    await run.pause(run.expire_s())
    run.cluster.heal_zookeeper(leader)
    run.cluster.heal_peers(leader)


async def leader_answers_held(run: FaultRun) -> None:
    """One way: the leader's answers to its followers held (they reach it, their fetches are never answered)
    past the lag time: the ISR shrinks to the leader, ack=all is refused; healed, the held answers arrive in order
    and the followers rejoin."""
    leader = await run.leader()
    run.cluster.cut_peers(leader, FROM_TARGET, HOLD)
    await run.pause(run.cluster.lag_time_ms / 1000 + 2.0)
    run.cluster.heal_peers(leader)


async def follower_requests_dropped(run: FaultRun) -> None:
    """One way: the followers' requests to the leader dropped (each connection aborted as it sends), past the lag
    time, while the leader's answers could still flow; healed, the followers reconnect and rejoin."""
    leader = await run.leader()
    run.cluster.cut_peers(leader, TO_TARGET, DROP)
    await run.pause(run.cluster.lag_time_ms / 1000 + 2.0)
    run.cluster.heal_peers(leader)


async def follower_restart_then_leader_dies(run: FaultRun) -> None:
    """KIP-101 case 1: a follower restarts, and the leader dies at once."""
    leader = await run.leader()
    follower = await run.follower()
    run.cluster.kill(follower)
    await run.cluster.wait_exit(follower)
    await run.cluster.restart(follower)
    run.cluster.kill(leader)
    await run.pause(run.expire_s())
    await run.cluster.restart(leader)


async def two_down_restarted_in_reverse(run: FaultRun) -> None:
    """KIP-101 case 2: the leader and a follower killed, restarted in the opposite order."""
    leader = await run.leader()
    follower = await run.follower()
    run.cluster.kill(leader)
    await run.pause(0.2)
    run.cluster.kill(follower)
    await run.pause(run.expire_s())
    await run.cluster.restart(follower)
    await run.cluster.restart(leader)


async def controller_dies_in_election(run: FaultRun) -> None:
    """The leader killed, then the controller killed while it moves the leaderships."""
    leader = await run.leader()
    run.cluster.kill(leader)
    await run.pause(run.cluster.session_timeout_s)
    controller = await run.cluster.controller()
    if controller is not None and controller != leader and run.cluster.running(controller):
        run.cluster.kill(controller)
        await run.pause(run.expire_s())
        await run.cluster.restart(controller)
    await run.pause(1.0)
    await run.cluster.restart(leader)


async def all_down(run: FaultRun) -> None:
    """Every broker killed, then restarted (the last leader last)."""
    leader = await run.leader()
    for b in run.cluster.ids:
        run.cluster.kill(b)
    await run.pause(run.expire_s())
    for b in sorted(run.cluster.ids, key=lambda b: b == leader):
        await run.cluster.restart(b)


async def sigterm_leader(run: FaultRun) -> None:
    """The leader stopped by SIGTERM (controlled shutdown), then started again."""
    leader = await run.leader()
    await run.cluster.stop(leader)
    await run.cluster.restart(leader)


CASES: dict[str, Case] = {
    "kill-leader": kill_leader,
    "restart-follower": restart_follower,
    "slow-follower": slow_follower,
    "zombie-leader": zombie_leader,
    "kip101-restart-then-leader-dies": follower_restart_then_leader_dies,
    "kip101-two-down-reverse-order": two_down_restarted_in_reverse,
    "controller-dies-in-election": controller_dies_in_election,
    "all-down": all_down,
    "sigterm-leader": sigterm_leader,
    "leader-cut-from-followers": leader_cut_from_followers,
    "leader-answers-held": leader_answers_held,
    "follower-requests-dropped": follower_requests_dropped,
}


# -- the load ----------------------------------------------------------------------------


async def _write(run: FaultRun, partition: int) -> None:
    """Send unique values to C{partition} with C{ack="all"}, L{WINDOW} outstanding, each outcome recorded."""
    options = ClientOptions.build(timeout_s=15)
    producer = Producer(zookeeper=run.cluster.zookeeper, reactor=run.reactor, ack="all", retries=3,
                        leader_wait_s=60.0, ack_timeout_ms=10_000, options=options,
                        connection_factory=run.cluster.client_connections(options))
    name = f"p{partition}"

    async def one(send) -> bool:
        try:
            result = await producer.send(TOPIC, send.value, partition_index=partition)
        except (TwlogError, OSError) as e:
            run.history.unknown(send, f"{type(e).__name__}: {e}")
            return False
        run.history.ok(send, result.offset)
        return True

    pending: deque[Deferred] = deque()
    seq = 0
    try:
        while run.running:
            while len(pending) < WINDOW:
                pending.append(Deferred.fromCoroutine(one(run.history.invoke(name, TOPIC, partition, f"{name}-{seq}"))))
                seq += 1
            if not await pending.popleft():
                await run.pause(0.1)
        while pending:
            await pending.popleft()
    finally:
        await producer.close()


async def _read_to_end(run: FaultRun, partition: int) -> tuple[int, int]:
    """Read the partition from its leader's start to its visible end, recording each message; (leader, end)."""
    leader = await run.leader(partition)
    connection = BrokerConnection(*run.cluster.address(leader), reactor=run.reactor, timeout_s=15)
    try:
        (end,) = (await connection.request(OffsetsRequest(TOPIC, partition, LATEST, 1))).offsets
        offset = 0
        reader = f"final-{partition}"
        while offset < end:
            response = await connection.request(FetchRequest(TOPIC, partition, offset, 1 << 20))
            batch = list(iter_messages(response.messages, offset))
            if not batch:
                break
            for message in batch:
                run.history.read(reader, TOPIC, partition, message.offset, message.payload)
            offset = batch[-1].next_offset
        run.history.scanned(reader, TOPIC, partition, 0, offset)
        return leader, end
    finally:
        await connection.close()


async def run_faults(root: str, reactor, cases: Sequence[str], cycles: int, *, seed: int = 0,
                     session_timeout_s: float = 4.0, settle_s: float = 1.0,
                     progress: Callable[[int, str], object] = lambda i, case: None) -> tuple[FaultRun, CheckResult]:
    """C{cycles} fault cycles, the cases taken in turn from C{cases}; the run and its check."""
    os.makedirs(root, exist_ok=True)
    cluster = FaultCluster(os.path.join(root, "cluster"), reactor, session_timeout_s=session_timeout_s)
    history = History(os.path.join(root, "history.jsonl"))
    run = FaultRun(cluster, history, reactor, random.Random(seed))
    await cluster.start()
    writers: list[Deferred] = []
    try:
        await create_replicated(cluster.zk, TOPIC, len(PARTITIONS), len(cluster.ids), clock=reactor,
                                min_insync_replicas=cluster.min_isr, wait_s=30)
        await cluster.wait_isr(TOPIC, PARTITIONS)
        writers = [Deferred.fromCoroutine(_write(run, p)) for p in PARTITIONS]
        for i in range(cycles):
            case = cases[i % len(cases)]
            progress(i, case)
            cluster.event(f"cycle {i + 1}: {case}")
            await run.pause(settle_s)
            await CASES[case](run)
            run.cycles.append(case)
            for b in cluster.ids:
                if cluster.running(b) and b in cluster.paused:
                    cluster.kill(b, signal.SIGCONT)
                cluster.heal_zookeeper(b)
                cluster.heal_peers(b)
            for b in cluster.ids:
                if not cluster.running(b):
                    cluster.event(f"broker {b}: found not running (exit status {cluster.processes[b].returncode})")
                    await cluster.restart(b)
            await cluster.wait_isr(TOPIC, PARTITIONS, timeout_s=90)
            cluster.event("every ISR full")
        await run.pause(settle_s)
        run.running = False
        await DeferredList(writers, consumeErrors=False)
        await cluster.wait_isr(TOPIC, PARTITIONS, timeout_s=90)
        comparisons = []
        log_dirs = {b: cluster.log_dir(b) for b in cluster.ids}
        for p in PARTITIONS:
            leader, end = await _read_to_end(run, p)
            history.final(TOPIC, p, leader, end)
            for _ in range(50):  # (the followers fetch the last sets within their next fetch)
                comparison = compare_segment_files(log_dirs, TOPIC, p, end)
                if comparison.same_bytes:
                    break
                await run.pause(0.2)
            comparisons.append(comparison)
        history.record_replicas(log_dirs, TOPIC)
        return run, check(history, comparisons)
    finally:
        run.running = False
        history.close()
        await cluster.close()


def fault_table(run: FaultRun, result: CheckResult, seconds: float) -> BenchTable:
    """Per case: the cycles run; then what the history holds and the checker's verdict."""
    table = BenchTable(
        f"twlog faults: 3 brokers, topic {TOPIC!r} (2 partitions, replication factor 3, min.insync.replicas 2), "
        f"ack=all, session timeout {run.cluster.session_timeout_s:g} s; {len(run.cycles)} cycles in {seconds:.0f} s",
        [Column.label("fault case"), Column("cycles", "count")])
    for case in CASES:
        count = run.cycles.count(case)
        if count:
            table.add_row(case, count)
    for name, value in result.counts.items():
        table.note(f"{name}: {value:,}")
    kinds = result.kinds()
    table.note("verdict: " + ("no anomaly" if result.valid else
                              "ANOMALIES: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))))
    return table


def main_faults(args) -> int:
    """Entry point of C{twlog bench faults}."""
    root = args.dir or tempfile.mkdtemp(prefix="twlog-faults-")
    cases = args.cases
    outcome: list = []
    started = time.monotonic()

    async def go(reactor, progress: BenchProgress) -> None:
        progress.step("fault cycles", total=args.cycles, unit="cycles")

        def cycle(i: int, case: str) -> None:
            progress.update(i, f"cycle {i + 1} of {args.cycles}: {case}")
            progress.log(f"cycle {i + 1} of {args.cycles}: {case}")

        outcome.extend(await run_faults(root, reactor, cases, args.cycles, seed=args.seed,
                                        session_timeout_s=args.session_timeout_s, progress=cycle))
        progress.update(args.cycles)

    print(f"fault runs under {root}; the history is {root}/history.jsonl", file=sys.stderr)
    status = react_with_progress(go)
    if status or not outcome:
        print(f"twlog bench faults: the run failed; see {root} (brokers' output in cluster/broker-N.out)",
              file=sys.stderr)
        return status or 1
    run, result = outcome
    fault_table(run, result, time.monotonic() - started).print()
    if not result.valid:
        print(result.report(), file=sys.stderr)
        print(f"twlog bench faults: anomalies found; the history is kept in {root}", file=sys.stderr)
        return 1
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0
