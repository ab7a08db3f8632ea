"""The brokers' metrics as the console reads them (parsing, percentiles, rates) and the sampler's series."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.console.cluster_support import FakeCluster
from twlog.console.metrics import BrokerFigures, parse_metrics, rate


class MetricsTests(SynchronousTestCase):
    def test_parse(self) -> None:
        """The figures the console shows, whether a counter's family is named with _total or not; request
        latency leaves out the types that wait by design (WAIT_FETCH, REPLICA_FETCH)."""
        text = ("# TYPE twlog_network_received_bytes counter\ntwlog_network_received_bytes_total 10\n"
                "# TYPE twlog_network_sent_bytes_total counter\ntwlog_network_sent_bytes_total 20\n"
                "# TYPE twlog_connections gauge\ntwlog_connections 4\n"
                "# TYPE twlog_leader_partitions gauge\ntwlog_leader_partitions 2\n"
                "# TYPE twlog_request_duration_seconds histogram\n"
                'twlog_request_duration_seconds_bucket{le="0.001",type="PRODUCE"} 1\n'
                'twlog_request_duration_seconds_bucket{le="+Inf",type="PRODUCE"} 2\n'
                'twlog_request_duration_seconds_bucket{le="0.001",type="WAIT_FETCH"} 0\n'
                'twlog_request_duration_seconds_bucket{le="+Inf",type="WAIT_FETCH"} 50\n'
                "# TYPE twlog_log_size_bytes gauge\n"
                'twlog_log_size_bytes{partition="0",topic="t"} 123\n')
        figures = parse_metrics(text, 7.0)
        self.assertEqual((figures.t, figures.bytes_in, figures.bytes_out, figures.connections,
                          figures.leader_partitions, figures.messages_in), (7.0, 10, 20, 4, 2, None))
        self.assertEqual(figures.latency_buckets, ((0.001, 1.0), (float("inf"), 2.0)))
        self.assertEqual(figures.sizes, {("t", "0"): 123})
        with self.assertRaises(ValueError):
            parse_metrics("this is { not prometheus", 0)

    def test_percentiles(self) -> None:
        """The bucket bound holding the quantile, in ms; past the last finite bucket, that bound; since the
        previous scrape when it saw requests since; None without requests."""
        figures = BrokerFigures(t=1, latency_buckets=((0.001, 51), (0.01, 99), (0.1, 100), (float("inf"), 101)))
        self.assertEqual([figures.percentile_ms(q) for q in (0.5, 0.9, 0.99, 0.999)], [1.0, 10.0, 100.0, 100.0])
        earlier = BrokerFigures(t=0, latency_buckets=((0.001, 51), (0.01, 51), (0.1, 51), (float("inf"), 51)))
        self.assertEqual(figures.percentile_ms(0.5, earlier), 10.0)
        self.assertIsNone(BrokerFigures(t=1).percentile_ms(0.5))

    def test_rate(self) -> None:
        before, now = BrokerFigures(t=0, bytes_in=100), BrokerFigures(t=10, bytes_in=600)
        self.assertEqual(rate(now, before, "bytes_in"), 50.0)
        self.assertIsNone(rate(BrokerFigures(t=20, bytes_in=5), now, "bytes_in"))  # (a restart: the counter reset)
        self.assertIsNone(rate(now, None, "bytes_in"))
        self.assertIsNone(rate(now, before, "messages_in"))


class SamplerTests(SynchronousTestCase):
    def test_series(self) -> None:
        """Every interval: broker.<id>.* and cluster.* rates, connections, and topic.<topic>.size (the leaders'
        bytes), into the history; a broker whose metrics do not answer is a problem, and left out."""
        cluster = FakeCluster(self)
        cluster.set_metrics(0, received=0, sent=0, connections=2, sizes={("rep", "0"): 40, ("rep", "1"): 1})
        cluster.set_metrics(1, received=0, sent=0, connections=1, sizes={("rep", "1"): 2, ("rep", "0"): 39})
        cluster.sampler.start()
        cluster.set_metrics(0, received=100, sent=200, connections=3, sizes={("rep", "0"): 50, ("rep", "1"): 1})
        cluster.metrics["http://127.0.0.1:9193/metrics"] = None
        cluster.clock.advance(10)
        history = cluster.context.history
        now = cluster.clock.seconds()
        self.assertEqual(history.latest("broker.0.bytes_in"), (now, 10.0))
        self.assertEqual(history.latest("broker.0.bytes_out"), (now, 20.0))
        self.assertEqual(history.series("broker.0.connections", 0), [(now - 10, 2.0), (now, 3.0)])
        self.assertEqual(history.latest("cluster.bytes_in"), (now, 10.0))
        self.assertEqual(history.series("topic.rep.size", 0), [(now - 10, 42.0), (now, 50.0)])
        self.assertIsNone(history.latest("broker.0.messages_in"))
        self.assertEqual(cluster.sampler.problems, ["cannot read the metrics of broker 1 (127.0.0.1:9093): "
                                                    "connection refused by http://127.0.0.1:9193/metrics"])
        cluster.sampler.stop()

    def test_a_slow_sample_is_not_piled_on(self) -> None:
        """While a sample waits for a broker, the next tick does not start another."""
        from twisted.internet.defer import Deferred

        cluster = FakeCluster(self)
        waiting: list[Deferred] = []

        def slow(url: str) -> Deferred:
            waiting.append(Deferred())
            return waiting[-1]

        cluster.sampler.store._fetch = slow
        cluster.sampler.tick()
        cluster.sampler.tick()
        self.assertEqual(len(waiting), 2)  # (one per broker, once)
        cluster.sampler.stop()
