# -*- test-case-name: tests.mirror.test_mirror,tests.integration.test_mirror -*-
"""C{twlog mirror}: embedded group consumers pull topics from source clusters and republish them to a target.

The paper's section 4: a cluster in each live datacenter, and one in the
analysis datacenter that pulls from them through embedded consumers.  Per
source cluster, every topic whose name matches the whitelist (and not the
blacklist) gets a group consumer (L{twlog.consumer.group.GroupConsumer}) in
the mirror's group; topics that appear later are picked up from the source's
topic registries (ZooKeeper watches on C{/brokers/topics}, and on C{/twlog/topics}
for replicated topics, whose partitions the group consumer reads from their
leaders).  Several mirror processes
with the same group share the partitions through the group's rebalance.

Delivery is at-least-once across clusters: the consumers run with
C{manual_offsets}, so a source offset is committed only once the target
acknowledged (ACK_PRODUCE, C{ack="all"}: flushed, and on a replicated target
topic held by every in-sync replica) every message before it
(L{twlog.mirror.tracker}); a mirror killed at any moment copies again, after
its restart, at most what was in flight.  Payload bytes are copied unchanged
(audit envelopes included); compressed sets are re-batched uncompressed.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from twlog.client.options import ClientOptions
from twlog.client.sasl import SASLSettings
from twlog.client.tls import TLSSettings
from twlog.consumer.admin import describe_groups
from twlog.consumer.group import GroupConsumer
from twlog.consumer.stream import GroupStream
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.zk import CONNECTED, NoNodeError, ZooKeeper, split_chroot
from twlog.coord.zkauth import ZooKeeperCredentials
from twlog.errors import RebalanceFailed, TwlogError
from twlog.mirror.copier import Copier
from twlog.mirror.tracker import OffsetTracker
from twlog.partition import TopicPartition, partition_ranges
from twlog.producer import Producer


class MirrorRefused(TwlogError):
    """The mirror cannot start: a cluster is unreachable, or a source is the target."""


@dataclass(frozen=True)
class MirrorSettings:
    """What C{twlog mirror} was asked to do."""

    sources: tuple[str, ...]
    target: str
    whitelist: re.Pattern | None = None
    blacklist: re.Pattern | None = None
    group: str | None = None
    streams: int = 1
    batch_size: int = 200
    max_in_flight: int = 10_000
    queued_max_messages: int = 1000
    status_s: float = 10.0
    connect_timeout_s: float = 10.0
    drain_timeout_s: float = 10.0
    send_timeout_s: float = 30.0
    #: The ZooKeeper credentials of every source cluster, and of the target (docs/security.md, "ZooKeeper").
    source_credentials: ZooKeeperCredentials | None = field(default=None, repr=False)
    target_credentials: ZooKeeperCredentials | None = field(default=None, repr=False)
    #: TLS and SASL toward the sources' brokers (the consumers) and the target's (the producer): C{--from-} and
    #: C{--to-client-config} (docs/security.md, "Spark, the mirror and groups"); None: plaintext, anonymous.
    source_tls: TLSSettings | None = None
    source_sasl: SASLSettings | None = field(default=None, repr=False)
    target_tls: TLSSettings | None = None
    target_sasl: SASLSettings | None = field(default=None, repr=False)

    @property
    def long_pause_s(self) -> float:
        """How long a pause at C{max_in_flight} lasts before it is a line of its own: the status interval (10 s
        without status lines); shorter pauses are counted in the status line."""
        return self.status_s if self.status_s > 0 else 10.0

    @property
    def group_name(self) -> str:
        return self.group or default_group(self.target)


def default_group(target: str) -> str:
    """The default group: named after the target, so mirrors into one target share their sources' partitions."""
    return "twlog-mirror-" + re.sub(r"[^A-Za-z0-9._-]+", "_", target).strip("_")


def selected(topic: str, whitelist: re.Pattern | None, blacklist: re.Pattern | None) -> bool:
    """Whether the mirror copies C{topic}: its whole name matches the whitelist (default: every topic) and not
    the blacklist."""
    if whitelist is not None and not whitelist.fullmatch(topic):
        return False
    return blacklist is None or not blacklist.fullmatch(topic)


def same_zookeeper(a: str, b: str) -> bool:
    """Whether two connect strings name the same ZooKeeper ensemble and chroot (localhost is 127.0.0.1)."""

    def normal(hosts: str) -> tuple[frozenset[str], str]:
        servers, chroot = split_chroot(hosts)
        names = {s.strip().replace("localhost", "127.0.0.1") for s in servers.split(",") if s.strip()}
        return frozenset(n if ":" in n else f"{n}:2181" for n in names), chroot.rstrip("/")

    return normal(a) == normal(b)


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class TopicFeed:
    """One source topic: its group consumer (manual offsets), the loops taking its streams, its offset tracker."""

    _log = Logger()

    def __init__(self, source: SourceCluster, topic: str, consumer: GroupConsumer) -> None:
        self.source = source
        self.topic = topic
        self.consumer = consumer
        self.tracker = OffsetTracker()
        self.running = True
        self._pumps: list[Deferred] = []
        #: Per partition: the end of what this process handed to the target, and of what it acknowledged.
        self.sent: dict[TopicPartition, int] = {}
        self.acked: dict[TopicPartition, int] = {}

    def acknowledge(self, partition: TopicPartition, next_offset: int) -> None:
        """The target acknowledged everything this process sent of C{partition} before C{next_offset}."""
        self.acked[partition] = max(next_offset, self.acked.get(partition, next_offset))
        self.consumer.acknowledge_offset(partition, next_offset)

    def already_sent(self, partition: TopicPartition, next_offset: int) -> bool:
        """Whether this process sent the message ending at C{next_offset} already (a rebalance handed out again
        what was in flight): then it is not sent twice, and its offset is committed once its first copy is
        acknowledged (at once if it was)."""
        if next_offset > self.sent.get(partition, -1):
            return False
        acked = self.acked.get(partition)
        if acked is not None and acked >= next_offset:
            self.consumer.acknowledge_offset(partition, acked)
        return True

    async def start(self, copier: Copier, streams: int) -> None:
        by_topic = await self.consumer.create_message_streams({self.topic: streams})
        for stream in by_topic[self.topic]:
            self._pumps.append(Deferred.fromCoroutine(self._pump(stream, copier)))

    async def _pump(self, stream: GroupStream, copier: Copier) -> None:
        while self.running:
            try:
                message = await stream.__anext__()
            except StopAsyncIteration:
                return
            except RebalanceFailed as e:
                self._log.warn("mirror: {error}; waiting for the next rebalance", error=e)
                continue
            except Exception as e:  # a corrupt message or one too large: its partition stops, the others go on
                self._log.error("mirror: {topic} from {source}: {error}", topic=self.topic, source=self.source.hosts,
                                error=e)
                continue
            if not self.running:
                return  # not copied, so not acknowledged: it is fetched again after the restart
            if self.already_sent(message.partition, message.next_offset):
                continue
            if await copier.copy(message, self):
                self.sent[message.partition] = message.next_offset

    async def close(self) -> None:
        """Stop taking messages, then commit what the target acknowledged and leave the group."""
        self.running = False
        await self.consumer.close()
        await DeferredList(self._pumps, consumeErrors=True)


class SourceCluster:
    """One C{--from} cluster: its ZooKeeper session, the view of its topics, a feed per selected topic."""

    _log = Logger()

    def __init__(self, hosts: str, mirror: Mirror, reactor) -> None:
        self.hosts = hosts
        self.mirror = mirror
        self._reactor = reactor
        settings = mirror.settings
        self.zk = ZooKeeper(hosts, reactor=reactor, connect_timeout_s=settings.connect_timeout_s,
                            credentials=settings.source_credentials)
        self.view = ClusterView(self.zk, listener=mirror.source_options.listener)
        #: The source's topic names, kept by a watch on C{/brokers/topics}.
        self.topics: set[str] = set()
        self.feeds: dict[str, TopicFeed] = {}
        self._picking = False
        self._again = False

    def follow_topics(self) -> Deferred[None]:
        """Read the topic names with a watch (again after each change and each reconnection); pick them up."""
        return Deferred.fromCoroutine(self._read_topics()).addErrback(
            lambda f: self._log.failure("mirror: reading the topics of {hosts} failed", f, hosts=self.hosts))

    async def _read_topics(self) -> None:
        if self.mirror.stopping:
            return
        await self.zk.ensure_path(paths.BROKER_TOPICS)
        topics = set(await self.zk.children(paths.BROKER_TOPICS, watch=lambda event: self.follow_topics()))
        # Replicated topics: watched once their registry exists (the mirror does not create it in the source).
        if await self.zk.exists(paths.REPLICATED_TOPICS, watch=lambda event: self.follow_topics()) is not None:
            try:
                topics |= set(await self.zk.children(paths.REPLICATED_TOPICS,
                                                     watch=lambda event: self.follow_topics()))
            except NoNodeError:
                pass  # (removed meanwhile: the watch above calls again)
        self.topics = topics
        self._changed()

    def session_changed(self, state: str) -> None:
        if state == CONNECTED:  # a new session has no watches: read (and watch) again
            self.follow_topics()

    def _changed(self) -> None:
        if self._picking:  # (_pick_up may finish before fromCoroutine returns: a flag, not its Deferred)
            self._again = True
            return
        self._picking = True
        Deferred.fromCoroutine(self._pick_up()).addErrback(
            lambda f: self._log.failure("mirror: following the topics of {hosts} failed", f, hosts=self.hosts))

    async def _pick_up(self) -> None:
        """Start a feed for every selected topic of the source without one (topics are never dropped)."""
        settings = self.mirror.settings
        try:
            while True:
                self._again = False
                for topic in sorted(self.topics):
                    if topic in self.feeds or not selected(topic, settings.whitelist, settings.blacklist):
                        continue
                    if self.mirror.stopping:
                        return
                    consumer = GroupConsumer(
                        self.zk, settings.group_name, reactor=self._reactor, manual_offsets=True,
                        auto_commit_interval_ms=1000, auto_offset_reset="smallest",
                        queued_max_messages=settings.queued_max_messages, options=self.mirror.source_options,
                    )
                    feed = self.feeds[topic] = TopicFeed(self, topic, consumer)
                    await feed.start(self.mirror.copier, settings.streams)
                    self.mirror.say(f"mirror: copying topic {topic} from {self.hosts}")
                if not self._again:
                    return
        finally:
            self._picking = False

    async def lag(self) -> tuple[int | None, str]:
        """Bytes the group's committed offsets are behind the source's latest offsets (None if unknown), and
        what that total leaves out (the partitions whose broker is down or did not answer), or C{""}."""
        try:
            groups = await describe_groups(self.zk, self.mirror.settings.group_name, reactor=self._reactor,
                                           timeout_s=2.0)
        except Exception:
            return None, ""
        if not groups:
            return None, ""
        group = groups[0]
        if not group.unknown:
            return group.lag, ""
        left_out = partition_ranges(p.topic_partition for p in group.unknown)
        return group.lag, f" (leaves out {left_out}: {'; '.join(group.problems())})"

    async def close(self) -> None:
        self.zk.remove_state_listener(self.session_changed)
        self.view.stop()
        await DeferredList([Deferred.fromCoroutine(f.close()) for f in self.feeds.values()], consumeErrors=True)


class Mirror:
    """Copies the selected topics of C{settings.sources} into C{settings.target} until L{stop}.

    @param say: C{(line) -> None}: the status lines and what the operator must know (stderr by default).
    """

    _log = Logger()

    def __init__(self, settings: MirrorSettings, *, reactor=None, say: Callable[[str], object] = _say,
                 client_options: ClientOptions | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor
        if not settings.sources:
            raise ValueError("give at least one source cluster")
        self.settings = settings
        self._reactor = reactor
        self.say = say
        self.client_options = client_options or ClientOptions(timeout_s=10.0, connect_timeout_s=3.0,
                                                              connect_attempts=2)
        #: The consumers' options (toward the sources) and the producer's (toward the target).
        base = self.client_options
        self.source_options = ClientOptions.build(base, tls=settings.source_tls or base.tls,
                                                  sasl=settings.source_sasl or base.sasl)
        self.target_options = ClientOptions.build(base, tls=settings.target_tls or base.tls,
                                                  sasl=settings.target_sasl or base.sasl)
        self.target_zk = ZooKeeper(settings.target, reactor=reactor, connect_timeout_s=settings.connect_timeout_s,
                                   credentials=settings.target_credentials)
        self.producer: Producer | None = None
        self.copier = Copier(self._send, clock=reactor, say=say, fatal=self._fatal, batch_size=settings.batch_size,
                             max_in_flight=settings.max_in_flight, long_pause_s=settings.long_pause_s)
        self.sources = [SourceCluster(hosts, self, reactor) for hosts in settings.sources]
        self.stopping = False
        #: Fires once the mirror has stopped (with the error that stopped it, if one did).
        self.done: Deferred[None] = Deferred()
        self.error: Exception | None = None
        self._status: LoopingCall | None = None
        self._stopped: Deferred[None] | None = None

    # -- starting -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to every cluster, refuse if one is unreachable or a source is the target, start copying.

        @raise MirrorRefused: naming the cluster and why.
        """
        for hosts in self.settings.sources:
            if same_zookeeper(hosts, self.settings.target):
                raise MirrorRefused(f"--from {hosts} and --to {self.settings.target} name the same cluster: a mirror "
                                    "copies between two clusters")
        target_brokers = await self._connect(self.target_zk, None, f"--to {self.settings.target}")
        for source in self.sources:
            brokers = await self._connect(source.zk, source.view, f"--from {source.hosts}")
            shared = sorted(set(brokers) & set(target_brokers))
            if shared:
                host, port = shared[0]
                raise MirrorRefused(f"--from {source.hosts} and --to {self.settings.target} name the same cluster: "
                                    f"broker {host}:{port} is registered in both")
        # ack "all": flushed on the leader, and on a replicated topic by every in-sync replica (the same as
        # "flushed" on a 0.7 topic): a source offset is committed only once the copy survives a failover.
        self.producer = Producer(zookeeper=self.target_zk, reactor=self._reactor, ack="all",
                                 options=self.target_options)
        for source in self.sources:
            source.zk.add_state_listener(source.session_changed)
            await source.follow_topics()
        if self.settings.status_s > 0:
            self._status = LoopingCall(lambda: Deferred.fromCoroutine(self._report()))
            self._status.clock = self._reactor
            self._status.start(self.settings.status_s, now=False).addErrback(
                lambda f: self._log.failure("mirror status failed", f))

    async def _connect(self, zk: ZooKeeper, view: ClusterView | None, what: str) -> list[tuple[str, int]]:
        """Start C{zk} (and C{view}, or a view of our own); the live brokers' addresses.

        @raise MirrorRefused: ZooKeeper cannot be reached, or no broker is registered there.
        """
        try:
            await zk.start()
        except Exception as e:
            raise MirrorRefused(f"cannot reach the ZooKeeper of {what}: {e}") from None
        own = view is None
        view = view or ClusterView(zk, listener=self.target_options.listener)  # (the sources have theirs)
        await view.start()
        brokers = sorted(view.brokers.values())
        if own:
            view.stop()
        if not brokers:
            raise MirrorRefused(f"no broker is registered in the ZooKeeper of {what}: is that cluster running?")
        return brokers

    # -- copying ------------------------------------------------------------------------

    def _send(self, topic: str, payloads: list[bytes]) -> Deferred:
        """Send to the target, given up after C{send_timeout_s} (a target whose ZooKeeper is gone can make a
        discovery wait for ever); the copier then sends the batch again."""
        return self.producer.send(topic, payloads).addTimeout(self.settings.send_timeout_s, self._reactor)

    def _fatal(self, error: Exception) -> None:
        if self.error is None:
            self.error = TwlogError(f"the target cannot take a mirrored message: {error}")
        self.stop()

    async def _report(self) -> None:
        stats = self.copier.stats
        total = sum(stats.messages.values())
        size = sum(stats.bytes.values())
        per_topic = ", ".join(f"{t} {stats.messages[t]:,} ({_size(stats.bytes[t])})" for t in sorted(stats.messages))
        lags = []
        for source in self.sources:
            lag, left_out = await source.lag()
            lags.append(f"lag {'unknown' if lag is None else _size(lag)} behind {source.hosts}{left_out}")
        pauses = self.copier.pauses.summary()
        self.say(f"mirror status: copied {total:,} messages ({_size(size)})" + (f": {per_topic}" if per_topic else "")
                 + f"; {self.copier.in_flight:,} in flight" + (f", {pauses}" if pauses else "") + "; "
                 + "; ".join(lags))

    # -- stopping -----------------------------------------------------------------------

    def stop(self) -> Deferred[None]:
        """Stop taking messages, wait (at most C{drain_timeout_s}) for the target to acknowledge what is in flight,
        commit the acknowledged offsets, leave the groups, close everything."""
        if self._stopped is None:
            self._stopped = Deferred.fromCoroutine(self._stop())
        return self._stopped

    async def _stop(self) -> None:
        self.stopping = True
        if self._status is not None and self._status.running:
            self._status.stop()
        for source in self.sources:
            for feed in source.feeds.values():
                feed.running = False
        drained = Deferred.fromCoroutine(self.copier.drain())
        drained.addTimeout(self.settings.drain_timeout_s, self._reactor)
        try:
            await drained
        except Exception:
            self.say(f"mirror: {self.copier.in_flight:,} messages not acknowledged by the target; they are copied "
                     "again by the next mirror")
        self.copier.stop()
        await DeferredList([Deferred.fromCoroutine(s.close()) for s in self.sources], consumeErrors=True)
        if self.producer is not None:
            closing = self.producer.close()
            closing.addTimeout(self.settings.drain_timeout_s, self._reactor)
            await DeferredList([closing], consumeErrors=True)
        for zk in [self.target_zk, *(s.zk for s in self.sources)]:
            if zk.connected:
                await DeferredList([zk.stop()], consumeErrors=True)
        self.done.callback(None)


__all__ = ["Mirror", "MirrorRefused", "MirrorSettings", "default_group", "same_zookeeper", "selected"]
