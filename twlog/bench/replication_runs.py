# -*- test-case-name: tests.integration.test_bench_replication -*-
"""The measurements of C{twlog bench replication}, each against a running L{ReplicationCluster}.

- L{measure_throughput}: a fresh replicated topic, one real L{Producer} (ZooKeeper, C{ack} appended or
  all), batches of C{batch} messages sent with a bounded window, timed from the first send to the last
  acknowledgement (the topic's leaders are learnt, and one batch per partition sent, before the clock starts).
- L{measure_failover}: a producer with default retries sends C{ack=all} batches one after another to a
  partition of replication factor 3; its leader is sent SIGKILL (reaped before the clock reads) or SIGTERM.
  The failover time runs from the signal to the first acknowledgement by the new leader: the first batch
  whose offset is at or past where the new leader's epoch began (its C{leader-epoch-checkpoint}), so an
  acknowledgement the old leader sent while stopping does not count.  Beside it: when ZooKeeper named the
  new leader, the longest pause between two acknowledgements, and the sends that failed.  The broker is
  started again and the next run waits until it is back in the ISR.
- L{measure_catch_up}: a follower is stopped (SIGTERM), C{catch_up_mb} MB are produced (C{ack=appended}),
  the follower is started again; its replica's end on disk is watched until it reaches the leader's end,
  and ZooKeeper until it is back in the ISR.  The speed is the bytes it lacked over the time from its first
  fetched byte to the last.

Every loop is bounded in count and time (L{ClusterError} saying what did not happen).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import attrs
from twisted.internet.defer import Deferred, DeferredSemaphore, gatherResults
from twisted.internet.task import deferLater

from twlog.bench.common import MB, payloads
from twlog.bench.replication_cluster import POLL_S, ClusterError, ReplicationCluster
from twlog.producer import Producer
from twlog.storage.directory import partition_directory
from twlog.storage.epochs import LEADER_EPOCH_CHECKPOINT, parse_epochs

#: Distinct message sets a producer cycles through (so nothing dedupes by accident).
DISTINCT_SETS = 20
#: Traffic before the leader is signalled, and after the failover (s).
BEFORE_S = 1.0
AFTER_S = 0.5
#: How long, past the session timeout, a failover may take before the run stops.
FAILOVER_MARGIN_S = 30.0
#: How long a stopped follower may take to leave the ISR, past the brokers' default --replica-lag-time-ms.
ISR_LEAVE_S = 10.0 + 20.0


@attrs.frozen
class ThroughputRun:
    replication_factor: int
    ack: str
    messages: int
    size: int
    seconds: float

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_s(self) -> float:
        return self.messages * self.size / self.seconds / MB


@attrs.frozen
class FailoverRun:
    #: C{"kill -9"} or C{"SIGTERM"}.
    how: str
    leader: int
    new_leader: int
    leader_was_controller: bool
    #: From the signal to the first acknowledgement by the new leader.
    seconds: float
    #: From the signal to ZooKeeper's state naming the new leader.
    elected_s: float
    #: The longest time between two acknowledgements around the signal.
    longest_pause_s: float
    #: Sends the producer failed (default retries).
    errors: int
    first_error: str | None


@attrs.frozen
class CatchUpRun:
    #: Bytes the follower lacked when it started again.
    behind: int
    #: From its first fetched byte to its end reaching the leader's.
    seconds: float
    #: From its process's start to its end reaching the leader's, and to its return to the ISR.
    from_start_s: float
    rejoin_s: float

    @property
    def mb_s(self) -> float:
        return self.behind / self.seconds / MB


def _sets(batch: int, size: int) -> list[list[bytes]]:
    data = payloads(DISTINCT_SETS * batch, size)
    return [data[i * batch:(i + 1) * batch] for i in range(DISTINCT_SETS)]


async def _sleep(reactor, seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)


async def _produce(reactor, producer: Producer, topic: str, partitions: int, count: int, batch: int, size: int,
                   window: int, done: Callable[[int], object] = lambda n: None) -> list:
    """Send C{count} sets of C{batch} messages round-robin over the partitions, C{window} at a time; their results
    (the first failure raises)."""
    sets = _sets(batch, size)
    semaphore = DeferredSemaphore(window)

    def sent(result):
        done(batch)
        return result

    sends = [semaphore.run(producer.send, topic, sets[i % len(sets)], partition_index=i % partitions).addCallback(sent)
             for i in range(count)]
    return await gatherResults(sends, consumeErrors=True).addErrback(lambda f: f.value.subFailure)


async def measure_throughput(cluster: ReplicationCluster, topic: str, replication_factor: int, ack: str,
                             messages: int, batch: int, size: int, partitions: int, waiting: int = 4,
                             progress_done: Callable[[int], object] = lambda n: None) -> ThroughputRun:
    """Produce C{messages} to a fresh topic of C{replication_factor} with C{ack}; the time it took."""
    reactor = cluster.reactor
    await cluster.create_topic(topic, partitions, replication_factor, min(2, replication_factor))
    producer = Producer(zookeeper=cluster.hosts, reactor=reactor, ack=ack)
    try:
        await producer.partitions(topic)
        await _produce(reactor, producer, topic, partitions, partitions, batch, size, partitions)  # warm up
        count = max(1, messages // batch)
        started = reactor.seconds()
        await _produce(reactor, producer, topic, partitions, count, batch, size, waiting * partitions,
                       progress_done)
        elapsed = reactor.seconds() - started
    finally:
        await producer.close()
    return ThroughputRun(replication_factor, ack, count * batch, size, elapsed)


def epoch_start(log_dir: str, topic: str, partition: int, epoch: int) -> int | None:
    """The offset at which leader epoch C{epoch} began in a replica's C{leader-epoch-checkpoint}, if written."""
    try:
        with open(os.path.join(log_dir, partition_directory(topic, partition), LEADER_EPOCH_CHECKPOINT)) as f:
            entries = parse_epochs(f.read())
    except (OSError, ValueError):
        return None
    return next((e.start_offset for e in entries if e.epoch == epoch), None)


async def measure_failover(cluster: ReplicationCluster, topic: str, how: str, batch: int, size: int) -> FailoverRun:
    """Signal the leader of C{topic}'s partition 0 (C{how}: C{"kill -9"} or C{"SIGTERM"}) under ack=all load."""
    reactor = cluster.reactor
    before = await cluster.wait_state(topic, 0, lambda s: s.online and len(s.isr) == len(cluster.ids),
                                      f"{topic} has a leader and every broker in its ISR")
    leader, controller = before.leader, await cluster.controller()
    producer = Producer(zookeeper=cluster.hosts, reactor=reactor, ack="all")  # default retries and waits
    acks: list[tuple[float, int]] = []  # (when, offset) of each acknowledgement
    errors: list[str] = []
    sets = _sets(batch, size)
    running = [True]

    async def send_loop() -> None:
        for i in range(10_000_000):  # (bounded: stopped below, within the run's deadline)
            if not running[0]:
                return
            try:
                result = await producer.send(topic, sets[i % len(sets)], partition_index=0)
                acks.append((reactor.seconds(), result.offset))
            except Exception as e:  # every failure counts; the loop goes on, as an application would
                errors.append(f"{type(e).__name__}: {e}")

    try:
        await producer.partitions(topic)
        sending = Deferred.fromCoroutine(send_loop())
        await _sleep(reactor, BEFORE_S)
        if how == "kill -9":
            cluster.kill(leader)
        else:
            cluster.signal(leader, signal.SIGTERM)
        signalled = reactor.seconds()
        deadline = signalled + cluster.session_timeout_s + FAILOVER_MARGIN_S
        after = None
        while after is None or after.leader == leader or not after.online:
            if reactor.seconds() > deadline:
                raise ClusterError(f"{how}: no new leader of {topic} within {deadline - signalled:g} s")
            after = await cluster.state(topic, 0)
            if after is not None and after.online and after.leader != leader:
                break
            await _sleep(reactor, POLL_S)
        elected = reactor.seconds() - signalled
        start = None
        while start is None:
            start = epoch_start(cluster.log_dirs[after.leader], topic, 0, after.leader_epoch)
            if reactor.seconds() > deadline:
                raise ClusterError(f"broker {after.leader} did not record leader epoch {after.leader_epoch}")
            await _sleep(reactor, POLL_S)
        while not any(offset >= start for _, offset in acks):
            if reactor.seconds() > deadline:
                raise ClusterError(f"{how}: no ack=all success from the new leader within {deadline - signalled:g} s"
                                   + (f" ({errors[-1]})" if errors else ""))
            await _sleep(reactor, POLL_S)
        first = min(when for when, offset in acks if offset >= start)
        await _sleep(reactor, AFTER_S)
        running[0] = False
        await sending
    finally:
        running[0] = False
        await producer.close()
    times = [when for when, _ in acks if when >= signalled - BEFORE_S / 2]
    pauses = [b - a for a, b in zip([signalled, *times], times) if b >= signalled]
    await cluster.wait_ended(leader)
    restarted = cluster.spawn(leader)
    await cluster.wait_registered(leader, since=restarted)
    await cluster.wait_state(topic, 0, lambda s: leader in s.isr, f"broker {leader} is back in {topic}'s ISR")
    return FailoverRun(how, leader, after.leader, leader == controller, first - signalled, elected,
                       max(pauses, default=first - signalled), len(errors), errors[0] if errors else None)


async def measure_catch_up(cluster: ReplicationCluster, topic: str, catch_up_mb: float, batch: int,
                           size: int) -> CatchUpRun:
    """Stop a follower of C{topic}'s partition 0, produce C{catch_up_mb} MB, start it; how fast it catches up."""
    reactor = cluster.reactor
    state = await cluster.wait_state(topic, 0, lambda s: s.online and len(s.isr) == len(cluster.ids),
                                     f"{topic} has a leader and every broker in its ISR")
    follower = max(b for b in state.isr if b != state.leader)
    cluster.signal(follower, signal.SIGTERM)
    await cluster.wait_ended(follower)
    producer = Producer(zookeeper=cluster.hosts, reactor=reactor, ack="appended")
    try:
        await producer.partitions(topic)
        count = max(1, int(catch_up_mb * MB) // (batch * size))
        results = await _produce(reactor, producer, topic, 1, count, batch, size, 4)
    finally:
        await producer.close()
    leader_end = max(r.next_offset for r in results)
    await cluster.wait_state(topic, 0, lambda s: follower not in s.isr, f"broker {follower} leaves {topic}'s ISR",
                             timeout_s=ISR_LEAVE_S)
    stopped_end = cluster.end(follower, topic, 0)
    restarted = reactor.seconds()
    cluster.spawn(follower)
    deadline = restarted + 60.0 + 10.0 * catch_up_mb
    first = caught = rejoined = None
    while caught is None or rejoined is None:
        now = reactor.seconds()
        if now > deadline:
            raise ClusterError(f"broker {follower} did not catch up within {deadline - restarted:g} s")
        end = cluster.end(follower, topic, 0)
        if first is None and end > stopped_end:
            first = now
        if caught is None and end >= leader_end:
            caught = now
        if rejoined is None:
            current = await cluster.state(topic, 0)
            if current is not None and follower in current.isr:
                rejoined = reactor.seconds()
        await _sleep(reactor, POLL_S)
    first = caught if first is None else first
    return CatchUpRun(leader_end - stopped_end, max(caught - first, POLL_S), caught - restarted, rejoined - restarted)
