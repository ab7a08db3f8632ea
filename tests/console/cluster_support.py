"""A console over a fake cluster, for deterministic HTTP-level tests of the cluster's routes: a L{FakeZooKeeper}
holding the brokers' and topics' nodes, brokers answered from memory (L{FakeBrokers}), metrics from text, and a
task.Clock."""

from __future__ import annotations

import json
from io import BytesIO
from types import SimpleNamespace

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from tests.fakezk import FakeZooKeeper
from twlog.console.app import make_site
from twlog.console.cluster import ClusterReader
from twlog.console.context import ConsoleContext
from twlog.console.partitions import BrokerUnreachable
from twlog.console.sampler import Sampler
from twlog.coord import paths
from twlog.coord.endpoints import endpoints_value
from twlog.coord.nodes import broker_value
from twlog.coord.replication.values import PartitionState, TopicAssignment
from twlog.errors import FetchSizeTooSmall, OffsetOutOfRange
from twlog.partition import TopicPartition
from twlog.protocol.codec import EARLIEST, BoundariesRequest, OffsetsRequest
from twlog.storage.fetched import MessageAndOffset
from twlog.storage.log_reader import offsets_newest_first

#: Bytes a message takes in the log besides its payload (as twlog's format: length, magic, attributes, CRC).
OVERHEAD = 10


class FakeLog:
    """One partition's messages, in segments: C{segments} is a list of (messages, last-modified ms)."""

    def __init__(self) -> None:
        self.segments: list[tuple[list[MessageAndOffset], int]] = []
        self.end = 0

    def append(self, payloads: list[bytes], mtime_ms: int, new_segment: bool = True) -> None:
        if new_segment or not self.segments:
            self.segments.append(([], mtime_ms))
        messages, _ = self.segments[-1]
        for payload in payloads:
            messages.append(MessageAndOffset(self.end, self.end + OVERHEAD + len(payload), payload))
            self.end += OVERHEAD + len(payload)
        self.segments[-1] = (messages, mtime_ms)

    def messages(self) -> list[MessageAndOffset]:
        return [m for messages, _ in self.segments for m in messages]

    @property
    def first(self) -> int:
        found = self.messages()
        return found[0].offset if found else self.end

    def offsets(self, time: int, max_offsets: int, now_ms: int) -> list[int]:
        entries = [(messages[0].offset, mtime) for messages, mtime in self.segments if messages]
        if not entries or self.end > entries[-1][0]:
            entries.append((self.end, now_ms))
        if time == EARLIEST:
            return [self.first]
        return offsets_newest_first(entries, time, max_offsets)

    def boundary(self, position: int) -> int:
        return next((m.offset for m in self.messages() if m.offset >= position), self.end)


class FakeBrokers:
    """L{twlog.console.partitions.Brokers} over L{FakeLog}s: C{cluster.logs[(topic, name)]}; brokers in
    C{cluster.down} do not answer."""

    def __init__(self, cluster: FakeCluster, context, layout) -> None:
        self.cluster = cluster
        self.context = context
        self.layout = layout
        self.closed = False

    def name(self, broker_id: int) -> str:
        return f"broker {broker_id}"

    def leader(self, tp: TopicPartition) -> int | None:
        return self.layout.leader(tp)

    def _log(self, tp: TopicPartition) -> FakeLog:
        leader = self.leader(tp)
        if leader is None or leader in self.cluster.down:
            raise BrokerUnreachable(f"broker {leader} (127.0.0.1:{9092 + (leader or 0)})", "refused")
        return self.cluster.logs.setdefault((tp.topic, tp.name), FakeLog())

    async def offsets(self, tp: TopicPartition, time: int, max_offsets: int = 1) -> list[int]:
        return self._log(tp).offsets(time, max_offsets, int(self.context.now() * 1000))

    async def first_last(self, tp: TopicPartition) -> tuple[int, int]:
        log = self._log(tp)
        return log.first, log.end

    async def request(self, tp: TopicPartition, request):
        log = self._log(tp)
        if isinstance(request, OffsetsRequest):
            return SimpleNamespace(offsets=log.offsets(request.time, request.max_offsets,
                                                       int(self.context.now() * 1000)))
        assert isinstance(request, BoundariesRequest)
        return SimpleNamespace(offsets=[log.boundary(p) for p in request.positions])

    async def boundary(self, tp: TopicPartition, position: int) -> int:
        return self._log(tp).boundary(position)

    async def fetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> list:
        log = self._log(tp)
        if offset > log.end or offset < log.first:
            raise OffsetOutOfRange(f"offset {offset} of {tp}")
        found, used = [], 0
        # (as a broker's, a fetch stops at the end of the segment it starts in)
        segment = next((messages for messages, _ in log.segments
                        if messages and messages[0].offset <= offset < messages[-1].next_offset), [])
        for message in segment:
            if message.offset < offset:
                continue
            size = message.next_offset - message.offset
            if used + size > max_bytes:
                if not found:
                    raise FetchSizeTooSmall(f"{tp} at {offset}")
                break
            found.append(message)
            used += size
        return found

    async def progress(self, replicated) -> tuple[dict, list[str]]:
        from twlog.client.replica_status import PartitionProgress

        found, problems = {}, []
        for p in replicated.partitions:
            if p.leader < 0:
                continue
            if p.leader in self.cluster.down:
                problems.append(f"{replicated.topic} partition {p.partition}: cannot ask leader broker {p.leader}")
                continue
            end = self.cluster.logs.get((replicated.topic, str(p.partition)), FakeLog()).end
            found[p.partition] = PartitionProgress(p.partition, p.leader, 0, end, {r: end for r in p.replicas})
        return found, problems

    async def close(self) -> None:
        self.closed = True


METRICS = """# TYPE twlog_network_received_bytes_total counter
twlog_network_received_bytes_total {received}
# TYPE twlog_network_sent_bytes counter
twlog_network_sent_bytes_total {sent}
# TYPE twlog_connections gauge
twlog_connections {connections}
# TYPE twlog_request_duration_seconds histogram
twlog_request_duration_seconds_bucket{{le="0.001",type="OFFSETS"}} {fast}
twlog_request_duration_seconds_bucket{{le="0.01",type="OFFSETS"}} {medium}
twlog_request_duration_seconds_bucket{{le="+Inf",type="OFFSETS"}} {total}
twlog_request_duration_seconds_count{{type="OFFSETS"}} {total}
twlog_request_duration_seconds_sum{{type="OFFSETS"}} 1.0
twlog_request_duration_seconds_bucket{{le="0.001",type="REPLICA_FETCH"}} 0
twlog_request_duration_seconds_bucket{{le="+Inf",type="REPLICA_FETCH"}} 500
twlog_request_duration_seconds_count{{type="REPLICA_FETCH"}} 500
twlog_request_duration_seconds_sum{{type="REPLICA_FETCH"}} 250.0
# TYPE twlog_log_size_bytes gauge
{sizes}
# TYPE twlog_log_end_offset gauge
{ends}
"""


class FakeCluster:
    """ZooKeeper's nodes of a cluster of brokers 0 and 1 (2 is down, remembered as holding topic C{old}), topics
    C{clicks} (0.7: 2 partitions on broker 0, 1 on broker 1) and C{rep} (replicated: partitions 0 and 1 on brokers
    0 and 1, partition 1's ISR short), and a console over it."""

    def __init__(self, testcase, *, connected: bool = True) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.zk = FakeZooKeeper(hosts="zk:2181")
        self.down: set[int] = set()
        self.logs: dict[tuple[str, str], FakeLog] = {}
        #: Each broker's metrics text (None: the scrape fails).
        self.metrics: dict[str, str | None] = {}
        self.testcase = testcase
        self._write_nodes()
        self.context = ConsoleContext(zk=self.zk, zookeeper="zk:2181", reactor=self.clock, timeout_s=5.0)
        self.context.parts["brokers"] = lambda context, layout: FakeBrokers(self, context, layout)
        self.sampler = Sampler(self.context, 10.0, fetch=self._fetch_metrics)
        self.reader = ClusterReader(self.context, lambda: self.zk)
        self.site = make_site(self.context)
        if connected:
            self.reader.start()

    def _write_nodes(self) -> None:
        zk = self.zk
        zk.start()
        for broker_id in (0, 1):
            zk.create(paths.broker_id_path(broker_id), broker_value("127.0.0.1", 9092 + broker_id, 1).encode(),
                      makepath=True)
            zk.create(paths.broker_endpoints_path(broker_id), endpoints_value(
                "127.0.0.1", 9092 + broker_id, None, f"http://127.0.0.1:{9192 + broker_id}/metrics"), makepath=True)
        zk.create(paths.broker_topic_path("clicks", 0), b"2", makepath=True)
        zk.create(paths.broker_topic_path("clicks", 1), b"1", makepath=True)
        zk.create(paths.held_path("old", 2), b"1", makepath=True)
        zk.create(paths.broker_topic_path("old"), b"", makepath=True)
        assignment = TopicAssignment("rep", {0: (0, 1), 1: (1, 0)}, {"retention.ms": "7200000"})
        zk.create(paths.replicated_topic_path("rep"), assignment.encode(), makepath=True)
        zk.create(paths.partition_state_path("rep", 0), PartitionState(0, 1, 1, (0, 1)).encode(), makepath=True)
        zk.create(paths.partition_state_path("rep", 1), PartitionState(1, 1, 1, (1,)).encode(), makepath=True)
        zk.create(paths.CONTROLLER, json.dumps({"version": 1, "brokerid": 0, "timestamp": "1"}).encode(),
                  makepath=True)

    def _fetch_metrics(self, url: str) -> defer.Deferred:
        text = self.metrics.get(url)
        if text is None:
            return defer.fail(ConnectionRefusedError(f"connection refused by {url}"))
        return defer.succeed(text.encode())

    def set_metrics(self, broker_id: int, *, received: float, sent: float, connections: int = 3,
                    sizes: dict[tuple[str, str], float] | None = None,
                    ends: dict[tuple[str, str], float] | None = None, latency=(90, 99, 100)) -> None:
        fast, medium, total = latency
        self.metrics[f"http://127.0.0.1:{9192 + broker_id}/metrics"] = METRICS.format(
            received=received, sent=sent, connections=connections, fast=fast, medium=medium, total=total,
            sizes="\n".join(f'twlog_log_size_bytes{{partition="{p}",topic="{t}"}} {v}'
                            for (t, p), v in (sizes or {}).items()),
            ends="\n".join(f'twlog_log_end_offset{{partition="{p}",topic="{t}"}} {v}'
                           for (t, p), v in (ends or {}).items()))

    def call(self, path: str, method: str = "GET") -> tuple[int, dict]:
        """(status, JSON answer) of one API request, answered at once (everything here is in memory)."""
        path, _, query = path.partition("?")
        request = DummyRequest([])
        request.method, request.path = method.encode(), path.encode()
        request.args = {}
        for key, value in (p.split("=", 1) for p in query.split("&") if p):
            request.args.setdefault(key.encode(), []).append(value.encode())
        request.content = BytesIO(b"")
        request.client = SimpleNamespace(host="127.0.0.1")
        api = self.site.resource.children[b"api"]
        result = api.render(request)
        if result is NOT_DONE_YET:
            self.testcase.assertTrue(request.finished, f"{method} {path} is not answered")
            result = b"".join(request.written)
        return request.responseCode or 200, json.loads(result)
