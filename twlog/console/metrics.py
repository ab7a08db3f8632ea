# -*- test-case-name: tests.console.test_metrics -*-
"""The brokers' Prometheus metrics, as the console reads them: scraped from each broker's C{metrics_url} (its
endpoints node), parsed with C{prometheus_client}'s parser, and kept (the last two scrapes per broker) so rates
can be given.

A scrape keeps only the figures the console shows (L{BrokerFigures}), so a broker with thousands of partitions
costs one parse, not a copy of its every sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.defer import Deferred
from twisted.web.client import Agent, HTTPConnectionPool, readBody
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from twlog.client.tls import TLSSettings

#: Request types left out of request latency: they wait for data (or for the follower's next fetch) by design,
#: so their time says nothing of how fast the broker answers.
WAITING_TYPES = frozenset({"WAIT_FETCH", "REPLICA_FETCH"})

#: The samples a scrape asks for (C{?name[]=...}, as prometheus_client's handlers and the brokers' take it): the
#: text to parse is then a few lines per partition, not every family's.
SCRAPED = ("twlog_network_received_bytes_total", "twlog_network_sent_bytes_total", "twlog_messages_in_total",
           "twlog_connections", "twlog_leader_partitions", "twlog_replica_partitions",
           "twlog_request_duration_seconds_bucket", "twlog_log_size_bytes", "twlog_log_end_offset")
SCRAPE_QUERY = "&".join(f"name[]={name}" for name in SCRAPED)

#: The most bytes of one scrape read (a broker with 10,000 partitions answers some megabytes).
MAX_SCRAPE_BYTES = 64 * 1024 * 1024


@attrs.frozen
class BrokerFigures:
    """What one scrape of a broker said, at C{t} (reactor seconds)."""

    t: float
    bytes_in: float | None = None  # counters
    bytes_out: float | None = None
    messages_in: float | None = None
    connections: float | None = None  # gauges
    leader_partitions: float | None = None
    replica_partitions: float | None = None
    #: The request-duration histogram summed over request types (but L{WAITING_TYPES}): (upper bound s,
    #: cumulative count), ascending.
    latency_buckets: tuple[tuple[float, float], ...] = ()
    #: Bytes on disk per (topic, partition number) (twlog_log_size_bytes), and the end offsets (bytes appended:
    #: twlog's offsets are byte positions; twlog_log_end_offset).
    sizes: dict[tuple[str, str], float] = attrs.field(factory=dict)
    ends: dict[tuple[str, str], float] = attrs.field(factory=dict)

    def percentile_ms(self, q: float, earlier: BrokerFigures | None = None) -> float | None:
        """The C{q}-quantile (0.5, 0.99, 0.999) of request latency, in ms, from the histogram's buckets (since
        C{earlier}'s scrape when given and it saw requests since, else since the broker started); None: no
        requests.  The bucket's upper bound, Prometheus' C{histogram_quantile} less its interpolation."""
        buckets = dict(self.latency_buckets)
        if earlier is not None and earlier.latency_buckets:
            before = dict(earlier.latency_buckets)
            delta = {le: count - before.get(le, 0.0) for le, count in buckets.items()}
            if delta and max(delta.values()) > 0 and min(delta.values()) >= 0:
                buckets = delta
        ordered = sorted(buckets.items())
        if not ordered or ordered[-1][1] <= 0:
            return None
        total = ordered[-1][1]
        rank = q * total
        finite = [le for le, _ in ordered if le != float("inf")]
        for le, count in ordered:
            if count >= rank:
                if le == float("inf"):  # (beyond the last finite bucket: say its bound, the most known)
                    return finite[-1] * 1000 if finite else None
                return le * 1000
        return None


def parse_metrics(text: str, t: float) -> BrokerFigures:
    """The figures of one scrape's text (the Prometheus text format).  @raise ValueError: not that format."""
    found: dict[str, Any] = {}
    buckets: dict[float, float] = {}
    sizes: dict[tuple[str, str], float] = {}
    ends: dict[tuple[str, str], float] = {}
    simple = {"twlog_network_received_bytes": "bytes_in", "twlog_network_sent_bytes": "bytes_out",
              "twlog_messages_in": "messages_in", "twlog_connections": "connections",
              "twlog_leader_partitions": "leader_partitions", "twlog_replica_partitions": "replica_partitions"}
    for family in text_string_to_metric_families(text):
        name = family.name.removesuffix("_total")  # (a counter's family is named with _total or without)
        if name in simple:
            for sample in family.samples:
                if sample.name in (name, name + "_total"):
                    found[simple[name]] = found.get(simple[name], 0.0) + sample.value
        elif name == "twlog_request_duration_seconds":
            for sample in family.samples:
                if sample.name.endswith("_bucket") and sample.labels.get("type") not in WAITING_TYPES:
                    le = float(sample.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + sample.value
        elif name in ("twlog_log_size_bytes", "twlog_log_end_offset"):
            into = sizes if name == "twlog_log_size_bytes" else ends
            for sample in family.samples:
                into[(sample.labels.get("topic", ""), sample.labels.get("partition", ""))] = sample.value
    return BrokerFigures(t=t, latency_buckets=tuple(sorted(buckets.items())), sizes=sizes, ends=ends, **found)


def rate(now: BrokerFigures | None, before: BrokerFigures | None, field: str) -> float | None:
    """A counter's per-second rate between two scrapes; None with fewer, or a reset (the broker restarted)."""
    if now is None or before is None:
        return None
    a, b = getattr(before, field), getattr(now, field)
    if a is None or b is None or now.t <= before.t or b < a:
        return None
    return (b - a) / (now.t - before.t)


class MetricsStore:
    """The last two scrapes of each broker, and the scraping.

    @param fetch: C{fetch(url) -> Deferred[bytes]} (L{http_fetcher}); tests give a fake.
    """

    def __init__(self, fetch: Callable[[str], Deferred], clock) -> None:
        self._fetch = fetch
        self._clock = clock
        self._scrapes: dict[int, tuple[BrokerFigures | None, BrokerFigures]] = {}

    async def scrape(self, broker_id: int, url: str) -> BrokerFigures:
        """Scrape C{url} as C{broker_id}'s metrics now; keep it.  @raise Exception: as the fetch, or ValueError."""
        body = await self._fetch(url)
        figures = parse_metrics(body.decode("utf-8", errors="replace"), self._clock.seconds())
        previous = self._scrapes.get(broker_id)
        self._scrapes[broker_id] = (previous[1] if previous else None, figures)
        return figures

    def latest(self, broker_id: int) -> BrokerFigures | None:
        scrapes = self._scrapes.get(broker_id)
        return scrapes[1] if scrapes else None

    def previous(self, broker_id: int) -> BrokerFigures | None:
        scrapes = self._scrapes.get(broker_id)
        return scrapes[0] if scrapes else None

    def rate(self, broker_id: int, field: str) -> float | None:
        return rate(self.latest(broker_id), self.previous(broker_id), field)

    def forget(self, keep: Iterable[int]) -> None:
        """Drop the scrapes of brokers not in C{keep} (gone from the cluster)."""
        keep = set(keep)
        for broker_id in [b for b in self._scrapes if b not in keep]:
            del self._scrapes[broker_id]


@implementer(IPolicyForHTTPS)
class TLSPolicy:
    """HTTPS metrics (a broker's C{--metrics-tls-cert}) checked against the client settings' CA (C{--client-config}'s
    C{ssl.ca.location}; the platform's trust without one), with their client certificate if any."""

    def __init__(self, tls: TLSSettings) -> None:
        self.tls = tls

    def creatorForNetloc(self, hostname: bytes, port: int):
        return self.tls.twisted_options(hostname.decode("ascii"))


def http_fetcher(reactor, timeout_s: float, tls: TLSSettings | None = None) -> Callable[[str], Deferred]:
    """C{fetch(url)}: GET C{url} (asking for the L{SCRAPED} samples only) with Twisted's Agent, its body (at most
    L{MAX_SCRAPE_BYTES}) within C{timeout_s}.  @raise ValueError: an answer other than 200."""
    pool = HTTPConnectionPool(reactor, persistent=True)  # (one connection per broker, kept between scrapes)
    pool.maxPersistentPerHost = 1
    agent = Agent(reactor, connectTimeout=timeout_s, pool=pool) if tls is None else \
        Agent(reactor, contextFactory=TLSPolicy(tls), connectTimeout=timeout_s, pool=pool)

    async def fetch(url: str) -> bytes:
        asked = url + ("&" if "?" in url else "?") + SCRAPE_QUERY
        response = await agent.request(b"GET", asked.encode("ascii"))
        if response.code != 200:
            raise ValueError(f"{url} answered HTTP {response.code}")
        if response.length is not None and isinstance(response.length, int) and response.length > MAX_SCRAPE_BYTES:
            raise ValueError(f"{url} answered {response.length} bytes, more than {MAX_SCRAPE_BYTES}")
        return await readBody(response)

    def start(url: str) -> Deferred:
        d = Deferred.fromCoroutine(fetch(url))
        d.addTimeout(timeout_s, reactor)
        return d

    start.close = pool.closeCachedConnections  # type: ignore[attr-defined]
    return start
