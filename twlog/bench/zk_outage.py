# -*- test-case-name: tests.integration.test_zk_outage -*-
"""C{twlog bench zk-outage}: how many messages a consumer group delivers twice when ZooKeeper goes away for a while.

L{outage_run} starts brokers in this process, registered in a fresh chroot of
a ZooKeeper server of its own, and two group members reading one topic.  A
producer writes numbered messages at a steady rate the whole time (straight
to the brokers, which need no ZooKeeper to serve).  After C{before_s} the
ZooKeeper server is stopped, and started again on the same port and data
C{outage_s} later; the producer goes on for C{after_s}, then stops, and the
run waits until every message was delivered (bounded by C{drain_s}).  A
message delivered more than once is a duplicate; the target is at most 5% of
what was delivered after a 20 s outage.  L{main_zk_outage} runs one round per
outage length and prints the table.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Sequence

import attrs
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from twlog.bench.common import BenchProgress, BenchTable, Column, react_with_progress
from twlog.broker.service import BrokerService
from twlog.client.connection import BrokerConnection
from twlog.config import BrokerConfig, LogConfig
from twlog.consumer.group import GroupConsumer
from twlog.consumer.stream import GroupStream
from twlog.coord.zk import LOST, ZooKeeper
from twlog.coord.zkserver import ZooKeeperServer
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, ProduceRequest
from twlog.storage.message import encode_message_set

TOPIC = "outage"


@attrs.frozen
class OutageResult:
    """One run: what was produced and delivered around a ZooKeeper outage of C{outage_s}."""

    outage_s: float
    #: Messages acknowledged by the brokers.
    produced: int
    #: Messages handed to the application, duplicates included.
    delivered: int
    #: Distinct messages delivered.
    distinct: int
    #: Sessions of the group members that expired (ZooKeeper said LOST).
    expired_sessions: int
    #: Seconds from ZooKeeper's return until the members had delivered as many messages as were produced by
    #: then (None: not within the C{after_s} the producer went on for).
    catch_up_s: float | None

    @property
    def duplicates(self) -> int:
        """Deliveries of a message delivered before."""
        return self.delivered - self.distinct

    @property
    def duplicate_share(self) -> float:
        """Duplicates as a share of what was delivered."""
        return self.duplicates / self.delivered if self.delivered else 0.0

    @property
    def missing(self) -> int:
        """Messages produced and never delivered."""
        return self.produced - self.distinct


class _Reader:
    """Reads every stream of the group members and counts each message's deliveries."""

    def __init__(self) -> None:
        self.counts: Counter[bytes] = Counter()
        self.delivered = 0
        self._readers: list[Deferred] = []

    def read(self, streams: dict[str, list[GroupStream]]) -> None:
        for topic_streams in streams.values():
            for stream in topic_streams:
                self._readers.append(Deferred.fromCoroutine(self._read(stream)))

    async def _read(self, stream: GroupStream) -> None:
        while True:
            try:
                message = await stream.__anext__()
            except StopAsyncIteration:
                return
            except Exception:  # a rebalance that failed (RebalanceFailed) is raised once: go on reading
                continue
            self.counts[message.payload] += 1
            self.delivered += 1

    def has(self, produced: int) -> bool:
        return len(self.counts) >= produced


class _Producer:
    """Writes numbered messages round-robin over the partitions, C{rate} a second, acknowledged once flushed."""

    def __init__(self, reactor, ports: list[int], partitions: int, rate: int, batch: int = 10) -> None:
        self._reactor = reactor
        self._connections = [BrokerConnection("127.0.0.1", port, reactor=reactor) for port in ports]
        self._targets = [(c, p) for c in self._connections for p in range(partitions)]
        self._period = batch / rate
        self._batch = batch
        self.produced = 0
        self._running = False
        self._done: Deferred | None = None

    def start(self) -> None:
        self._running = True
        self._done = Deferred.fromCoroutine(self._run())

    async def stop(self) -> None:
        self._running = False
        if self._done is not None:
            await self._done
        await DeferredList([c.close() for c in self._connections], consumeErrors=True)

    async def _run(self) -> None:
        started = self._reactor.seconds()
        sent = 0
        while self._running:
            connection, partition = self._targets[sent % len(self._targets)]
            payloads = [b"%d" % n for n in range(self.produced, self.produced + self._batch)]
            request = AckProduceRequest(ACK_FLUSHED, 10_000,
                                        (ProduceRequest(TOPIC, partition, encode_message_set(payloads)),))
            results = (await connection.request(request)).results
            if any(r.error for r in results):
                raise RuntimeError(f"the broker refused a batch: {results}")
            self.produced += self._batch
            sent += 1
            delay = started + sent * self._period - self._reactor.seconds()
            if delay > 0:
                await deferLater(self._reactor, delay, lambda: None)


async def outage_run(reactor, server: ZooKeeperServer, outage_s: float, *, before_s: float = 8.0,
                     after_s: float = 8.0, drain_s: float = 60.0, rate: int = 1000, brokers: int = 1,
                     partitions: int = 4, members: int = 2, session_timeout_s: float = 6.0,
                     auto_commit_interval_ms: int = 1000, log_dir: str | None = None,
                     progress: BenchProgress | None = None) -> OutageResult:
    """One round: stop C{server} for C{outage_s} while C{members} group members read what a producer writes.

    C{server} runs when called and runs again on return (stopped and started in a thread, which blocks).
    The members' sessions time out after C{session_timeout_s}; they commit every C{auto_commit_interval_ms}.
    """
    say = progress.log if progress is not None else (lambda line: None)
    chroot = f"/twlog-outage-{uuid.uuid4().hex[:8]}"
    admin = ZooKeeper(server.connect_string, reactor=reactor)
    await admin.start()
    await admin.ensure_path(chroot)
    await admin.stop()
    hosts = server.connect_string + chroot
    directory = log_dir or tempfile.mkdtemp(prefix="twlog-zk-outage-")
    services: list[BrokerService] = []
    group: list[GroupConsumer] = []
    producer: _Producer | None = None
    expired = [0]

    def count_expiry(state: str) -> None:
        if state == LOST:
            expired[0] += 1

    try:
        for broker_id in range(brokers):
            config = BrokerConfig(log=LogConfig(os.path.join(directory, f"broker-{broker_id}"),
                                                num_partitions=partitions, flush_interval_ms=100),
                                  port=0, interface="127.0.0.1", broker_id=broker_id, zookeeper=hosts)
            service = BrokerService(config, reactor, stop_reactor_on_error=False,
                                    zookeeper_session_timeout_s=session_timeout_s)
            service.startService()
            services.append(service)
            await service.listening
        producer = _Producer(reactor, [s.broker.port for s in services], partitions, rate)
        producer.start()
        reader = _Reader()
        for i in range(members):
            consumer = GroupConsumer(hosts, "outage", reactor=reactor, consumer_id=f"member-{i}",
                                     session_timeout_s=session_timeout_s,
                                     auto_commit_interval_ms=auto_commit_interval_ms, rebalance_max_retries=10)
            group.append(consumer)
            reader.read(await consumer.create_message_streams({TOPIC: 1}))
            consumer.zookeeper.add_state_listener(count_expiry)
        await deferLater(reactor, before_s, lambda: None)
        say(f"  stopping ZooKeeper for {outage_s:g} s ({producer.produced:,} messages produced so far)")
        await deferToThread(server.stop)
        await deferLater(reactor, outage_s, lambda: None)
        await deferToThread(server.start, 60.0, 1)  # (one attempt: the clients know this port)
        back, produced_by_then = reactor.seconds(), producer.produced
        say(f"  ZooKeeper is back ({produced_by_then:,} messages produced so far)")
        catch_up = None
        while reactor.seconds() < back + after_s:
            if catch_up is None and reader.has(produced_by_then):
                catch_up = reactor.seconds() - back
            await deferLater(reactor, 0.05, lambda: None)
        await producer.stop()
        deadline = reactor.seconds() + drain_s
        while not reader.has(producer.produced) and reactor.seconds() < deadline:
            await deferLater(reactor, 0.05, lambda: None)
        if not reader.has(producer.produced):
            raise TimeoutError(f"{producer.produced - len(reader.counts):,} of {producer.produced:,} messages were "
                               f"not delivered within {drain_s:g} s of the producer's end")
        await deferLater(reactor, 1.0, lambda: None)  # late duplicates (a rebalance still under way) count too
        return OutageResult(outage_s, producer.produced, reader.delivered, len(reader.counts), expired[0],
                            catch_up)
    finally:
        if producer is not None:
            await producer.stop()
        await DeferredList([c.close() for c in group], consumeErrors=True)
        await DeferredList([s.stopService() for s in services if s.running], consumeErrors=True)
        if log_dir is None:
            shutil.rmtree(directory, ignore_errors=True)


def main_zk_outage(args) -> int:
    """Entry point of C{twlog bench zk-outage}: a local ZooKeeper stopped for each outage length in turn."""
    root = tempfile.mkdtemp(prefix="twlog-bench-zk-outage-")
    print(f"starting ZooKeeper under {root}", file=sys.stderr)
    zookeeper = ZooKeeperServer(os.path.join(root, "zookeeper")).start()
    results: list[OutageResult] = []
    try:
        async def run_all(reactor, progress: BenchProgress) -> None:
            progress.step("outages", total=len(args.outages), unit="runs")
            for n, outage_s in enumerate(args.outages):
                progress.update(n, f"ZooKeeper stopped for {outage_s} s: run {n + 1} of {len(args.outages)}")
                results.append(await outage_run(
                    reactor, zookeeper, outage_s, before_s=args.before_s, after_s=args.after_s, rate=args.rate,
                    session_timeout_s=args.session_timeout_s, log_dir=os.path.join(root, f"run-{n}"),
                    progress=progress))
                progress.update(n + 1)

        status = react_with_progress(run_all)
        if status:
            return status
    finally:
        zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    outage_table(results, args).print()
    return 0


def outage_table(results: Sequence[OutageResult], args) -> BenchTable:
    """The table of the runs: produced, delivered, duplicates (and their share), missing, expiries, catch-up."""
    table = BenchTable(
        f"twlog zk-outage benchmark: 2 group members, 1 broker with 4 partitions, {args.rate:,} msg/s, session "
        f"timeout {args.session_timeout_s:g} s, autocommit every 1 s",
        [Column("outage", "s"), Column("produced", "msg"), Column("delivered", "msg"), Column("duplicates", "msg"),
         Column("duplicates", "% of delivered"), Column("missing", "msg"), Column("expired sessions", "count"),
         Column("caught up", "s after ZooKeeper's return")])
    table.note("(caught up: the members had delivered as many messages as were produced when ZooKeeper came back)")
    for r in results:
        table.add_row(f"{r.outage_s:g}", f"{r.produced:,}", f"{r.delivered:,}", f"{r.duplicates:,}",
                      f"{100 * r.duplicate_share:.2f}", f"{r.missing:,}", r.expired_sessions,
                      f"{r.catch_up_s:.1f}" if r.catch_up_s is not None else table.missing(
                          "not caught up while the producer went on (--after-s)"))
    table.note("(target: at most 5% duplicates after a 20 s outage)")
    return table
