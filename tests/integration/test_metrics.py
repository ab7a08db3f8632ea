"""A broker's /metrics over real HTTP: started from twistd twlog's options with --metrics-port 0, scraped
after real produces and fetches, and parsed with prometheus_client's parser."""

from __future__ import annotations

import gzip
import socket

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor
from twisted.internet.error import ConnectionRefusedError
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, readBody
from twisted.web.http_headers import Headers

from tests.integration.broker import raw_connect
from twlog.broker.service import BrokerService
from twlog.broker.tap import Options
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, FetchRequest, ProduceRequest
from twlog.storage.message import encode_message_set


def broker_from_options(testcase: TestCase, *argv: str) -> BrokerService:
    """A broker built as twistd twlog builds it, from C{argv}, on any free port, in its own directory."""
    options = Options()
    options.parseOptions(["--port", "0", "--log-dir", testcase.mktemp(), *argv])
    service = BrokerService(options.config, reactor, stop_reactor_on_error=False)
    return service


async def started(testcase: TestCase, service: BrokerService) -> BrokerService:
    service.startService()
    testcase.addCleanup(lambda: service.stopService() if service.running else None)
    await service.listening
    return service


async def get(url: str, headers: dict[bytes, list[bytes]] | None = None):
    """GET C{url}: the response and its body."""
    response = await Agent(reactor).request(b"GET", url.encode(), Headers(headers or {}))
    return response, await readBody(response)


def samples(text: str) -> dict[tuple, float]:
    """Every sample of a text-format page, by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class MetricsOverHTTPTests(TestCase):
    timeout = 60

    async def test_scrape(self) -> None:
        """After a flushed produce and a zero-copy fetch, /metrics parses and counts them, the partition and the
        connection."""
        service = await started(self, broker_from_options(self, "--metrics-port", "0", "--broker-id", "3"))
        self.assertRegex(service.metrics_url, r"^http://127\.0\.0\.1:\d+/metrics$")
        client = await raw_connect(self, service)
        payloads = [b"m%04d" % i * 20 for i in range(50)]
        client.send(AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest("clicks", 0, encode_message_set(payloads)),)))
        await client.responses(1)  # flushed: now visible
        client.send(FetchRequest("clicks", 0, 0, 1 << 20))
        await client.responses(2)

        response, body = await get(service.metrics_url)
        self.assertEqual(response.code, 200)
        self.assertTrue(response.headers.getRawHeaders(b"content-type")[0].startswith(b"text/plain; version=0.0.4"))
        found = samples(body.decode())
        self.assertEqual(found["twlog_broker_info", (("broker_id", "3"),)], 1)
        self.assertEqual(found["twlog_requests_total", (("type", "ACK_PRODUCE"),)], 1)
        self.assertEqual(found["twlog_requests_total", (("type", "FETCH"),)], 1)
        self.assertEqual(found["twlog_request_duration_seconds_count", (("type", "FETCH"),)], 1)
        self.assertEqual(found["twlog_connections", ()], 1)
        log = service.logs.get_log("clicks", 0)
        labels = (("partition", "0"), ("topic", "clicks"))
        self.assertEqual(found["twlog_log_size_bytes", labels], log.size_bytes())
        self.assertEqual(found["twlog_log_flushed_offset", labels], log.end_offset)
        self.assertGreaterEqual(found["twlog_flush_duration_seconds_count", ()], 1)
        # The fetched log bytes went out with sendfile(2), and count in the bytes sent.
        self.assertEqual(found["twlog_sendfile_sent_bytes_total", ()], log.size_bytes())
        self.assertGreater(found["twlog_network_sent_bytes_total", ()], log.size_bytes())
        self.assertGreater(found["twlog_network_received_bytes_total", ()], log.size_bytes())
        self.assertGreater(found["process_open_fds", ()], 0)

    async def test_gzip(self) -> None:
        """A scraper that accepts gzip (Prometheus does) gets the page compressed."""
        service = await started(self, broker_from_options(self, "--metrics-port", "0"))
        response, body = await get(service.metrics_url, {b"accept-encoding": [b"gzip"]})
        self.assertEqual(response.headers.getRawHeaders(b"content-encoding"), [b"gzip"])
        self.assertIn("twlog_connections", {f.name for f in text_string_to_metric_families(gzip.decompress(body)
                                                                                           .decode())})

    async def test_root_points_to_metrics(self) -> None:
        """GET / says where the metrics are."""
        service = await started(self, broker_from_options(self, "--metrics-port", "0"))
        response, body = await get(service.metrics_url.removesuffix("metrics"))
        self.assertEqual((response.code, body), (200, b"twlog broker metrics: /metrics\n"))

    async def test_off_by_default(self) -> None:
        """Without --metrics-port there is no metrics server and no hook on the hot path."""
        service = await started(self, broker_from_options(self))
        self.assertIsNone(service.metrics)
        self.assertIsNone(service.metrics_url)
        self.assertIsNone(service.factory.request_observer)

    async def test_port_taken(self) -> None:
        """A metrics port another process listens on stops the broker before it listens, naming the option."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)
        port = listener.getsockname()[1]
        service = broker_from_options(self, "--metrics-port", str(port))
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        with self.assertRaises(Exception) as raised:
            await service.listening
        self.assertEqual(str(raised.exception),
                         f"cannot serve metrics on 127.0.0.1:{port} (--metrics-port): Address already in use")
        self.assertIsNone(service.port)
        self.flushLoggedErrors()

    async def test_stop_closes_the_metrics_port(self) -> None:
        """A stopped broker no longer serves its metrics."""
        service = await started(self, broker_from_options(self, "--metrics-port", "0"))
        url = service.metrics_url
        await service.stopService()
        with self.assertRaises(ConnectionRefusedError):
            await get(url)
