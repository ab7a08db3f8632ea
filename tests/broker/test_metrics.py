"""Tests for twlog.broker.metrics: a broker's Prometheus metrics, scraped from its own registry.

The names, types and labels follow Prometheus' conventions (a C{twlog_} prefix, the unit in the
name, C{_total} on counters, seconds for durations); each test drives a real L{Broker} and
L{BrokerProtocol} over a StringTransport and reads the text format back with prometheus_client's
parser.
"""

from __future__ import annotations

import struct

import attrs
import prometheus_client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.test.requesthelper import DummyRequest

from twlog.broker.metrics import REQUEST_NAMES, BrokerMetrics, LatencyHistogram, error_name, request_name
from twlog.config import BrokerConfig, LogConfig
from twlog.errors import InvalidMessage, InvalidRequest, OffsetOutOfRange, RequestTooLarge, WrongPartition
from twlog.protocol import codec
from twlog.protocol.admission import Refusal
from twlog.protocol.codec import (
    ACK_APPENDED,
    AckProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.server import Broker
from twlog.storage.manager import LogManager
from twlog.storage.message import encode_message_set

from ..fakes import ManualRunner, run_now


def frame(request) -> bytes:
    """A request as it travels: size prefix and frame."""
    data = codec.encode_request(request)
    return struct.pack(">i", len(data)) + data


def scrape(registry) -> dict[str, object]:
    """The registry's families by name, parsed back from the text format."""
    return {family.name: family for family in text_string_to_metric_families(generate_latest(registry).decode())}


def samples(registry, name: str) -> dict[tuple, float]:
    """The samples called C{name}, by their sorted label items."""
    found = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def value(registry, name: str, **labels: str) -> float | None:
    """One sample's value (None when it is not there)."""
    return samples(registry, name).get(tuple(sorted(labels.items())))


class MetricsTestCase(SynchronousTestCase):
    def start(self, runner=run_now, max_connections=None, **overrides) -> BrokerMetrics:
        log_fields = {f.name for f in attrs.fields(LogConfig)}
        log_settings = dict(flush_messages=1, num_partitions=2)
        log_settings.update({k: v for k, v in overrides.items() if k in log_fields})
        broker_settings = {k: v for k, v in overrides.items() if k not in log_fields}
        self.clock = Clock()
        config = BrokerConfig(log=LogConfig(self.mktemp(), **log_settings), port=0, broker_id=7, **broker_settings)
        self.logs = LogManager(config.log, self.clock, runner)
        self.broker = Broker(self.logs, config, self.clock)
        self.factory = BrokerFactory(self.broker, max_connections=max_connections)
        self.metrics = BrokerMetrics(self.broker, self.factory, self.logs)
        self.logs.start()
        self.addCleanup(self.logs.close)
        return self.metrics

    def connect(self):
        protocol = self.factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        self.addCleanup(lambda: protocol.connectionLost(None) if protocol in self.factory.connections else None)
        return protocol, transport

    @property
    def registry(self):
        return self.metrics.registry


class RegistryTests(MetricsTestCase):
    def test_each_broker_has_its_own_registry(self) -> None:
        """Two brokers in one process count apart, and neither touches prometheus_client's global registry."""
        first = self.start()
        protocol, _ = self.connect()
        protocol.dataReceived(frame(MetadataRequest()))
        second = self.start()
        self.assertIsNot(first.registry, second.registry)
        self.assertEqual(value(first.registry, "twlog_requests_total", type="METADATA"), 1)
        self.assertIsNone(value(second.registry, "twlog_requests_total", type="METADATA"))
        self.assertEqual([n for n in scrape(prometheus_client.REGISTRY) if n.startswith("twlog")], [])

    def test_names_types_and_help(self) -> None:
        """Every twlog family is prefixed, typed, documented, and counters end in _total."""
        self.start()
        families = {n: f for n, f in scrape(self.registry).items() if n.startswith("twlog_")}
        expected = {
            "twlog_broker_info": "gauge", "twlog_requests": "counter", "twlog_request_errors": "counter",
            "twlog_messages_in": "counter", "twlog_bytes_in": "counter",
            "twlog_request_duration_seconds": "histogram", "twlog_network_received_bytes": "counter",
            "twlog_network_sent_bytes": "counter", "twlog_sendfile_sent_bytes": "counter",
            "twlog_connections": "gauge", "twlog_connections_max": "gauge",
            "twlog_connections_accepted": "counter", "twlog_connections_refused": "counter",
            "twlog_connections_max_per_ip": "gauge", "twlog_connections_idle_timeout_seconds": "gauge",
            "twlog_connections_reaped": "counter", "twlog_connections_idle_closed": "counter",
            "twlog_buffered_request_bytes": "gauge", "twlog_buffered_request_bytes_limit": "gauge",
            "twlog_request_budget_stopped_connections": "gauge", "twlog_request_budget_stops": "counter",
            "twlog_request_timeouts": "counter", "twlog_connections_waiting_turn": "gauge",
            "twlog_waiting_fetches": "gauge", "twlog_flush_duration_seconds": "histogram",
            "twlog_flush_failures": "counter", "twlog_log_size_bytes": "gauge", "twlog_log_segments": "gauge",
            "twlog_log_start_offset": "gauge", "twlog_log_flushed_offset": "gauge", "twlog_log_end_offset": "gauge",
            "twlog_log_failed": "gauge", "twlog_under_replicated_partitions": "gauge",
            "twlog_under_min_isr_partitions": "gauge", "twlog_active_controller": "gauge",
            "twlog_offline_partitions": "gauge", "twlog_isr_shrinks": "counter", "twlog_isr_expands": "counter",
            "twlog_leader_partitions": "gauge", "twlog_replica_partitions": "gauge", "twlog_waiting_produces": "gauge",
            "twlog_replica_lag_bytes": "gauge", "twlog_replica_lag_seconds": "gauge",
        }
        self.assertEqual({n: f.type for n, f in families.items()}, expected)
        self.assertTrue(all(f.documentation for f in families.values()))
        text = generate_latest(self.registry).decode()
        self.assertIn("# TYPE twlog_requests_total counter", text)
        self.assertIn('twlog_broker_info{broker_id="7"} 1.0', text)
        self.assertIn("process_open_fds", text)  # the process's own metrics too

    def test_names_of_request_types_and_errors(self) -> None:
        """Request types are labelled by their wire names; errors by their exception names."""
        self.start()
        # a new request type needs a name (12, 13 and 15 are served once the replica side is installed; 16 and
        # 17, SASL's, by the authentication gate, twlog.protocol.authentication)
        self.assertEqual(len(REQUEST_NAMES), len(self.broker.handlers) + 5)
        self.assertEqual([request_name(k) for k in (0, 6, 42, -1)], ["PRODUCE", "WAIT_FETCH", "unknown", "unknown"])
        self.assertEqual([error_name(c) for c in (1, 11, -1, 99)],
                         ["OffsetOutOfRange", "InvalidRequest", "Unknown", "Error99"])


class RequestTests(MetricsTestCase):
    def setUp(self) -> None:
        self.start()
        self.protocol, self.transport = self.connect()

    def test_requests_by_type(self) -> None:
        """Each request decoded counts once under its type, answered or not."""
        message_set = encode_message_set([b"a", b"b"])
        requests = [
            ProduceRequest("t", 0, message_set),
            MultiProduceRequest((ProduceRequest("t", 0, message_set), ProduceRequest("t", 1, message_set))),
            AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, message_set),)),
            FetchRequest("t", 0, 0, 1000),
            FetchRequest("t", 0, 0, 1000),
            MultiFetchRequest((FetchRequest("t", 0, 0, 1000),)),
            WaitFetchRequest(0, 0, (FetchRequest("t", 0, 0, 1000),)),
            OffsetsRequest("t", 0, -1, 1),
            MetadataRequest(),
        ]
        self.protocol.dataReceived(b"".join(map(frame, requests)))
        self.assertEqual(samples(self.registry, "twlog_requests_total"), {
            (("type", name),): count for name, count in [
                ("PRODUCE", 1), ("MULTIPRODUCE", 1), ("ACK_PRODUCE", 1), ("FETCH", 2), ("MULTIFETCH", 1),
                ("WAIT_FETCH", 1), ("OFFSETS", 1), ("METADATA", 1)]
        })
        counts = samples(self.registry, "twlog_request_duration_seconds_count")
        self.assertEqual(counts[(("type", "FETCH"),)], 2)
        self.assertEqual(counts[(("type", "PRODUCE"),)], 1)  # handled: it gets no response
        self.assertEqual(samples(self.registry, "twlog_request_errors_total"), {})

    def test_errors_by_type_and_code(self) -> None:
        """Each error code answered counts under its request type, code and name; one per failed part."""
        bad = bytearray(encode_message_set([b"abc"]))
        bad[-1] ^= 1
        self.protocol.dataReceived(b"".join([
            frame(FetchRequest("t", 0, 500, 1000)),  # past the end of an empty log
            frame(WaitFetchRequest(0, 0, (FetchRequest("t", 9, 0, 10), FetchRequest("t", 8, 0, 10)))),
            frame(ProduceRequest("t", 0, bytes(bad))),  # fire-and-forget: refused all the same
            frame(OffsetsRequest("t", 5, -1, 1)),
        ]))
        errors = samples(self.registry, "twlog_request_errors_total")
        self.assertEqual(errors, {
            (("code", str(OffsetOutOfRange.code)), ("error", "OffsetOutOfRange"), ("type", "FETCH")): 1,
            (("code", str(WrongPartition.code)), ("error", "WrongPartition"), ("type", "WAIT_FETCH")): 2,
            (("code", str(InvalidMessage.code)), ("error", "InvalidMessage"), ("type", "PRODUCE")): 1,
            (("code", str(WrongPartition.code)), ("error", "WrongPartition"), ("type", "OFFSETS")): 1,
        })

    def test_malformed_frame(self) -> None:
        """A frame that does not parse counts as an InvalidRequest of its type, or of type unknown; it is no request."""
        self.protocol.dataReceived(struct.pack(">ih", 2, 99))
        self.assertEqual(samples(self.registry, "twlog_request_errors_total"), {
            (("code", str(InvalidRequest.code)), ("error", "InvalidRequest"), ("type", "unknown")): 1,
        })
        self.assertEqual(samples(self.registry, "twlog_requests_total"), {})

    def test_oversize_frame(self) -> None:
        """A frame over --max-request-bytes counts as RequestTooLarge, in the 0.7 code a 0.7 type gets."""
        self.protocol.dataReceived(struct.pack(">ih", 200 * 1024 * 1024, codec.WAIT_FETCH))
        self.assertEqual(value(self.registry, "twlog_request_errors_total", type="WAIT_FETCH",
                               code=str(RequestTooLarge.code), error="RequestTooLarge"), 1)

    def test_bytes_in_and_out(self) -> None:
        """Bytes received and written are counted as they cross the connection, log bytes included."""
        self.logs.get_or_create_log("t", 0).append(encode_message_set([b"x" * 100]))
        data = frame(FetchRequest("t", 0, 0, 1000)) + frame(MetadataRequest())
        self.protocol.dataReceived(data[:7])
        self.protocol.dataReceived(data[7:])
        self.assertEqual(value(self.registry, "twlog_network_received_bytes_total"), len(data))
        self.assertEqual(value(self.registry, "twlog_network_sent_bytes_total"), len(self.transport.value()))
        self.assertGreater(len(self.transport.value()), 100)
        self.assertEqual(value(self.registry, "twlog_sendfile_sent_bytes_total"), 0)  # no socket: copied


    def test_messages_and_bytes_in_by_topic(self) -> None:
        """Producers' appends count messages and bytes by topic; a set refused counts nothing."""
        first, second = encode_message_set([b"a" * 10, b"b" * 20]), encode_message_set([b"c" * 30])
        data = (frame(ProduceRequest("t", 0, first)) + frame(ProduceRequest("u", 0, second))
                + frame(ProduceRequest("t", 0, b"\x00\x00\x00\x09broken!!!")))
        self.protocol.dataReceived(data)
        self.assertEqual(value(self.registry, "twlog_messages_in_total", topic="t"), 2)
        self.assertEqual(value(self.registry, "twlog_bytes_in_total", topic="t"), len(first))
        self.assertEqual(value(self.registry, "twlog_messages_in_total", topic="u"), 1)
        self.assertEqual(value(self.registry, "twlog_bytes_in_total", topic="u"), len(second))


class LatencyTests(MetricsTestCase):
    def test_waiting_fetch(self) -> None:
        """A waiting fetch counts as waiting while held, and its latency runs until its answer is written."""
        self.start()
        protocol, transport = self.connect()
        protocol.dataReceived(frame(WaitFetchRequest(2000, 1, (FetchRequest("t", 0, 0, 1000),))))
        self.assertEqual(value(self.registry, "twlog_waiting_fetches"), 1)
        self.assertIsNone(value(self.registry, "twlog_request_duration_seconds_count", type="WAIT_FETCH"))
        self.clock.advance(2)
        self.assertNotEqual(transport.value(), b"")
        self.assertEqual(value(self.registry, "twlog_waiting_fetches"), 0)
        buckets = samples(self.registry, "twlog_request_duration_seconds_bucket")
        self.assertEqual(buckets[(("le", "1.0"), ("type", "WAIT_FETCH"))], 0)
        self.assertEqual(buckets[(("le", "2.5"), ("type", "WAIT_FETCH"))], 1)
        self.assertEqual(buckets[(("le", "+Inf"), ("type", "WAIT_FETCH"))], 1)
        self.assertEqual(value(self.registry, "twlog_request_duration_seconds_sum", type="WAIT_FETCH"), 2.0)

    def test_histogram_buckets(self) -> None:
        """Buckets are cumulative and inclusive of their bound; the sum adds every duration; negatives count as 0."""
        histogram = LatencyHistogram((0.1, 1.0))
        for seconds in (0.05, 0.1, 0.5, 3.0, -1.0):
            histogram.observe(seconds)
        self.assertEqual(histogram.buckets(), [("0.1", 3), ("1.0", 4), ("+Inf", 5)])
        self.assertAlmostEqual(histogram.sum, 3.65)


class ConnectionTests(MetricsTestCase):
    def test_open_accepted_and_refused(self) -> None:
        """Open connections are a gauge; accepted and refused ones (past the cap) are counters."""
        self.start(max_connections=2)
        first, _ = self.connect()
        self.connect()
        self.assertIsInstance(self.factory.buildProtocol(None), Refusal)
        self.assertEqual(value(self.registry, "twlog_connections"), 2)
        self.assertEqual(value(self.registry, "twlog_connections_max"), 2)
        self.assertEqual(value(self.registry, "twlog_connections_accepted_total"), 2)
        self.assertEqual(value(self.registry, "twlog_connections_refused_total", cap="max_connections"), 1)
        self.assertEqual(value(self.registry, "twlog_connections_refused_total", cap="max_connections_per_ip"), 0)
        first.connectionLost(None)
        self.assertEqual(value(self.registry, "twlog_connections"), 1)

    def test_limits_per_address_reaped_and_idle(self) -> None:
        """The per-address cap and the idle timeout are gauges; refusals at the per-address cap, idle connections
        replaced at each cap, and those closed by the idle timeout are counters."""
        self.start(max_connections=3, max_connections_per_ip=2, reap_idle_s=5.0, idle_timeout_s=60.0)
        self.assertEqual(value(self.registry, "twlog_connections_max_per_ip"), 2)
        self.assertEqual(value(self.registry, "twlog_connections_idle_timeout_seconds"), 60)
        self.connect()
        self.connect()
        self.assertIsInstance(self.factory.buildProtocol(None), Refusal)  # same address ("?"), none idle
        self.clock.advance(5)
        self.connect()  # replaces the address's longest-idle one
        self.clock.advance(60)
        self.assertEqual(value(self.registry, "twlog_connections_refused_total", cap="max_connections_per_ip"), 1)
        self.assertEqual(value(self.registry, "twlog_connections_reaped_total", cap="max_connections_per_ip"), 1)
        self.assertEqual(value(self.registry, "twlog_connections_reaped_total", cap="max_connections"), 0)
        self.assertEqual(value(self.registry, "twlog_connections_idle_closed_total"), 2)

    def test_buffered_request_bytes(self) -> None:
        """Bytes of half-arrived frames are the budget's gauge; a connection the budget stops counts."""
        self.start(max_request_bytes=4096, max_buffered_request_bytes=4096)
        first, _ = self.connect()
        second, _ = self.connect()
        first.dataReceived(struct.pack(">i", 3000) + b"\0" * 1000)
        self.assertEqual(value(self.registry, "twlog_buffered_request_bytes"), 1000)
        self.assertEqual(value(self.registry, "twlog_buffered_request_bytes_limit"), 4096)
        second.dataReceived(struct.pack(">i", 3000) + b"\0" * 100)  # does not fit beside the first
        self.assertEqual(value(self.registry, "twlog_buffered_request_bytes"), 1100)
        self.assertEqual(value(self.registry, "twlog_request_budget_stopped_connections"), 1)
        self.assertEqual(value(self.registry, "twlog_request_budget_stops_total"), 1)

    def test_request_timeouts_and_turns(self) -> None:
        """A connection closed at the frame deadline is counted; so are the connections waiting for a turn."""
        self.start(request_timeout_s=5.0)
        late, _ = self.connect()
        late.dataReceived(struct.pack(">i", 3000) + b"\0" * 100)
        busy, _ = self.connect()
        offsets = codec.encode_request(OffsetsRequest("t", 0, -1, 1))
        busy.dataReceived((struct.pack(">i", len(offsets)) + offsets) * 100)  # more than a turn
        self.assertEqual(value(self.registry, "twlog_connections_waiting_turn"), 1)
        self.clock.advance(5)
        self.assertEqual(value(self.registry, "twlog_request_timeouts_total"), 1)
        self.assertEqual(value(self.registry, "twlog_connections_waiting_turn"), 0)


class FlushTests(MetricsTestCase):
    def test_flush_latency_and_failures(self) -> None:
        """An fsync's time on the pool thread is observed when it ends; a failed one counts as a failure."""
        runner = ManualRunner()
        self.start(runner=runner)
        log = self.logs.get_or_create_log("t", 0)
        runner.run_all()  # the new directory's fsync
        self.assertEqual(value(self.registry, "twlog_flush_duration_seconds_count"), 0)
        log.append(encode_message_set([b"a"]))  # flush_messages=1: its fsync starts now
        self.clock.advance(0.3)
        runner.run_one()
        self.assertEqual(value(self.registry, "twlog_flush_duration_seconds_count"), 1)
        self.assertAlmostEqual(value(self.registry, "twlog_flush_duration_seconds_sum"), 0.3)
        self.assertEqual(value(self.registry, "twlog_flush_duration_seconds_bucket", le="0.25"), 0)
        self.assertEqual(value(self.registry, "twlog_flush_duration_seconds_bucket", le="0.5"), 1)
        self.logs.get_or_create_log("t", 1).append(encode_message_set([b"b"]))
        runner.fail_one(OSError(5, "Input/output error"))
        self.assertEqual(value(self.registry, "twlog_flush_failures_total"), 1)
        self.assertEqual(value(self.registry, "twlog_log_failed", topic="t", partition="1"), 1)
        self.assertEqual(value(self.registry, "twlog_log_failed", topic="t", partition="0"), 0)


class PartitionTests(MetricsTestCase):
    def test_sizes_and_offsets_read_at_scrape_time(self) -> None:
        """Each partition's size, segments and offsets come from its log when scraped: flushed lags the end."""
        runner = ManualRunner()
        self.start(runner=runner, flush_messages=100)
        log = self.logs.get_or_create_log("clicks", 1)
        runner.run_all()
        first = log.append(encode_message_set([b"a" * 10]))
        self.assertEqual(value(self.registry, "twlog_log_end_offset", topic="clicks", partition="1"),
                         first.next_offset)
        self.assertEqual(value(self.registry, "twlog_log_flushed_offset", topic="clicks", partition="1"), 0)
        log.flush()
        runner.run_all()
        labels = dict(topic="clicks", partition="1")
        self.assertEqual(value(self.registry, "twlog_log_flushed_offset", **labels), first.next_offset)
        self.assertEqual(value(self.registry, "twlog_log_size_bytes", **labels), log.size_bytes())
        self.assertEqual(value(self.registry, "twlog_log_segments", **labels), 1)
        self.assertEqual(value(self.registry, "twlog_log_start_offset", **labels), 0)
        self.assertEqual(set(samples(self.registry, "twlog_log_size_bytes")),
                         {(("partition", "1"), ("topic", "clicks"))})  # a partition never written has no log


class PageTests(MetricsTestCase):
    def render(self, resource, accept: str | None = None, args: dict | None = None) -> tuple[bytes, str]:
        request = DummyRequest([b""])
        if accept:
            request.requestHeaders.setRawHeaders(b"accept", [accept.encode()])
        request.args = args or {}
        body = resource.render_GET(request)
        return body, request.responseHeaders.getRawHeaders(b"content-type")[0].decode()

    def test_text_format(self) -> None:
        """GET /metrics is Prometheus' text format, version 0.0.4."""
        self.start()
        page = self.metrics.site().resource.children[b"metrics"].original
        body, content_type = self.render(page)
        self.assertTrue(content_type.startswith("text/plain; version=0.0.4"), content_type)
        self.assertIn("twlog_connections", {f.name for f in text_string_to_metric_families(body.decode())})

    def test_openmetrics_when_asked(self) -> None:
        """A scraper that accepts OpenMetrics gets it."""
        self.start()
        page = self.metrics.site().resource.children[b"metrics"].original
        body, content_type = self.render(page, accept="application/openmetrics-text; version=1.0.0")
        self.assertTrue(content_type.startswith("application/openmetrics-text"), content_type)
        self.assertTrue(body.endswith(b"# EOF\n"))

    def test_name_filter(self) -> None:
        """?name[]=... restricts the answer to the families named, as prometheus_client's handlers do."""
        self.start()
        page = self.metrics.site().resource.children[b"metrics"].original
        body, _ = self.render(page, args={b"name[]": [b"twlog_connections"]})
        self.assertEqual([f.name for f in text_string_to_metric_families(body.decode())], ["twlog_connections"])
