"""The brokers' listeners in ZooKeeper (twlog.coord.endpoints): the value, its parsing, and a TLS client's reading."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from twlog.coord.endpoints import PLAINTEXT, SSL, endpoints_value, listener_values, metrics_url_of, parse_endpoints
from twlog.coord.layout import ClusterLayout


class EndpointsTests(SynchronousTestCase):
    def test_value_is_kafka_style_json(self) -> None:
        value = endpoints_value("127.0.0.1", 9092, 9093)
        self.assertEqual(json.loads(value), {"version": 1, "endpoints": ["PLAINTEXT://127.0.0.1:9092",
                                                                         "SSL://127.0.0.1:9093"]})
        self.assertEqual(parse_endpoints(value), {PLAINTEXT: ("127.0.0.1", 9092), SSL: ("127.0.0.1", 9093)})
        self.assertEqual(parse_endpoints(endpoints_value("::1", 9092, None)), {PLAINTEXT: ("::1", 9092)})
        self.assertEqual(json.loads(endpoints_value("::1", None, 9093))["endpoints"], ["SSL://[::1]:9093"])

    def test_metrics_url(self) -> None:
        """A broker serving metrics says where (the console scrapes them); a node without it, from an older twlog
        or a broker without --metrics-port, is read as before, with no URL."""
        value = endpoints_value("127.0.0.1", 9092, None, "https://127.0.0.1:9192/metrics")
        self.assertEqual(json.loads(value), {"version": 1, "endpoints": ["PLAINTEXT://127.0.0.1:9092"],
                                             "metrics_url": "https://127.0.0.1:9192/metrics"})
        self.assertEqual(parse_endpoints(value), {PLAINTEXT: ("127.0.0.1", 9092)})
        self.assertEqual(metrics_url_of(value), "https://127.0.0.1:9192/metrics")
        for older in (endpoints_value("127.0.0.1", 9092, None), b'{"version":1,"endpoints":[],"metrics_url":7}',
                      b'{"metrics_url":"file:///etc/passwd"}', b"not json"):
            self.assertIsNone(metrics_url_of(older), older)

    def test_bad_values(self) -> None:
        for value, expected in [
            (b"not json", "are not JSON"),
            (b'{"version":1}', "no list of endpoints"),
            (b'{"endpoints":[1]}', "no list of endpoints"),
            (b'{"endpoints":["SASL_SSL://h:1"]}', "is not PLAINTEXT or SSL://host:port"),
            (b'{"endpoints":["SSL://h:port"]}', "does not end in :<port>"),
        ]:
            with self.assertRaises(ValueError) as raised:
                parse_endpoints(value)
            self.assertIn(expected, str(raised.exception))

    def test_plaintext_reads_the_registrations_as_they_are(self) -> None:
        brokers = {"0": b"h-1:127.0.0.1:9092", "1": None}
        self.assertEqual(listener_values(brokers, {}, PLAINTEXT), (brokers, []))

    def test_tls_locates_each_broker_at_its_tls_listener(self) -> None:
        """A TLS client's layout names the TLS ports; a live broker without a TLS listener is not live to it
        (its partitions offline, with a problem each), nor is one that has not written its listeners."""
        brokers = {"0": b"h-1:127.0.0.1:9092", "1": b"h-1:127.0.0.1:9094", "2": b"h-1:127.0.0.1:9096", "3": None}
        endpoints = {"0": endpoints_value("127.0.0.1", 9092, 9093), "1": endpoints_value("127.0.0.1", 9094, None),
                     "3": endpoints_value("127.0.0.1", 9098, 9099)}
        values, problems = listener_values(brokers, endpoints, SSL)
        self.assertEqual(values, {"0": b"127.0.0.1:9093", "1": None, "2": None, "3": None})
        self.assertEqual(len(problems), 2)
        self.assertIn("broker 1 has no SSL listener", problems[0])
        self.assertIn("broker 2 has not registered its listeners", problems[1])
        layout, _ = ClusterLayout.from_registrations(values, {"t": {"0": b"2", "1": b"1"}},
                                                     {"t": {"0": b"2", "1": b"1"}})
        self.assertEqual(dict(layout.brokers), {0: ("127.0.0.1", 9093)})
        self.assertEqual([tp.name for tp in layout.offline_partitions("t")], ["1-0"])

    def test_a_bad_endpoints_value_is_a_problem_not_a_crash(self) -> None:
        values, problems = listener_values({"0": b"h-1:127.0.0.1:9092"}, {"0": b"{"}, SSL)
        self.assertEqual(values, {"0": None})
        self.assertEqual(len(problems), 1)
        self.assertIn("broker 0: broker endpoints", problems[0])
