# -*- test-case-name: tests.broker.test_metrics,tests.integration.test_metrics -*-
"""A broker's metrics in Prometheus' text format: L{BrokerMetrics}, and the HTTP page serving them.

Each broker has a registry of its own (several brokers share a process in
C{twlog local} and in the tests; prometheus_client's global registry would
mix them).  The hot paths count with plain integers kept by the objects that
do the work: the connection factory (requests by type, bytes in and out,
connections), the L{Broker} (error codes answered), the request budget; the
two histograms (request and flush latency) are plain lists of bucket counts
here, told of each request and each fsync through observer hooks.  The
collector turns all of it into metric families at scrape time, and reads the
partitions' sizes and offsets from the L{LogManager} then: nothing is done
per message, and a request costs a dictionary update and a bisection.  The
replication families (Kafka's names, docs/operations.md) are read then too,
from the broker's L{ReplicaManager} and L{Controller}, found through the
callables the service gives (they exist only once it joined ZooKeeper).

The page is rendered on the reactor thread, where the counters and the logs
live: prometheus_client's own Twisted resource runs its WSGI app on the
reactor's thread pool, which the logs' fsyncs use, and would read the logs
from another thread.  A scrape takes the reactor for about 4 ms with 100
partitions and 30 ms with 1,000 (mostly prometheus_client's formatting).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from twisted.internet.error import CannotListenError
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.web.resource import EncodingResourceWrapper, Resource
from twisted.web.server import GzipEncoderFactory, Request, Site
from twisted.web.static import Data
from typing_extensions import override

from twlog.broker.listeners import tcp_endpoint
from twlog.client.tls import openssl_reason, server_certificate_options
from twlog.config import BrokerConfig
from twlog.coord.replication.controller import Controller
from twlog.errors import ERRORS, UNKNOWN, TwlogError
from twlog.protocol import codec, replication_codec, sasl_codec
from twlog.protocol.authentication import Authentication
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.server import Broker
from twlog.replica.manager import ReplicaManager
from twlog.storage.manager import LogManager

#: The label value of each request type; any other type (a frame that did not parse) is "unknown".
REQUEST_NAMES = {
    codec.PRODUCE: "PRODUCE",
    codec.FETCH: "FETCH",
    codec.MULTIFETCH: "MULTIFETCH",
    codec.MULTIPRODUCE: "MULTIPRODUCE",
    codec.OFFSETS: "OFFSETS",
    codec.ACK_PRODUCE: "ACK_PRODUCE",
    codec.WAIT_FETCH: "WAIT_FETCH",
    codec.METADATA: "METADATA",
    codec.CLUSTER_METADATA: "CLUSTER_METADATA",
    codec.CREATE_TOPIC: "CREATE_TOPIC",
    codec.BOUNDARIES: "BOUNDARIES",
    codec.DELETE_TOPIC: "DELETE_TOPIC",
    replication_codec.REPLICA_FETCH: "REPLICA_FETCH",
    replication_codec.EPOCH_END_OFFSET: "EPOCH_END_OFFSET",
    replication_codec.CLUSTER_METADATA_V2: "CLUSTER_METADATA_V2",
    replication_codec.REPLICA_STATUS: "REPLICA_STATUS",
    sasl_codec.SASL_HANDSHAKE: "SASL_HANDSHAKE",
    sasl_codec.SASL_AUTHENTICATE: "SASL_AUTHENTICATE",
}

#: Upper bounds (seconds) of the request latency buckets: a waiting fetch may last up to
#: C{max_fetch_wait_ms} (30 s by default).
REQUEST_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Upper bounds (seconds) of the flush (fsync) latency buckets.
FLUSH_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def request_name(kind: int) -> str:
    """The C{type} label of a request type number."""
    return REQUEST_NAMES.get(kind, "unknown")


def error_name(code: int) -> str:
    """The C{error} label of a wire error code: its exception's name (L{twlog.errors})."""
    cls = ERRORS.get(code)
    return cls.__name__ if cls is not None else "Unknown" if code == UNKNOWN else f"Error{code}"


class LatencyHistogram:
    """A histogram of durations in plain integers: one bisection and two additions per observation."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        """Count one duration (a negative one, from a clock stepped back, counts as 0)."""
        if seconds < 0:
            seconds = 0.0
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative counts by upper bound, as Prometheus wants them (the last is C{+Inf})."""
        out, total = [], 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            total += count
            out.append((bound, total))
        return out


class BrokerMetrics:
    """One broker's metrics: L{registry}, fed by hooks into its factory, logs and broker.

    Build it before the logs start (it observes their flushes from then on).

    @param replicas: the broker's replica manager at scrape time (None: it has none, without ZooKeeper or
        before joining it).
    @param controller: the broker's controller candidacy at scrape time (None: none).
    """

    def __init__(self, broker: Broker, factory: BrokerFactory, logs: LogManager, *,
                 replicas: Callable[[], ReplicaManager | None] = lambda: None,
                 controller: Callable[[], Controller | None] = lambda: None) -> None:
        self.broker = broker
        self.factory = factory
        self.logs = logs
        self.replicas = replicas
        self.controller = controller
        self.request_latency: dict[int, LatencyHistogram] = {}
        self.flush_latency = LatencyHistogram(FLUSH_BUCKETS_S)
        #: fsyncs that failed (or were put off for lack of descriptors).
        self.flush_failures = 0
        #: The registry to scrape: this broker's families, and the process's (CPU, memory, descriptors).
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_BrokerCollector(self))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        factory.request_observer = self.request_done
        logs.observe_flushes(self.flush_done)

    def request_done(self, kind: int, seconds: float) -> None:
        """A request of type C{kind} was answered C{seconds} after it arrived."""
        histogram = self.request_latency.get(kind)
        if histogram is None:
            histogram = self.request_latency[kind] = LatencyHistogram(REQUEST_BUCKETS_S)
        histogram.observe(seconds)

    def flush_done(self, seconds: float, ok: bool) -> None:
        """A log's fsync ended after C{seconds}, successfully or not."""
        if ok:
            self.flush_latency.observe(seconds)
        else:
            self.flush_failures += 1

    def site(self) -> Site:
        """An HTTP site serving the metrics at C{/metrics} (gzipped when the scraper accepts it)."""
        root = Resource()
        root.putChild(b"", Data(b"twlog broker metrics: /metrics\n", "text/plain; charset=utf-8"))
        root.putChild(b"metrics", EncodingResourceWrapper(MetricsPage(self.registry), [GzipEncoderFactory()]))
        return _QuietSite(root)


def metrics_https(config: BrokerConfig, site: Site):
    """C{site} as the metrics port serves it: over HTTPS with C{--metrics-tls-cert} and C{--metrics-tls-key} (and
    a client certificate required with C{--metrics-tls-client-ca}), else as it is (HTTP).

    @raise TwlogError: a file cannot be used (one line naming it).
    """
    if config.metrics_cert is None or config.metrics_key is None:
        return site
    try:
        options = server_certificate_options(
            config.metrics_cert, config.metrics_key, config.metrics_client_ca, what="--metrics-tls-cert",
            options=("--metrics-tls-cert", "--metrics-tls-key", "--metrics-tls-client-ca"))
    except Exception as e:  # (TLSSetupError, or whatever else OpenSSL makes of the files: one line)
        raise TwlogError(f"cannot serve metrics over HTTPS: {openssl_reason(e)}") from None
    wrapped = TLSMemoryBIOFactory(options, False, site)
    wrapped.noisy = False
    return wrapped


async def serve_metrics(reactor, config: BrokerConfig, site: Site):
    """Listen with the metrics C{site} on C{--metrics-interface:--metrics-port} (HTTPS with C{--metrics-tls-cert});
    the listening port.

    @raise TwlogError: the port cannot be listened on, or a TLS file cannot be used (one line).
    """
    interface, port = config.metrics_interface, config.metrics_port
    served = metrics_https(config, site)
    try:
        return await tcp_endpoint(reactor, interface, port).listen(served)
    except CannotListenError as e:
        reason = getattr(e.socketError, "strerror", None) or str(e)
        raise TwlogError(f"cannot serve metrics on {interface}:{port} (--metrics-port): {reason}") from None


def metrics_url(config: BrokerConfig, port) -> str:
    """Where C{port} (listening) serves the metrics: C{http://HOST:PORT/metrics}, or https."""
    host = config.metrics_interface
    host = f"[{host}]" if ":" in host else host
    scheme = "http" if config.metrics_cert is None else "https"
    return f"{scheme}://{host}:{port.getHost().port}/metrics"


def advertised_metrics_url(config: BrokerConfig, port) -> str | None:
    """L{metrics_url} as others reach it (the broker's endpoints node, where the console finds it): served on every
    interface, at the broker's advertised host.  None: no metrics served."""
    if port is None:
        return None
    if config.metrics_interface not in ("0.0.0.0", "::", ""):
        return metrics_url(config, port)
    host = config.advertised_host
    host = f"[{host}]" if ":" in host else host
    return f"{'http' if config.metrics_cert is None else 'https'}://{host}:{port.getHost().port}/metrics"


class MetricsPage(Resource):
    """C{GET /metrics}: the registry in the text format the scraper asks for (Prometheus' or OpenMetrics').

    As prometheus_client's own handlers, C{?name[]=NAME} restricts the output to the families named.
    """

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.registry = registry

    def render_GET(self, request: Request) -> bytes:
        encoder, content_type = choose_encoder(request.getHeader("accept") or "")
        names = [n.decode("utf-8", "replace") for n in request.args.get(b"name[]", [])]
        registry = self.registry.restricted_registry(names) if names else self.registry
        request.setHeader("Content-Type", content_type)
        return encoder(registry)


class _QuietSite(Site):
    """A site that writes no access log line per scrape (one every few seconds, for ever)."""

    noisy = False

    @override
    def log(self, request: Request) -> None:
        pass


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class _BrokerCollector:
    """Reads the broker's counters and logs at scrape time (on the reactor thread)."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        broker, factory, budget = metrics.broker, metrics.factory, metrics.factory.budget
        info = InfoMetricFamily("twlog_broker", "This broker's id.")
        info.add_metric([], {"broker_id": str(broker.config.broker_id)})
        yield info
        yield from self._requests(metrics)
        yield from _authorization(broker)
        yield _counter("twlog_network_received_bytes", "Bytes received from clients.", factory.received_bytes)
        yield _counter("twlog_network_sent_bytes", "Bytes of responses written to clients, log bytes included.",
                       factory.sent_bytes)
        yield _counter("twlog_sendfile_sent_bytes", "Of twlog_network_sent_bytes_total, the log bytes sent with "
                       "sendfile(2).", factory.sendfile_bytes)
        yield _gauge("twlog_connections", "Open client connections.", len(factory.connections))
        yield _gauge("twlog_connections_max", "The connection cap (--max-connections).",
                     factory.max_connections if factory.max_connections is not None else float("nan"))
        yield _counter("twlog_connections_accepted", "Client connections accepted.", factory.accepted)
        yield _gauge("twlog_connections_max_per_ip", "The cap on one address's connections "
                     "(--max-connections-per-ip).",
                     factory.max_connections_per_ip if factory.max_connections_per_ip is not None else float("nan"))
        yield _gauge("twlog_connections_idle_timeout_seconds", "Connections idle this long are closed "
                     "(--idle-timeout-s; 0: never).", factory.idle_timeout_s)
        refused = CounterMetricFamily("twlog_connections_refused", "Client connections refused at a cap (none "
                                      "idle long enough to replace), by cap.", labels=["cap"])
        refused.add_metric(["max_connections"], factory.refused)
        refused.add_metric(["max_connections_per_ip"], factory.refused_per_ip)
        yield refused
        reaped = CounterMetricFamily("twlog_connections_reaped", "Idle client connections closed to make room "
                                     "for a new one at a cap, by cap.", labels=["cap"])
        reaped.add_metric(["max_connections"], factory.reaped)
        reaped.add_metric(["max_connections_per_ip"], factory.reaped_per_ip)
        yield reaped
        yield _counter("twlog_connections_idle_closed", "Client connections closed after --idle-timeout-s without "
                       "a whole request.", factory.idle_closed)
        yield _gauge("twlog_buffered_request_bytes", "Bytes of requests buffered over all connections.",
                     budget.total)
        yield _gauge("twlog_buffered_request_bytes_limit", "The bound on buffered request bytes "
                     "(--max-buffered-request-bytes).", budget.limit)
        yield _gauge("twlog_request_budget_stopped_connections", "Connections not read because the buffered request "
                     "bytes are at the bound.", budget.stopped)
        yield _counter("twlog_request_budget_stops", "Times a connection stopped being read because the buffered "
                       "request bytes were at the bound.", budget.holds)
        yield _counter("twlog_request_timeouts", "Connections closed because a request frame did not arrive whole "
                       "within --request-timeout-s of its first byte.", factory.late_frames.total)
        yield _gauge("twlog_connections_waiting_turn", "Connections with requests ready, waiting for their turn.",
                     factory.turns.waiting)
        yield _gauge("twlog_waiting_fetches", "WAIT_FETCH requests held until data arrives or their wait ends.",
                     broker.waiting_fetches())
        flushes = HistogramMetricFamily("twlog_flush_duration_seconds", "Time from starting a log's fsync (on "
                                        "a pool thread) to its end, for fsyncs that succeeded.")
        flushes.add_metric([], metrics.flush_latency.buckets(), metrics.flush_latency.sum)
        yield flushes
        yield _counter("twlog_flush_failures", "fsyncs that failed, or were put off for lack of descriptors.",
                       metrics.flush_failures)
        yield from self._partitions(metrics.logs)
        yield from _authentication(factory.authentication)
        yield from _replication(metrics.replicas(), metrics.controller())

    def _requests(self, metrics: BrokerMetrics) -> Iterator[Metric]:
        requests = CounterMetricFamily("twlog_requests", "Requests received, by type.", labels=["type"])
        for kind, count in sorted(metrics.factory.requests.items()):
            requests.add_metric([request_name(kind)], count)
        yield requests
        errors = CounterMetricFamily(
            "twlog_request_errors", "Error codes answered, by request type and code: one per failed part of "
            "a multi-part request; a refused fire-and-forget produce counts too.", labels=["type", "code", "error"],
        )
        for (kind, code), count in sorted(metrics.broker.error_counts.items()):
            errors.add_metric([request_name(kind), str(code), error_name(code)], count)
        yield errors
        latency = HistogramMetricFamily(
            "twlog_request_duration_seconds", "Time from a request's arrival until its response was written "
            "(waiting fetches included), by type.", labels=["type"],
        )
        for kind, histogram in sorted(metrics.request_latency.items()):
            latency.add_metric([request_name(kind)], histogram.buckets(), histogram.sum)
        yield latency

    def _partitions(self, logs: LogManager) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        families = {
            "size": GaugeMetricFamily("twlog_log_size_bytes", "Bytes on disk of a partition's segments.",
                                      labels=labels),
            "segments": GaugeMetricFamily("twlog_log_segments", "Segment files of a partition.", labels=labels),
            "start": GaugeMetricFamily("twlog_log_start_offset", "A partition's first offset still on disk.",
                                       labels=labels),
            "flushed": GaugeMetricFamily("twlog_log_flushed_offset", "A partition's latest offset visible to "
                                         "consumers (flushed).", labels=labels),
            "end": GaugeMetricFamily("twlog_log_end_offset", "Where a partition's next append lands (flushed or "
                                     "not).", labels=labels),
            "failed": GaugeMetricFamily("twlog_log_failed", "1 when a write or fsync failed in the partition: it "
                                        "takes no more messages until the broker restarts.", labels=labels),
        }
        for (topic, partition), log in sorted(logs.logs().items()):
            values = [topic, str(partition)]
            families["size"].add_metric(values, log.size_bytes())
            families["segments"].add_metric(values, len(log.segments))
            families["start"].add_metric(values, log.start_offset)
            families["flushed"].add_metric(values, log.flushed_offset)
            families["end"].add_metric(values, log.end_offset)
            families["failed"].add_metric(values, 0 if log.failed is None else 1)
        yield from families.values()


def _authentication(auth: Authentication | None) -> Iterator[Metric]:
    """Authentications that succeeded and failed, by mechanism (C{TLS}: a client certificate), and connections
    closed for not authenticating (docs/security.md, "Authentication")."""
    if auth is None:
        return
    for name, counts, what in (("twlog_authentication_successes", auth.successes, "succeeded"),
                               ("twlog_authentication_failures", auth.failures, "failed")):
        family = CounterMetricFamily(name, f"Client authentications that {what}, by mechanism (TLS: a client "
                                     "certificate).", labels=["mechanism"])
        for mechanism, count in sorted(counts.items()):
            family.add_metric([mechanism], count)
        yield family
    yield _counter("twlog_authentication_refused_requests", "Connections closed for a request sent before "
                   "authenticating (--require-auth).", auth.refused.total)
    yield _counter("twlog_authentication_timeouts", "Connections closed for not authenticating within "
                   "--request-timeout-s (--require-auth).", auth.late.total)


def _authorization(broker: Broker) -> Iterator[Metric]:
    """With C{--acls}: the requests refused, by the operation and the resource type they lacked."""
    if broker.guard is None:
        return
    refusals = CounterMetricFamily("twlog_authorization_refusals", "Requests the ACLs refused (--acls), by the "
                                   "operation and the resource type they needed.",
                                   labels=["operation", "resource_type"])
    for (operation, resource_type), count in sorted(broker.guard.refusals.items()):
        refusals.add_metric([operation, resource_type], count)
    yield refusals


def _replication(manager: ReplicaManager | None, controller: Controller | None) -> Iterator[Metric]:
    """The replication families, Kafka's metrics under twlog's names: zeros on a broker with no replica manager."""
    leaders = len(manager.leaders) if manager is not None else 0
    yield _gauge("twlog_under_replicated_partitions", "Partitions this broker leads whose ISR is smaller than their "
                 "replicas (Kafka's ReplicaManager UnderReplicatedPartitions).",
                 manager.under_replicated() if manager is not None else 0)
    yield _gauge("twlog_under_min_isr_partitions", "Partitions this broker leads whose ISR is below "
                 "min.insync.replicas: ack=all is refused (ReplicaManager UnderMinIsrPartitionCount).",
                 manager.under_min_isr() if manager is not None else 0)
    active = controller is not None and controller.active
    yield _gauge("twlog_active_controller", "1 on the active controller, else 0 (KafkaController "
                 "ActiveControllerCount).", int(active))
    yield _gauge("twlog_offline_partitions", "Replicated partitions with no live leader, as the active controller "
                 "last found them; 0 on the other brokers (KafkaController OfflinePartitionsCount).",
                 len(controller.offline) if active else 0)
    yield _counter("twlog_isr_shrinks", "ISR changes this broker's leaders wrote that took replicas out "
                   "(ReplicaManager IsrShrinksPerSec, as a count).", manager.isr_shrinks if manager is not None else 0)
    yield _counter("twlog_isr_expands", "ISR changes this broker's leaders wrote that put replicas in "
                   "(ReplicaManager IsrExpandsPerSec, as a count).", manager.isr_expands if manager is not None else 0)
    yield _gauge("twlog_leader_partitions", "Replicated partitions this broker leads (ReplicaManager LeaderCount).",
                 leaders)
    yield _gauge("twlog_replica_partitions", "Replicated partitions this broker leads or follows (ReplicaManager "
                 "PartitionCount).", leaders + len(manager.followers) if manager is not None else 0)
    yield _gauge("twlog_waiting_produces", "ack=all message sets held until the ISR holds them, one per partition "
                 "of a waiting ACK_PRODUCE (DelayedOperationPurgatory PurgatorySize delayedOperation=Produce).",
                 manager.waiting_acks() if manager is not None else 0)
    labels = ["topic", "partition", "replica"]
    lag_bytes = GaugeMetricFamily("twlog_replica_lag_bytes", "On a partition's leader, per follower: the leader's "
                                  "end less the follower's, as of its latest fetch (FetcherLagMetrics ConsumerLag, "
                                  "in bytes).", labels=labels)
    lag_seconds = GaugeMetricFamily("twlog_replica_lag_seconds", "On a partition's leader, per follower: seconds "
                                    "since the follower was last caught up; past --replica-lag-time-ms it leaves "
                                    "the ISR.", labels=labels)
    for topic, partition, replica, behind, seconds in (manager.follower_lags() if manager is not None else ()):
        values = [topic, str(partition), str(replica)]
        lag_bytes.add_metric(values, behind)
        lag_seconds.add_metric(values, seconds)
    yield lag_bytes
    yield lag_seconds
