# -*- test-case-name: tests.console.test_sampler -*-
"""The console's sampler of the brokers' metrics: every C{--sample-interval} seconds it scrapes each live broker's
metrics (at the C{metrics_url} of its endpoints node), all at once, each bounded by the console's timeout, and
records into C{context.history} (docs/console.md, "Series"):

  - C{broker.<id>.bytes_in}, C{.bytes_out}, C{.messages_in} (per second) and C{.connections};
  - C{cluster.bytes_in}, C{cluster.bytes_out}, C{cluster.messages_in}: the brokers' rates summed;
  - C{topic.<topic>.size}: bytes on the leaders of the topic's partitions (every broker of a 0.7 topic),
    from the brokers' C{twlog_log_size_bytes}: one scrape per broker however many topics there are.

The latest figures are kept (L{Sampler.topic_sizes}, L{Sampler.topic_rates}, the L{MetricsStore}) for the API.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger

from twlog.console.cluster import reader_of
from twlog.console.context import ConsoleContext
from twlog.console.http import ApiError
from twlog.console.metrics import BrokerFigures, MetricsStore, http_fetcher, rate
from twlog.coord.layout import ClusterLayout
from twlog.partition import TopicPartition, address_text

_log = Logger(namespace="twlog.console")

#: The counters turned into per-second series, and the gauges recorded as they are.
RATES = ("bytes_in", "bytes_out", "messages_in")
GAUGES = ("connections",)


def broker_name(broker_id: int, address: tuple[str, int] | None) -> str:
    """C{broker 1 (127.0.0.1:9092)}: a broker as the banner names it."""
    return f"broker {broker_id}" + (f" ({address_text(*address)})" if address else "")


def partition_owners(layout: ClusterLayout) -> dict[tuple[int, str, str], TopicPartition]:
    """Whose copy of each partition counts: (broker id, topic, the number the broker's metrics label it by) ->
    the partition.  A 0.7 partition C{<b>-<n>} is broker C{b}'s C{n}; a replicated partition C{p} its leader's
    C{p}."""
    owners: dict[tuple[int, str, str], TopicPartition] = {}
    for topic, partitions in layout.partitions.items():
        for tp in partitions:
            leader = layout.leader(tp) if tp.fixed_leader is None else tp.fixed_leader
            if leader is not None:
                owners[(leader, topic, str(tp.number))] = tp
    return owners


class Sampler:
    """Samples the brokers' metrics every C{interval_s} (C{context.parts["sampler"]})."""

    def __init__(self, context: ConsoleContext, interval_s: float, fetch=None) -> None:
        self.context = context
        self.interval_s = interval_s
        self._fetch = fetch or http_fetcher(context.reactor, context.timeout_s, context.options.tls)
        self.store = MetricsStore(self._fetch, context.reactor)
        #: The latest sample's figures: topic -> bytes (on the leaders), and bytes appended per second.
        self.topic_sizes: dict[str, float] = {}
        self.partition_sizes: dict[str, dict[str, float]] = {}
        self.topic_rates: dict[str, float | None] = {}
        #: When the latest sample was taken (reactor seconds), and what it could not reach.
        self.sampled_at: float | None = None
        self.problems: list[str] = []
        self._loop = task.LoopingCall(self.tick)
        self._loop.clock = context.reactor
        self._running: defer.Deferred | None = None
        context.parts["sampler"] = self

    def start(self) -> None:
        self._loop.start(self.interval_s, now=True).addErrback(
            lambda f: _log.failure("console: the sampler stopped", f))

    def stop(self) -> defer.Deferred | None:
        """Stop sampling; the Deferred fires once the scrapes' kept connections are closed."""
        if self._loop.running:
            self._loop.stop()
        if self._running is not None and not self._running.called:
            self._running.cancel()
        close = getattr(self._fetch, "close", None)
        return close() if close is not None else None

    def tick(self) -> None:
        """One sample (skipped while the previous one still runs: a sample never piles on another)."""
        self.sample_now()

    def sample_now(self) -> defer.Deferred:
        """Fires once a sample has been taken: the one under way, or one started now (its failure logged)."""
        if self._running is None or self._running.called:
            self._running = defer.ensureDeferred(self.sample())
            self._running.addErrback(self._failed)
        done: defer.Deferred = defer.Deferred()
        self._running.addBoth(lambda result: (done.callback(None), result)[1])
        return done

    def _failed(self, failure) -> None:
        if failure.check(ApiError, defer.CancelledError):
            return None  # (ZooKeeper down: said by the API; stopped)
        _log.failure("console: a sample failed", failure)

    async def sample(self) -> None:
        """Scrape every live broker, record the series, and keep the figures."""
        view = reader_of(self.context).ready_view()
        layout = view.layout()
        figures, problems = await self.scrape(layout)
        now = self.context.now()
        history = self.context.history
        totals: dict[str, float | None] = {name: None for name in RATES}
        for broker_id, found in figures.items():
            before = self.store.previous(broker_id)
            for name in RATES:
                value = rate(found, before, name)
                history.record(f"broker.{broker_id}.{name}", now, value)
                if value is not None:
                    totals[name] = (totals[name] or 0.0) + value
            for name in GAUGES:
                history.record(f"broker.{broker_id}.{name}", now, getattr(found, name))
        for name, value in totals.items():
            history.record(f"cluster.{name}", now, value)
        self._topics(layout, figures, now)
        self.sampled_at, self.problems = now, problems
        self.store.forget(layout.brokers)

    async def scrape(self, layout: ClusterLayout) -> tuple[dict[int, BrokerFigures], list[str]]:
        """Scrape every live broker's metrics at once: the figures of those answered, and one line per one not."""
        endpoints = await reader_of(self.context).endpoints()
        problems: list[str] = []
        asked: list[tuple[int, Any]] = []
        for broker_id in sorted(layout.brokers):
            url = endpoints.get(broker_id, {}).get("metrics_url")
            if url is None:
                continue  # (no --metrics-port: its figures are unknown, not a problem)
            asked.append((broker_id, defer.ensureDeferred(self.store.scrape(broker_id, url))))
        answers = await defer.DeferredList([d for _, d in asked], consumeErrors=True)
        figures: dict[int, BrokerFigures] = {}
        for (broker_id, _), (ok, result) in zip(asked, answers):
            if ok:
                figures[broker_id] = result
            else:
                why = result.getErrorMessage().splitlines()[0] if result.getErrorMessage() else result.type.__name__
                if result.check(defer.TimeoutError, defer.CancelledError):
                    why = f"no answer within {self.context.timeout_s:g} s"
                problems.append(f"cannot read the metrics of {broker_name(broker_id, layout.brokers.get(broker_id))}"
                                f": {why}")
        return figures, problems

    def _topics(self, layout: ClusterLayout, figures: dict[int, BrokerFigures], now: float) -> None:
        owners = partition_owners(layout)
        sizes: dict[str, float] = {}
        partition_sizes: dict[str, dict[str, float]] = {}
        appended: dict[str, float | None] = {}
        for (broker_id, topic, number), tp in owners.items():
            found = figures.get(broker_id)
            key = (topic, number)
            if found is None or key not in found.sizes:
                continue
            sizes[topic] = sizes.get(topic, 0.0) + found.sizes[key]
            partition_sizes.setdefault(topic, {})[tp.name] = found.sizes[key]
            before = self.store.previous(broker_id)
            if before is not None and key in before.ends and key in found.ends and found.t > before.t:
                grown = max(0.0, found.ends[key] - before.ends[key]) / (found.t - before.t)
                appended[topic] = (appended.get(topic) or 0.0) + grown
            else:
                appended.setdefault(topic, None)
        for topic, size in sizes.items():
            self.context.history.record(f"topic.{topic}.size", now, size)
        self.topic_sizes, self.topic_rates, self.partition_sizes = sizes, appended, partition_sizes

    def topic_partition_sizes(self, topic: str) -> dict[str, float]:
        """The latest sample's bytes of each partition of C{topic} (by name) on its leader."""
        return self.partition_sizes.get(topic, {})


def sampler_of(context: ConsoleContext) -> Sampler | None:
    return context.parts.get("sampler")


__all__ = ["Sampler", "broker_name", "partition_owners", "sampler_of"]
